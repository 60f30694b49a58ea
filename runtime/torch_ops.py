"""isagen kernels as torch operators: ``torch.ops.isagen.<name>``.

    import isagen.runtime.torch_ops            # registers one op per bundled spec, plus the generic ones
    z = torch.ops.isagen.add_bf16(x, y)        # a new tensor; inputs are never modified
    y2 = torch.ops.isagen.axpy(x, y, 2.0)      # dtype-generic: builds the f32/bf16/f16 kernel it needs
    o, lse = torch.ops.isagen.attention(q, k, v, True)   # isagen.runtime.attention.attention as an op
    c = torch.ops.isagen.scaled_mm(a, b, sa, sb, torch.bfloat16)   # isagen.runtime.scaled_mm (FP8 GEMM)
    c = torch.ops.isagen.mx_mm(a, b, sa, sb, torch.bfloat16, "e2m1", "e2m1")   # isagen.runtime.mx_mm (MX GEMM)
    dq, dk, dv = torch.ops.isagen.attention_backward(do, q, k, v, o, lse, True)   # ... and its backward

The op's schema comes from the kernel's launch contract (``isagen.builders.contract.LaunchInfo``), so a kernel
needs no torch code of its own: its input tensors (roles ``in`` and ``inout``) in order, then its
scalars (``float`` for f32/f64, ``int`` otherwise) -> its written tensors (``inout`` and ``out``).  The
op is functional: an ``inout`` tensor is cloned and the clone written, an ``out`` tensor is allocated
with the shape its size symbols give.  CPU tensors run in the emulator, GPU tensors through hip-python
(the device decides, not ``ISAGEN_BACKEND``).  Each op has a fake (meta) implementation, so
``torch.compile`` can trace through it.

Registering a new kernel: ``register_op(name, spec)`` (one fixed kernel), or
``register_op(name, spec, dtype_param="dtype")`` to build the variant whose ``dtype`` parameter matches
the input tensors.  ``shapes=`` names an adapter (``SHAPE_ADAPTERS``) that takes the shapes a torch user
passes and views them as the kernel's contract: the memory-bound ops take ``[..., hidden]`` rows
(``rms_norm``, ``softmax`` ...), any shape (activations) and ``[..., 2d]`` gate|up halves
(``silu_and_mul`` ..., as vLLM and AITER), and the rotary ops build the ``head_dim`` of their input.
See docs/runtime.md.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

from isagen.api import _override_text, build, resolve_spec, torch_dtype
from isagen.builders.spec import bundled_specs_dir, load_spec
from isagen.errors import LaunchError, SpecError
from isagen.runtime import gpu

NAMESPACE = "isagen"
_lib = torch.library.Library(NAMESPACE, "FRAGMENT")
_lock = threading.Lock()

# op name -> (spec, dtype parameter or None, extra params); torch dtype -> isagen element type
_OPS: dict[str, OpEntry] = {}
_ELEMENT = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
            torch.int32: "i32", torch.int8: "i8", torch.uint8: "u8", torch.int64: "i64", torch.int16: "i16"}
# dtype-generic ops over the bundled elementwise specs: element type -> parameters of that variant
# (16 bytes per lane: vec 4 for f32, 8 for the 16-bit types)
_VEC16 = {"f32": {"vec": 4}, "bf16": {"vec": 8}, "f16": {"vec": 8}}
# the memory-bound kernels (kernels/norms.py, softmax.py, rotary.py, activations.py): one spec per op, the
# dtype follows the inputs; fp32 rows take twice the registers, so the row kernels spread them over 4 waves
_ANY: dict[str, dict[str, int]] = {"f32": {}, "bf16": {}, "f16": {}}
_ROWS = {"f32": {"waves_per_row": 4}, "bf16": {}, "f16": {}}
# op -> (bundled spec, variants, shape adapter or None)
GENERIC_OPS = {
    "axpy": ("axpy_f32", _VEC16, None),
    "scale": ("scale_f16", _VEC16, None),
    "add": ("add_bf16", _VEC16, None),
    **{op: (f"{op}_bf16", _ROWS, "rows") for op in ("rms_norm", "add_rms_norm", "layer_norm",
                                                   "dropout_add_layer_norm", "softmax")},
    **{op: (f"{op}_bf16", _ANY, "rotary") for op in ("rotary_neox", "rotary_interleaved")},
    **{op: (f"{op}_bf16", _ANY, "flat") for op in ("silu", "gelu", "gelu_tanh", "relu", "tanh")},
    **{op: (f"{op}_bf16", _ANY, "gated") for op in ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul")},
    # quantization (kernels/quant.py): x [..., hidden] -> q (the target's fp8) [, scales [...]]
    **{op: (f"{op}_bf16", _ROWS, "rows") for op in ("per_token_quant_fp8", "static_quant_fp8")},
    # ... fused after RMSNorm (fp32 rows: 8 waves, 2 per row, so that a 4 KiB chunk of the weight fits one
    # LDS staging round) and after SiLU-and-mul ([..., 2d] gate | up)
    **{op: (f"{op}_bf16", {"f32": {"waves": 8, "waves_per_row": 2}, "bf16": {}, "f16": {}}, "rows")
       for op in ("rms_norm_per_token_quant_fp8", "add_rms_norm_per_token_quant_fp8")},
    "silu_and_mul_per_token_quant_fp8": ("silu_and_mul_per_token_quant_fp8_bf16", _ANY, "gated"),
    # MXFP8 (OCP microscaling: targets with OCP fp8 only): x [..., hidden] -> q [..., hidden], scales [..., hidden/32]
    "mxfp8_quant": ("mxfp8_quant_bf16", _ANY, "blocks32"),
    # MXFP4 (gfx950): x [..., hidden] -> q uint8 [..., hidden/2] (fp4 e2m1 two a byte, element 2i in bits 3:0),
    # scales [..., hidden/32]
    "mxfp4_quant": ("mxfp4_quant_bf16", _ANY, "blocks32"),
}
# ops whose kernel dtype follows only some inputs (the others have fixed types: a quantization scale is fp32)
DTYPE_FROM = {"static_quant_fp8": ("x",)}


# --------------------------------------------------------------------------- shape adapters
# An adapter views the tensors a torch user passes (schema order) as the kernel contract's shapes and
# gives back a function that views the kernel's outputs as the user expects.  Views only: nothing is
# copied beyond what ``.contiguous()`` needs anyway.
def _rows_adapter(name: str, info, tensors: list):
    """``x`` (and ``residual``) ``[..., hidden]`` -> ``[rows, hidden]``; outputs back to ``[..., hidden]``."""
    row_like = [t.name for t in info.tensors if t.role in ("in", "inout") and len(t.shape) == 2]
    names = [t.name for t in info.tensors if t.role in ("in", "inout")]
    lead = None
    out = []
    for tname, x in zip(names, tensors):
        if tname in row_like:
            if x.dim() < 1:
                raise LaunchError(f"isagen::{name}: tensor '{tname}' is a scalar; expected [..., hidden]")
            if lead is None:
                lead = tuple(x.shape[:-1])
            elif tuple(x.shape[:-1]) != lead:
                raise LaunchError(f"isagen::{name}: tensor '{tname}' has shape {tuple(x.shape)}, but the first "
                                  f"row tensor's leading dimensions are {lead}")
            x = x.reshape(-1, x.shape[-1])
        out.append(x)
    def back(y):
        if lead is None:
            return y
        if y.dim() == 2:
            return y.reshape(*lead, y.shape[-1])
        return y.reshape(lead) if y.dim() == 1 else y      # one value per row (a quantization's scales)
    return out, back


def _flat_adapter(name: str, info, tensors: list):
    """Any shape -> ``[n]``; outputs back to the input's shape."""
    shape = tuple(tensors[0].shape)
    return [t.reshape(-1) for t in tensors], lambda y: y.reshape(shape)


