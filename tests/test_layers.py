"""The layer rules of docs/ARCHITECTURE.md (and ../shared/DESIGN.md), checked on the include graph.

Reads every `#include "..."` of src/ (and of the front doors cli/, python/src/, examples/, bench/),
resolves it the way the build does (the including file's folder, then src/, then include/), and
fails, listing each offending line, when:
  - a layer includes a layer it may not (ALLOWED below: core -> nothing above it, device -> core,
    jit -> core + device, lang -> core, call -> lang + jit + device + core, graph -> call and
    below (never nn), nn -> graph and below, models ->
    nn + io + below, io -> core + device); a public header counts as the layer that implements it
    (PUBLIC_OWNER), so `core` may include only core's own public headers;
  - a file outside a backend (src/device/cuda, src/device/cpu) includes one of its headers;
  - a file includes another folder's private header (*_internal.h, *_impl.h) other than the
    documented exceptions (SHARED_PRIVATE);
  - a front door (cli, python/src, examples, bench) includes anything but public headers and its own
    folder's headers (two benches excepted: FRONT_DOOR_EXCEPTIONS, docs/ARCHITECTURE.md);
  - an include cannot be resolved, or a public header is missing from PUBLIC_OWNER;
  - the version in include/nabla/version.h differs from CMakeLists.txt's project version.
The checker checks itself first on a small tree with one violation of each kind (so the test
fails if a rule stops reporting), then the real tree.

Run: python3 tests/test_layers.py [ROOT]   (ctest: `layers`; also a pytest / minipytest module)
"""
import os
import re
import sys
import tempfile

# Layers: who may include whom (each may include itself). `graph` (src/graph: the op table
# ops.def, its row interface op_rows.h and the tape) sits between call and nn: it includes no nn
# header. Rows whose kernels are nn's (conv, attention, norms, MLP, encodings) are declared in
# graph/op_rows.h and defined in src/nn/<module>/ (the linker joins them), so the arrow stays
# nn -> graph (docs/ARCHITECTURE.md).
ALLOWED = {
    "core": {"core"},
    "device": {"core"},
    "lang": {"core"},
    "jit": {"core", "device"},
    "call": {"core", "device", "jit", "lang"},
    "graph": {"core", "device", "jit", "lang", "call"},
    "nn": {"core", "device", "jit", "call", "graph"},
    "io": {"core", "device"},
    "models": {"core", "device", "jit", "call", "graph", "nn", "io"},
}

# Public headers (include/nabla/) by the layer that implements them. `app` = the umbrella header,
# for programs only. image.h is io's (PNG files); it also declares the fit-image samplers of
# src/models/image.c, which io never calls.
PUBLIC_OWNER = {
    "alloc.h": "core", "dtype.h": "core", "env.h": "core", "file.h": "core", "log.h": "core",
    "shape.h": "core", "status.h": "core", "version.h": "core",
    "device.h": "device", "tensor.h": "device", "npy.h": "device",
    "cache.h": "jit",
    "module.h": "call", "cmdlist.h": "call",
    "nn_tape.h": "graph", "graph.h": "graph", "nn_mlp.h": "nn", "nn_encoding.h": "nn", "nn_optim.h": "nn",
    "nn_unet.h": "models", "fit_image.h": "models", "graph_bench.h": "models", "graph_models.h": "models",
    "graph_chain_bench.h": "models",
    "image.h": "io", "nn_dataset.h": "io", "safetensors.h": "io",
    "nabla.h": "app",
}

# Folders whose every header is private to them (a backend's internals).
BACKENDS = ("device/cuda", "device/cpu")

# Private headers (*_internal.h, *_impl.h) shared beyond their folder, and with whom (path
# prefixes under src/). Each is an interface between modules that has no better home yet.
SHARED_PRIVATE = {
    # the fused grid + MLP kernels: the encoding drives the MLP's CUDA backward
    "nn/mlp/mlp_internal.h": ("nn/mlp/", "nn/encoding/"),
}

