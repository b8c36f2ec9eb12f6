"""Operators OpenVINO's PyTorch frontend lacks or mis-infers, rewritten as standard ops with the same numbers while
``convert_model`` reads the program (openvino 2026.4); each rewrite is reversible.

* :func:`polar_as_complex` — ``aten.polar`` (no rule at all: complex rotary embeddings, DeepSeek-V2, Llama 4).
* :func:`fft_as_matmuls` — ``aten.fft_fft``/``fft_ifft``/``fft_fftn``/``fft_rfft``/``fft_irfft`` and ``_conj``
  (no rule: FNet's Fourier mixing, Autoformer's autocorrelation) as products with DFT matrices built in the graph
  from ``arange`` of the (possibly dynamic) length.
* :func:`ceil_pools_as_sums` — an ``avg_pool`` in ceil mode with windows that do not overlap, whose kernel may
  be larger than its input, as window sums over the input (EfficientNet's and ALIGN's global pool, ``AvgPool2d(hidden_dim, ceil_mode=True)``):
  OpenVINO's shape inference refuses such a kernel at run time.
* :func:`index_add_alpha_folded` — an ``aten.index_add`` ``alpha`` folded into its source, for
  :func:`index_add_rule` (the frontend's own rule requires the ``alpha`` tracing drops).

Every rewrite inserts the new nodes before the rewritten node and turns the node itself into the last op of the
replacement, so its users are untouched; :func:`expanded_nodes` restores the node and erases the new ones after.
"""

from __future__ import annotations

import contextlib
import math
import operator
from collections.abc import Callable, Iterator
from typing import Any

from ...patches.graph import Inserter, edited_nodes

__all__ = [
    "ceil_pools_as_sums",
    "expanded_nodes",
    "fft_as_matmuls",
    "index_add_alpha_folded",
    "index_add_rule",
    "op_rewrites",
    "polar_as_complex",
]


#: ``expand(node, add) -> (target, args[, kwargs]) | None``: the node's new op; ``add(target, *args)`` inserts helper
#: nodes.
Expansion = Callable[[Any, Inserter], "tuple[Any, ...] | None"]


def expanded_nodes(program: Any, targets: set[Any], expand: Expansion) -> contextlib.AbstractContextManager[int]:
    """Rewrite every ``call_function`` node of ``targets`` that ``expand`` accepts (nested graphs too) inside the
    block: helper nodes inserted before it, the node's own target, args and kwargs (none unless ``expand`` returns
    them) replaced; restored and erased after
    (:func:`~hub_export.patches.graph.edited_nodes`). The helper nodes' values stay out of their ``meta`` (nothing
    reads them there: only the rewritten node reads the helpers, and ``convert_model`` re-traces the graph); a node
    whose inputs have no fake values is left as it is.

    Yields:
        How many nodes were rewritten.
    """

    def edit(node: Any, add: Inserter) -> dict[str, Any] | None:
        if node.target not in targets or add.mode is None:
            return None
        result = expand(node, add)
        if result is None:
            return None
        return {"target": result[0], "args": result[1], "kwargs": dict(result[2]) if len(result) > 2 else {}}

    return edited_nodes(program, edit)


def _complex(add: Inserter, real: Any, imag: Any) -> tuple[Any, tuple[Any, ...]]:
    """``view_as_complex(stack([real, imag], -1))``: a complex tensor OpenVINO's frontend marks as such."""
    import torch

    aten = torch.ops.aten
    return aten.view_as_complex.default, (add(aten.stack.default, [real, imag], -1),)


def _expand_polar(node: Any, add: Inserter) -> tuple[Any, tuple[Any, ...]] | None:
    import torch

    aten = torch.ops.aten
    if node.target is not aten.polar.default:
        return None
    magnitude, angle = node.args
    real = add(aten.mul.Tensor, magnitude, add(aten.cos.default, angle))
    return _complex(add, real, add(aten.mul.Tensor, magnitude, add(aten.sin.default, angle)))


