"""A stand-in for the few parts of pytest the suite uses (raises, skip, mark.skipif, importorskip,
approx-free asserts, the tmp_path fixture), for machines without pytest:  python3 minipytest.py python/tests
Runs every test_* function of every test_*.py file; prints 'N passed, N failed, N skipped'."""
import importlib.util
import inspect
import os
import pathlib
import re
import sys
import tempfile
import traceback
import types


class _Skip(Exception):
    pass


class _Raises:
    def __init__(self, exc, match=None):
        self.exc, self.match, self.value = exc, match, None

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        if et is None:
            raise AssertionError(f"DID NOT RAISE {self.exc}")
        if not issubclass(et, self.exc):
            return False
        if self.match and not re.search(self.match, str(ev)):
            raise AssertionError(f"{ev!r} does not match {self.match!r}")
        self.value = ev
        return True


def _skipif(cond, reason=""):
    def deco(f):
        if cond:
            def skipped(*a, **k):
                raise _Skip(reason)
            skipped.__name__ = f.__name__
            return skipped
        return f
    return deco


def _importorskip(name):
    try:
        return importlib.import_module(name)
    except ImportError:
        raise _Skip(f"no {name}")


def _parametrize(names, values):
    names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)

    def deco(f):
        cases = getattr(f, "_mini_cases", [{}])
        new = []
        for v in values:
            v = v if len(names) > 1 else (v,)
            new.extend({**c, **dict(zip(names, v))} for c in cases)
        f._mini_cases = new
        return f
    return deco


pytest = types.ModuleType("pytest")
pytest.raises = _Raises
pytest.skip = lambda reason="": (_ for _ in ()).throw(_Skip(reason))
pytest.mark = types.SimpleNamespace(skipif=_skipif, parametrize=_parametrize)
pytest.importorskip = _importorskip
sys.modules["pytest"] = pytest


def main(d, only=None):
    """Runs the test_*.py files of d (or only those named in `only`)."""
    sys.path.insert(0, d)
    p = f = s = 0
    for fn in sorted(os.listdir(d)):
        if not (fn.startswith("test_") and fn.endswith(".py")) or (only and fn not in only):
            continue
        spec = importlib.util.spec_from_file_location(fn[:-3], os.path.join(d, fn))
        mod = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(mod)
        except _Skip as e:
            print(f"SKIPPED {fn}: {e}")
            s += 1
            continue
        for name in sorted(vars(mod)):
            if not name.startswith("test_") or not callable(getattr(mod, name)):
                continue
            fun = getattr(mod, name)
            for case in getattr(fun, "_mini_cases", [{}]):
                label = name + (f"[{'-'.join(map(str, case.values()))}]" if case else "")
                try:
                    if "tmp_path" in inspect.signature(fun).parameters and "tmp_path" not in case:
                        with tempfile.TemporaryDirectory() as tmp:  # pytest's tmp_path fixture
                            fun(**case, tmp_path=pathlib.Path(tmp))
                    else:
                        fun(**case)
                    print(f"PASSED {fn}::{label}")
                    p += 1
                except _Skip as e:
                    print(f"SKIPPED {fn}::{label}: {e}")
                    s += 1
                except Exception:
                    print(f"FAILED {fn}::{label}")
                    traceback.print_exc()
                    f += 1
    print(f"{p} passed, {f} failed, {s} skipped")
    return 1 if f else 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0].endswith(".py"):  # files: python3 minipytest.py dir/test_a.py dir/test_b.py
        sys.exit(main(os.path.dirname(os.path.abspath(args[0])), {os.path.basename(a) for a in args}))
    sys.exit(main(args[0] if args else os.path.dirname(os.path.abspath(__file__))))
