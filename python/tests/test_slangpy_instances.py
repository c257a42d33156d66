"""SlangPy's InstanceList / InstanceTensor on nabla: a struct's methods called over an array of
instances (`this` bound per element; [mutating] methods write back), and struct methods called
as functions ("Particle.update"). CPU, and CUDA with a GPU."""
import numpy as np
import pytest

import nabla as spy
from nbtest import devices

SRC = """
struct Material { float3 color; float3 emission; };
struct Particle {
    float2 position;
    float2 velocity;
    float size;
    Material material;
    __init(float2 p, float2 v) {
        position = p; velocity = v; size = 0.5;
        material.color = float3(1, 1, 1); material.emission = float3(0, 0, 0);
    }
    [mutating] void reset(float2 p, float2 v) { position = p; velocity = v; }
    [mutating] void update_position(float dt) { position += velocity * dt; }
    float speed() { return length(velocity); }
    static float twice(float x) { return 2 * x; }
};
float not_a_method(float x) { return x; }
"""

_mods = {}


def mod(dev):
    if dev not in _mods:
        _mods[dev] = spy.load_module_from_source(SRC, "inst.slang", device=dev)
    return _mods[dev]


def soa(n, dev):
    return {
        "position": np.zeros((n, 2), np.float32),
        "velocity": np.zeros((n, 2), np.float32),
        "size": np.zeros((n,), np.float32),
        "material": {"color": np.zeros((n, 3), np.float32), "emission": np.zeros((n, 3), np.float32)},
    }


@pytest.mark.parametrize("dev", devices())
def test_methods_as_functions(dev):
    m = mod(dev)
    f = m.require_function("Particle.speed")
    assert "Particle.speed(Particle this)" in repr(f)
    sp = f({"position": [0, 0], "velocity": np.array([[3, 4], [0, 2]], np.float32), "size": 1.0,
            "material": {"color": [1, 1, 1], "emission": [0, 0, 0]}})
    assert np.allclose(sp, [5, 2])
    assert m.require_function("Particle.twice")(np.array([1.0, 2.0], np.float32)).tolist() == [2.0, 4.0]
    with pytest.raises(spy.NotFoundError, match="Particle.fly"):
        m.require_function("Particle.fly")


@pytest.mark.parametrize("dev", devices())
def test_instance_list_soa(dev):
    m = mod(dev)
    data = soa(3, dev)
    pl = spy.InstanceList("Particle", data, module=m)
    pl.construct(np.array([[1, 2], [3, 4], [5, 6]], np.float32), np.array([3, 4], np.float32))
    assert pl.position.tolist() == [[1, 2], [3, 4], [5, 6]]
    assert pl.velocity.tolist() == [[3, 4]] * 3
    assert pl.size.tolist() == [0.5] * 3
    assert pl.material["color"].tolist() == [[1, 1, 1]] * 3
    pl.reset(np.zeros(2, np.float32), np.array([0, 1], np.float32))  # broadcast to every instance
    pl.update_position(1.0)
    pl.update_position(np.array([1.0, 2.0, 3.0], np.float32))  # one dt per instance
    assert pl.position.tolist() == [[0, 2], [0, 3], [0, 4]]
    assert np.allclose(pl.speed(), [1, 1, 1])
    # the same arrays seen through the dict (written in place)
    assert data["position"].tolist() == [[0, 2], [0, 3], [0, 4]]
    # a field set through the list
    pl.velocity = np.array([[1, 0], [2, 0], [3, 0]], np.float32)
    assert np.allclose(pl.speed(), [1, 2, 3])
    # a bound method recorded into a command encoder runs at submit
    if dev == "cpu":  # (numpy outputs of a CUDA module cannot be recorded: they are staged)
        enc = spy.device(dev).create_command_encoder()
        pl.update_position.append_to(enc, 1.0)
        pl.update_position.append_to(enc, 1.0)
        assert pl.position.tolist() == [[0, 2], [0, 3], [0, 4]]
        spy.device(dev).submit_command_buffer(enc.finish())
        assert pl.position.tolist() == [[2, 2], [4, 3], [6, 4]]


@pytest.mark.parametrize("dev", devices())
def test_instance_list_nabla_tensors(dev):
    m = mod(dev)
    n = 1000
    data = {k: spy.Tensor.from_numpy(v, device=dev) if not isinstance(v, dict) else
            {k2: spy.Tensor.from_numpy(v2, device=dev) for k2, v2 in v.items()} for k, v in soa(n, dev).items()}
    pl = spy.InstanceList("Particle", data, module=m)
    vel = np.random.default_rng(0).standard_normal((n, 2)).astype(np.float32)
    pl.reset(np.zeros((n, 2), np.float32), vel)
    for _ in range(4):
        pl.update_position(0.25)
    assert np.allclose(pl.position.to_numpy(), vel, atol=1e-6)


