"""SlangPy spelling of devices and module loading: init_device / create_device, DeviceType,
Module.load_from_file(device, path), device.load_module(name), device.load_module_from_file(path),
device.load_module_from_source(name, source). Installed by install()."""
import os

from . import _nabla


class DeviceType:
    """SlangPy's device types. nabla runs Slang on `cuda` and `cpu` (its C back end); `automatic`
    picks cuda when a GPU and driver are present, else the cpu. The graphics APIs are named so
    that asking for one gives a clear UnsupportedError."""

    automatic = "automatic"
    cpu = "cpu"
    cuda = "cuda"
    vulkan = "vulkan"
    d3d12 = "d3d12"
    metal = "metal"
    wgpu = "wgpu"


_GRAPHICS = ("vulkan", "d3d12", "metal", "wgpu")
# include paths given to init_device, per device name (devices are shared handles)
_include_paths = {}


def _type_spec(type):
    if type is None:
        return "auto"
    name = getattr(type, "name", None) if not isinstance(type, str) else type
    if not isinstance(name, str):
        raise _nabla.ArgumentError(f"init_device: type must be a spy.DeviceType or a str, got {type!r}")
    n = name.lower()
    if n in ("automatic", "auto"):
        return "auto"
    if n == "cpu" or n == "cuda" or (n.startswith("cuda:") and n[5:].isdigit()):
        return n
    if n in _GRAPHICS:
        raise _nabla.UnsupportedError(
            f"init_device: device type '{n}' is not supported: nabla runs Slang on 'cuda' and 'cpu' "
            "(DeviceType.cuda, DeviceType.cpu, DeviceType.automatic)")
    raise _nabla.ArgumentError(
        f"init_device: unknown device type {name!r} (expected DeviceType.automatic, DeviceType.cuda, "
        "DeviceType.cpu or 'cuda:N')")


def init_device(type=DeviceType.automatic, enable_debug_layers=False, include_paths=None,
                adapter_luid=None, enable_print=False, enable_hot_reload=False,
                enable_compilation_reports=False, compiler_options=None, **unknown):
    """SlangPy's init_device / create_device -> nabla.Device. include_paths are searched by
    device.load_module(name) and by `import` in modules loaded through this device. The debug /
    print / hot-reload / report switches have no effect here (nabla reports errors as
    exceptions always)."""
    if unknown:
        raise _nabla.ArgumentError(f"init_device: unknown argument(s) {sorted(unknown)}")
    if adapter_luid is not None:
        raise _nabla.UnsupportedError("init_device: adapter_luid is not supported (use type='cuda:N')")
    if compiler_options is not None:
        inc = compiler_options.get("include_paths") if isinstance(compiler_options, dict) else None
        include_paths = list(include_paths or []) + list(inc or [])
    dev = _nabla.device(_type_spec(type))
    if include_paths:
        paths = _include_paths.setdefault(dev.name, [])
        for p in include_paths:
            p = os.path.abspath(str(p))
            if p not in paths:
                paths.append(p)
    return dev


def include_paths(device):
    return list(_include_paths.get(device.name, [])) if device is not None else []


def _resolve(name, device, exts=(".slang", ".nb")):
    """SlangPy's search: the name as a path (relative to the working directory), then relative to
    each include path; without an extension, .slang then .nb are tried."""
    name = str(name)
    cands = [name] + ([] if os.path.splitext(name)[1] else [name + e for e in exts])
    dirs = [os.getcwd()] + include_paths(device)
    for d in dirs:
        for c in cands:
            p = c if os.path.isabs(c) else os.path.join(d, c)
            if os.path.isfile(p):
                return p
    raise _nabla.FileError(f"module '{name}' not found (searched {', '.join(dirs)}; "
                           "add directories with spy.init_device(include_paths=[...]))")


def install(nabla):
    Module = nabla.Module

    def load_from_file(device, path, link=None, options=None):
        """SlangPy: Module.load_from_file(device, path) -> nabla.Module on that device."""
        if not isinstance(device, _nabla.Device):
            raise _nabla.ArgumentError(
                f"Module.load_from_file(device, path): device must be a nabla.Device, got {type(device).__name__}")
        if link:
            raise _nabla.UnsupportedError("Module.load_from_file: link= is not supported")
        defines = options.get("defines") if isinstance(options, dict) else None
        return nabla.load_module(_resolve(path, device), device=device, include_dirs=include_paths(device) or None,
                                 defines=defines)

    def load_from_source(device, name, source, options=None):
        return nabla.load_module_from_source(source, str(name) if str(name).endswith((".slang", ".nb"))
                                             else f"{name}.slang", device=device,
                                             include_dirs=include_paths(device) or None)

    Module.load_from_file = staticmethod(load_from_file)
    Module.load_from_source = staticmethod(load_from_source)
    Module.load_from_module = staticmethod(lambda device, module: module)  # already a nabla.Module
    Dev = _nabla.Device
    Dev.load_module = lambda self, name: load_from_file(self, name)
    Dev.load_module.__doc__ = "SlangPy: device.load_module(name) searched in the cwd and include paths."
    Dev.load_module_from_file = lambda self, path: load_from_file(self, path)
    Dev.load_module_from_source = lambda self, name, source: load_from_source(self, name, source)
    Dev.type = property(lambda self: self.kind, doc="SlangPy: the device type ('cuda' or 'cpu')")
    Dev.include_paths = property(lambda self: include_paths(self))
