"""Writes the CUDA C sources of the tape's kernels (src/nn/tape/tape_cuda_basic.c: tk_src,
src/nn/norm/tape_cuda_norm.c: gn_src, src/nn/tape/tape_cast.c: cast_src) to OUTDIR/basic.cu, norm.cu and
cast.cu, for the CPU emulator
(tools/device/tapecuda_emu.sh, which supplies its own bf16 helpers) or for ptxas reports
(tools/device/tapecuda_ptxas.sh, --helpers: the NB_CUDA_BF16_HELPERS text of src/nn/common/bf16_cuda.h
first, as the library pastes it).

    python3 tools/device/tapecuda_extract.py OUTDIR [--helpers]
"""
import ast
import re
import sys


def literals(text):
    return "".join(ast.literal_eval(l) for l in re.findall(r'("(?:[^"\\]|\\.)*")', text))


def main():
    out = sys.argv[1]
    helpers = ""
    if "--helpers" in sys.argv:
        h = open("src/nn/common/bf16_cuda.h").read()
        a = h.index("#define NB_CUDA_BF16_HELPERS")
        b = h.index("#endif", a)
        helpers = literals(h[a + len("#define NB_CUDA_BF16_HELPERS"):b])
    for src, var, name in [("src/nn/tape/tape_cuda_basic.c", "tk_src", "basic.cu"),
                           ("src/nn/norm/tape_cuda_norm.c", "gn_src", "norm.cu"),
                           ("src/nn/tape/tape_cast.c", "cast_src", "cast.cu")]:
        s = open(src).read()
        a = s.index("static const char %s[] =" % var)
        m = re.compile(r'"\s*;\n').search(s, a)
        chunk = s[s.index("\n", a) + 1:m.end() - 2]
        lits = re.findall(r'^\s*("(?:[^"\\]|\\.)*")\s*$', chunk, re.M)
        open(out + "/" + name, "w").write(helpers + "".join(ast.literal_eval(l) for l in lits))


main()
