"""Complex arithmetic as pairs of real numbers, for the ExecuTorch runtime, which has no complex dtype.

Llama-4's and DeepSeek-V2's rotary embeddings are written in complex numbers: the frequencies as ``torch.polar``,
the queries and keys as ``view_as_complex`` of their pairs, a complex product, then ``view_as_real``. ``to_edge``
refuses the program ("Operator torch._ops.aten.polar.default is not in Core ATen opset"), and no ExecuTorch kernel
takes a complex tensor.

:func:`complex_as_real_pairs` re-traces a program holding a complex value with each op on complex values decomposed
into the same op on ``view_as_real`` pairs (a trailing axis of 2: real, imaginary), wrapped back with
``view_as_complex``: ``polar`` as ``(r cos t, r sin t)``, a product as ``(ac - bd, ad + bc)``, sums and differences
pairwise, views, reshapes, unsqueezes, slices, selects, expands and clones on the pairs' axes. Each
``view_as_real(view_as_complex(x))`` that leaves is then ``x``: where the complex values only travel between these
ops, none is left. The same products and sums as the complex kernels (float rounding only). A program with another
op on a complex value keeps it (the lowering then names that op).

Fourier transforms (FNet's token mixing ``fftn(x, dim=(1, 2)).real``, Autoformer's autocorrelation ``irfft(rfft(q)
* conj(rfft(k)))``) reach ``to_edge`` as ``_fft_r2c`` / ``_fft_c2c`` / ``_fft_c2r``, which the runtime has no kernel
for ("not in Core ATen opset"). Each transformed axis becomes a discrete Fourier transform written as products with
its ``cos`` / ``sin`` matrix, built in the program from ``arange`` of the axis' size (``k * t mod n`` in integers, so
the angles stay exact at any length): ``O(n^2)`` per axis instead of ``O(n log n)``, exact to float rounding, and
dynamic in the axis' size. ``torch.fft``'s functions are first decomposed into those three ops, and ``conj`` flips
the imaginary part.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["complex_as_real_pairs"]


def _pairs(value: Any) -> Any:
    import torch

    return torch.view_as_real(value) if value.is_complex() else None


def _complex(pairs: Any) -> Any:
    import torch

    return torch.view_as_complex(pairs.contiguous())


def _axis(dim: int, rank: int) -> int:
    """A complex tensor's axis ``dim`` (of ``rank``) on its pairs (one more trailing axis)."""
    return dim if dim >= 0 else dim + rank


def _polar(abs: Any, angle: Any) -> Any:
    import torch

    return _complex(torch.stack([abs * torch.cos(angle), abs * torch.sin(angle)], dim=-1))


def _product(a: Any, b: Any) -> Any:
    import torch

    if not (isinstance(a, torch.Tensor) and a.is_complex()) and not (isinstance(b, torch.Tensor) and b.is_complex()):
        return NotImplemented
    if not (isinstance(a, torch.Tensor) and a.is_complex()):
        a, b = b, a
    x = _pairs(a)
    if not (isinstance(b, torch.Tensor) and b.is_complex()):  # a real factor scales both parts
        return _complex(x * (b.unsqueeze(-1) if isinstance(b, torch.Tensor) else b))
    y = _pairs(b)
    re = x[..., 0] * y[..., 0] - x[..., 1] * y[..., 1]
    im = x[..., 0] * y[..., 1] + x[..., 1] * y[..., 0]
    return _complex(torch.stack([re, im], dim=-1))


def _pairwise(op: Any) -> Any:
    def decomposed(a: Any, b: Any, alpha: Any = 1) -> Any:
        import torch

        if not all(isinstance(v, torch.Tensor) and v.is_complex() for v in (a, b)):
            return NotImplemented
        return _complex(op(_pairs(a), _pairs(b) * alpha if alpha != 1 else _pairs(b)))

    return decomposed


def _on_pairs(op: Any, shape_arg: bool = False, dim_arg: bool = False, new_axis: bool = False) -> Any:
    """``op`` of a complex tensor as ``op`` of its pairs: a size list gets the trailing 2, an axis counted from the
    end is the complex tensor's (of its output's rank when ``op`` inserts the axis: ``unsqueeze``)."""

    def decomposed(value: Any, *args: Any, **kwargs: Any) -> Any:
        if not value.is_complex():
            return NotImplemented
        args_list = list(args)
        if shape_arg:
            args_list[0] = [*args_list[0], 2]
        if dim_arg:
            args_list[0] = _axis(args_list[0], value.dim() + int(new_axis))
        return _complex(op(_pairs(value), *args_list, **kwargs))

    return decomposed