def polar_as_complex(program: Any) -> contextlib.AbstractContextManager[int]:
    """``aten.polar(abs, angle)`` as ``view_as_complex(stack([abs * cos(angle), abs * sin(angle)], -1))``, ATen's
    own definition, inside the block. OpenVINO's PyTorch frontend (openvino 2026.4) has no rule for ``aten.polar``
    ("No conversion rule found for operations: aten.polar.default") but converts ``view_as_complex`` and complex
    products, which the complex rotary embeddings (DeepSeek-V2, Llama 4) apply next.

    Yields:
        How many nodes were rewritten.
    """
    import torch

    return expanded_nodes(program, {torch.ops.aten.polar.default}, _expand_polar)


def _arguments(node: Any) -> dict[str, Any]:
    """The node's arguments by name, defaults included."""
    schema = node.target._schema
    values = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}
    values.update(zip((a.name for a in schema.arguments), node.args))
    values.update(node.kwargs)
    return values


def _parts(add: Inserter, x: Any) -> tuple[Any, Any]:
    """``(real, imag)`` of ``x``: ``imag`` is None for a real tensor."""
    import torch

    aten = torch.ops.aten
    if not add.val(x).is_complex():
        return x, None
    pairs = add(aten.view_as_real.default, x)
    return add(aten.select.int, pairs, -1, 0), add(aten.select.int, pairs, -1, 1)


def _as_float(add: Inserter, value: Any, dtype: Any) -> Any:
    """A size (int or a ``sym_size`` node) as a 0-dim tensor of ``dtype``."""
    import torch

    return add(torch.ops.aten.scalar_tensor.default, value, dtype=dtype)


def _along(add: Inserter, x: Any, axis: int, matrix: Any) -> Any:
    """``x`` multiplied by ``matrix`` along ``axis`` (``x``'s ``axis`` sized like ``matrix``'s rows)."""
    import torch

    aten = torch.ops.aten
    last = add.val(x).dim() - 1
    if axis == last:
        return add(aten.matmul.default, x, matrix)
    moved = add(aten.matmul.default, add(aten.transpose.int, x, axis, last), matrix)
    return add(aten.transpose.int, moved, axis, last)


def _dft_matrices(add: Inserter, rows: Any, cols: Any, n: Any, dtype: Any, device: Any) -> tuple[Any, Any]:
    """``cos`` and ``sin`` of ``2 pi (j k mod n) / n`` for ``j < rows``, ``k < cols``: the angle is reduced in
    integers first, so it stays under ``2 pi`` (float32 ``cos`` of ``2 pi j k / n`` loses digits as ``j k`` grows)."""
    import torch

    aten = torch.ops.aten
    index = {"dtype": torch.int64, "device": device}
    j = add(aten.unsqueeze.default, add(aten.arange.default, rows, **index), 1)
    k = add(aten.unsqueeze.default, add(aten.arange.default, cols, **index), 0)
    product = add(aten.mul.Tensor, j, k)
    reduced = add(aten.remainder.Tensor, product, add(torch.ops.aten.scalar_tensor.default, n, **index))
    turns = add(aten.div.Tensor, add(aten._to_copy.default, reduced, dtype=dtype), _as_float(add, n, dtype))
    angle = add(aten.mul.Scalar, turns, 2 * math.pi)
    return add(aten.cos.default, angle), add(aten.sin.default, angle)


def _scaled(add: Inserter, x: Any, n: Any, power: float) -> Any:
    """``x / n ** power`` (``power`` 0, 0.5 or 1)."""
    import torch

    aten = torch.ops.aten
    if power == 0:
        return x
    size = _as_float(add, n, add.val(x).dtype)
    return add(aten.div.Tensor, x, size if power == 1 else add(aten.sqrt.default, size))


def _norm_power(norm: str | None, inverse: bool) -> float:
    """The power of ``n`` a transform divides by: ``norm`` as ``torch.fft`` reads it."""
    if norm == "ortho":
        return 0.5
    return float(inverse) if norm in (None, "backward") else float(not inverse)


def _size(add: Inserter, x: Any, axis: int) -> Any:
    """``x``'s size on ``axis``: an int, or a ``sym_size`` node when it is symbolic."""
    import torch

    size = add.val(x).shape[axis]
    return int(size) if isinstance(size, int) else add(torch.ops.aten.sym_size.int, x, axis)