def _gated_adapter(name: str, info, tensors: list):
    """``x [..., 2d]`` (gate | up, as vLLM's and AITER's ``*_and_mul``) -> ``[rows, 2, d]``; the output
    ``[rows, d]`` back to ``[..., d]`` (one value per row, a quantization's scales, to ``[...]``)."""
    x = tensors[0]
    if x.dim() < 1 or x.shape[-1] % 2:
        raise LaunchError(f"isagen::{name}: x has shape {tuple(x.shape)}; expected [..., 2*d] (gate | up), an even "
                          "last dimension")
    lead, d = tuple(x.shape[:-1]), x.shape[-1] // 2
    return [x.reshape(-1, 2, d)], lambda y: y.reshape(*lead, d) if y.dim() == 2 else y.reshape(lead)


def _blocks32_adapter(name: str, info, tensors: list):
    """``x [..., hidden]`` -> ``[rows, hidden/32, 32]`` (MXFP8's and MXFP4's blocks of 32); ``q`` back to
    ``[..., hidden]`` (MXFP4's packed bytes to ``[..., hidden/2]``), the per-block scales ``[rows, blocks]`` to
    ``[..., blocks]``."""
    x = tensors[0]
    if x.dim() < 1 or x.shape[-1] % 32:
        raise LaunchError(f"isagen::{name}: x has shape {tuple(x.shape)}; expected [..., hidden] with hidden a "
                          "multiple of 32 (blocks of 32 elements)")
    lead, hidden = tuple(x.shape[:-1]), x.shape[-1]
    return [x.reshape(-1, hidden // 32, 32)], lambda y: y.reshape(*lead, hidden // 32 * y.shape[-1]) \
        if y.dim() == 3 else y.reshape(*lead, hidden // 32)


def _same_adapter(name: str, info, tensors: list):
    return tensors, lambda y: y


SHAPE_ADAPTERS = {"rows": _rows_adapter, "flat": _flat_adapter, "gated": _gated_adapter, "rotary": _same_adapter,
                  "blocks32": _blocks32_adapter}
# kernel parameters an adapter takes from the inputs' shapes (the kernel built per value, like dtype)
SHAPE_PARAMS = {"rotary": lambda tensors: {"head_dim": int(tensors[0].shape[-1])} if tensors[0].dim() else {}}


@dataclass
class OpEntry:
    name: str
    spec: str
    dtype_param: str | None
    variants: dict | None     # element type -> extra parameters (dtype-generic ops)
    params: dict
    schema: str
    inputs: tuple             # tensor names, in schema order
    scalars: tuple            # (name, python type)
    outputs: tuple            # tensor names
    kernels: dict             # (target, dtype, backend) -> Kernel
    shapes: str | None = None  # a SHAPE_ADAPTERS key: user shapes -> the contract's
    dtype_of: tuple = ()       # the inputs whose element type picks the variant (all when empty)

    def adapt(self, info, tensors: list):
        """(tensors viewed as the contract's shapes, a function viewing an output as the user expects)."""
        if self.shapes is None:
            return tensors, lambda y: y
        return SHAPE_ADAPTERS[self.shapes](self.name, info, tensors)


def _scalar_type(dtype: str) -> str:
    return "float" if dtype.startswith("f") else "int"


_CONTRACTS: dict = {}


def _contract(spec: str, params: dict, target: str | None = None):
    """The launch contract of ``spec`` with ``params`` on ``target``: from the spec alone, nothing built.  A
    spec that does not list ``target`` (MXFP8: OCP targets only) gives its first target's contract (the
    schema and the fake); running it on ``target`` is refused by the build, in one line."""
    target = target or gpu.default_target()
    key = (spec, tuple(sorted(params.items())), target)
    if key not in _CONTRACTS:
        s = load_spec(resolve_spec(spec), [f"{k}={_override_text(v)}" for k, v in params.items()])
        _CONTRACTS[key] = s.launch_info(s.select_targets(target if target in s.targets else None)[0])
    return _CONTRACTS[key]


def _params_for(entry: OpEntry, tensors: list) -> dict:
    """The op's kernel parameters for these inputs (the dtype parameter follows their element type)."""
    params = dict(entry.params)
    if entry.dtype_param:
        dtypes = {t.dtype for n, t in zip(entry.inputs, tensors) if not entry.dtype_of or n in entry.dtype_of}
        if len(dtypes) != 1:
            raise LaunchError(f"isagen::{entry.name}: the input tensors mix dtypes "
                              f"{', '.join(sorted(map(str, dtypes)))}")
        dtype = dtypes.pop()
        element = _ELEMENT.get(dtype)
        if element is None or (entry.variants is not None and element not in entry.variants):
            have = ", ".join(entry.variants) if entry.variants is not None else ", ".join(_ELEMENT.values())
            raise LaunchError(f"isagen::{entry.name}: no kernel for {dtype} tensors (it has: {have})")
        params[entry.dtype_param] = element
        params.update((entry.variants or {}).get(element, {}))
    if entry.shapes in SHAPE_PARAMS:
        params.update(SHAPE_PARAMS[entry.shapes](tensors))
    return params


def register_op(name: str, spec: str, *, dtype_param: str | None = None, variants: dict | None = None,
                shapes: str | None = None, dtype_of: tuple = (), **params) -> str:
    """Register ``torch.ops.isagen.<name>`` running the kernel of ``spec`` (a bundled spec name or a
    path) with ``params`` overriding its parameters.

    With ``dtype_param`` the op builds, per call, the kernel whose parameter of that name is the input
    tensors' element type (of the inputs ``dtype_of`` names, when given: a quantization's fp32 scale does
    not pick the variant); ``variants`` (element type -> extra parameters) then lists the element types
    it accepts and what each needs (e.g. ``{"f32": {"vec": 4}, "bf16": {"vec": 8}}``).  ``shapes`` names a
    ``SHAPE_ADAPTERS`` entry (``rows``, ``flat``, ``gated``) for ops that take torch-style shapes.  Returns
    the op's qualified name.  Registering the same name again with the same arguments is a no-op."""
    with _lock:
        old = _OPS.get(name)
        if old is not None:
            if (old.spec, old.dtype_param, old.variants, old.params, old.shapes) != (spec, dtype_param, variants,
                                                                                      params, shapes):
                raise SpecError(f"torch op isagen::{name} is already registered for spec '{old.spec}'")
            return f"{NAMESPACE}::{name}"
        if not name.isidentifier():
            raise SpecError(f"torch op name '{name}' is not an identifier")
        if shapes is not None and shapes not in SHAPE_ADAPTERS:
            raise SpecError(f"torch op isagen::{name}: unknown shapes adapter '{shapes}' (known: "
                            f"{', '.join(SHAPE_ADAPTERS)})")
        info = _contract(spec, params)
        inputs = tuple(t.name for t in info.tensors if t.role in ("in", "inout"))
        outputs = tuple(t.name for t in info.tensors if t.written)
        known = {d for t in info.tensors if t.role in ("in", "inout") for d in t.shape if isinstance(d, str)}
        for t in info.tensors:
            if t.role == "out":
                free = [d for d in t.shape if isinstance(d, str) and d not in known]
                if free:
                    raise SpecError(f"torch op isagen::{name}: output '{t.name}' has size(s) {', '.join(free)} that "
                                    "no input tensor's shape gives")
        scalars = tuple((s.name, _scalar_type(s.dtype)) for s in info.scalars)
        args = [f"Tensor {n}" for n in inputs] + [f"{ty} {n}" for n, ty in scalars]
        ret = "Tensor" if len(outputs) == 1 else "(" + ", ".join("Tensor" for _ in outputs) + ")"
        schema = f"({', '.join(args)}) -> {ret}"
        entry = OpEntry(name, spec, dtype_param, variants, dict(params), schema, inputs, scalars, outputs, {}, shapes,
                        tuple(dtype_of))
        _define_op(name, schema, lambda backend: _impl(entry, backend), _fake(entry))
        _OPS[name] = entry
        return f"{NAMESPACE}::{name}"


def _define_op(name: str, schema: str, impl_for, fake) -> None:
    """Define ``isagen::name`` with its emulator (CPU tensors) and hip (CUDA tensors) implementations,
    ``impl_for(backend)``, and its fake implementation for torch.compile."""
    _lib.define(name + schema)
    _lib.impl(name, impl_for("emu"), "CPU")
    _lib.impl(name, impl_for("hip"), "CUDA")
    torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=_lib)


def _kernel(entry: OpEntry, tensors: list, backend: str):
    """The built kernel for these inputs (built once per target and parameters, then reused)."""
    dev = tensors[0].device
    if backend == "hip":
        target = gpu.device_arch(dev.index if dev.index is not None else torch.cuda.current_device()).split(":")[0]
    else:
        target = gpu.default_target()
    params = _params_for(entry, tensors)
    key = (target, tuple(sorted(params.items())))
    kernel = entry.kernels.get(key)
    if kernel is None:
        kernel = entry.kernels[key] = build(entry.spec, target, **params)
    return kernel


def _outputs(info, target: str, inputs: dict, device, op: str) -> dict:
    """Fresh output tensors: clones of inout inputs, new tensors of the contract's shape for outs."""
    sizes: dict[str, int] = {}
    for t in info.tensors:
        if t.name in inputs:
            got_shape = tuple(inputs[t.name].shape)
            if len(got_shape) != len(t.shape):
                dims = ", ".join(str(d) for d in t.shape)
                raise LaunchError(f"isagen::{op}: tensor '{t.name}' has shape {got_shape}, expected "
                                  f"{len(t.shape)} dimension(s) [{dims}]")
            for d, got in zip(t.shape, got_shape):
                if isinstance(d, str):
                    sizes.setdefault(d, got)
    out = {}
    for t in info.tensors:
        if t.role == "inout":
            out[t.name] = inputs[t.name].clone(memory_format=torch.contiguous_format)
        elif t.role == "out":
            shape = [sizes[d] if isinstance(d, str) else d for d in t.shape]
            out[t.name] = torch.empty(shape, dtype=torch_dtype(t.dtype, target), device=device)
    return out


def _impl(entry: OpEntry, backend: str):
    def impl(*args):
        tensors = list(args[:len(entry.inputs)])
        scalars = dict(zip((n for n, _ in entry.scalars), args[len(entry.inputs):]))
        kernel = _kernel(entry, tensors, backend)
        tensors, view_back = entry.adapt(kernel.launch, tensors)
        inputs = dict(zip(entry.inputs, tensors))
        outs = _outputs(kernel.launch, kernel.target, inputs, tensors[0].device, entry.name)
        call = {**{n: t.contiguous() for n, t in inputs.items()}, **outs}
        kernel.run(**call, **scalars, backend=backend)
        result = tuple(view_back(outs[n]) for n in entry.outputs)
        return result[0] if len(result) == 1 else result
    impl.__name__ = f"isagen_{entry.name}_{backend}"
    return impl


def _fake(entry: OpEntry):
    def fake(*args):
        tensors = list(args[:len(entry.inputs)])
        target = gpu.default_target()
        info = _contract(entry.spec, _params_for(entry, tensors), target)
        tensors, view_back = entry.adapt(info, tensors)
        outs = _outputs(info, target, dict(zip(entry.inputs, tensors)), tensors[0].device, entry.name)
        result = tuple(view_back(outs[n]) for n in entry.outputs)
        return result[0] if len(result) == 1 else result
    return fake


def register_bundled_ops() -> list[str]:
    """One op per bundled spec (``torch.ops.isagen.<spec name>``) and the dtype-generic ops."""
    names = []
    for path in sorted(bundled_specs_dir().glob("*.yaml")):
        names.append(register_op(path.stem, path.stem))
    for name, (spec, variants, shapes) in GENERIC_OPS.items():
        if (bundled_specs_dir() / f"{spec}.yaml").is_file():
            names.append(register_op(name, spec, dtype_param="dtype", variants=variants, shapes=shapes,
                                     dtype_of=DTYPE_FROM.get(name, ())))
    return names


# --------------------------------------------------------------------------- attention
# torch.ops.isagen.attention: isagen.runtime.attention.attention as an op (its own schema: optional tensors,
# a layout, a variable number of sequences, which no launch contract describes)
ATTENTION_SCHEMA = ('(Tensor q, Tensor k, Tensor v, bool causal=False, float? softmax_scale=None, '
                    'Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_k=None, str layout="bhnd") -> (Tensor, Tensor)')
_EXTRA_OPS: dict[str, str] = {}


def register_attention_op() -> str:
    """Register ``torch.ops.isagen.attention(q, k, v, causal, softmax_scale, cu_seqlens_q, cu_seqlens_k,
    layout) -> (o, lse)``: CPU tensors run in the emulator, GPU tensors through hip (the device decides);
    the fake implementation gives the outputs' shapes and dtypes from the inputs' metadata."""
    from isagen.runtime import attention as attn
    with _lock:
        if "attention" in _EXTRA_OPS:
            return f"{NAMESPACE}::attention"

        def run_on(backend: str):
            def impl(q, k, v, causal=False, softmax_scale=None, cu_seqlens_q=None, cu_seqlens_k=None,
                     layout="bhnd"):
                return attn._attention(q, k, v, causal, softmax_scale, cu_seqlens_q, cu_seqlens_k, layout,
                                       backend=backend)
            impl.__name__ = f"isagen_attention_{backend}"
            return impl

        def fake(q, k, v, causal=False, softmax_scale=None, cu_seqlens_q=None, cu_seqlens_k=None, layout="bhnd"):
            return attn.output_like(q, k, v, cu_seqlens_q, cu_seqlens_k, layout)

        _define_op("attention", ATTENTION_SCHEMA, run_on, fake)
        _EXTRA_OPS["attention"] = ATTENTION_SCHEMA
        return f"{NAMESPACE}::attention"


ATTENTION_BACKWARD_SCHEMA = ('(Tensor do, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, bool causal=False, '
                             'float? softmax_scale=None, Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_k=None, '
                             'str layout="bhnd") -> (Tensor, Tensor, Tensor)')


def register_attention_backward_op() -> str:
    """Register ``torch.ops.isagen.attention_backward(do, q, k, v, o, lse, causal, softmax_scale,
    cu_seqlens_q, cu_seqlens_k, layout) -> (dq, dk, dv)`` (``isagen.runtime.attention.attention_backward``,
    with a fake implementation) and make ``torch.ops.isagen.attention`` differentiable through it: its
    gradient for q, k and v; lse's incoming gradient is ignored (flash-attn's convention)."""
    from isagen.runtime import attention as attn
    register_attention_op()
    with _lock:
        if "attention_backward" in _EXTRA_OPS:
            return f"{NAMESPACE}::attention_backward"

        def run_on(backend: str):
            def impl(do, q, k, v, o, lse, causal=False, softmax_scale=None, cu_seqlens_q=None, cu_seqlens_k=None,
                     layout="bhnd"):
                return attn.attention_backward(do, q, k, v, o, lse, causal, softmax_scale, cu_seqlens_q,
                                               cu_seqlens_k, layout, backend=backend)
            impl.__name__ = f"isagen_attention_backward_{backend}"
            return impl

        def fake(do, q, k, v, o, lse, causal=False, softmax_scale=None, cu_seqlens_q=None, cu_seqlens_k=None,
                 layout="bhnd"):
            return attn.gradients_like(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, layout)

        _define_op("attention_backward", ATTENTION_BACKWARD_SCHEMA, run_on, fake)

        def setup_context(ctx, inputs, output):
            q, k, v, causal, softmax_scale, cu_q, cu_k, layout = inputs
            o, lse = output
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.extra = (causal, softmax_scale, cu_q, cu_k, layout)

        def backward(ctx, do, dlse):
            q, k, v, o, lse = ctx.saved_tensors
            causal, softmax_scale, cu_q, cu_k, layout = ctx.extra
            dq, dk, dv = torch.ops.isagen.attention_backward(do, q, k, v, o, lse, causal, softmax_scale, cu_q, cu_k,
                                                             layout)
            return dq, dk, dv, None, None, None, None, None

        torch.library.register_autograd(f"{NAMESPACE}::attention", backward, setup_context=setup_context, lib=_lib)
        _EXTRA_OPS["attention_backward"] = ATTENTION_BACKWARD_SCHEMA
        return f"{NAMESPACE}::attention_backward"


# --------------------------------------------------------------------------- scaled_mm
SCALED_MM_SCHEMA = ("(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, ScalarType out_dtype=bfloat16, "
                    "Tensor? bias=None, str? target=None, int[]? block_size=None) -> Tensor")


def register_scaled_mm_op() -> str:
    """Register ``torch.ops.isagen.scaled_mm(a, b, scale_a, scale_b, out_dtype, bias, target, block_size) -> C``
    (``isagen.runtime.scaled_mm.scaled_mm``: b stored N×K, C = scale_a·scale_b·(a @ b.T) + bias), with a
    fake implementation; CPU tensors run in the emulator, GPU tensors through hip."""
    from isagen.runtime import scaled_mm as smm
    with _lock:
        if "scaled_mm" in _EXTRA_OPS:
            return f"{NAMESPACE}::scaled_mm"

        def run_on(backend: str):
            def impl(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, target=None, block_size=None):
                return smm.scaled_mm(a, b, scale_a, scale_b, out_dtype, bias, target, backend=backend,
                                     block_size=block_size)
            impl.__name__ = f"isagen_scaled_mm_{backend}"
            return impl

        def fake(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, target=None, block_size=None):
            return smm.output_like(a, b, scale_a, scale_b, out_dtype, bias, block_size)

        _define_op("scaled_mm", SCALED_MM_SCHEMA, run_on, fake)
        _EXTRA_OPS["scaled_mm"] = SCALED_MM_SCHEMA
        return f"{NAMESPACE}::scaled_mm"


# --------------------------------------------------------------------------- mx_mm
MX_MM_SCHEMA = ("(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, ScalarType out_dtype=bfloat16, "
                "str a_format=\"e4m3\", str? b_format=None, str? target=None) -> Tensor")


def register_mx_mm_op() -> str:
    """Register ``torch.ops.isagen.mx_mm(a, b, scale_a, scale_b, out_dtype, a_format, b_format, target) -> C``
    (``isagen.runtime.mx_mm.mx_mm``: gfx950's MX GEMM, b stored N×K, E8M0 block-32 scales), with a fake
    implementation; CPU tensors run in the emulator, GPU tensors through hip."""
    from isagen.runtime import mx_mm as mx
    with _lock:
        if "mx_mm" in _EXTRA_OPS:
            return f"{NAMESPACE}::mx_mm"

        def run_on(backend: str):
            def impl(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, a_format="e4m3", b_format=None, target=None):
                return mx.mx_mm(a, b, scale_a, scale_b, out_dtype, a_format=a_format, b_format=b_format,
                                target=target, backend=backend)
            impl.__name__ = f"isagen_mx_mm_{backend}"
            return impl

        def fake(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, a_format="e4m3", b_format=None, target=None):
            return mx.output_like(a, b, scale_a, scale_b, out_dtype)

        _define_op("mx_mm", MX_MM_SCHEMA, run_on, fake)
        _EXTRA_OPS["mx_mm"] = MX_MM_SCHEMA
        return f"{NAMESPACE}::mx_mm"


def registered_ops() -> dict:
    return {**{name: e.schema for name, e in _OPS.items()}, **_EXTRA_OPS}


register_bundled_ops()
register_attention_op()
register_attention_backward_op()
register_scaled_mm_op()
register_mx_mm_op()