@pytest.mark.parametrize("dev", devices())
def test_instance_errors(dev):
    m = mod(dev)
    with pytest.raises(spy.ArgumentError, match="not a struct type"):
        spy.InstanceList("float3", {}, module=m)
    with pytest.raises(spy.ArgumentError, match="module is unknown"):
        spy.InstanceList("Particle", {})
    pl = spy.InstanceList("Particle", soa(2, dev), module=m)
    with pytest.raises(AttributeError, match="no field or method 'fly'"):
        pl.fly(1.0)
    # a mutating method writes every field: a field given as one value cannot be written
    one = soa(2, dev)
    one["size"] = 0.5
    with pytest.raises(spy.ArgumentError, match="'this.size' is inout"):
        spy.InstanceList("Particle", one, module=m).update_position(1.0)
    with pytest.raises(spy.ArgumentError, match="_type"):
        spy.InstanceList("Particle", {"_type": "Material"}, module=m)


FLAT_SRC = """
struct Body {
    float2 position;
    float2 velocity;
    float mass;
    [mutating] void reset(float2 p, float2 v) { position = p; velocity = v; mass = 1; }
    [mutating] void step(float dt) { position += velocity * dt; }
    float energy() { return 0.5 * mass * dot(velocity, velocity); }
};
"""


@pytest.mark.skipif(not hasattr(spy, "SlangType"), reason="needs module.Struct dtypes (SlangPy part 1)")
@pytest.mark.parametrize("dev", devices())
def test_instance_tensor(dev):
    m = spy.load_module_from_source(FLAT_SRC, "flat.slang", device=dev)
    body = m.Body  # a SlangType: the flat layout (position, velocity, mass) = 5 floats
    pt = spy.InstanceTensor(body, (4,))  # module.Body knows its module
    assert pt.shape == (4,) and tuple(pt.tensor.shape) == (4, 5)
    vel = np.arange(8, dtype=np.float32).reshape(4, 2)
    pt.reset(np.zeros(2, np.float32), vel)
    pt.step(0.5)
    flat = pt.to_numpy()
    assert np.allclose(flat[:, 0:2], 0.5 * vel) and np.allclose(flat[:, 2:4], vel) and np.all(flat[:, 4] == 1)
    assert np.allclose(pt.energy(), 0.5 * (vel * vel).sum(axis=1))
    data = np.zeros((4, 5), np.float32)
    data[:, 2] = 1.0  # velocity.x
    data[:, 4] = 2.0  # mass
    pt.copy_from_numpy(data)
    assert np.allclose(pt.energy(), 1.0)
    # the design doc's spelling: InstanceList(module.Struct, dict of fields)
    pl = spy.InstanceList(m.Body, {"position": np.zeros((2, 2), np.float32),
                                   "velocity": np.ones((2, 2), np.float32), "mass": np.ones(2, np.float32)})
    pl.step(2.0)
    assert pl.position.tolist() == [[2, 2], [2, 2]]
    with pytest.raises(spy.ArgumentError, match="not a struct type"):
        spy.InstanceList(m.float3, {})


MIXED_SRC = """
struct Cell {
    int id;
    float2 pos;
    float heat;
    __init(int i, float2 p) { id = i; pos = p; heat = 0.0; }
    [mutating] void warm(float dt) { heat = heat + dt * float(id); }
    float score() { return heat + pos.x; }
}
"""


@pytest.mark.parametrize("dev", devices())
def test_instances_of_a_struct_of_mixed_types(dev):
    """A struct mixing int and float fields: InstanceTensor holds its C records (a struct tensor,
    u8 storage), methods bind the fields as strided views; construct with tensor inputs gives a
    struct tensor whose fields are merged into an InstanceList's arrays."""
    m = spy.load_module_from_source(MIXED_SRC, "mixed.slang", device=dev)
    ct = spy.InstanceTensor(m.Cell, (3,))
    assert ct.tensor.dtype == m.Cell and ct.shape == (3,)
    rec = np.zeros(3, [("id", "<i4"), ("pos", "<f4", (2,)), ("heat", "<f4")])
    rec["id"], rec["pos"][:, 0] = [1, 2, 3], [10, 20, 30]
    ct.copy_from_numpy(rec)
    ct.warm(0.5)
    assert ct.to_numpy()["heat"].tolist() == [0.5, 1.0, 1.5]
    assert ct.score().to_numpy().tolist() == [10.5, 21.0, 31.5]
    ids = spy.Tensor.from_numpy(np.array([4, 5], np.int32), device=dev)
    p = spy.Tensor.from_numpy(np.ones((2, 2), np.float32), device=dev)
    assert m.require_function("Cell.__init")(ids, p).dtype == m.Cell  # a struct result from tensors: a struct tensor
    il = spy.InstanceList(m.Cell, {"id": np.zeros(2, np.int32), "pos": np.zeros((2, 2), np.float32),
                                   "heat": np.zeros(2, np.float32)})
    il.construct(ids, p)
    assert il.id.tolist() == [4, 5] and il.pos.tolist() == [[1, 1], [1, 1]]
