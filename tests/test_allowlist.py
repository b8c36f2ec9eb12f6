"""The allow-list that resolves class names from ``export.json`` (``hub_export/_allowlist.py``)."""

from __future__ import annotations

import pytest
from transformers.modeling_outputs import CausalLMOutputWithPast

from hub_export import _allowlist
from hub_export._allowlist import resolve_output_class
from hub_export.errors import ManifestError


def test_output_classes_are_looked_up_once_and_refusals_are_not_kept() -> None:
    assert resolve_output_class("CausalLMOutputWithPast") is CausalLMOutputWithPast
    assert _allowlist._FOUND_OUTPUT_CLASSES["CausalLMOutputWithPast"] is CausalLMOutputWithPast  # a runner's calls
    assert resolve_output_class("CausalLMOutputWithPast", "LlamaForCausalLM") is CausalLMOutputWithPast
    for name in ("Popen", "PreTrainedModel", "os.system"):  # not a transformers output class, twice
        for _ in range(2):
            with pytest.raises(ManifestError, match="allowed output class|not a class name"):
                resolve_output_class(name)
        assert name not in _allowlist._FOUND_OUTPUT_CLASSES
