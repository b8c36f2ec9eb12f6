"""Architecture coverage in CI: a representative slice of ``tests/zoo.py`` beyond ``tests/tiny_models.py``.

Each model is exported once with ``dynamic=True`` on its sample kwargs, then run at the sample shape and at
another batch/sequence length; every flattened output (logits, caches, hidden states) must match eager PyTorch
and the output class must be the eager one. The whole zoo runs in ``benchmarks/coverage.py``
(``docs/support-matrix.md``). Regression tests for the architectures the patches fixed follow the slice: mixtures of
experts on ONNX/OpenVINO (``patches.dynamo.experts_as_standard_ops``), size arithmetic on OpenVINO (Mamba-2, and
a tiny module for ``patches.openvino.size_arithmetic_rules``), and a sequence axis pinned by the model's code.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import torch
from zoo import build

from hub_export.configs import AutoExportConfig
from hub_export.dims import Dim
from hub_export.errors import InputError
from hub_export.export.auto import exporter_class
from hub_export.structure import flatten_value

ATOL = 1e-4

# (architecture, backend): a decoder with sliding window, a mixture of experts (with a shared expert) on every
# backend, an encoder with offset positions, a convolutional vision model, a convolutional audio encoder, and a
# state-space model whose chunk padding is size arithmetic (mod, min, ceil division) on OpenVINO. (Swin needs the
# same rules; its OpenVINO conversion takes ~50 s, so it runs in the benchmark only.)
CELLS = [
    ("mistral", "dynamo"),
    ("mistral", "onnx"),
    ("qwen2_moe", "dynamo"),
    ("qwen2_moe", "onnx"),
    ("qwen2_moe", "openvino"),
    ("roberta", "dynamo"),
    ("roberta", "onnx"),
    ("convnext", "dynamo"),
    ("wav2vec2", "dynamo"),
    ("mamba2", "openvino"),
]


#: Config entries changed for a cell: Mamba-2's chunk padding converts the same in each layer, and its OpenVINO
#: conversion time grows with the layers.
OVERRIDES: dict[str, dict[str, Any]] = {"mamba2": {"num_hidden_layers": 1}}


def _leaves(output: Any) -> dict[str, torch.Tensor]:
    leaves: list[tuple[str, torch.Tensor]] = []
    flatten_value(output, (), leaves)
    return dict(leaves)


@pytest.fixture(scope="module")
def cases() -> Any:
    """name -> a zoo case, built once per module and shared by its backends."""
    built: dict[str, Any] = {}

    def get(name: str) -> Any:
        if name not in built:
            built[name] = build(name, **OVERRIDES.get(name, {}))
        return built[name]

    return get


@pytest.mark.parametrize(("name", "backend"), CELLS, ids=[f"{n}-{b}" for n, b in CELLS])
def test_zoo_architecture_matches_eager(name: str, backend: str, cases: Any) -> None:
    case = cases(name)
    config = AutoExportConfig.config_class(backend)(dynamic=True)
    exported = exporter_class(backend)().export(case.model, case.sample, config=config)
    assert exported.components["model"].metadata.parity["max_abs_diff"] <= ATOL
    for inputs in (case.sample, case.other):
        with torch.no_grad():
            expected = case.model(**inputs)
        got = exported(**inputs)
        assert type(got) is type(expected)
        got_leaves, expected_leaves = _leaves(got), _leaves(expected)
        assert list(got_leaves) == list(expected_leaves)
        for key, want in expected_leaves.items():
            assert got_leaves[key].shape == want.shape, key
            diff = (got_leaves[key] - want).abs().max().item() if want.numel() else 0.0
            assert diff <= ATOL, f"{name}/{backend} {key}: max abs diff {diff:.2e}"


def test_experts_trace_to_standard_ops_and_restore(cases: Any) -> None:
    """MoE layers default to ``grouped_mm`` (histc + a transformers custom op): the trace must hold neither."""
    from hub_export.export.trace import trace

    model = cases("mixtral").model
    experts = [m for m in model.modules() if hasattr(m, "has_gate") and hasattr(m, "num_experts")]
    implementation = model.config._experts_implementation  # "grouped_mm", transformers' default on CPU
    assert experts
    for backend in ("dynamo", "executorch"):  # a per-expert loop (where); ExecuTorch: gathered weights (bmm)
        config = AutoExportConfig.config_class(backend)(dynamic=True)
        exporter = exporter_class(backend)()
        choose = functools.partial(exporter.experts_forward, config=config)  # the backend's choice, as export() does
        program = trace(model, cases("mixtral").sample, config, experts=choose).program
        targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
        assert not [t for t in targets if "transformers" in t or "histc" in t or "grouped_mm" in t]
        per_expert_loop = "aten.where.default" in targets and "aten.bmm.default" not in targets
        assert per_expert_loop == (backend != "executorch"), backend
        assert all("forward" not in vars(m) for m in experts)  # the per-instance switch is gone
        assert model.config._experts_implementation == implementation


class _SizeArithmetic(torch.nn.Module):
    """Floor division of a negative size (a ceil division), ``%`` and ``min`` of two sizes, as traced; ``//`` of
    integer tensors holding negative values (the Qwen3 audio encoders' frame counts)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows, cols = x.shape
        chunks = -(-cols // 4)
        counts = (torch.arange(cols) - 2) // 3 + torch.floor_divide(torch.arange(cols) - 4, 2)  # -1 // 3 is -1
        scale = torch.sym_float(cols) / 4
        return x.new_ones(chunks, 2) * (cols % 3) + torch.sym_min(rows, cols) + counts.sum() + scale


def test_openvino_size_arithmetic_follows_python() -> None:
    """OpenVINO truncates ``//`` and has no rule for ``%``/``sym_min``/``sym_float``: the conversion rules give
    Python's results."""
    from hub_export import OpenVINOConfig

    model = _SizeArithmetic()
    exported = exporter_class("openvino")().export(model, {"x": torch.zeros(2, 7)}, config=OpenVINOConfig(dynamic=True))
    for rows, cols in ((2, 5), (5, 3), (3, 9), (4, 8)):
        x = torch.zeros(rows, cols)
        torch.testing.assert_close(exported(x=x), model(x), rtol=0, atol=0)


class _StepByStep(torch.nn.Module):
    """Loops over the sequence in Python (as recurrent reference code does where no patch rewrites it)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(64, 8)
        self.head = torch.nn.Linear(8, 64)

    def forward(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        hidden, state = self.embed(input_ids), torch.zeros(input_ids.shape[0], 8)
        steps = []
        for t in range(input_ids.shape[1]):
            state = 0.5 * state + hidden[:, t]
            steps.append(state)
        return {"logits": self.head(torch.stack(steps, 1))}


def test_dynamic_axis_pinned_by_the_model_is_named(tmp_path: Path) -> None:
    """A model looping over the sequence in Python: the export warns once and the run-time error says why, also
    after a save and load (a pinned axis is a dim with min == max in the manifest)."""
    from hub_export.model import ExportedModel

    model = _StepByStep().eval()
    sample, other = {"input_ids": torch.randint(0, 64, (2, 7))}, {"input_ids": torch.randint(0, 64, (3, 11))}
    config = AutoExportConfig.config_class("dynamo")(dynamic=True)
    with pytest.warns(UserWarning, match=r"'input_ids' axis 1 \(fixed to 7\).*model's code fixed it") as record:
        exported = exporter_class("dynamo")().export(model, sample, config=config)
    assert len([w for w in record if "fixed to" in str(w.message)]) == 1
    signature = exported.components["model"].metadata.signature
    assert signature.inputs[0].shape == ("batch", "sequence") and signature.dims["sequence"] == Dim("sequence", 7, 7)
    exported.save_pretrained(tmp_path)
    for loaded in (exported, ExportedModel.from_pretrained(tmp_path)):
        with pytest.raises(InputError, match="model's code fixed this axis") as error:
            loaded(**other)
        assert "Re-export with dynamic=True" not in str(error.value)
    batch = {"input_ids": other["input_ids"][:, :7]}  # another batch at the traced length still runs
    with torch.no_grad():
        torch.testing.assert_close(exported(**batch)["logits"], model(**batch)["logits"], rtol=0, atol=ATOL)