FRONT_DOORS = ("cli", "python/src", "examples", "bench")
# bench_call.c times a raw JIT launch as the floor under a call; bench_tape_ops.c times a tape op's
# CUDA row alone, without the tape around it; bench_nb_ops.c times the library's .nb ops (an nn-internal
# layer) against the tape's rows, the CUDA cast row through nb_tape_cast (docs/ARCHITECTURE.md).
FRONT_DOOR_EXCEPTIONS = {("bench/bench_call.c", "jit/jit.h"),
                         ("bench/bench_tape_ops.c", "graph/op_rows.h"),
                         ("bench/bench_nb_ops.c", "nn/ops/nb_ops.h"),
                         ("bench/bench_nb_ops.c", "graph/op_rows.h")}

SOURCE_EXT = (".c", ".h", ".cu", ".cuh", ".cpp", ".inc")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def layer_of(rel):
    """Layer of a path relative to src/ ('nn/conv/x.c' -> 'nn')."""
    return rel.split("/", 1)[0]


def sources(root, top):
    base = os.path.join(root, top)
    for d, dirs, files in os.walk(base):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(SOURCE_EXT):
                yield os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")


def includes(root, path):
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            m = INCLUDE_RE.match(line)
            if m:
                yield n, m.group(1)


def resolve(root, path, inc):
    """('src', rel) | ('public', name) | ('local', repo path) | None."""
    here = os.path.dirname(path)
    if os.path.isfile(os.path.join(root, here, inc)):
        full = os.path.normpath(os.path.join(here, inc)).replace(os.sep, "/")
        if full.startswith("src/"):
            return ("src", full[4:])
        if full.startswith("include/nabla/"):
            return ("public", full[len("include/nabla/"):])
        return ("local", full)
    if os.path.isfile(os.path.join(root, "src", inc)):
        return ("src", os.path.normpath(inc).replace(os.sep, "/"))
    if inc.startswith("nabla/") and os.path.isfile(os.path.join(root, "include", inc)):
        return ("public", inc[len("nabla/"):])
    return None


def private_of(rel):
    """The folder a src header is private to, or None if it is not private."""
    folder = os.path.dirname(rel)
    for b in BACKENDS:
        if folder == b or folder.startswith(b + "/"):
            return b
    name = os.path.basename(rel)
    if name.endswith("_internal.h") or name.endswith("_impl.h"):
        return folder
    return None


def check_src_include(rel, inc_kind, target):
    """The rule a src/ file `rel` breaks by including target, or None."""
    me = layer_of(rel)
    if me not in ALLOWED:
        return "%s is in no known layer (add src/%s/ to ALLOWED in tests/test_layers.py)" % (
            rel, me)
    if inc_kind == "public":
        owner = PUBLIC_OWNER.get(target)
        if owner is None:
            return "public header nabla/%s has no layer (add it to PUBLIC_OWNER)" % target
        if owner != me and owner not in ALLOWED[me]:
            return "layer %s includes nabla/%s, a public header of layer %s" % (me, target, owner)
        return None
    if inc_kind == "local":
        return "includes %s outside src/ and include/" % target
    other = layer_of(target)
    if other != me and other not in ALLOWED[me]:
        return "layer %s includes %s of layer %s" % (me, target, other)
    owner = private_of(target)
    if owner is not None and not (rel.startswith(owner + "/")):
        shared = SHARED_PRIVATE.get(target)
        if shared is None or not any(rel.startswith(p) for p in shared):
            what = "backend" if owner in BACKENDS else "folder"
            return "includes %s, private to the %s src/%s/" % (target, what, owner)
    return None


