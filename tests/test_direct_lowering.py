"""hub_export.patches.direct_lowering: ONNX and OpenVINO lower a traced program as it stands, without the re-trace of
``run_decompositions``, where nothing in it needs one; otherwise, and whenever that lowering fails, they re-trace."""

from __future__ import annotations

import pytest
import torch
from tiny_models import build, text_inputs

from hub_export import OnnxConfig, OnnxExporter, OpenVINOConfig, OpenVINOExporter
from hub_export.patches.direct_lowering import blocking_operators, direct_program

aten = torch.ops.aten


class TrainingForms(torch.nn.Module):
    """The training-IR forms the re-trace would replace: casts (one to the same dtype), ``&`` of masks, and a
    ``no_grad`` region."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            doubled = x * 2
        keep = (mask > 0) & (x > 0)
        wide = doubled.to(torch.float64) * keep
        return wide.to(torch.float32) + x.to(torch.float32)


def _targets(program) -> set:
    return {n.target for m in program.graph_module.modules() for n in m.graph.nodes if n.op == "call_function"}


def _inputs(seed: int, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 5, generator=generator), torch.randint(0, 2, (rows, 5), generator=generator)


def test_the_training_forms_become_the_ops_the_re_trace_gives_with_the_same_values() -> None:
    model = TrainingForms().eval()
    batch = torch.export.Dim("batch")
    program = torch.export.export(model, _inputs(0, 3), dynamic_shapes=({0: batch}, {0: batch}))
    traced = _targets(program)
    assert {aten.to.dtype, aten.__and__.Tensor, torch.ops.higher_order.wrap_with_set_grad_enabled} <= traced
    code = program.graph_module.code

    direct = direct_program(program, lambda op: True)

    assert direct is not None
    targets = _targets(direct)
    assert not targets & {aten.to.dtype, aten.__and__.Tensor, aten._assert_tensor_metadata.default}
    assert not any(isinstance(t, torch._ops.HigherOrderOperator) for t in targets)
    assert {aten._to_copy.default, aten.bitwise_and.Tensor} <= targets
    assert sum(n.target is aten._to_copy.default for n in direct.graph.nodes) == 2  # float32 -> float32 is no cast
    assert program.graph_module.code == code  # the traced program is left as it was
    x, mask = _inputs(1, 4)
    torch.testing.assert_close(direct.module()(x, mask), model(x, mask), rtol=0, atol=0)
    assert direct.module()(x, mask).dtype == torch.float32


class WritesItsInput(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x * 2


class WritesAClone(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y.mul_(2)
        return y + x


class CountsCalls(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        return x + self.calls


class Branches(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda x: x + 1, lambda x: x - 1, (x,))


@pytest.mark.parametrize("module", [WritesItsInput, WritesAClone, CountsCalls, Branches])
def test_a_program_that_writes_a_tensor_or_holds_a_subgraph_needs_the_re_trace(module) -> None:
    program = torch.export.export(module().eval(), (torch.randn(2, 3),))
    assert direct_program(program, lambda op: True) is None


def test_an_operator_the_format_does_not_translate_needs_the_re_trace() -> None:
    program = torch.export.export(TrainingForms().eval(), _inputs(0, 3))
    assert direct_program(program, lambda op: op is not aten.mul.Tensor) is None
    # the graph as traced: the no_grad region is a higher-order op, which direct_program inlines before checking
    blocking = blocking_operators(program.graph, lambda op: op is not aten.mul.Tensor)
    assert blocking == ["aten.mul.Tensor", "wrap_with_set_grad_enabled"]


def _count_retraces(monkeypatch) -> list[int]:
    calls: list[int] = []
    original = torch.export.ExportedProgram.run_decompositions

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", counted)
    return calls


@pytest.mark.parametrize(
    ("exporter", "config"), [(OnnxExporter, OnnxConfig), (OpenVINOExporter, OpenVINOConfig)], ids=["onnx", "openvino"]
)
def test_a_generation_export_lowers_without_the_re_trace_and_generates_eager_tokens(
    monkeypatch, exporter, config
) -> None:
    model = build("llama").model
    retraces = _count_retraces(monkeypatch)
    exported = exporter().export_for_generation(model, text_inputs(1, 7), config=config(dynamic=True))
    assert retraces == []
    prompt = text_inputs(2, 9, pad_left=3, seed=4)
    expected = model.generate(**prompt, max_new_tokens=6, do_sample=False)
    assert torch.equal(exported.generate(**prompt, max_new_tokens=6, do_sample=False), expected)


class ShiftedLogs(torch.nn.Module):
    """``xlogy``: kept by torch.export, with no rule in openvino 2026.4's frontend, decomposed by the re-trace."""

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"logits": torch.special.xlogy(x.abs(), x.abs() + 2)}