def _c2c(add: Inserter, real: Any, imag: Any, axis: int, n: Any, inverse: bool, norm: str | None) -> tuple[Any, Any]:
    """The DFT of ``real + i imag`` along ``axis`` (length ``n``): ``(a + ib)(C -+ iS)``."""
    import torch

    aten = torch.ops.aten
    val = add.val(real)
    cos, sin = _dft_matrices(add, n, n, n, val.dtype, val.device)
    a_cos, a_sin = _along(add, real, axis, cos), _along(add, real, axis, sin)
    if imag is None:
        out_real, out_imag = a_cos, (a_sin if inverse else add(aten.neg.default, a_sin))
    else:
        b_cos, b_sin = _along(add, imag, axis, cos), _along(add, imag, axis, sin)
        if inverse:
            out_real, out_imag = add(aten.sub.Tensor, a_cos, b_sin), add(aten.add.Tensor, b_cos, a_sin)
        else:
            out_real, out_imag = add(aten.add.Tensor, a_cos, b_sin), add(aten.sub.Tensor, b_cos, a_sin)
    power = _norm_power(norm, inverse)
    return _scaled(add, out_real, n, power), _scaled(add, out_imag, n, power)


def _same_length(x: Any, axis: int, n: Any) -> bool:
    """Whether a transform length ``n`` (None: the input's) is the input's size on ``axis`` (without guarding)."""
    import torch

    if n is None:
        return True
    size = x.meta["val"].shape[axis]
    n = n.meta.get("val") if isinstance(n, torch.fx.Node) else n
    if isinstance(size, int) or isinstance(n, int):
        return isinstance(size, int) and isinstance(n, int) and size == n
    return str(size) == str(n)


def _expand_fft(node: Any, add: Inserter) -> tuple[Any, tuple[Any, ...]] | None:  # noqa: C901 - one case per op
    import torch

    aten = torch.ops.aten
    args = _arguments(node)
    x = args["self"]
    ndim = x.meta["val"].dim()
    if node.target is aten._conj.default:
        real, imag = _parts(add, x)
        return None if imag is None else _complex(add, real, add(aten.neg.default, imag))
    if node.target in (aten.fft_fftn.default, aten.fft_ifftn.default):
        axes = range(ndim) if args["dim"] is None else args["dim"]
        axes = [a % ndim for a in axes]
        if args["s"] is not None and any(not _same_length(x, a, n) for a, n in zip(axes, args["s"], strict=False)):
            return None
        real, imag = _parts(add, x)
        for axis in axes:
            inverse = node.target is aten.fft_ifftn.default
            real, imag = _c2c(add, real, imag, axis, _size(add, x, axis), inverse, args["norm"])
        return _complex(add, real, imag)
    axis = args["dim"] % ndim
    if node.target in (aten.fft_fft.default, aten.fft_ifft.default):
        if not _same_length(x, axis, args["n"]):
            return None
        real, imag = _parts(add, x)
        inverse = node.target is aten.fft_ifft.default
        return _complex(add, *_c2c(add, real, imag, axis, _size(add, x, axis), inverse, args["norm"]))
    val = x.meta["val"]
    if node.target is aten.fft_rfft.default:  # one side of a real input's spectrum: n // 2 + 1 columns
        if val.is_complex() or not _same_length(x, axis, args["n"]):
            return None
        n = _size(add, x, axis)
        half = n // 2 + 1 if isinstance(n, int) else add(operator.add, add(operator.floordiv, n, 2), 1)
        cos, sin = _dft_matrices(add, n, half, n, val.dtype, val.device)
        power = _norm_power(args["norm"], False)
        real = _scaled(add, _along(add, x, axis, cos), n, power)
        return _complex(add, real, _scaled(add, add(aten.neg.default, _along(add, x, axis, sin)), n, power))
    if node.target is aten.fft_irfft.default:  # Hermitian: sum_k w_k (a_k cos - b_k sin), w_k 2 but at 0 and n / 2
        m = _size(add, x, axis)
        real, imag = _parts(add, x)
        if imag is None:
            return None
        if args["n"] is None:  # 2 (m - 1) samples from m coefficients
            n, rows = (2 * (m - 1) if isinstance(m, int) else add(operator.mul, add(operator.sub, m, 1), 2)), m
        else:  # the first n // 2 + 1 coefficients; fewer are as many zeros, which need no rows
            n = args["n"]
            half = n // 2 + 1 if isinstance(n, int) else add(operator.add, add(operator.floordiv, n, 2), 1)
            real, imag = (add(aten.slice.Tensor, part, axis, 0, half) for part in (real, imag))
            rows = _size(add, real, axis)
        cos, sin = _dft_matrices(add, rows, n, n, add.val(real).dtype, val.device)
        k = add(aten.arange.default, rows, dtype=torch.int64, device=val.device)
        not_dc = add(aten.ne.Scalar, k, 0)
        not_nyquist = add(aten.ne.Scalar, add(aten.mul.Scalar, k, 2), n)
        dtype = add.val(cos).dtype
        weight = add(aten.add.Tensor, *(add(aten._to_copy.default, b, dtype=dtype) for b in (not_dc, not_nyquist)))
        weight = add(aten.unsqueeze.default, weight, 1)
        cos, sin = add(aten.mul.Tensor, cos, weight), add(aten.mul.Tensor, sin, weight)
        summed = add(aten.sub.Tensor, _along(add, real, axis, cos), _along(add, imag, axis, sin))
        power = _norm_power(args["norm"], True)
        if power == 0:
            return aten.clone.default, (summed,)
        size = _as_float(add, n, add.val(summed).dtype)
        return aten.div.Tensor, (summed, size if power == 1 else add(aten.sqrt.default, size))
    return None


