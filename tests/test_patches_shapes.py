"""hub_export.patches.shapes: torch's export constraint solver no longer ends an export on the guard of a nested
integer division (MobileViTV2's conv strides, pytorch/pytorch#131897); the guard itself is left to the dims.
hub_export.patches.lengths: ``len(tensor)`` and transformers' ``conv1d_output_length`` no longer pin an axis."""

from __future__ import annotations

import pytest
import sympy
import torch
from torch._dynamo.source import LocalSource
from torch.export import Dim
from torch.fx.experimental.symbolic_shapes import DimConstraints
from torch.utils._sympy.functions import FloorDiv
from transformers.audio_utils import conv1d_output_length

from hub_export.patches.lengths import conv_length_symbolic, tensor_len_symbolic
from hub_export.patches.shapes import unsolvable_guards_dropped


def _solve_stride_guard() -> None:
    """The guard MobileViTV2's stride-8 stem and its two halvings leave on the image height (traced at 64)."""
    size = sympy.Symbol("s0", integer=True, positive=True)
    strided = FloorDiv(size - 1, 8)
    guard = sympy.Eq(4 * FloorDiv(strided + 1, 2), 4 * FloorDiv(strided - 1, 2) + 4)
    constraints = DimConstraints({size: [LocalSource("pixel_values")]}, {size: sympy.Integer(64)}, set(), {})
    constraints.add(guard)
    constraints.solve()


def test_a_nested_division_guard_no_longer_ends_the_export() -> None:
    original = DimConstraints.add
    with pytest.raises(NotImplementedError, match="cannot be solved"):  # the upstream bug, still there
        _solve_stride_guard()
    with unsolvable_guards_dropped():
        _solve_stride_guard()
    assert DimConstraints.add is original  # restored


class _Batched(torch.nn.Module):
    """``batch_size = len(source_flatten)`` as in the RT-DETR family's forward."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch_size = len(x)
        return x.reshape(batch_size, -1).sum(-1) + len([1, 2])


def test_len_of_a_tensor_keeps_the_batch_dynamic() -> None:
    model, sample = _Batched(), torch.randn(2, 3, 4)
    shapes = ({0: Dim.AUTO},)
    pinned = torch.export.export(model, (sample,), dynamic_shapes=shapes, strict=False)
    assert _placeholder_shape(pinned)[0] == 2  # the upstream bug (pytorch/pytorch#185804), still there
    with tensor_len_symbolic(model, packages=(__name__,)) as patched:
        program = torch.export.export(model, (sample,), dynamic_shapes=shapes, strict=False)
    assert patched == 1 and "len" not in globals()  # restored: the builtin again
    assert not isinstance(_placeholder_shape(program)[0], int)
    other = torch.randn(5, 3, 4)
    torch.testing.assert_close(program.module()(other), model(other), rtol=0, atol=0)


def _placeholder_shape(program: torch.export.ExportedProgram) -> tuple:
    name = program.graph_signature.user_inputs[0]
    node = next(n for n in program.graph.nodes if n.name == name)
    return tuple(
        int(s) if isinstance(s, int) or s.node.maybe_as_int() is not None else s for s in node.meta["val"].shape
    )


class _Strided(torch.nn.Module):
    """XCodec's use: a convolution's output length from ``conv1d_output_length`` (``int()`` of a true division)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 1, kernel_size=3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., : conv1d_output_length(self.conv, x.shape[-1])] * 2


def test_conv1d_output_length_keeps_the_length_dynamic() -> None:
    model, sample = _Strided(), torch.randn(1, 1, 40)
    shapes = ({2: Dim.AUTO},)
    assert _placeholder_shape(torch.export.export(model, (sample,), dynamic_shapes=shapes))[2] == 40  # upstream
    with conv_length_symbolic(model, packages=(__name__,)) as patched:
        program = torch.export.export(model, (sample,), dynamic_shapes=shapes)
    assert patched == 1 and conv1d_output_length.__module__ == "transformers.audio_utils"  # restored
    assert not isinstance(_placeholder_shape(program)[2], int)
    other = torch.randn(1, 1, 57)
    torch.testing.assert_close(program.module()(other), model(other), rtol=0, atol=0)
