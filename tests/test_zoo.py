"""Architecture coverage in CI: a representative slice of ``tests/zoo.py`` beyond ``tests/tiny_models.py``.

Each model is exported once with ``dynamic=True`` on its sample kwargs, then run at the sample shape and at
another batch/sequence length; every flattened output (logits, caches, hidden states) must match eager PyTorch
and the output class must be the eager one. The whole zoo runs in ``benchmarks/coverage.py``
(``docs/support-matrix.md``).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from zoo import build

from hub_export.configs import AutoExportConfig
from hub_export.exporters.auto import exporter_class
from hub_export.signature import flatten_value

ATOL = 1e-4

# (architecture, backend): a decoder with sliding window, a mixture of experts, an encoder with offset
# positions, a convolutional vision model, a convolutional audio encoder.
CELLS = [
    ("mistral", "dynamo"),
    ("mistral", "onnx"),
    ("qwen2_moe", "dynamo"),
    ("roberta", "dynamo"),
    ("roberta", "onnx"),
    ("convnext", "dynamo"),
    ("wav2vec2", "dynamo"),
]


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
            built[name] = build(name)
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
