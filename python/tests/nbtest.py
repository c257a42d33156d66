"""Helpers shared by the nabla Python tests."""
import os

import nabla

SRC = """
float add(float a, float b) { return a + b; }
float3 scale(float3 v, float s) { return v * s; }
void split(float3 v, out float x, out float2 yz) { x = v.x; yz = v.yz; }
void bump(inout float x, float d) { x = x + d; }
int twice(int x) { return x * 2; }
bool neg(bool b) { return !b; }
struct P { float2 xy; float w; };
float weigh(P p) { return (p.xy.x + p.xy.y) * p.w; }
struct Q { float3 pos; int n; };
Q mk(float x) { Q q; q.pos = float3(x, 2 * x, 3 * x); q.n = int(x) + 1; return q; }
float trace(float2x2 m) { return m[0][0] + m[1][1]; }
extern static const float kGain = 1.0;
float gain(float x) { return x * kGain; }
float sc(float x, float s = 2.0) { return x * s; }
[Differentiable] float square(float x) { return x * x; }
[Differentiable] float mul(float a, float b) { return a * b; }
[Differentiable] float axpb(float x, float a, float b) { return a * x + b; }
[Differentiable] double dmuls(double a, double b) { return a * b + sin(a); }
"""

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def devices():
    """'cpu', plus 'cuda' when a GPU is usable (NB_REQUIRE_CUDA=1 makes its absence a failure)."""
    d = ["cpu"]
    if nabla.cuda_available():
        d.append("cuda")
    elif os.environ.get("NB_REQUIRE_CUDA") == "1":
        raise AssertionError("NB_REQUIRE_CUDA=1 but no CUDA device: "
                             + str(nabla._nabla.cuda_unavailable_reason()))
    return d


_mods = {}


def module(dev="cpu"):
    if dev not in _mods:
        _mods[dev] = nabla.load_module_from_source(SRC, "t.nb", device=dev)
    return _mods[dev]