def _angles(bins: Any, signal: Any, size: Any) -> tuple[Any, Any]:
    """``cos`` and ``sin`` of ``2 pi k t / n`` for ``k`` in ``bins`` (rows) and ``t`` in ``signal`` (columns), ``n``
    a 0-d tensor: the product reduced mod ``n`` in integers first."""
    import math

    import torch

    turns = torch.remainder(bins[:, None] * signal[None, :], size)
    angle = turns.to(torch.float32) * (2 * math.pi) / size.to(torch.float32)
    return torch.cos(angle), torch.sin(angle)


def _size_of(positions: Any) -> Any:
    """``len(positions)`` as a 0-d integer tensor (no symbolic scalar in the program)."""
    import torch

    return torch.ones_like(positions).sum()


def _dft(re: Any, im: Any | None, dim: int, forward: bool, bins: int | None = None) -> tuple[Any, Any]:
    """The discrete Fourier transform of ``re + i im`` (``im`` None: real) along ``dim``, the first ``bins``
    frequencies (all by default), as real and imaginary parts in ``re``'s dtype."""
    import torch

    re = re.movedim(dim, -1)
    im = im.movedim(dim, -1) if im is not None else None
    signal = torch.arange(re.shape[-1], device=re.device)
    frequencies = signal if bins is None else torch.arange(bins, device=re.device)
    cos, sin = (m.to(re.dtype) for m in _angles(frequencies, signal, _size_of(signal)))
    sign = -1.0 if forward else 1.0  # exp(-i ...) forward, exp(+i ...) inverse
    out_re, out_im = re @ cos.T, (re @ sin.T) * sign
    if im is not None:
        out_re = out_re - (im @ sin.T) * sign
        out_im = out_im + im @ cos.T
    return out_re.movedim(-1, dim), out_im.movedim(-1, dim)


def _scaled(values: Any, sizes: list[Any], normalization: int) -> Any:
    """``values`` scaled as ``normalization`` says over the transformed axes' sizes (0: none, 1: by the square root
    of their product, 2: by the product), each size a 0-d tensor."""
    if normalization == 0:
        return values
    count = sizes[0]
    for size in sizes[1:]:
        count = count * size
    count = count.to(values.dtype)
    return values / (count.sqrt() if normalization == 1 else count)


def _sizes(value: Any, dims: list[int]) -> list[Any]:
    import torch

    return [_size_of(torch.arange(value.shape[d], device=value.device)) for d in dims]