def check(root):
    """All violations in the tree at root, as 'file:line: message' strings."""
    bad = []
    for path in sources(root, "src"):
        rel = path[4:]
        for n, inc in includes(root, path):
            r = resolve(root, path, inc)
            if r is None:
                bad.append('%s:%d: cannot resolve #include "%s"' % (path, n, inc))
                continue
            why = check_src_include(rel, *r)
            if why:
                bad.append("%s:%d: %s" % (path, n, why))
    for top in FRONT_DOORS:
        if not os.path.isdir(os.path.join(root, top)):
            continue
        for path in sources(root, top):
            for n, inc in includes(root, path):
                r = resolve(root, path, inc)
                if r is None:
                    bad.append('%s:%d: cannot resolve #include "%s"' % (path, n, inc))
                elif r[0] == "public":
                    if r[1] not in PUBLIC_OWNER:
                        bad.append("%s:%d: public header nabla/%s has no layer (add it to "
                                   "PUBLIC_OWNER)" % (path, n, r[1]))
                elif r[0] == "src" and (path, inc) not in FRONT_DOOR_EXCEPTIONS:
                    bad.append("%s:%d: %s uses only the public API, but includes src/%s" % (
                        path, n, top, r[1]))
    pub = os.path.join(root, "include", "nabla")
    if os.path.isdir(pub):
        for f in sorted(os.listdir(pub)):
            if f.endswith(".h") and f not in PUBLIC_OWNER:
                bad.append("include/nabla/%s: public header with no layer (add it to "
                           "PUBLIC_OWNER)" % f)
    bad += check_version(root)
    return bad


def check_version(root):
    try:
        with open(os.path.join(root, "CMakeLists.txt")) as fh:
            cm = re.search(r"project\(\s*nabla\s+VERSION\s+([0-9.]+)", fh.read())
        with open(os.path.join(root, "include", "nabla", "version.h")) as fh:
            vh = fh.read()
    except OSError as e:
        return ["version: %s" % e]
    s = re.search(r'#define NABLA_VERSION_STRING "([^"]+)"', vh)
    parts = [re.search(r"#define NABLA_VERSION_%s (\d+)" % k, vh) for k in ("MAJOR", "MINOR",
                                                                          "PATCH")]
    if not cm or not s or not all(parts):
        return ["version: project(nabla VERSION x.y.z) or NABLA_VERSION_* not found"]
    bad = []
    if s.group(1) != cm.group(1):
        bad.append("include/nabla/version.h: NABLA_VERSION_STRING %s but CMakeLists.txt says %s"
                   % (s.group(1), cm.group(1)))
    if ".".join(p.group(1) for p in parts) != s.group(1):
        bad.append("include/nabla/version.h: MAJOR.MINOR.PATCH disagree with "
                   "NABLA_VERSION_STRING")
    return bad


# ---- self-test: a small tree with one violation of each kind ------------------------------------

