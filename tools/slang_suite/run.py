#!/usr/bin/python3
"""Run the ported Slang autodiff tests (port.py's output) through `nabla call` and score them.

    tools/slang_suite/run.py DIR [--nabla build/nabla] [--device cpu[,cuda]] [--timeout 30]
                             [--jobs 2] [--filter SUBSTR] [--json] [--show-fail N]

Each test is `nabla call DIR/<file> computeMain NAME=[...]... [--conformance A:IFoo=0]... --grid X,Y,Z
--device D` (a `//TEST_INPUT: type_conformance A:IFoo = 0` line becomes --conformance), with every
TEST_INPUT buffer passed by name as an array of its element type (render-test's data words:
integers are bit patterns, so `data=[1]` in a float buffer is the float with bits 0x00000001), and
the grid of the one thread group render-test dispatches (computeMain's [numthreads]).

The `out` buffers (TEST_INPUT order) are printed as render-test does with -output-using-type
("type: float" then one "%f" line per element; int32_t/uint32_t as "%d"/"%u") and compared as
slang-test does: against the .expected.txt file (per line; floats within a relative 1e-4, exact
when one side is 0; extra actual lines ignored), or with FileCheck semantics against the test's
filecheck-buffer prefix lines (PREFIX:, -NEXT, -SAME, -NOT, -DAG, -EMPTY, -LABEL; substring
matches, {{regex}}, [[VAR:regex]] / [[VAR]]).

Outcomes: pass; fail (ran, wrong answer); compile error (a `file:line:col: error:` diagnostic);
crash (killed by a signal, exit status >= 128 or an abort/assert/sanitizer message); error (any
other nonzero exit: a call-binding or run-time error reported without a source diagnostic);
timeout; port error (the harness could not be ported: port.py says why). Failures are grouped by
cause: the first diagnostic message with quoted identifiers and numbers normalized.
"""
import argparse
import concurrent.futures
import json
import math
import os
import re
import struct
import subprocess
import sys
import time

SCALARS = {
    "float": ("float", "f"), "float16_t": ("half", "f"), "half": ("half", "f"),
    "double": ("double", "f"), "float64_t": ("double", "f"),
    "int": ("int32_t", "i"), "int32_t": ("int32_t", "i"),
    "uint": ("uint32_t", "u"), "uint32_t": ("uint32_t", "u"), "bool": ("bool", "x"),
}


def elem_info(elem):
    """'float3' -> ('float', 3); 'vector<float,3>' -> ('float', 3); unknown -> (None, 1)."""
    e = elem.replace(" ", "")
    m = re.fullmatch(r"vector<(\w+),(\d)>", e)
    if m:
        return m.group(1), int(m.group(2))
    m = re.fullmatch(r"(float|int|uint|half|double|bool)([1-4])", e)
    if m:
        return m.group(1), int(m.group(2))
    if e in SCALARS:
        return e, 1
    return None, 1


def word_value(w, kind):
    if kind == "f":
        v = struct.unpack("<f", struct.pack("<I", w))[0]
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        return v
    if kind == "i":
        return w - (1 << 32) if w & 0x80000000 else w
    return w