def fft_as_matmuls(program: Any) -> contextlib.AbstractContextManager[int]:
    """``torch.fft`` transforms as products with DFT matrices, inside the block.

    OpenVINO's PyTorch frontend (openvino 2026.4) has no rule for the ``fft`` ops of an exported program
    ("No conversion rule found for operations: aten._fft_r2c.default, aten._fft_c2r.default, aten._conj.default";
    its TorchScript rules ``aten::fft_*`` are not reachable from ``torch.export``). The composite ops
    (``fft_fft``/``fft_ifft``/``fft_fftn``/``fft_ifftn`` of any length, dynamic included; ``fft_rfft`` and
    ``fft_irfft`` of any length too) become real matrix products along the transformed axis, the matrices built in
    the graph from ``arange``; the complex result is ``view_as_complex`` of its real and imaginary parts, which the
    frontend carries through complex products; ``_conj`` negates the imaginary part. An ``n`` or ``s`` that pads or
    crops the input is left to the frontend.

    Yields:
        How many nodes were rewritten.
    """
    import torch

    aten = torch.ops.aten
    targets = {aten._conj.default, aten.fft_fftn.default, aten.fft_ifftn.default, aten.fft_fft.default}
    targets |= {aten.fft_ifft.default, aten.fft_rfft.default, aten.fft_irfft.default}
    return expanded_nodes(program, targets, _expand_fft)


def _per_axis(value: Any, count: int) -> list[int]:
    values = [value] if isinstance(value, int) else list(value)
    return values * count if len(values) == 1 else values


def _windows(add: Inserter, positions: Any, shift: int, starts: Any, kernel: int, dtype: Any, device: Any) -> Any:
    """``[t, i]`` 1.0 where position ``t`` (``< positions``, moved by ``shift``) is in window ``i`` (``[start, start
    + kernel)``)."""
    import torch

    aten = torch.ops.aten
    index = add(aten.arange.default, positions, dtype=torch.int64, device=device)
    offsets = add(aten.sub.Tensor, add(aten.unsqueeze.default, add(aten.add.Scalar, index, shift), 1), starts)
    inside = add(aten.logical_and.default, add(aten.ge.Scalar, offsets, 0), add(aten.lt.Scalar, offsets, kernel))
    return add(aten._to_copy.default, inside, dtype=dtype)