def _fft_r2c(value: Any, dim: list[int], normalization: int, onesided: bool) -> Any:
    """A real tensor's transform over ``dim``: the last of them first (half its frequencies when ``onesided``)."""
    import torch

    if value.is_complex():
        return NotImplemented
    dims = [_axis(d, value.dim()) for d in dim]
    last = dims[-1]
    n = value.shape[last]
    re, im = _dft(value, None, last, True, n // 2 + 1 if onesided else None)
    for d in dims[:-1]:
        re, im = _dft(re, im, d, True)
    pairs = _scaled(torch.stack([re, im], dim=-1), _sizes(value, dims), normalization)
    return _complex(pairs)


def _fft_c2c(value: Any, dim: list[int], normalization: int, forward: bool) -> Any:
    import torch

    if not value.is_complex():
        return NotImplemented
    pairs = _pairs(value)
    re, im = pairs[..., 0], pairs[..., 1]
    dims = [_axis(d, value.dim()) for d in dim]
    for d in dims:
        re, im = _dft(re, im, d, forward)
    return _complex(_scaled(torch.stack([re, im], dim=-1), _sizes(value, dims), normalization))


def _fft_c2r(value: Any, dim: list[int], normalization: int, last_dim_size: Any) -> Any:
    """The real inverse of a one-sided spectrum: the other axes' inverse transforms, then the last axis' from its
    ``n // 2 + 1`` frequencies, each but the first (and the middle one of an even ``n``) counted twice."""
    import torch

    if not value.is_complex():
        return NotImplemented
    pairs = _pairs(value)
    re, im = pairs[..., 0], pairs[..., 1]
    dims = [_axis(d, value.dim()) for d in dim]
    for d in dims[:-1]:
        re, im = _dft(re, im, d, False)
    last = dims[-1]
    re, im = re.movedim(last, -1), im.movedim(last, -1)
    signal = torch.arange(last_dim_size, device=re.device)
    frequencies = torch.arange(re.shape[-1], device=re.device)
    size = _size_of(signal)
    cos, sin = (m.to(re.dtype) for m in _angles(frequencies, signal, size))
    twice = 2 - (frequencies == 0).to(re.dtype) - (frequencies * 2 == size).to(re.dtype)
    out = re @ (cos * twice[:, None]) - im @ (sin * twice[:, None])
    return _scaled(out.movedim(-1, last), [*_sizes(value, dims[:-1]), size], normalization)


def _conjugate(value: Any) -> Any:
    import torch

    if not value.is_complex():
        return NotImplemented
    pairs = _pairs(value)
    return _complex(torch.stack([pairs[..., 0], -pairs[..., 1]], dim=-1))


def _to_complex(value: Any, **kwargs: Any) -> Any:
    """A real tensor cast to a complex dtype (``fft`` of a real input): its pairs with a zero imaginary part."""
    import torch

    dtype = kwargs.get("dtype")
    if value.is_complex() or dtype is None or not dtype.is_complex:
        return NotImplemented
    real = value.to(torch.float64 if dtype == torch.complex128 else torch.float32)
    return _complex(torch.stack([real, torch.zeros_like(real)], dim=-1))


def _fft_functions() -> dict[Any, Any]:
    """``torch.fft``'s functions decomposed into ``_fft_r2c`` / ``_fft_c2c`` / ``_fft_c2r`` (their own kernels')."""
    import torch

    aten = torch.ops.aten
    table = {}
    for name in (
        "fft",
        "ifft",
        "rfft",
        "irfft",
        "fft2",
        "ifft2",
        "rfft2",
        "irfft2",
        "fftn",
        "ifftn",
        "rfftn",
        "irfftn",
    ):
        op = getattr(aten, f"fft_{name}").default
        table[op] = functools.partial(op._op_dk, torch._C.DispatchKey.CompositeImplicitAutograd)
    return table


def _table() -> dict[Any, Any]:
    import torch

    aten = torch.ops.aten
    return {
        aten.polar.default: _polar,
        aten.mul.Tensor: _product,
        aten.add.Tensor: _pairwise(aten.add.Tensor),
        aten.sub.Tensor: _pairwise(aten.sub.Tensor),
        aten.view.default: _on_pairs(aten.view.default, shape_arg=True),
        aten.reshape.default: _on_pairs(aten.reshape.default, shape_arg=True),
        aten.expand.default: _on_pairs(aten.expand.default, shape_arg=True),
        aten.unsqueeze.default: _on_pairs(aten.unsqueeze.default, dim_arg=True, new_axis=True),
        aten.slice.Tensor: _on_pairs(aten.slice.Tensor, dim_arg=True),
        aten.select.int: _on_pairs(aten.select.int, dim_arg=True),
        aten.clone.default: _on_pairs(aten.clone.default),
        aten._fft_r2c.default: _fft_r2c,
        aten._fft_c2c.default: _fft_c2c,
        aten._fft_c2r.default: _fft_c2r,
        aten._conj.default: _conjugate,
        aten._to_copy.default: _to_complex,
        aten.conj_physical.default: _conjugate,
        aten.resolve_conj.default: _on_pairs(aten.clone.default),
        **_fft_functions(),
    }


def _has_complex(program: Any) -> bool:
    import torch

    for node in program.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor) and value.is_complex():
            return True
    return False


def _pairs_cancelled(program: Any) -> None:
    """Each ``view_as_real(view_as_complex(x))`` replaced by ``x``; the complex values left unused erased."""
    import torch

    aten = torch.ops.aten
    graph = program.graph
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is aten.view_as_real.default:
            source = node.args[0]
            if getattr(source, "target", None) is aten.view_as_complex.default:
                node.replace_all_uses_with(source.args[0])
    for node in reversed(list(graph.nodes)):
        if (
            node.op == "call_function"
            and not node.users
            and node.target
            in (
                aten.view_as_real.default,
                aten.view_as_complex.default,
                aten.clone.default,
            )
        ):
            graph.erase_node(node)
    program.graph_module.recompile()


def complex_as_real_pairs(program: Any) -> Any:
    """``program`` re-traced with its complex arithmetic on real pairs (see the module's docstring), or ``program``
    itself when it holds no complex value (no re-trace)."""
    if not _has_complex(program):
        return program
    program = program.run_decompositions(_table())
    _pairs_cancelled(program)
    return program
