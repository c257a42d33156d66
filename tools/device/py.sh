#!/usr/bin/env bash
# Device run for the Python package (issue 5): builds libnabla + nabla._nabla in build-dev-py,
# runs the pytest suite (torch + CUDA tests included, NB_REQUIRE_CUDA=1), the examples and the
# call-overhead benchmark. Logs: $OUT/py/{env,build,pytest,examples,bench}.log
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/py"
mkdir -p "$O"
B=build-dev-py
PY="$(command -v python3)"
export NABLA_CACHE_DIR="$PWD/$B/cache"
export NB_REQUIRE_CUDA=1

{
  date -u
  echo "python: $PY"; "$PY" --version
  "$PY" -c "import sysconfig, os; i = sysconfig.get_paths()['include']; print('include', i, 'Python.h' if os.path.exists(i + '/Python.h') else 'NO Python.h')"
  "$PY" -c "import numpy; print('numpy', numpy.__version__)" 2>&1
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())" 2>&1
  "$PY" -c "import pytest; print('pytest', pytest.__version__)" 2>&1
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
} > "$O/env.log" 2>&1

{
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$PY" -DNB_BUILD_TESTS=ON
  cmake --build "$B" -j "$(nproc)" --target nabla_python
  cmake --build "$B" -j "$(nproc)" --target test_stream_native
} > "$O/build.log" 2>&1
SO="$B/python/nabla/_nabla.abi3.so"
if [ ! -f "$SO" ]; then
  # No Python headers here: fall back to the abi3 extension built on the dev machine (Python 3.11
  # headers; the stable ABI loads on 3.12), if it was placed next to this script.
  echo "EXTENSION NOT BUILT ON THE DEVICE (no Python headers for $PY?)" | tee -a "$O/build.log"
  if [ -f tools/device/py_prebuilt/_nabla.abi3.so ]; then
    mkdir -p "$B/python/nabla"
    cp tools/device/py_prebuilt/_nabla.abi3.so "$SO"
    cp python/nabla/*.py "$B/python/nabla/"
    echo "USING PREBUILT tools/device/py_prebuilt/_nabla.abi3.so (built on the dev machine)" | tee -a "$O/build.log"
  fi
fi
export PYTHONPATH="$PWD/$B/python"
"$B/tests/test_stream_native" > "$O/test_stream_native.log" 2>&1; echo "exit: $?" >> "$O/test_stream_native.log"

# pytest may be missing on the device: python/tests/minipytest.py stands in for the few parts used.
if "$PY" -c "import pytest" 2>/dev/null; then
  timeout 150 "$PY" -m pytest -v -rs -p no:cacheprovider python/tests > "$O/pytest.log" 2>&1
else
  echo "(pytest not installed: using python/tests/minipytest.py)" > "$O/pytest.log"
  timeout 150 "$PY" python/tests/minipytest.py python/tests >> "$O/pytest.log" 2>&1
fi
echo "exit: $?" >> "$O/pytest.log"

{
  for e in add.py square_torch.py train_mlp.py; do
    echo "== examples/python/$e"
    timeout 60 "$PY" "examples/python/$e"; echo "exit: $?"
  done
} > "$O/examples.log" 2>&1

timeout 90 "$PY" bench/python/bench_call.py --n 20000 > "$O/bench.log" 2>&1
echo "exit: $?" >> "$O/bench.log"
# cold start: a fresh process, warm disk cache
{
  for dev in cpu cuda; do
    "$PY" -c "
import time; t0 = time.perf_counter()
import nabla
t1 = time.perf_counter()
import numpy as np
t1b = time.perf_counter()
m = nabla.load_module('examples/square.nb', device='$dev')
y = m.square(np.ones(4, np.float32))
t2 = time.perf_counter()
print('$dev: import nabla %.1f ms, load + first call (warm disk cache) %.1f ms' % ((t1-t0)*1e3, (t2-t1b)*1e3))"
  done
} >> "$O/bench.log" 2>&1
tail -n 3 "$O/pytest.log"
cat "$O/bench.log"
