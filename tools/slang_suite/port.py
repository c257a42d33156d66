#!/usr/bin/python3
"""Port the harness of Slang's autodiff compute tests to nabla (issue #14's yardstick).

    tools/slang_suite/port.py --slang PATH_OR_GITDIR --out DIR [--tensor] [--dirs a,b]

PATH is a Slang checkout (or any directory holding tests/autodiff and tests/autodiff-dstdlib) or a
bare git directory (read with `git show HEAD:...`). Nothing of Slang's is copied into this repo:
the ported files are written under DIR, with DIR/manifest.json describing every test for run.py.

Which tests: a file is a *runnable compute test* when one of its //TEST lines is COMPARE_COMPUTE or
COMPARE_COMPUTE_EX and runs on the CPU or CUDA (`-cpu`, `-cuda`, or no API option at all; lines
only for -vk/-d3d*/-dx*/-wgpu/-mtl are skipped). TEST_IGNORE_FILE, SIMPLE/DIAGNOSTIC-only and
INTERPRET-only files are counted separately and not ported.

What changes (only the harness, never the math or the derivative calls; line numbers are kept):
  native mode (default): each module-scope `RWStructuredBuffer<T> name;` / `StructuredBuffer<T>`
    that a TEST_INPUT binds moves into computeMain's parameter list; `[numthreads]` and the
    `SV_DispatchThreadID` parameter stay. A buffer that another function also uses stays a
    module-scope global (the compiler must support those natively); run.py binds it by name.
  --tensor (fallback): `[numthreads(..)]` becomes `[Kernel]`, the buffers become `Tensor<T, 1>`
    parameters of computeMain and the SV_* parameters become locals read from dispatch_id().
    A buffer used by another function cannot move: that test is marked as a port error.

The manifest records per test: the inputs (element type and initial words of every buffer, in
TEST_INPUT order, which is the order render-test prints the `out` buffers in), the thread grid
(render-test dispatches one group, so the grid is the numthreads extents), and what the output is
compared with (the .expected.txt file, or the filecheck-buffer prefix's check lines).
"""
import argparse
import json
import os
import re
import struct
import subprocess
import sys

DEFAULT_DIRS = ["tests/autodiff", "tests/autodiff-dstdlib"]
OTHER_APIS = {"-vk", "-vulkan", "-d3d11", "-dx11", "-d3d12", "-dx12", "-wgpu", "-mtl", "-metal",
              "-gl", "-glsl"}


# ---------------------------------------------------------------- reading the Slang sources
class Source:
    """A Slang checkout directory or a bare git directory."""

    def __init__(self, path):
        self.path = path
        self.git = os.path.isdir(os.path.join(path, "objects")) and \
            os.path.exists(os.path.join(path, "HEAD"))

    def list(self, d):
        if self.git:
            out = subprocess.run(["git", "--git-dir", self.path, "ls-tree", "--name-only",
                                  "HEAD", d + "/"], capture_output=True, text=True, check=True)
            return sorted(os.path.basename(p) for p in out.stdout.split("\n") if p)
        full = os.path.join(self.path, d)
        return sorted(os.listdir(full)) if os.path.isdir(full) else []

    def read(self, rel):
        if self.git:
            r = subprocess.run(["git", "--git-dir", self.path, "show", "HEAD:" + rel],
                               capture_output=True)
            return r.stdout.decode("utf-8", "replace") if r.returncode == 0 else None
        p = os.path.join(self.path, rel)
        if not os.path.isfile(p):
            return None
        with open(p, encoding="utf-8", errors="replace") as f:
            return f.read()


