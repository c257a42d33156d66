"""SlangPy's Tensor.view(shape, strides, offset) and Tensor.load_from_image(device, path, ...)
on nabla: views share storage (in elements of the dtype: records of a struct tensor), bounds are
checked; images load as float/float2/float3/float4 tensors with SlangPy's channel, flip, scale /
offset, grayscale and linearize rules. Bad input gives typed errors."""
import struct
import zlib

import os

import numpy as np
import pytest

import nabla as spy
from nabla.types import NDBuffer, Tensor
from nbtest import devices


# ---- view -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", devices())
def test_view_shares_storage(kind):
    dev = spy.init_device(type=kind)
    t = Tensor.from_numpy(dev, np.arange(12, dtype=np.float32))
    v = t.view((3, 4))  # C-order strides by default
    assert v.shape == (3, 4) and v.to_numpy().tolist() == np.arange(12).reshape(3, 4).tolist()
    w = t.view((2, 2), strides=(4, 1), offset=1)  # elements 1, 2 / 5, 6
    assert w.to_numpy().tolist() == [[1, 2], [5, 6]]
    assert t.view((4,), strides=(3,)).to_numpy().tolist() == [0, 3, 6, 9]
    assert t.view((3, 2), strides=(0, 1), offset=10).to_numpy().tolist() == [[10, 11]] * 3  # stride 0
    w.copy_from(Tensor.from_numpy(dev, np.full((2, 2), -1, np.float32)))  # writes go to t
    assert t.to_numpy().tolist()[:8] == [0, -1, -1, 3, 4, -1, -1, 7]
    # offsets add to the view's own; a view may reach back to the start of the storage
    assert t.view((2,), offset=6).view((3,), offset=-4).to_numpy().tolist() == [-1, 3, 4]
    assert t[4:].view((2,), offset=-4).to_numpy().tolist() == [0, -1]


def test_view_of_struct_tensors_counts_records_and_views_grads():
    dev = spy.init_device(type="cpu")
    m = spy.load_module_from_source("struct Px { float r; float g; float b; }\n"
                                    "struct Rec { int id; float w; }\n"
                                    "float bright(Px p) { return p.r + p.g + p.b; }\n", "vw.slang", device=dev)
    p = Tensor.from_numpy(dev, np.arange(18, dtype=np.float32).reshape(6, 3), target_slang_dtype=m.Px)
    v = p.view((2, 2), offset=1)  # records 1..4 as [2, 2]; each record keeps its 3 floats
    assert v.dtype == m.Px and v.shape == (2, 2, 3)
    assert v.flatten_dtype().to_numpy().reshape(4, 3)[:, 0].tolist() == [3, 6, 9, 12]
    np.testing.assert_allclose(m.bright(v).to_numpy(), [[12, 21], [30, 39]])
    r = Tensor.zeros(dev, shape=(4,), dtype=m.Rec)  # mixed types: records of 8 bytes
    r["id"].copy_from(Tensor.from_numpy(dev, np.arange(4, dtype=np.int32)))
    assert r.view((2,), strides=(2,), offset=1).to_numpy()["id"].tolist() == [1, 3]
    g = Tensor.from_numpy(dev, np.arange(6, dtype=np.float32)).with_grads()
    g.grad.copy_from(Tensor.from_numpy(dev, np.arange(6, dtype=np.float32) * 10))
    gv = g.view((2,), strides=(2,), offset=1)
    assert gv.to_numpy().tolist() == [1, 3] and gv.grad.to_numpy().tolist() == [10, 30]
    assert gv.grad_in is gv.grad


def test_view_errors():
    dev = spy.init_device(type="cpu")
    t = Tensor.from_numpy(dev, np.arange(12, dtype=np.float32))
    with pytest.raises(spy.ShapeError, match="does not fit in its buffer"):
        t.view((13,))
    with pytest.raises(spy.ShapeError, match="does not fit in its buffer"):
        t.view((4,), strides=(4,))  # reaches element 12
    with pytest.raises(spy.ShapeError, match="does not fit"):
        t.view((2,), offset=-1)
    with pytest.raises(spy.ShapeError, match=r"strides \[-1\] must be >= 0"):
        t.view((2,), strides=(-1,), offset=5)
    with pytest.raises(spy.ShapeError, match="2 dims, strides 1"):
        t.view((2, 2), strides=(1,))
    with pytest.raises(spy.ShapeError, match="negative dim"):
        t.view((-2,))


