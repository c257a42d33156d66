"""SlangPy spelling of calls: the hook the C call layer runs first for calls that need it
(python/src/spy.c nbp_spy_wants), and FunctionNode (f.set(...), f.return_type(...)).

The hook rewrites (args, kwargs) before binding:
- a nabla.Tensor / numpy array / torch tensor for a **struct** parameter is read in the flat
  layout (python/nabla/_spy_types.py) and bound field by field as zero-copy strided views; in
  `.bwds`, a Tensor's gradient buffer (`.grad` = grad_out) is split the same way into `_grads`;
  a struct tensor (any field types) and a numpy structured array are bound by their fields
  (python/nabla/_spy_struct.py);
- a **struct result** becomes a struct tensor (`_result=Tensor` / "tensor", `module.S`, or tensor
  inputs) or a numpy structured array (`_result=numpy.ndarray` / "numpy"); `_result=` a struct
  tensor or structured array is written field by field in place;
- a dict with a `_type` key (`{'_type': 'MyType', 'x': 5}`) must name the parameter's type
  (ArgumentError otherwise); the key is dropped;
- `_result=nabla.Tensor` / `numpy.ndarray` / `torch.Tensor` (the classes) mean "tensor" /
  "numpy" / "torch".
"""
from . import _nabla
from ._spy_types import SlangType, builtin_type, cmodule_type, lazy_module, struct_layout

_spy_struct = lazy_module("_spy_struct")  # imported on first use: import nabla stays small

_MODS = {"in", "out", "inout", "const", "uniform", "no_diff", "nodiff"}
_info_cache = {}


def _split_params(sig):
    """'float[8] compute(MLP<32,8> mlp, float[32] input)' -> [('MLP<32,8>', 'mlp'), ...]"""
    i = sig.find("(")
    j = sig.rfind(")")
    if i < 0 or j < i:
        return []
    body, parts, depth, cur = sig[i + 1:j], [], 0, ""
    for ch in body:
        if ch in "<[(":
            depth += 1
        elif ch in ">])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    out = []
    for p in parts:
        toks = p.split()
        toks = [t for t in toks if t not in _MODS]
        if not toks:
            continue
        name = toks[-1] if len(toks) > 1 else ""
        out.append(("".join(toks[:-1]) if len(toks) > 1 else toks[0], name))
    return out


def _info(fn):
    key = (id(fn.module), fn.name)
    hit = _info_cache.get(key)
    if hit is not None:
        return hit[1]
    overloads = []
    ov = 0
    while True:
        sig = _nabla.func_signature(fn, ov)
        if sig is None:
            break
        leaves = _nabla.func_leaves(fn, ov) or []
        params = _split_params(sig)
        sleaves = {}
        tensor_params = {lf[0] for lf in leaves if lf[4]}  # views inside: slangtorch's, not ours
        for lf in leaves:
            p, path = lf[0], lf[1]
            if p >= 0 and "." in path and p not in tensor_params:
                sleaves.setdefault(p, []).append((p, path.split(".", 1)[1]) + tuple(lf[2:]))
        overloads.append((params, sleaves))
        ov += 1
    _info_cache[key] = (fn.module, overloads)
    return overloads


def _numpy():
    import numpy

    return numpy


def _is_torch(o):
    import sys

    t = sys.modules.get("torch")
    return t is not None and isinstance(o, t.Tensor)


def _views(fname, pname, tname, leaves, v):
    """{field path: view} of v in the flat layout of a struct with these leaves."""
    dtype, shape, fields = struct_layout(leaves, f"struct {tname}")
    if isinstance(v, (list, tuple)) or (not isinstance(v, _nabla.CTensor) and not _is_torch(v)
                                         and not hasattr(v, "__array_interface__")):
        try:
            v = _numpy().asarray(v, dtype={"f32": "float32", "f64": "float64", "i32": "int32",
                                           "u32": "uint32", "i64": "int64"}.get(dtype, "float32"))
        except Exception:
            raise _nabla.ArgumentError(
                f"{fname}: argument '{pname}' is a struct {tname}: pass a dict of its fields, or a "
                f"nabla.Tensor / numpy array / torch tensor in the flat layout (…, {', '.join(map(str, shape))})"
            ) from None
    vshape = tuple(v.shape)
    if vshape[len(vshape) - len(shape):] != shape or len(vshape) < len(shape):
        raise _nabla.ShapeError(
            f"{fname}: argument '{pname}' (struct {tname}) has shape {list(vshape)}: a struct {tname} is "
            f"stored as {list(shape)} per element (fields {', '.join(p for p, _, _ in fields)}), so the "
            f"array must end in {list(shape)}")
    if len(fields) == 1:
        return {fields[0][0]: v}
    out, off, lead = {}, 0, vshape[:-1]
    for path, _, dims in fields:
        n = 1
        for d in dims:
            n *= d
        if isinstance(v, _nabla.CTensor):
            last = len(vshape) - 1
            if not dims:
                w = _nabla.tensor_select(v, last, off)
            else:
                w = _nabla.tensor_slice(v, last, off, off + n, 1)
                if dims != (n,):
                    w = _nabla.tensor_reshape(w, lead + dims)
        else:
            w = v[..., off] if not dims else v[..., off:off + n].reshape(lead + dims)
        out[path] = w
        off += n
    return out