def _expand_pool(node: Any, add: Inserter) -> tuple[Any, tuple[Any, ...]] | None:
    """Per axis, the window sums as a product with a 0/1 matrix (position, window) and ATen's divisor as the column
    sums of the same matrix over the input (padding not counted) or over the padded input: with ``s >= k`` ceil mode
    keeps every window that starts inside the input or its left padding, ``ceil((n + p) / s)`` of them."""
    import torch

    aten = torch.ops.aten
    args = _arguments(node)
    x = args["self"]
    val = x.meta["val"]
    count = {aten.avg_pool1d.default: 1, aten.avg_pool2d.default: 2, aten.avg_pool3d.default: 3}[node.target]
    kernel = _per_axis(args["kernel_size"], count)
    stride = _per_axis(args["stride"] or kernel, count)
    padding = _per_axis(args["padding"], count)
    if not args["ceil_mode"] or any(s < k for s, k in zip(stride, kernel, strict=True)):
        return None
    spatial = val.shape[-count:]
    if all(isinstance(n, int) and n + 2 * p >= k for n, p, k in zip(spatial, padding, kernel, strict=True)):
        return None  # the kernel fits every input: the frontend's own pool is right
    divisor = args.get("divisor_override")
    sums, divisors = x, []
    for offset, (k, s, p) in enumerate(zip(kernel, stride, padding, strict=True)):
        axis = val.dim() - count + offset
        size = _size(add, x, axis)
        windows = (
            (size + p + s - 1) // s
            if isinstance(size, int)
            else add(operator.floordiv, add(operator.add, size, p + s - 1), s)
        )
        starts = add(aten.unsqueeze.default, add(aten.mul.Scalar, add(aten.arange.default, windows,
                     dtype=torch.int64, device=val.device), s), 0)  # fmt: skip
        inside = _windows(add, size, p, starts, k, val.dtype, val.device)
        sums = _along(add, sums, axis, inside)
        if divisor:
            continue
        if args["count_include_pad"] and p:  # the padded positions [-p, n + p) count
            padded = size + 2 * p if isinstance(size, int) else add(operator.add, size, 2 * p)
            inside = _windows(add, padded, 0, starts, k, val.dtype, val.device)
        column = add(aten.sum.dim_IntList, inside, [0])
        for _ in range(val.dim() - 1 - axis):
            column = add(aten.unsqueeze.default, column, -1)
        divisors.append(column)
    if divisor:
        return aten.div.Scalar, (sums, divisor)
    total = divisors[0]
    for column in divisors[1:]:
        total = add(aten.mul.Tensor, total, column)
    return aten.div.Tensor, (sums, total)


def ceil_pools_as_sums(program: Any) -> contextlib.AbstractContextManager[int]:
    """An ``avg_pool1d/2d/3d`` in ceil mode whose windows do not overlap (``stride >= kernel``) and whose kernel may
    be larger than its input, as window sums (a product with a 0/1 matrix per axis, built in the graph from
    ``arange``) divided by ATen's divisor, inside the block.

    EfficientNet and ALIGN pool globally with ``nn.AvgPool2d(hidden_dim, ceil_mode=True)``: a kernel larger than
    the feature map, which ATen allows (one window, clipped to the input) and OpenVINO's shape inference refuses at
    run time ("Kernel after dilation has size (dim: 8) larger than the data shape after padding (dim: 5)", openvino
    2026.4). The windows and divisors are ATen's for any input size; no tensor is larger than the input (padding
    it to hold a 1280-wide kernel took gigabytes).

    Yields:
        How many nodes were rewritten.
    """
    import torch

    aten = torch.ops.aten
    targets = {aten.avg_pool1d.default, aten.avg_pool2d.default, aten.avg_pool3d.default}
    return expanded_nodes(program, targets, _expand_pool)


def _expand_index_add(node: Any, add: Inserter) -> tuple[Any, tuple[Any, ...]] | None:
    import torch

    alpha = node.args[4] if len(node.args) > 4 else node.kwargs.get("alpha", 1)
    if isinstance(alpha, (int, float)) and alpha == 1:
        return None
    x, dim, index, source = node.args[:4]
    return node.target, (x, dim, index, add(torch.ops.aten.mul.Scalar, source, alpha))