SELF_TREE = {
    "CMakeLists.txt": "project(nabla VERSION 1.2.3 LANGUAGES C)\n",
    "include/nabla/version.h": ('#define NABLA_VERSION_MAJOR 1\n#define NABLA_VERSION_MINOR 2\n'
                                '#define NABLA_VERSION_PATCH 3\n'
                                '#define NABLA_VERSION_STRING "1.2.3"\n'),
    "include/nabla/status.h": "",
    "include/nabla/tensor.h": "",
    "include/nabla/nn_tape.h": "",
    "src/core/ok.c": '#include "core/ok.h"\n#include "nabla/status.h"\n',
    "src/core/ok.h": "",
    "src/core/up.c": '#include "nabla/tensor.h"\n',                       # core -> device (public)
    "src/device/cuda/api.h": "",
    "src/device/cuda/ok.c": '#include "device/cuda/api.h"\n#include "api.h"\n',
    "src/device/up.c": '#include "graph/op_rows.h"\n',                   # device -> graph
    "src/graph/op_rows.h": '#include "nabla/nn_tape.h"\n',
    "src/graph/tape_internal.h": '#include "graph/op_rows.h"\n',
    "src/graph/tape.c": '#include "graph/tape_internal.h"\n',           # own private: fine
    "src/graph/row_up.c": '#include "nn/conv/ok.h"\n',                  # graph -> nn
    "src/nn/conv/ok.h": "",
    "src/nn/conv/ok.c": '#include "graph/op_rows.h"\n',                 # row contract: fine
    "src/nn/conv/tape.c": '#include "graph/tape_internal.h"\n',          # graph private
    "src/nn/conv/backend.c": '#include "device/cuda/api.h"\n',            # backend private
    "src/nn/enc/enc_internal.h": "",
    "src/nn/conv/priv.c": '#include "nn/enc/enc_internal.h"\n',           # folder private
    "src/lang/dev.c": "#include \"device/cuda/api.h\"\n",                 # lang -> device
    "src/io/lost.c": '#include "io/missing.h"\n',                         # unresolved
    "src/weird/x.c": "",                                                  # unknown layer (no
    "src/weird/y.c": '#include "core/ok.h"\n',                            # includes: unchecked)
    "cli/main.c": '#include "nabla/status.h"\n#include "core/ok.h"\n',     # front door -> src
    "bench/bench_call.c": '#include "jit/jit.h"\n',                       # documented exception
    "src/jit/jit.h": "",
}
SELF_EXPECT = [
    "src/core/up.c:1: layer core includes nabla/tensor.h",
    "src/device/up.c:1: layer device includes graph/op_rows.h",
    "src/graph/row_up.c:1: layer graph includes nn/conv/ok.h",
    "src/nn/conv/tape.c:1: includes graph/tape_internal.h, private to the folder",
    "src/nn/conv/backend.c:1: includes device/cuda/api.h, private to the backend",
    "src/nn/conv/priv.c:1: includes nn/enc/enc_internal.h, private to the folder",
    "src/lang/dev.c:1: layer lang includes device/cuda/api.h",
    'src/io/lost.c:1: cannot resolve #include "io/missing.h"',
    "src/weird/y.c:1: weird/y.c is in no known layer",
    "cli/main.c:2: cli uses only the public API, but includes src/core/ok.h",
    "include/nabla/status.h: public header with no layer",   # status.h is known: must NOT appear
]


def self_test():
    with tempfile.TemporaryDirectory() as root:
        for p, text in SELF_TREE.items():
            os.makedirs(os.path.dirname(os.path.join(root, p)), exist_ok=True)
            with open(os.path.join(root, p), "w") as fh:
                fh.write(text)
        got = check(root)
        problems = []
        for want in SELF_EXPECT[:-1]:
            if not any(g.startswith(want) for g in got):
                problems.append("self-test: expected a violation starting %r" % want)
        if any(g.startswith(SELF_EXPECT[-1]) for g in got):
            problems.append("self-test: status.h reported as unknown")
        if len(got) != len(SELF_EXPECT) - 1:
            problems.append("self-test: %d violations, expected %d:\n  %s" % (
                len(got), len(SELF_EXPECT) - 1, "\n  ".join(got)))
        # the version check fails on a mismatch
        with open(os.path.join(root, "CMakeLists.txt"), "w") as fh:
            fh.write("project(nabla VERSION 1.2.4 LANGUAGES C)\n")
        if not check_version(root):
            problems.append("self-test: a version mismatch was not reported")
        return problems


def repo_root():
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_checker_reports_each_kind_of_violation():
    assert self_test() == []


def test_tree_follows_the_layer_rules():
    bad = check(repo_root())
    assert bad == [], "layer violations:\n" + "\n".join(bad)


def main(argv):
    root = argv[1] if len(argv) > 1 else repo_root()
    problems = self_test()
    if problems:
        print("\n".join(problems))
        print("layers: the checker's self-test FAILED")
        return 1
    bad = check(root)
    if bad:
        print("\n".join(bad))
        print("layers: %d violation(s) of the layer rules (docs/ARCHITECTURE.md)" % len(bad))
        return 1
    n = sum(1 for top in ("src",) + FRONT_DOORS if os.path.isdir(os.path.join(root, top))
            for _ in sources(root, top))
    print("layers: %d files follow the layer rules" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