# ---- load_from_image --------------------------------------------------------------------------


def write_png(path, pixels, color_type):
    """An 8-bit PNG of pixels (uint8 [H, W] or [H, W, C]) with this colour type (0 gray, 2 RGB,
    4 gray + alpha, 6 RGBA)."""
    h, w = pixels.shape[:2]
    raw = b"".join(b"\x00" + np.ascontiguousarray(pixels[y]).tobytes() for y in range(h))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color_type, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


RGB = np.array([[[10, 20, 30], [40, 50, 60], [70, 80, 90]], [[100, 110, 120], [130, 140, 150], [160, 170, 180]]],
               np.uint8)


def srgb_to_linear(v):
    return np.where(v <= 0.04045, v / 12.92, ((v + 0.055) / 1.055) ** 2.4)


@pytest.mark.parametrize("kind", devices())
def test_load_from_image_channels(kind, tmp_path):
    dev = spy.init_device(type=kind)
    p = str(tmp_path / "rgb.png")
    write_png(p, RGB, 2)
    t = Tensor.load_from_image(dev, p)  # float3 (2, 3): f32 (2, 3, 3)
    assert t.shape == (2, 3, 3) and t.dtype == "f32" and t.device.name == dev.name
    np.testing.assert_allclose(t.to_numpy(), RGB / 255.0, atol=1e-6)
    rgba = np.concatenate([RGB, np.full((2, 3, 1), 51, np.uint8)], -1)
    write_png(p, rgba, 6)
    np.testing.assert_allclose(NDBuffer.load_from_image(dev, p).to_numpy(), rgba / 255.0, atol=1e-6)
    write_png(p, RGB[..., 0], 0)  # gray: float (2, 3)
    g = Tensor.load_from_image(dev, p)
    assert g.shape == (2, 3)
    np.testing.assert_allclose(g.to_numpy(), RGB[..., 0] / 255.0, atol=1e-6)
    write_png(p, np.stack([RGB[..., 0], RGB[..., 1]], -1), 4)  # gray + alpha: float2 = (Y, Y) as SlangPy
    ya = Tensor.load_from_image(dev, p).to_numpy()
    assert ya.shape == (2, 3, 2)
    np.testing.assert_allclose(ya[..., 1], RGB[..., 0] / 255.0, atol=1e-6)


def test_load_from_image_options(tmp_path):
    dev = spy.init_device(type="cpu")
    p = str(tmp_path / "rgb.png")
    write_png(p, RGB, 2)
    ref = RGB / 255.0
    np.testing.assert_allclose(Tensor.load_from_image(dev, p, flip_y=True).to_numpy(), ref[::-1], atol=1e-6)
    np.testing.assert_allclose(Tensor.load_from_image(dev, p, scale=2.0, offset=0.5).to_numpy(), ref * 2 + 0.5,
                               atol=1e-5)
    gray = Tensor.load_from_image(dev, p, grayscale=True)  # SlangPy keeps the red channel
    assert gray.shape == (2, 3)
    np.testing.assert_allclose(gray.to_numpy(), ref[..., 0], atol=1e-6)
    np.testing.assert_allclose(Tensor.load_from_image(dev, p, linearize=True).to_numpy(), srgb_to_linear(ref),
                               atol=1e-6)
    rgba = np.concatenate([RGB, np.full((2, 3, 1), 128, np.uint8)], -1)
    write_png(p, rgba, 6)  # linearize leaves alpha as it is
    lin = Tensor.load_from_image(dev, p, linearize=True).to_numpy()
    np.testing.assert_allclose(lin[..., 3], 128 / 255.0, atol=1e-6)
    np.testing.assert_allclose(lin[..., :3], srgb_to_linear(ref), atol=1e-6)


FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "image")


def test_load_from_image_jpeg_and_exr():
    """JPEG: sRGB-encoded [0, 1] samples within 2 / 255 of djpeg's decode (the PPM beside it);
    OpenEXR: linear half / float values as stored (tests/data/image/README.md)."""
    dev = spy.init_device(type="cpu")
    jpg = Tensor.load_from_image(dev, os.path.join(FIXTURES, "s420.jpg")).to_numpy()
    ref = Tensor.load_from_image(dev, os.path.join(FIXTURES, "s420.ref.ppm")).to_numpy()
    assert jpg.shape == (29, 37, 3)
    assert np.abs(jpg - ref).max() <= 2 / 255 + 1e-6
    gray = Tensor.load_from_image(dev, os.path.join(FIXTURES, "proggray.jpg")).to_numpy()
    assert gray.shape == (29, 37)
    exr = Tensor.load_from_image(dev, os.path.join(FIXTURES, "zip_half_rgba.exr"), linearize=True).to_numpy()
    assert exr.shape == (37, 23, 4)
    y, x = 1, 5  # an odd row: ((x * 7 + y * 13 + k * 5) % 32) / 8 - 1.5, + 3 for alpha
    want = [((x * 7 + y * 13 + k * 5) % 32) / 8 - 1.5 + (3 if k == 3 else 0) for k in range(4)]
    np.testing.assert_array_equal(exr[y, x], np.array(want, np.float32))


def test_load_from_image_errors(tmp_path):
    dev = spy.init_device(type="cpu")
    with pytest.raises(spy.FileError, match="no such file"):
        Tensor.load_from_image(dev, str(tmp_path / "missing.png"))
    exr = tmp_path / "img.exr"
    exr.write_bytes(b"v/1\x01" + bytes(40))
    with pytest.raises(spy.FileError, match=r"'.*img.exr' is not a valid EXR file \(version 0\)"):
        Tensor.load_from_image(dev, str(exr))
    tiled = tmp_path / "tiled.exr"
    tiled.write_bytes(b"v/1\x01\x02\x02\x00\x00" + bytes(40))
    with pytest.raises(spy.UnsupportedError, match="is a tiled OpenEXR file, which nabla does not read"):
        Tensor.load_from_image(dev, str(tiled))
    jpg = tmp_path / "img.jpg"  # SOI, then an arithmetic-coded frame header (SOF9)
    jpg.write_bytes(b"\xff\xd8\xff\xc9\x00\x11\x08\x00\x01\x00\x01\x03" + bytes(20))
    with pytest.raises(spy.UnsupportedError, match="a JPEG file with arithmetic coding, which nabla does not read"):
        Tensor.load_from_image(dev, str(jpg))
    gif = tmp_path / "img.gif"
    gif.write_bytes(b"GIF89a" + bytes(20))
    with pytest.raises(spy.UnsupportedError, match=r"in the GIF format, which nabla does not read \(nabla reads PNG, "
                                                   r"JPEG, OpenEXR, BMP, TGA, Radiance HDR, PFM and PPM / PGM"):
        Tensor.load_from_image(dev, str(gif))
    bmp = tmp_path / "bad.bmp"
    bmp.write_bytes(b"BM" + bytes(30))
    with pytest.raises(spy.FileError, match="not a valid BMP file"):
        Tensor.load_from_image(dev, str(bmp))
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(4))
    with pytest.raises(spy.FileError, match="truncated"):
        Tensor.load_from_image(dev, str(bad))
    with pytest.raises(spy.ArgumentError, match="device must be a nabla.Device"):
        Tensor.load_from_image("cpu", str(bad))
    p = str(tmp_path / "ok.png")
    write_png(p, RGB, 2)
    with pytest.raises(spy.ArgumentError, match="scale must be a number"):
        Tensor.load_from_image(dev, p, scale="2")