def _strip_type(d):
    return {k: (_strip_type(v) if isinstance(v, dict) else v) for k, v in d.items() if k != "_type"}


def _arg(fn, overloads, index, name, a, grads):
    params, sleaves = overloads[0]
    if index is None:
        index = next((i for i, (_, n) in enumerate(params) if n == name), -1)
    if isinstance(a, dict) and "_type" in a:
        want = str(a["_type"]).replace(" ", "")
        types = [ov[0][index][0] for ov in overloads if 0 <= index < len(ov[0])]
        if want not in types:
            pname = params[index][1] if 0 <= index < len(params) else name
            raise _nabla.ArgumentError(
                f"{fn.name}: argument '{pname}' says _type '{a['_type']}', but the parameter's type is "
                f"{' or '.join(repr(t) for t in types) if types else 'unknown'}")
        return _strip_type(a)
    if index < 0 or index not in sleaves or isinstance(a, dict) or type(a).__name__ == "SimpleNamespace":
        return a
    tname, pname = params[index]
    if _spy_struct.is_struct_tensor(a):  # records of the struct: one strided view per field
        st = a.slang_type
        if st.name.replace(" ", "") != tname:
            raise _nabla.DtypeError(f"{fn.name}: argument '{pname}' is a tensor of struct {st.name}, the parameter "
                                    f"is {tname}")
        if fn.mode == "bwds" and a.grad is not None:
            grads[pname] = _spy_struct.nest(_spy_struct.field_views(a.grad, st))
        return _spy_struct.nest(_spy_struct.field_views(a, st))
    if getattr(getattr(a, "dtype", None), "names", None) is not None and hasattr(a, "__array_interface__"):
        st = cmodule_type(fn.module, tname)  # a numpy structured array: its fields by name
        return _spy_struct.nest(_spy_struct.structured_fields(a, st, fn.name, pname))
    if isinstance(a, _nabla.CTensor) and fn.mode == "bwds" and a.grad is not None:
        grads[pname] = _spy_struct.nest(_views(fn.name, pname, tname, sleaves[index], a.grad))
        a = a.detach()
    return _spy_struct.nest(_views(fn.name, pname, tname, sleaves[index], a))


def result_kind(r):
    """_result= / return_type() values -> "tensor" | "numpy" | "torch" (or r unchanged)."""
    if r is _nabla.CTensor or isinstance(r, SlangType):
        return "tensor"
    if isinstance(r, type):
        mod, nm = r.__module__, r.__name__
        if mod == "numpy" and nm == "ndarray":
            return "numpy"
        if mod.startswith("torch") and nm == "Tensor":
            return "torch"
        raise _nabla.ArgumentError(f"_result={nm}: expected nabla.Tensor, numpy.ndarray, torch.Tensor or a "
                                   "kind name ('tensor', 'numpy', 'torch')")
    if getattr(r, "__name__", None) in ("numpy", "torch") and hasattr(r, "__spec__"):  # the modules
        return r.__name__
    return r


_ret_cache = {}
_DECL_MODS = ("static", "inline", "public", "internal", "private", "const")


def _ret_name(sig):
    """'static Cell Cell.__init(int i)' -> 'Cell'; 'MLP<32, 8> f(...)' -> 'MLP<32,8>'."""
    if "(" not in sig:
        return ""
    head = sig.split("(")[0].strip()
    head = head[:len(head) - len(head.split()[-1])].strip() if head.split() else ""  # drop the name
    words = head.split(" ")
    while words and (words[0] in _DECL_MODS or words[0].startswith("[")):
        words = words[1:]
    return "".join(words)


def _ret_struct(fn):
    """The SlangType of fn's struct result, or None."""
    key = (id(fn.module), fn.name)
    hit = _ret_cache.get(key)
    if hit is not None and hit[0] is fn.module:
        return hit[1]
    ret = _ret_name(_nabla.func_signature(fn, 0) or "")
    st = None
    if ret and ret != "void" and builtin_type(ret) is None:
        try:
            st = cmodule_type(fn.module, ret)
        except _nabla.NablaError:
            st = None
        if st is not None and (not st.is_struct or st.dtype is None):
            st = None
    _ret_cache[key] = (fn.module, st)
    return st


