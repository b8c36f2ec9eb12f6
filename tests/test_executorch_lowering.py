"""ExecuTorch lowering workarounds (``hub_export/backends/executorch/patches.py``, ``_op_rewrites.py``), each on a
tiny synthetic module that reproduces the upstream failure it works around."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hub_export import ExecutorchConfig, ExecutorchExporter
from hub_export.backends.executorch.io import program_contents

pytest.importorskip("executorch")


class _MaxOverStride(torch.nn.Module):
    """Hiera's query pooling: ``x.view(batch, stride, -1, hidden).max(dim=1).values`` of a 4-D tensor, which
    XNNPACK's partitioner accepts and its visitor refuses (it pools dims 2 or 3, keepdim only); beside it a
    ``max(dim=3, keepdim=True)`` the delegate does take."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.proj(x)
        pooled = hidden.view(x.shape[0], 2, -1, 8).max(dim=1).values
        kept = hidden.view(x.shape[0], 2, -1, 8).max(dim=3, keepdim=True).values
        return pooled + kept.sum(1)


def test_max_dims_xnnpack_cannot_pool_run_outside_the_delegate() -> None:
    from executorch.backends.xnnpack.partition.config import node_configs

    original = node_configs.MaxDimConfig.check_constraints
    model = _MaxOverStride().eval()
    export = ExecutorchExporter().export(model, {"x": torch.randn(2, 6, 8)}, config=ExecutorchConfig(dynamic=True))
    operators, delegates = program_contents(export.program)
    assert "aten::max" in operators and delegates  # the dim-1 reduction left to the portable kernels
    for shape in [(2, 6, 8), (5, 4, 8)]:
        x = torch.randn(shape)
        with torch.no_grad():
            assert float((export(x=x) - model(x)).abs().max()) < 1e-5
    assert node_configs.MaxDimConfig.check_constraints is original


class _Buckets(torch.nn.Module):
    """Idefics3's patch position buckets: ``torch.bucketize`` (not in the core ATen opset, no decomposition)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        boundaries = torch.arange(0, 1, 1 / 8)
        return torch.bucketize(x, boundaries, right=True) * 10 + torch.bucketize(x, boundaries)


def test_bucketize_is_lowered_as_comparisons_and_restored() -> None:
    from hub_export.backends.executorch._op_rewrites import bucketize_as_comparisons

    program = torch.export.export(_Buckets(), (torch.rand(2, 5),))
    before = [node.target for node in program.graph.nodes]
    with bucketize_as_comparisons(program) as count:
        assert count == 2
    assert [node.target for node in program.graph.nodes] == before
    export = ExecutorchExporter().export(_Buckets(), {"x": torch.rand(2, 5)}, config=ExecutorchConfig(dynamic=True))
    for shape in [(2, 5), (3, 4)]:
        x = torch.rand(shape)
        x[0, :3] = torch.tensor([0.0, 0.125, 0.5])  # on boundaries: right=True and False differ
        assert torch.equal(export(x=x), _Buckets()(x))


class _Nonzero(torch.nn.Module):
    """A data-dependent size (``nonzero``): its re-trace creates unbacked symbols in the program's ShapeEnv."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nonzero(x > 0).sum(0)


def test_a_failed_lowering_leaves_no_pending_unbacked_symbols_for_the_next() -> None:
    from torch._guards import detect_fake_mode

    from hub_export.backends.executorch._decompose import unbacked_symbols_restorer

    program = torch.export.export(_Nonzero(), (torch.randn(6),))
    values = [n.meta["val"] for n in program.graph.nodes if n.op == "placeholder"]
    env = detect_fake_mode(values).shape_env
    before = list(env.pending_fresh_unbacked_symbols)
    restore = unbacked_symbols_restorer(program)
    with pytest.raises(RuntimeError, match="kept"):
        with detect_fake_mode(values):
            env.create_unbacked_symint()  # what a lowering failing half-way through run_decompositions leaves
            raise RuntimeError("a node kept whole was not decomposed or delegated")
    assert env.pending_fresh_unbacked_symbols != before
    restore()
    assert env.pending_fresh_unbacked_symbols == before
    program.run_decompositions({})  # re-traces: would fail on the pending symbol


class _AvgPool(torch.nn.Module):
    """An ``AvgPool2d``: XNNPACK's serializer writes its (unused) dilations as 0 (SEW's pooling)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.avg_pool2d(x, 2)


def test_an_average_pooling_delegate_passes_the_load_time_check(tmp_path: Path) -> None:
    from hub_export import ExportedModel

    export = ExecutorchExporter().export(_AvgPool(), {"x": torch.randn(2, 3, 4, 4)}, config=ExecutorchConfig())
    export.save_pretrained(tmp_path)
    loaded = ExportedModel.from_pretrained(tmp_path)  # checks every XNNPACK node's fields before the runtime
    x = torch.randn(2, 3, 4, 4)
    assert torch.allclose(loaded(x=x), _AvgPool()(x), atol=1e-6)