def index_add_alpha_folded(program: Any) -> contextlib.AbstractContextManager[int]:
    """``aten.index_add(x, dim, index, source, alpha=a)`` as ``index_add(x, dim, index, source * a)`` inside the
    block: :func:`index_add_rule` reads no ``alpha`` (an integer keyword OpenVINO's Python context cannot read).

    Yields:
        How many nodes were rewritten.
    """
    import torch

    return expanded_nodes(program, {torch.ops.aten.index_add.default}, _expand_index_add)


@contextlib.contextmanager
def op_rewrites(program: Any) -> Iterator[None]:
    """Every rewrite of this module, inside the block."""
    with polar_as_complex(program), fft_as_matmuls(program), ceil_pools_as_sums(program):
        with index_add_alpha_folded(program):
            yield


#: ``torch.Tensor.scatter_reduce``'s ``reduce`` -> ``ScatterElementsUpdate``'s ``reduction``
_REDUCTIONS = {"sum": "sum", "prod": "prod", "mean": "mean", "amax": "max", "amin": "min"}


def scatter_reduce_rule(context: Any) -> list[Any]:
    """The conversion rule of ``aten.scatter_reduce.two``, which OpenVINO's frontend lacks (openvino 2026.4: "No
    conversion rule found for operations: aten.scatter_reduce.two"; BLT's patch pooling, TAPAS's segment
    reductions): ``ScatterElementsUpdate`` (opset 12) has the same reductions, ``use_init_val`` as
    ``include_self``. ATen reads only the part of ``src`` the index covers; the opset's updates are that part."""
    import numpy as np
    import openvino.opset12 as ops

    data, axis, index, src = (context.get_input(i) for i in range(4))
    reduce = bytes(context.get_input(4).get_node().get_data()).decode()  # the frontend's strings are u8 constants
    include_self = True
    if context.get_input_size() > 5 and not context.input_is_none(5):
        include_self = bool(context.get_input(5).get_node().get_data())
    elif context.has_attribute("include_self"):  # a bool keyword the Python context cannot read
        read = {context.get_attribute("include_self", default_value=d) for d in (False, True)}
        # unreadable: present, so not its default (tracing drops arguments equal to their defaults)
        include_self = read.pop() if len(read) == 1 else False
    shape = ops.shape_of(index)  # i64
    zeros = ops.multiply(shape, ops.constant(np.int64(0)))
    updates = ops.slice(src, zeros, shape, ops.add(zeros, ops.constant(np.int64(1))))
    node = ops.scatter_elements_update(data, index, updates, axis, _REDUCTIONS[reduce], include_self)
    return [node.output(0)]


def index_add_rule(context: Any) -> list[Any]:
    """The conversion rule of ``aten.index_add.default``: the frontend's own (openvino 2026.4) requires ``alpha`` as
    its fifth input, which ``torch.export`` drops when it is the default ("Got less inputs 4 than expected 5":
    JetMoE's expert outputs, ``index_add(0, index, source)``). ``ScatterElementsUpdate`` with the ``sum`` reduction
    over the data, the index repeated along ``source``'s other axes: the same sums, duplicates included. Any other
    ``alpha`` was folded into ``source`` by :func:`index_add_alpha_folded` (the Python context cannot read it)."""
    import numpy as np
    import openvino.opset12 as ops

    data, index, source = context.get_input(0), context.get_input(2), context.get_input(3)
    dim = int(np.asarray(context.get_input(1).get_node().get_data()))
    rank = source.get_partial_shape().rank.get_length()
    dim %= max(rank, 1)
    if rank > 1:  # (n,) -> (1, .., n, .., 1), then the source's shape
        layout = ops.constant(np.array([1] * dim + [-1] + [1] * (rank - dim - 1), dtype=np.int64))
        index = ops.broadcast(ops.reshape(index, layout, False), ops.shape_of(source)).output(0)
    node = ops.scatter_elements_update(data, index, source, ops.constant(np.int64(dim)), "sum", True)
    return [node.output(0)]
