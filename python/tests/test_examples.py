"""The Python examples run as they are (examples/python/*.py), so they never rot."""
import os
import subprocess
import sys

import pytest

from nbtest import ROOT


def run(name):
    env = dict(os.environ)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", name)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_add_example():
    assert "ok" in run("add.py")


def test_train_mlp_example():
    assert "mse" in run("train_mlp.py")


def test_square_torch_example():
    pytest.importorskip("torch")
    assert "ok on" in run("square_torch.py")


def test_particles_example():
    # SlangPy's generators, InstanceList and command encoders together
    assert ": ok" in run("particles.py")


def test_square_slangtorch_example():
    """The slangtorch tutorial as written: [TorchEntryPoint] host functions + MySquareFuncInSlang."""
    pytest.importorskip("torch")
    assert "ok on" in run("square_slangtorch.py")


def test_slangpy_design_example():
    assert "ok: the loss went from" in run(os.path.join("slangpy_design", "example.py"))