# ---------------------------------------------------------------- scanning Slang text
def code_mask(text):
    """The text with comments and string/char literal contents blanked (newlines kept), so that
    regex positions on the mask are positions in the original text."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "#" and text[text.rfind("\n", 0, i) + 1:i].strip() == "":  # preprocessor line: not part of any declaration
            while i < n and text[i] != "\n":
                out[i] = " "
                i += 1
        elif c == "/" and i + 1 < n and text[i + 1] == "/":
            while i < n and text[i] != "\n":
                out[i] = " "
                i += 1
        elif c == "/" and i + 1 < n and text[i + 1] == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if text[k] != "\n":
                    out[k] = " "
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            for k in range(i + 1, min(j, n)):
                out[k] = " "
            i = j + 1
        else:
            i += 1
    return "".join(out)


def depth_map(mask):
    """Brace depth before each character of the mask."""
    d, depths = 0, []
    for c in mask:
        depths.append(d)
        if c == "{":
            d += 1
        elif c == "}":
            d = max(0, d - 1)
    return depths


def match_close(mask, i, open_c, close_c):
    """Index of the bracket closing mask[i] (== open_c), or -1."""
    d = 0
    for j in range(i, len(mask)):
        if mask[j] == open_c:
            d += 1
        elif mask[j] == close_c:
            d -= 1
            if d == 0:
                return j
    return -1


TEST_RE = re.compile(r"^//\s*TEST(\([^)]*\))?\s*:\s*([A-Z_]+)(\(([^)]*)\))?\s*:?(.*)$")


def parse_tests(text):
    tests, ignore = [], False
    for line in text.split("\n"):
        s = line.strip()
        if s.startswith("//TEST_IGNORE_FILE") or s.startswith("// TEST_IGNORE_FILE"):
            ignore = True
        if re.match(r"//\s*DIAGNOSTIC_TEST\s*:", s):
            tests.append({"kind": "DIAGNOSTIC", "opts": {}, "args": [], "line": s})
        m = TEST_RE.match(s)
        if m and not s.startswith("//TEST_INPUT") and m.group(2) != "INPUT":
            opts = {}
            for kv in (m.group(4) or "").split(","):
                if "=" in kv:
                    k, v = kv.split("=", 1)
                    opts[k.strip()] = v.strip()
            tests.append({"kind": m.group(2), "opts": opts, "args": m.group(5).split(),
                          "line": s})
    return tests, ignore


def test_api(args):
    if "-cpu" in args:
        return "cpu"
    if "-cuda" in args:
        return "cuda"
    if any(a in OTHER_APIS for a in args):
        return "other"
    return "default"


# ---------------------------------------------------------------- TEST_INPUT
class HarnessError(Exception):
    pass


def parse_data(s):
    """data=[...] words as render-test stores them: ints as their 32-bit pattern, floats as
    float bits, `1.0h` as half bits; buffer-name references are unsupported."""
    words = []
    for tok in s.replace(",", " ").split():
        neg = tok.startswith("-")
        t = tok[1:] if neg else tok
        if re.fullmatch(r"(0x[0-9a-fA-F]+|\d+)", t):
            v = int(t, 0) & 0xFFFFFFFF
            words.append((-v) & 0xFFFFFFFF if neg else v)
        elif re.fullmatch(r"[0-9.]+([eE][-+]?\d+)?[hH]", t):
            raise HarnessError("half data literal")
        elif re.fullmatch(r"([0-9]*\.?[0-9]*([eE][-+]?\d+)?)[fF]?", t) and t.rstrip("fF"):
            f = float(t.rstrip("fF"))
            words.append(struct.unpack("<I", struct.pack("<f", -f if neg else f))[0])
        else:
            raise HarnessError("data=[] entry '%s'" % tok)
    return words


def parse_ubuffer_opts(s):
    """ubuffer(...) options -> dict(words, stride, count)."""
    b = {"words": [], "stride": 4, "count": None}
    m = re.search(r"data\s*=\s*\[([^\]]*)\]", s)
    if m:
        b["words"] = parse_data(m.group(1))
        s = s[:m.start()] + s[m.end():]
    for k, v in re.findall(r"(\w+)\s*=\s*([^,\s)]+)", s):
        if k == "stride":
            b["stride"] = int(v)
        elif k == "count":
            b["count"] = int(v)
        else:
            raise HarnessError("ubuffer option '%s'" % k)
    if re.search(r"random\s*\(", s):
        raise HarnessError("ubuffer random()")
    return b


def parse_inputs(text):
    """-> (buffers, type_conformances). Anything the port cannot express raises HarnessError."""
    bufs, confs = [], []
    for line in text.split("\n"):
        s = line.strip()
        if not s.startswith("//"):
            continue
        s = s[2:].strip()
        if not s.startswith("TEST_INPUT"):
            continue
        s = s[len("TEST_INPUT"):].lstrip().lstrip(":").strip()
        m = re.match(r"type_conformance\s+(.*?)\s*;?\s*$", s)
        if m:
            confs.append(m.group(1))
            continue
        m = re.match(r"set\s+([\w.\[\]]+)\s*=\s*(out\s+)?ubuffer\s*\((.*)\)\s*;?\s*$", s)
        if m:
            b = parse_ubuffer_opts(m.group(3))
            b.update(name=m.group(1), out=bool(m.group(2)))
            bufs.append(b)
            continue
        m = re.match(r"ubuffer\s*\((.*?)\)\s*(:\s*(.*))?$", s)
        if m:
            b = parse_ubuffer_opts(m.group(1))
            b.update(name=None, out=False)
            for part in (m.group(3) or "").split(","):
                part = part.strip()
                if part == "out":
                    b["out"] = True
                elif part.startswith("name"):
                    b["name"] = part[4:].lstrip(" =").strip()
                elif part:
                    raise HarnessError("ubuffer binding '%s'" % part)
            if not b["name"]:
                raise HarnessError("unnamed ubuffer")
            bufs.append(b)
            continue
        raise HarnessError("TEST_INPUT '%s'" % s[:60])
    return bufs, confs


# ---------------------------------------------------------------- expectations
CHECK_KINDS = ("NEXT", "NOT", "DAG", "SAME", "EMPTY", "LABEL", "COUNT")


def filecheck_lines(text, prefix):
    """[(directive, pattern)] of PREFIX:, PREFIX-NEXT: ... lines, in file order."""
    out = []
    rx = re.compile(r"(?<![\w-])" + re.escape(prefix) + r"(-[A-Z]+(-\d+)?)?:(.*)$")
    for line in text.split("\n"):
        m = rx.search(line)
        if not m:
            continue
        kind = (m.group(1) or "-").lstrip("-") or "CHECK"
        if kind != "CHECK" and kind.split("-")[0] not in CHECK_KINDS:
            continue
        out.append((kind, m.group(3).strip()))
    return out


def expectation(src, rel, text, test):
    prefix = test["opts"].get("filecheck-buffer")
    if prefix:
        checks = filecheck_lines(text, prefix)
        if not checks:
            raise HarnessError("no %s: lines for filecheck-buffer" % prefix)
        return {"mode": "filecheck", "prefix": prefix, "checks": checks}
    exp = src.read(rel + ".expected.txt")
    if exp is None:
        raise HarnessError("no .expected.txt")
    return {"mode": "expected", "text": exp}


# ---------------------------------------------------------------- the rewrite
def find_decl(mask, depths, text, name):
    """The module-scope declaration `[uniform] TYPE name [: register(..)];` of a TEST_INPUT
    name -> (start, end, type_text), or None."""
    for m in re.finditer(r"(?<![\w.])%s\s*(?::\s*register\s*\([^)]*\))?\s*;" % re.escape(name),
                         mask):
        if depths[m.start()] != 0:
            continue
        start = max(mask.rfind(c, 0, m.start()) for c in ";{}]") + 1
        ty = mask[start:m.start()].strip()
        ty = re.sub(r"^(?:(?:uniform|globallycoherent)\s+)+", "", ty)
        if not ty or "(" in ty or "=" in ty:
            continue
        while start < m.start() and mask[start].isspace():
            start += 1
        return start, m.end(), re.sub(r"\s+", " ", ty)
    return None


def element_type(ty):
    """The scalar/vector type a buffer holds: StructuredBuffer<E>[.Handle], E*, Ptr<E>, or E."""
    m = re.fullmatch(r"(?:RW)?StructuredBuffer\s*<\s*(.+?)\s*>(\s*\.\s*Handle)?", ty)
    if m:
        return m.group(1)
    m = re.fullmatch(r"Ptr\s*<\s*(.+?)\s*>", ty) or re.fullmatch(r"(.+?)\s*\*", ty)
    return m.group(1) if m else ty


IDENT_RE = r"(?<![\w.$])(?<!->)%s(?!\w)"


def find_entry(mask, depths, name="computeMain"):
    for m in re.finditer(r"\b%s\s*\(" % name, mask):
        if depths[m.start()] != 0:
            continue
        lp = m.end() - 1
        rp = match_close(mask, lp, "(", ")")
        if rp < 0:
            continue
        k = rp + 1
        while k < len(mask) and mask[k].isspace():
            k += 1
        if k < len(mask) and mask[k] == ":":  # return semantic
            k = mask.find("{", k)
        if k < 0 or k >= len(mask) or mask[k] != "{":
            continue
        body_end = match_close(mask, k, "{", "}")
        return {"start": m.start(), "lp": lp, "rp": rp, "lb": k, "rb": body_end}
    return None


def numthreads_of(mask, text, entry_start):
    """-> (span of `numthreads(..)` in the attributes of computeMain or None, grid).
    Without [numthreads] Slang's default is one thread."""
    best = None
    for m in re.finditer(r"\bnumthreads\s*\(([^)]*)\)", mask):
        if m.start() < entry_start and not re.search(r"[;{}]", mask[m.end():entry_start]):
            best = m
    if not best:
        return None, [1, 1, 1]
    vals = [v.strip() for v in text[best.start(1):best.end(1)].split(",")]
    try:
        grid = [int(v, 0) for v in vals]
    except ValueError:
        raise HarnessError("non-literal [numthreads(%s)]" % ", ".join(vals))
    return (best.start(), best.end()), (grid + [1, 1, 1])[:3]


