#!/usr/bin/env python3
"""Runs slang-torch's inline-MLP example (examples/inline-mlp-example: mlp_image_fit.py,
image_model.py, image-model.slang, inline-mlp.slang, cuda_matmul_prelude.cuh, media/jeep.jpg)
on nabla, with only its import line changed, and summarises the loss curve.

    PYTHONPATH=build/python tools/slang_suite/run_inline_mlp_example.py DIR

DIR holds the example's files (not part of this repository; extract them from a slang-torch
checkout). The files are copied to a temporary directory and image_model.py's `import slangtorch`
becomes `import nabla.slangtorch as slangtorch` — the one edit a user makes. The script's plotting
and video dependencies (matplotlib, cv2) are always replaced by stand-ins (a headless GPU machine's
cv2 fails in destroyAllWindows, with or without nabla): `plt.imread` reads the image with PIL, or
from media/<name>.npy beside it (made elsewhere with PIL); plotting and video writing do nothing. Prints the first, 100th, 1000th and last loss,
the run's wall time and the script's exit status."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

PLT = '''
import os
import numpy as np


def imread(path):
    try:
        from PIL import Image
        return np.asarray(Image.open(path))
    except ImportError:
        return np.load(os.path.splitext(path)[0] + ".npy")


class _Ax:
    def __getattr__(self, name):
        return lambda *a, **k: None


def subplots(*shape, **kw):
    n = 1
    for s in shape:
        n *= s
    return None, tuple(_Ax() for _ in range(n)) if n > 1 else _Ax()


def show(*a, **k):
    pass


def __getattr__(name):
    return lambda *a, **k: None
'''

CV2 = '''
def VideoWriter_fourcc(*a):
    return 0


class VideoWriter:
    def __init__(self, *a, **k):
        pass

    def write(self, frame):
        pass

    def release(self):
        pass


def destroyAllWindows():
    pass
'''


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    src = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        ex = os.path.join(tmp, "example")
        shutil.copytree(src, ex)
        p = os.path.join(ex, "image_model.py")
        text = open(p).read()
        new = re.sub(r"^import slangtorch$", "import nabla.slangtorch as slangtorch", text, count=1, flags=re.M)
        if new == text:
            raise SystemExit("image_model.py has no line 'import slangtorch'")
        open(p, "w").write(new)
        shims = os.path.join(tmp, "shims")
        os.makedirs(shims)
        os.makedirs(os.path.join(shims, "matplotlib"))
        open(os.path.join(shims, "matplotlib", "__init__.py"), "w").write("")
        open(os.path.join(shims, "matplotlib", "pyplot.py"), "w").write(PLT)
        open(os.path.join(shims, "cv2.py"), "w").write(CV2)
        env = dict(os.environ)
        # absolute: the script runs in the temporary copy
        paths = [os.path.abspath(q) for q in env.get("PYTHONPATH", "").split(os.pathsep) if q]
        env["PYTHONPATH"] = os.pathsep.join([shims, *paths])
        t0 = time.time()
        r = subprocess.run([sys.executable, "mlp_image_fit.py"], cwd=ex, env=env, capture_output=True, text=True)
        wall = time.time() - t0
    losses = [float(m.group(2)) for m in re.finditer(r"Iteration (\d+), Loss: ([-+0-9.eE]+|nan|inf)", r.stdout)]
    if r.returncode != 0 or not losses:
        print(r.stdout[-3000:])
        print(r.stderr[-3000:])
    pick = [i for i in (0, 100, 1000, len(losses) - 1) if 0 <= i < len(losses)]
    print("inline-mlp example on nabla: " + ", ".join(f"it {i}: {losses[i]:.5f}" for i in pick)
          + f"; {len(losses)} iterations in {wall:.1f} s; exit {r.returncode}")
    sys.exit(r.returncode if r.returncode else (0 if losses else 1))


if __name__ == "__main__":
    main()
