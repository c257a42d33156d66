#!/usr/bin/env python3
"""The environment registry is the only reader of the environment (nabla/env.h).

usage: test_env_registry.py REPO_ROOT

Fails when production code (src/, cli/, python/src/, python/nabla/) reads the environment
anywhere but src/core/env.c (getenv, secure_getenv, os.environ, os.getenv), when a name
in the registry is missing from docs/ENV.md's table, or when that table has a name the registry
does not have. Run by CTest (env_registry)."""
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
REGISTRY = os.path.join("src", "core", "env.c")
C_READ = re.compile(r"\b(secure_getenv|getenv)\s*\(")  # (passing environ on to a child is no read)
PY_READ = re.compile(r"\bos\.(environ|getenv)\b|\bgetenv\(")


def strip_c_comments(text):
    """Comments and string literals out (a getenv named in a comment is no read); lines kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text[i] in "\"'":
            q, j = text[i], i + 1
            while j < n and text[j] != q:
                j += 2 if text[j] == "\\" else 1
            out.append(q + q)
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def readers():
    found = []
    for top in ("src", "cli", os.path.join("python", "src"), os.path.join("python", "nabla")):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in sorted(files):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, ROOT)
                if rel == REGISTRY:
                    continue
                if f.endswith((".c", ".h", ".cu", ".cuh")):
                    text, pat = strip_c_comments(open(path, encoding="utf-8", errors="replace").read()), C_READ
                elif f.endswith(".py"):
                    text = "\n".join(l.split("#")[0] for l in open(path, encoding="utf-8").read().splitlines())
                    pat = PY_READ
                else:
                    continue
                for k, line in enumerate(text.splitlines(), 1):
                    if pat.search(line):
                        found.append("%s:%d: %s" % (rel, k, line.strip()))
    return found


def registry_names():
    text = open(os.path.join(ROOT, REGISTRY)).read()
    names = re.findall(r'\[NB_ENV_\w+\]\s*=\s*\{"(\w+)"', text)
    assert names, "no entries parsed from " + REGISTRY
    return names


def main():
    problems = ["reads the environment outside %s (add a setting to the registry instead): %s" % (REGISTRY, r)
                for r in readers()]
    names = registry_names()
    if len(set(names)) != len(names):
        problems.append("the registry names a variable twice: %s" % names)
    doc = open(os.path.join(ROOT, "docs", "ENV.md")).read()
    rows = re.findall(r"^\| `(\w+)` \|", doc, flags=re.M)  # the settings table: | `NAME` | ...
    for n in names:
        if n not in rows:
            problems.append("docs/ENV.md's table does not document %s (in the registry)" % n)
    for n in rows:
        if n not in names:
            problems.append("docs/ENV.md documents %s, which the registry does not have" % n)
    for p in problems:
        print("FAIL:", p)
    print("%d settings in the registry; %s" % (len(names), "ok" if not problems else "%d problems" % len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