def _result_plan(fn, st, kw):
    """Rewrites _result for a struct result; returns the post-processing of the call's result."""
    r = kw.get("_result")
    if _spy_struct.is_struct_tensor(r):
        if r.slang_type.name != st.name:
            raise _nabla.DtypeError(f"{fn.name}: _result is a tensor of struct {r.slang_type.name}, the function "
                                    f"returns {st.name}")
        kw["_result"] = _spy_struct.nest(_spy_struct.field_views(r))
        return lambda out: r
    if getattr(getattr(r, "dtype", None), "names", None) is not None and hasattr(r, "__array_interface__"):
        kw["_result"] = _spy_struct.nest(_spy_struct.structured_fields(r, st, fn.name, "_result"))
        return lambda out: r
    if r is None or r in ("tensor", "numpy"):
        kind = r
        recorded = kw.get("_append_to") is not None  # filled at submit: the fields stay as they come

        def post(out):
            if not isinstance(out, dict) or recorded:
                return out
            k = kind or ("tensor" if all(isinstance(v, _nabla.CTensor) for v in out.values()) else None)
            return _spy_struct.from_fields(out, st, k) if k and set(out) == {p for p, _, _ in st.fields} else out

        return post
    return None


def hook(fn, args, kw):
    overloads = _info(fn)
    kw = dict(kw) if kw else {}
    if "_result" in kw:
        kw["_result"] = result_kind(kw["_result"])
    post = None
    if fn.mode == "primal":
        st = _ret_struct(fn)
        if st is not None:
            post = _result_plan(fn, st, kw)
    grads = {}
    new_args = tuple(_arg(fn, overloads, i, None, a, grads) for i, a in enumerate(args))
    for k in list(kw):
        if not k.startswith("_"):
            kw[k] = _arg(fn, overloads, None, k, kw[k], grads)
    if grads:
        g = dict(kw.get("_grads") or {})
        for k, v in grads.items():
            g.setdefault(k, v)
        kw["_grads"] = g
    return (new_args, kw, post) if post is not None else (new_args, kw)


# ---- FunctionNode: f.set(...), f.return_type(...) -------------------------------------------


class FunctionNode:
    """A nabla.Function with values bound by name on every call (`f.set({...})`: SlangPy's global
    parameters — module-scope buffers are trailing parameters bound by name) and/or a result kind
    (`f.return_type(Tensor)`). Calls, .bwds, .fwds, .map, .dispatch, .set, .return_type chain."""

    def __init__(self, fn, values=None, result=None):
        self._fn, self._values, self._result = fn, dict(values or {}), result

    def _kw(self, kw):
        out = dict(self._values)
        out.update(kw)
        if self._result is not None and "_result" not in out and self._fn.mode == "primal":
            out["_result"] = self._result
        return out

    def __call__(self, *args, **kw):
        return self._fn(*args, **self._kw(kw))

    call = __call__

    def dispatch(self, thread_count, *args, **kw):
        return self._fn.dispatch(thread_count, *args, **self._kw(kw))

    def set(self, values=None, **kw):
        return _set(self._fn, dict(self._values, **_values(values, kw)), self._result)

    def return_type(self, t):
        return FunctionNode(self._fn, self._values, _return_kind(self._fn, t))

    def map(self, *a, **k):
        return FunctionNode(self._fn.map(*a, **k), self._values, self._result)

    @property
    def bwds(self):
        return FunctionNode(self._fn.bwds, self._values)

    @property
    def fwds(self):
        return FunctionNode(self._fn.fwds, self._values)

    def __getattr__(self, name):
        return getattr(self._fn, name)

    def __repr__(self):
        return f"<nabla.FunctionNode {self._fn!r} set={sorted(self._values)} result={self._result!r}>"


def _values(values, kw):
    if values is None:
        return dict(kw)
    if not isinstance(values, dict):
        raise _nabla.ArgumentError("set(values): expected a dict {name: value} (or keyword arguments)")
    out = dict(values)
    out.update(kw)
    return out


def _set(fn, values, result=None):
    names = set(fn.param_names)
    for k in values:
        if not isinstance(k, str) or k not in names:
            raise _nabla.ArgumentError(
                f"{fn.name}.set: '{k}' is not a global parameter of {fn.name} (it reaches: "
                f"{', '.join(fn.param_names) or 'nothing'}; module-scope buffers a function uses are "
                "its trailing parameters)")
    return FunctionNode(fn, values, result)


def _return_kind(fn, t):
    if isinstance(t, SlangType):
        ret = _ret_name(_nabla.func_signature(fn, 0) or "")
        bt = builtin_type(ret)
        same = ret == t.name.replace(" ", "") or (bt is not None and (bt.dtype, bt.shape) == (t.dtype, t.shape))
        if not same:
            raise _nabla.DtypeError(f"{fn.name}.return_type({t.name}): the function returns '{ret}'")
        return "tensor"
    if t in ("tensor", "numpy", "torch"):
        return t
    return result_kind(t)


def install(nabla):
    F = _nabla.Function
    F.set = lambda self, values=None, **kw: _set(self, _values(values, kw))
    F.set.__doc__ = "SlangPy: f.set({name: value}) -> FunctionNode binding those parameters on every call"
    F.return_type = lambda self, t: FunctionNode(self, None, _return_kind(self, t))
    F.return_type.__doc__ = "SlangPy: f.return_type(nabla.Tensor | numpy.ndarray | torch.Tensor | module.X)"
    F.call = lambda self, *a, **k: self(*a, **k)
    _nabla._spy_set_hook(hook)
