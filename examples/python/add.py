"""SlangPy's first example in nabla: a .nb function called over whole arrays.

    PYTHONPATH=build/python python3 examples/python/add.py      (or after `pip install ./python`)
"""
import os

import numpy as np

import nabla

HERE = os.path.dirname(os.path.abspath(__file__))

device = nabla.device("auto")  # cuda:0 when there is a GPU, else the cpu
module = nabla.load_module(os.path.join(HERE, "..", "add.nb"), device=device)

a = np.random.rand(1_000_000).astype(np.float32)
b = np.random.rand(1_000_000).astype(np.float32)

result = module.add(a, b)  # numpy in -> numpy out; runs on `device`
assert np.allclose(result, a + b)
print(f"add over {a.size:,} floats on {device.name}: ok", result[:4])

# Broadcasting like NumPy: a scalar for every thread, a row for every row.
print(module.add(np.arange(6, dtype=np.float32).reshape(2, 3), 100.0))
print(module.add([[1, 2, 3], [4, 5, 6]], [10, 20, 30]))

# Outer product with .map: a's dim 0 -> kernel dim 0, b's dim 0 -> kernel dim 1.
print(module.add.map((0,), (1,))(np.arange(3.0), np.arange(4.0) * 10))

# Keep data on the device between calls with nabla.Tensor.
x = nabla.Tensor.from_numpy(a, device=device)
y = module.add(x, x)  # Tensor in -> Tensor out, no copies
print(y, y.to_numpy()[:4])
