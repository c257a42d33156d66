"""SlangPy's Tensor.load_from_image(device, path, flip_y, linearize, scale, offset, grayscale).

As SlangPy (slangpy/types/common.py load_buffer_data_from_image + Bitmap.convert): the image is
read as float32; a file of 1 channel gives a `float` tensor (H, W), 2 channels `float2`, 3
`float3`, 4 `float4` (nabla's flat layout: f32 (H, W, C)); `grayscale=True` keeps one channel
(R of an RGB(A) file: SlangPy's converter takes the red channel, not the luminance; Y of a gray
file); a gray + alpha file gives (Y, Y) as SlangPy's converter derives both R and G from Y.
Integer formats (PNG, JPEG, BMP, TGA, PPM / PGM) give values in [0, 1] that hold sRGB-encoded colours:
they stay encoded unless `linearize=True`, which applies the sRGB transfer function to the colour
channels (not alpha). Float formats (OpenEXR, Radiance HDR, PFM) hold linear values as stored (above 1
too): `linearize` leaves them unchanged, as a linear bitmap is not re-linearized by sgl. Then rows
are flipped (`flip_y`) and `data * scale + offset` applied. The files are read by nabla's C
reader (nb_image_read, include/nabla/image.h: PNG, JPEG, OpenEXR, BMP, TGA, HDR, PFM, PPM / PGM);
other formats are an UnsupportedError naming the format and listing the supported ones.
"""
import os

from . import _nabla


def load_data(path, flip_y=False, linearize=False, scale=1.0, offset=0.0, grayscale=False):
    """The image as a float32 numpy array (H, W) or (H, W, C), SlangPy's conversions applied."""
    import numpy as np

    path = os.fspath(path)
    if not os.path.exists(path):
        raise _nabla.FileError(f"load_from_image: no such file '{path}'")
    t, info = _nabla.image_read(path, _nabla.device("cpu"))
    data = t.to_numpy()
    ch = info["channels"]
    has_alpha = ch == 4
    if ch == 1:
        data = data[..., 0]
    elif ch == 2:  # gray + alpha: SlangPy gives Y, or (Y, Y)
        y = data[..., 0]
        data = y if grayscale else np.stack([y, y], axis=-1)
    elif grayscale:
        data, has_alpha = data[..., 0], False
    data = np.asarray(data, dtype=np.float32)
    if linearize and info["srgb"]:  # integer samples are sRGB-encoded: decode the colour channels
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