def functions_outside(mask, depths, entry):
    """Spans (start, end) of the mask that are code outside computeMain's body."""
    return [(0, entry["lb"]), (entry["rb"] + 1, len(mask))]


def port_text(text, bufs, tensor):
    """-> (new_text, info). Keeps every line where it was (diagnostics map to the original)."""
    mask = code_mask(text)
    depths = depth_map(mask)
    entry = find_entry(mask, depths)
    if not entry:
        raise HarnessError("no computeMain definition")
    nt, grid = numthreads_of(mask, text, entry["start"])

    edits = []  # (start, end, replacement), non-overlapping
    params, globals_kept, global_refs = [], [], []
    for b in bufs:
        name = b["name"]
        d = find_decl(mask, depths, text, name)
        if not d:
            raise HarnessError("'%s' is not declared at module scope" % name)
        dstart, dend, b["decl"] = d
        b["elem"] = element_type(b["decl"])
        used = []
        for lo, hi in functions_outside(mask, depths, entry):
            for u in re.finditer(IDENT_RE % re.escape(name), mask[lo:hi]):
                pos = lo + u.start()
                if not (dstart <= pos < dend):
                    used.append(pos)
        if used:
            global_refs.append(name)
        if used and not tensor:
            globals_kept.append(name)
            b["bind"] = "global"
            continue
        b["bind"] = "param"
        blank = "".join(ch if ch == "\n" else "" for ch in text[dstart:dend])
        edits.append((dstart, dend, blank))
        if tensor:
            params.append("Tensor<%s, 1> %s" % (b["elem"], name))
        else:
            params.append("%s %s" % (b["decl"], name))
    if tensor and global_refs:
        raise HarnessError("buffer '%s' used outside computeMain (--tensor cannot move it)"
                           % global_refs[0])

    inner = mask[entry["lp"] + 1:entry["rp"]]
    prelude = ""
    if tensor:
        # SV_* parameters become locals computed from the one-group dispatch.
        kept = []
        for p in split_params(text[entry["lp"] + 1:entry["rp"]]):
            m = re.match(r"\s*(?:in\s+)?(\w+)\s+(\w+)\s*:\s*(SV_\w+)\s*$", p)
            if not m:
                if p.strip():
                    kept.append(p.strip())
                continue
            ty, nm, sem = m.groups()
            val = {"SV_DispatchThreadID": "dispatch_id()", "SV_GroupThreadID": "dispatch_id()",
                   "SV_GroupID": "uint3(0, 0, 0)"}.get(sem)
            if sem == "SV_GroupIndex":
                val = "(dispatch_id().x + %d * (dispatch_id().y + %d * dispatch_id().z))" % (
                    grid[0], grid[1])
            if val is None:
                raise HarnessError("semantic %s" % sem)
            if not re.search(r"\d$", ty):  # scalar parameter: the x component
                val = "(%s).x" % val if "dispatch_id" in val and "*" not in val else val
            prelude += " %s %s = %s(%s);" % (ty, nm, ty, val)
        if nt:
            edits.append((nt[0], nt[1], "Kernel"))
        else:
            edits.append((entry["start"], entry["start"], "[Kernel] "))
        edits.append((entry["lp"] + 1, entry["rp"], ", ".join(kept + params)))
        edits.append((entry["lb"] + 1, entry["lb"] + 1, prelude))
    elif params:
        sep = ", " if inner.strip() else ""
        edits.append((entry["rp"], entry["rp"], sep + ", ".join(params)))
    edits.sort()
    out, pos = [], 0
    for s, e, r in edits:
        out.append(text[pos:s])
        out.append(r)
        pos = e
    out.append(text[pos:])
    return "".join(out), {"grid": grid, "globals_kept": globals_kept, "global_refs": global_refs}


