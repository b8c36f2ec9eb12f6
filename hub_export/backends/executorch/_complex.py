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
"""

from __future__ import annotations

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
