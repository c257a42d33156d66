"""SlangPy's Tensor.load_from_image(device, path, flip_y, linearize, scale, offset, grayscale).

As SlangPy (slangpy/types/common.py load_buffer_data_from_image + Bitmap.convert): the image is
read as float32 in [0, 1]; a file of 1 channel gives a `float` tensor (H, W), 2 channels `float2`,
3 `float3`, 4 `float4` (nabla's flat layout: f32 (H, W, C)); `grayscale=True` keeps one channel
(R of an RGB(A) file: SlangPy's converter takes the red channel, not the luminance; Y of a gray
file); a gray + alpha file gives (Y, Y) as SlangPy's converter derives both R and G from Y. 8-bit
files hold sRGB-encoded values: they stay encoded unless `linearize=True`, which applies the sRGB
transfer function to the colour channels (not alpha). Then rows are flipped (`flip_y`) and
`data * scale + offset` applied. nabla reads PNG (8-bit gray, gray + alpha, RGB, RGBA, palette:
include/nabla/image.h); other formats are an UnsupportedError naming the format.
"""
import os

from . import _nabla

_PNG_SIG = b"\x89PNG\r\n\x1a\n"


def _png_color_type(path):
    """The PNG's IHDR colour type (0 gray, 2 RGB, 3 palette, 4 gray + alpha, 6 RGBA)."""
    try:
        with open(path, "rb") as f:
            head = f.read(26)
    except FileNotFoundError:
        raise _nabla.FileError(f"load_from_image: no such file '{path}'") from None
    except OSError as e:
        raise _nabla.FileError(f"load_from_image: cannot read '{path}': {e.strerror}") from None
    if head[:8] != _PNG_SIG:
        ext = os.path.splitext(str(path))[1] or "(no extension)"
        raise _nabla.UnsupportedError(
            f"load_from_image: '{path}' is not a PNG file ({ext}); nabla reads PNG images only")
    if len(head) < 26 or head[12:16] != b"IHDR":
        raise _nabla.FileError(f"load_from_image: '{path}' is a truncated PNG file (no IHDR header)")
    return head[25]


def load_data(path, flip_y=False, linearize=False, scale=1.0, offset=0.0, grayscale=False):
    """The image as a float32 numpy array (H, W) or (H, W, C), SlangPy's conversions applied."""
    import numpy as np

    path = os.fspath(path)
    ctype = _png_color_type(path)
    cpu = _nabla.device("cpu")
    has_alpha = False
    if ctype in (0, 4):  # gray (+ alpha): nabla's reader spreads gray; SlangPy gives Y, or (Y, Y)
        y = _nabla.image_read_png(path, 1, cpu).to_numpy()[..., 0]
        data = y if grayscale or ctype == 0 else np.stack([y, y], axis=-1)
    else:
        data = _nabla.image_read_png(path, 0, cpu).to_numpy()  # RGB (palette: RGB or RGBA), RGBA
        has_alpha = data.shape[-1] == 4
        if grayscale:
            data, has_alpha = data[..., 0], False
    data = np.asarray(data, dtype=np.float32)
    if linearize:  # 8-bit PNG values are sRGB-encoded: decode the colour channels
        def srgb_to_linear(v):
            return np.where(v <= 0.04045, v / 12.92, ((v + 0.055) / 1.055) ** 2.4).astype(np.float32)

        if has_alpha:
            data = np.concatenate([srgb_to_linear(data[..., :3]), data[..., 3:]], axis=-1)
        else:
            data = srgb_to_linear(data)
    if flip_y:
        data = np.flipud(data)
    if scale != 1.0 or offset != 0.0:
        data = data * np.float32(scale) + np.float32(offset)
    return np.ascontiguousarray(data, dtype=np.float32)


def load_from_image(device, path, flip_y=False, linearize=False, scale=1.0, offset=0.0, grayscale=False,
                    greyscale=None):
    """Tensor.load_from_image(device, path, ...) -> a float / float2 / float3 / float4 tensor of the
    image's (H, W) (flat layout: f32 (H, W[, C])) on device."""
    if not isinstance(device, _nabla.Device):
        raise _nabla.ArgumentError(
            f"load_from_image(device, path): device must be a nabla.Device, got {type(device).__name__}")
    if greyscale is not None:  # slangpy.types.common spells it so
        grayscale = greyscale
    for name, v in (("scale", scale), ("offset", offset)):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _nabla.ArgumentError(f"load_from_image: {name} must be a number, got {v!r}")
    data = load_data(path, flip_y, linearize, float(scale), float(offset), bool(grayscale))
    return _nabla.tensor_from_buffer(data, device)