def buffer_json(b):
    """The array nabla gets for one TEST_INPUT buffer (None when the element type is unknown)."""
    scalar, n = elem_info(b["elem"])
    if scalar is None or scalar in ("half", "double"):
        return None
    kind = SCALARS[scalar][1]
    nwords = max(len(b["words"]), ((b["count"] or 0) * b["stride"] + 3) // 4)
    words = b["words"] + [0] * (nwords - len(b["words"]))
    vals = [word_value(w, kind) for w in words]
    if n > 1:
        vals = [vals[i:i + n] for i in range(0, len(vals) - len(vals) % n, n)]
    return vals


def flatten(v):
    if isinstance(v, list):
        for x in v:
            yield from flatten(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from flatten(x)
    else:
        yield v


def format_output(test, out):
    """render-test's -output-using-type text for the out buffers, or raise KeyError."""
    lines = []
    for b in test["buffers"]:
        if not b["out"]:
            continue
        scalar, _ = elem_info(b["elem"])
        if b["name"] not in out:
            raise KeyError(b["name"])
        vals = list(flatten(out[b["name"]]))
        if scalar is None:
            lines += ["%X" % (int(v) & 0xFFFFFFFF) for v in vals]
            continue
        tname, kind = SCALARS[scalar]
        if scalar != "bool":
            lines.append("type: " + tname)
        for v in vals:
            if kind == "f":
                if isinstance(v, str):
                    v = float(v.replace("Infinity", "inf"))
                lines.append("%f" % v)
            elif kind == "x":
                lines.append("%X" % (int(v) & 0xFFFFFFFF))
            else:
                lines.append("%d" % int(v))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- comparisons
def _lines(s):
    ls = s.replace("\r\n", "\n").split("\n")
    while ls and not ls[-1].strip():
        ls.pop()
    return ls


def _nearly(a, b, eps=1e-4):
    if a == b:
        return True
    if math.isnan(a) or math.isnan(b):
        return False
    if a == 0.0 or b == 0.0:
        return abs(a - b) < eps * 2.2250738585072014e-308
    return abs(a - b) < eps * (abs(a) + abs(b))


def _atof(s):
    m = re.match(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", s)
    if m:
        return float(m.group(0))
    t = s.strip().lower()
    if t.lstrip("-+") in ("nan", "inf", "infinity"):
        return float(t)
    return 0.0


def compare_expected(actual, ref):
    """slang-test's _compareWithType: -> None when equal, else a short reason."""
    la, lr = _lines(actual), _lines(ref)
    if len(lr) < len(la):
        la = la[:len(lr)]
    if len(la) != len(lr):
        return "%d output lines, expected %d" % (len(la), len(lr))
    is_float = False
    for i, (a, r) in enumerate(zip(la, lr)):
        if a.startswith("type:"):
            if a != r:
                return "line %d: '%s', expected '%s'" % (i + 1, a, r)
            is_float = a.split(":", 1)[1].strip() in ("half", "float", "double", "bfloat16")
            continue
        if is_float:
            if not _nearly(_atof(a), _atof(r)):
                return "line %d: %s, expected %s" % (i + 1, a.strip(), r.strip())
        elif a.strip() != r.strip():
            return "line %d: %s, expected %s" % (i + 1, a.strip(), r.strip())
    return None


def _pattern(p, vars_):
    """FileCheck pattern -> regex (literal text, {{regex}}, [[VAR:regex]], [[VAR]])."""
    out, i = [], 0
    while i < len(p):
        if p.startswith("{{", i):
            j = p.find("}}", i + 2)
            j = len(p) if j < 0 else j
            out.append("(?:%s)" % p[i + 2:j])
            i = j + 2
        elif p.startswith("[[", i):
            j = p.find("]]", i + 2)
            j = len(p) if j < 0 else j
            body = p[i + 2:j]
            if ":" in body:
                name, rx = body.split(":", 1)
                out.append("(?P<%s>%s)" % (name.strip(), rx))
            else:
                out.append(re.escape(vars_.get(body.strip(), "")))
            i = j + 2
        else:
            j = i
            while j < len(p) and not p.startswith("{{", j) and not p.startswith("[[", j):
                j += 1
            lit = p[i:j]
            out.append("[ \t]+".join(re.escape(x) for x in re.split(r"[ \t]+", lit)))
            i = j
    return re.compile("".join(out))


def filecheck(actual, checks):
    """-> None when the checks hold, else a reason (FileCheck semantics, common subset)."""
    text = actual
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def line_of(pos):
        lo, hi = 0, len(line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if line_starts[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo

    vars_ = {}
    pos, last_line = 0, -1
    nots = []
    dag_start = None
    for kind, pat in checks:
        if kind == "EMPTY":
            ln = last_line + 1
            if ln >= len(line_starts):
                return "CHECK-EMPTY: no line after line %d" % (last_line + 1)
            end = line_starts[ln + 1] - 1 if ln + 1 < len(line_starts) else len(text)
            if text[line_starts[ln]:end].strip():
                return "CHECK-EMPTY: line %d is not empty" % (ln + 1)
            last_line, pos = ln, end
            continue
        if not pat:
            return "empty check string"
        rx = _pattern(pat, vars_)
        if kind == "NOT":
            nots.append((pat, rx))
            continue
        if kind == "DAG":
            if dag_start is None:
                dag_start = pos
            m = rx.search(text, dag_start)
            if not m:
                return "CHECK-DAG: '%s' not found" % pat
            pos = max(pos, m.end())
            last_line = line_of(m.start())
            vars_.update({k: v for k, v in m.groupdict().items() if v is not None})
            continue
        dag_start = None
        if kind == "SAME":
            end = line_starts[last_line + 1] if last_line + 1 < len(line_starts) else len(text)
            m = rx.search(text, pos, end)
        else:
            m = rx.search(text, pos)
        if not m:
            return "%s: '%s' not found%s" % (
                kind, pat, " after line %d" % (last_line + 1) if last_line >= 0 else "")
        ml = line_of(m.start())
        if kind == "NEXT" and ml != last_line + 1:
            return "CHECK-NEXT: '%s' on line %d, expected on line %d" % (pat, ml + 1,
                                                                          last_line + 2)
        for npat, nrx in nots:
            if nrx.search(text, pos, m.start()):
                return "CHECK-NOT: '%s' found" % npat
        nots = []
        vars_.update({k: v for k, v in m.groupdict().items() if v is not None})
        pos, last_line = m.end(), ml
    for npat, nrx in nots:
        if nrx.search(text, pos):
            return "CHECK-NOT: '%s' found" % npat
    return None


# ---------------------------------------------------------------- running
DIAG_RE = re.compile(r"^(.*?):(\d+):(\d+): error: (.*)$", re.M)


def declared_in(name, src):
    """Whether the test's source declares NAME itself (a type, function, variable or
    parameter): such names are normalized in causes, library names are kept."""
    if re.search(r"\b(?:struct|interface|class|enum|typedef|typealias|namespace|"
                 r"associatedtype)\s+%s\b" % re.escape(name), src):
        return True
    return bool(re.search(r"\b(?!return\b|else\b|case\b|new\b)[A-Za-z_][\w<>,.]*[\s*&]+%s"
                          r"\s*[(;=:{,)<\[]" % re.escape(name), src))


def normalize(msg, src=""):
    def quoted(m):
        q, body = m.group(1), m.group(2)
        if re.fullmatch(r"[A-Za-z_]\w*", body) and declared_in(body, src):
            return q + "X" + q
        if re.search(r"/|\.(nb|slang)$|^[\w]+(-[\w]+)+$", body):  # paths, module names
            return q + "X" + q
        return m.group(0)
    msg = re.sub(r"(['`])([^'`\n]*)\1", quoted, msg)
    msg = re.sub(r"\b\d+(\.\d+)?\b", "N", msg)
    msg = re.sub(r"(?<=in: )/\S+", "DIR", msg)
    return msg.strip()[:160]


def run_one(args, test, device):
    r = {"name": test["name"], "device": device}
    if test["status"] != "ported":
        r.update(outcome="port error", cause=test["error"])
        return r
    cmd = [args.nabla, "call", os.path.join(args.dir, test["file"]), "computeMain"]
    for b in test["buffers"]:
        v = buffer_json(b)
        if v is None:
            r.update(outcome="port error", cause="harness: buffer element type " + b["elem"])
            return r
        cmd.append("%s=%s" % (b["name"], json.dumps(v)))
    for conf in test.get("type_conformances") or []:  # `type_conformance A:IFoo = 0`: the host's ids
        cmd += ["--conformance", conf]
    cmd += ["--grid", ",".join(str(g) for g in test["grid"]), "--device", device]
    r["cmd"] = " ".join(("'%s'" % c if re.search(r"[\s\[\]\"]", c) else c) for c in cmd)
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                           errors="replace")
    except subprocess.TimeoutExpired:
        r.update(outcome="timeout", cause="timeout (%g s)" % args.timeout)
        return r
    r["seconds"] = round(time.time() - t0, 3)
    try:
        with open(os.path.join(args.dir, test["file"]), errors="replace") as f:
            src = f.read()
    except OSError:
        src = ""
    err = p.stderr
    m = DIAG_RE.search(err)
    if p.returncode < 0 or p.returncode >= 128 or re.search(
            r"Assertion|AddressSanitizer|UndefinedBehaviorSanitizer|runtime error:|abort",
            err):
        sig = -p.returncode if p.returncode < 0 else p.returncode - 128
        r.update(outcome="crash", cause="crash: signal %d" % sig if p.returncode != 1 else
                 "crash: " + normalize(err.strip().split("\n")[0], src))
        r["stderr"] = err[-2000:]
        return r
    if p.returncode != 0:
        if m:
            r.update(outcome="compile error", cause=normalize(m.group(4), src),
                     message="%s:%s:%s: %s" % (os.path.basename(m.group(1)), m.group(2),
                                               m.group(3), m.group(4)))
        else:
            first = (err.strip() or p.stdout.strip() or "exit %d" % p.returncode).split("\n")[0]
            r.update(outcome="error", cause="error: " + normalize(first, src), message=first)
        return r
    try:
        res = json.loads(p.stdout)
        actual = format_output(test, res.get("out") or {})
    except (ValueError, KeyError, TypeError) as e:
        r.update(outcome="error", cause="error: no output buffer in nabla's result",
                 message="%s: %s" % (type(e).__name__, e))
        return r
    exp = test["expect"][device]
    why = compare_expected(actual, exp["text"]) if exp["mode"] == "expected" else \
        filecheck(actual, exp["checks"])
    if why:
        r.update(outcome="fail", cause="wrong answer", message=why, actual=actual)
    else:
        r["outcome"] = "pass"
    return r


ORDER = ["pass", "fail", "compile error", "crash", "error", "timeout", "port error"]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="port.py's --out directory")
    ap.add_argument("--nabla", default=os.path.join(here, "..", "..", "build", "nabla"))
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cpu,cuda")
    ap.add_argument("--timeout", type=float, default=30)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--filter", default="")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--show-fail", type=int, default=3,
                    help="example tests printed per cause (0: none)")
    args = ap.parse_args()
    with open(os.path.join(args.dir, "manifest.json")) as f:
        man = json.load(f)
    tests = [t for t in man["tests"] if args.filter in t["name"]]
    jobs = [(t, d) for d in args.device.split(",") for t in tests]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        results = list(ex.map(lambda td: run_one(args, td[0], td[1]), jobs))
    if args.json:
        json.dump({"mode": man["mode"], "counts": man["counts"], "results": results},
                  sys.stdout, indent=1)
        print()
        return 0
    for dev in args.device.split(","):
        rs = [r for r in results if r["device"] == dev]
        tally = {k: sum(1 for r in rs if r["outcome"] == k) for k in ORDER}
        print("device %s (%s harness): total %d, %s" % (
            dev, man["mode"], len(rs), ", ".join("%s %d" % (k, v) for k, v in tally.items())))
        causes = {}
        for r in rs:
            if r["outcome"] != "pass":
                causes.setdefault(r["cause"], []).append(r)
        for cause, group in sorted(causes.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            print("  %4d  [%s] %s" % (len(group), group[0]["outcome"], cause))
            for r in group[:args.show_fail]:
                print("          %s%s" % (r["name"], ("  -- " + r["message"][:150])
                                          if r.get("message") else ""))
    skipped = {k: v for k, v in man["counts"].items() if k != "runnable"}
    print("not runnable compute tests (not ported): " +
          ", ".join("%s %d" % kv for kv in sorted(skipped.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