def test_openvino_converts_through_the_re_trace_when_the_direct_conversion_fails(monkeypatch) -> None:
    retraces = _count_retraces(monkeypatch)
    model = ShiftedLogs().eval()
    exported = OpenVINOExporter().export(model, {"x": torch.randn(2, 5)}, config=OpenVINOConfig(dynamic=True))
    assert len(retraces) == 1
    x = torch.randn(3, 7)
    torch.testing.assert_close(exported(x=x)["logits"], model(x)["logits"], rtol=1e-5, atol=1e-5)


def test_onnx_lowers_again_through_the_re_trace_when_the_direct_lowering_fails(monkeypatch) -> None:
    """Whatever fails after the program was given as it stood (here the optimizer, once) makes the exporter lower the
    re-traced program."""
    import hub_export.backends.onnx.exporter as onnx_exporter

    retraces = _count_retraces(monkeypatch)
    original, failed = onnx_exporter._optimize, []

    def fails_once(model) -> None:
        if not failed:
            failed.append(1)
            raise RuntimeError("optimizer failed")
        original(model)

    monkeypatch.setattr(onnx_exporter, "_optimize", fails_once)
    model = TrainingForms().eval()
    exported = OnnxExporter().export(model, dict(zip(("x", "mask"), _inputs(0, 3), strict=True)))
    assert failed == [1]
    assert len(retraces) == 1
    x, mask = _inputs(1, 3)
    torch.testing.assert_close(exported(x=x, mask=mask), model(x, mask))


def test_a_failed_openvino_conversion_leaves_the_root_logger_as_it_was() -> None:
    """openvino's ``convert_model`` sets the root logger to ERROR and restored it only on success: the fallback
    above (a failed direct conversion) left every library's warnings silenced after the export."""
    import logging

    root = logging.getLogger()
    before = (root.level, list(root.filters), list(root.handlers))
    OpenVINOExporter().export(ShiftedLogs().eval(), {"x": torch.randn(2, 5)}, config=OpenVINOConfig(dynamic=True))
    assert (root.level, list(root.filters), list(root.handlers)) == before


class SameDtypes(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"logits": x * 2.0 + x.sum(-1, keepdim=True)}


class MixedDtypes(torch.nn.Module):
    """A float tensor plus positions counted in int64: ONNX's ``Add`` needs the cast torch makes implicitly."""

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"logits": x + torch.arange(x.shape[-1])}


@pytest.mark.parametrize(("module", "needed"), [(SameDtypes, False), (MixedDtypes, True)])
def test_onnx_type_promotion_runs_only_where_a_cast_is_needed(monkeypatch, module, needed) -> None:
    """torch.onnx's type-promotion pass executes every node again; it runs only where the recorded dtypes call for
    a cast (``backends/onnx/_promotion.promotion_needed``), and the export computes eager's numbers either way."""
    from torch.onnx._internal.fx.passes import type_promotion

    from hub_export.backends.onnx._promotion import promotion_needed

    program = torch.export.export(module().eval(), (torch.randn(2, 5),))
    assert promotion_needed(program.graph_module) is needed
    runs: list[int] = []
    original = type_promotion.InsertTypePromotion.run

    def counted(self, *args, **kwargs):
        runs.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(type_promotion.InsertTypePromotion, "run", counted)
    exported = OnnxExporter().export(module().eval(), {"x": torch.randn(2, 5)}, config=OnnxConfig(dynamic=True))
    assert len(runs) == int(needed)
    x = torch.randn(3, 7)
    torch.testing.assert_close(exported(x=x)["logits"], module()(x)["logits"])