def write_bmp(path, rgb):
    """A 24-bit bottom-up BMP of uint8 [H, W, 3] (rows padded to 4 bytes, BGR)."""
    h, w = rgb.shape[:2]
    stride = (w * 3 + 3) // 4 * 4
    rows = b"".join(rgb[y, :, ::-1].tobytes().ljust(stride, b"\0") for y in range(h - 1, -1, -1))
    head = b"BM" + struct.pack("<IHHI", 54 + len(rows), 0, 0, 54)
    head += struct.pack("<IiiHHIIiiII", 40, w, h, 1, 24, 0, len(rows), 0, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(head + rows)


@pytest.mark.parametrize("kind", devices())
def test_load_from_image_formats(kind, tmp_path):
    # BMP, TGA, PPM / PGM (integer samples: sRGB-encoded, linearize decodes them), Radiance HDR and
    # PFM (linear floats as stored, above 1 too; linearize leaves them)
    dev = spy.init_device(type=kind)
    ref = RGB / 255.0
    p = str(tmp_path / "a.bmp")
    write_bmp(p, RGB)
    t = Tensor.load_from_image(dev, p)
    assert t.shape == (2, 3, 3) and t.device.name == dev.name
    np.testing.assert_allclose(t.to_numpy(), ref, atol=1e-6)
    np.testing.assert_allclose(Tensor.load_from_image(dev, p, linearize=True, flip_y=True).to_numpy(),
                               srgb_to_linear(ref)[::-1], atol=1e-6)
    # TGA: 32-bit, top-left origin, BGRA
    rgba = np.concatenate([RGB, np.full((2, 3, 1), 51, np.uint8)], -1)
    p = str(tmp_path / "a.tga")
    with open(p, "wb") as f:
        f.write(struct.pack("<BBBHHBHHHHBB", 0, 0, 2, 0, 0, 0, 0, 0, 3, 2, 32, 0x28)
                + rgba[..., [2, 1, 0, 3]].tobytes())
    np.testing.assert_allclose(Tensor.load_from_image(dev, p).to_numpy(), rgba / 255.0, atol=1e-6)
    # PPM P6 and PGM P5
    p = str(tmp_path / "a.ppm")
    with open(p, "wb") as f:
        f.write(b"P6\n3 2\n255\n" + RGB.tobytes())
    np.testing.assert_allclose(Tensor.load_from_image(dev, p).to_numpy(), ref, atol=1e-6)
    p = str(tmp_path / "a.pgm")
    with open(p, "wb") as f:
        f.write(b"P5 3 2 255\n" + RGB[..., 1].tobytes())
    g = Tensor.load_from_image(dev, p)
    assert g.shape == (2, 3)
    np.testing.assert_allclose(g.to_numpy(), ref[..., 1], atol=1e-6)
    # PFM: rows bottom to top, little-endian (negative scale); values kept as stored
    hdr = np.array([[[0.5, 2.0, 100.0], [0.0, 1.0, 3.5]]], np.float32)  # (1, 2, 3)
    hdr = np.concatenate([hdr, hdr * 2], 0)  # (2, 2, 3)
    p = str(tmp_path / "a.pfm")
    with open(p, "wb") as f:
        f.write(b"PF\n2 2\n-1.0\n" + hdr[::-1].astype("<f4").tobytes())
    np.testing.assert_array_equal(Tensor.load_from_image(dev, p).to_numpy(), hdr)
    np.testing.assert_array_equal(Tensor.load_from_image(dev, p, linearize=True).to_numpy(), hdr)
    np.testing.assert_array_equal(Tensor.load_from_image(dev, p, grayscale=True).to_numpy(), hdr[..., 0])
    # Radiance HDR: RGBE, value = byte * 2^(e - 136)
    p = str(tmp_path / "a.hdr")
    with open(p, "wb") as f:
        f.write(b"#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y 1 +X 2\n" + bytes([128, 64, 32, 129, 255, 0, 1, 140]))
    want = np.array([[[1.0, 0.5, 0.25], [255 * 16.0, 0.0, 16.0]]], np.float32)
    np.testing.assert_array_equal(Tensor.load_from_image(dev, p).to_numpy(), want)
    np.testing.assert_array_equal(Tensor.load_from_image(dev, p, linearize=True, scale=0.5).to_numpy(), want * 0.5)