def split_params(s):
    parts, d, cur = [], 0, ""
    for c in s:
        if c in "<([":
            d += 1
        elif c in ">)]":
            d -= 1
        if c == "," and d == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    parts.append(cur)
    return parts


# ---------------------------------------------------------------- driver
def classify(tests, ignore):
    if ignore:
        return "ignored", None
    compute = [t for t in tests if t["kind"] in ("COMPARE_COMPUTE", "COMPARE_COMPUTE_EX")]
    usable = [t for t in compute if test_api(t["args"]) != "other"]
    if usable:
        return "runnable", usable
    if compute:
        return "other-api-only", None
    kinds = {t["kind"] for t in tests}
    if "INTERPRET" in kinds:
        return "interpret", None
    if kinds:
        return "simple-or-diagnostic", None
    return "no-test", None


def pick(usable, device):
    """The test line whose expectation applies on DEVICE: its own API first, then a line with
    no API option, then any."""
    for want in (device, "default"):
        for t in usable:
            if test_api(t["args"]) == want:
                return t
    return usable[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--slang", required=True, help="Slang checkout or bare git dir")
    ap.add_argument("--out", required=True)
    ap.add_argument("--tensor", action="store_true",
                    help="fallback rewrite: [Kernel] + Tensor<T,1> parameters")
    ap.add_argument("--dirs", default=",".join(DEFAULT_DIRS))
    a = ap.parse_args()
    src = Source(a.slang)
    tests_out = []
    counts = {}
    global_ref_tests = []
    for d in a.dirs.split(","):
        names = src.list(d)
        if not names:
            print("port.py: no files under %s in %s" % (d, a.slang), file=sys.stderr)
            return 2
        for fn in names:
            if not fn.endswith(".slang"):
                continue
            rel = d + "/" + fn
            text = src.read(rel)
            dst = os.path.join(a.out, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            tests, ignore = parse_tests(text)
            cat, usable = classify(tests, ignore)
            counts[cat] = counts.get(cat, 0) + 1
            if cat != "runnable":
                if cat in ("no-test", "ignored"):  # a module other tests import (TEST_IGNORE_FILE
                    # marks most of Slang's library halves): copied unchanged
                    with open(dst, "w") as f:
                        f.write(text)
                continue
            rec = {"name": rel[len("tests/"):] if rel.startswith("tests/") else rel,
                   "file": rel, "status": "ported"}
            try:
                bufs, confs = parse_inputs(text)
                new, info = port_text(text, bufs, a.tensor)
                rec.update(info)
                rec["buffers"] = bufs
                rec["type_conformances"] = confs
                rec["expect"] = {dev: expectation(src, rel, text, pick(usable, dev))
                                 for dev in ("cpu", "cuda")}
                with open(dst, "w") as f:
                    f.write(new)
                if info["global_refs"]:
                    global_ref_tests.append(rec["name"])
            except HarnessError as e:
                rec["status"] = "port-error"
                rec["error"] = "harness: " + str(e)
                if "used outside computeMain" in str(e):
                    global_ref_tests.append(rec["name"])
                # keep a (harness-unported) copy so the failure is inspectable
                with open(dst, "w") as f:
                    f.write(text)
            tests_out.append(rec)
    man = {"mode": "tensor" if a.tensor else "native", "counts": counts,
           "global_ref_tests": global_ref_tests, "tests": tests_out}
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(man, f, indent=1)
    perr = sum(1 for t in tests_out if t["status"] != "ported")
    print("runnable compute tests: %d (harness not portable: %d)" % (len(tests_out), perr))
    print("not ported: " + ", ".join("%s %d" % (k, v) for k, v in sorted(counts.items())
                                     if k != "runnable"))
    print("tests using a buffer from a function other than computeMain: %d"
          % len(global_ref_tests))
    return 0


if __name__ == "__main__":
    sys.exit(main())
