"""The allow-list that resolves class names from ``export.json`` (``hub_export/_allowlist.py``)."""

from __future__ import annotations

import pytest
from transformers.modeling_outputs import CausalLMOutputWithPast

from hub_export import _allowlist
from hub_export._allowlist import resolve_output_class
from hub_export.errors import ManifestError


def test_output_classes_are_looked_up_once_and_refusals_are_not_kept() -> None:
    assert resolve_output_class("CausalLMOutputWithPast") is CausalLMOutputWithPast
    assert (
        _allowlist._FOUND_OUTPUT_CLASSES["CausalLMOutputWithPast", None] is CausalLMOutputWithPast
    )  # a runner's calls
    assert resolve_output_class("CausalLMOutputWithPast", "LlamaForCausalLM") is CausalLMOutputWithPast
    for name in ("Popen", "PreTrainedModel", "os.system"):  # not a transformers output class, twice
        for _ in range(2):
            with pytest.raises(ManifestError, match="allowed output class|not a class name"):
                resolve_output_class(name)
        assert (name, None) not in _allowlist._FOUND_OUTPUT_CLASSES


def test_a_class_name_several_models_define_resolves_to_the_architectures_own() -> None:
    """Qwen3-VL and Cohere Compass each define ``BaseModelOutputWithDeepstackFeatures``: whichever module was imported
    first, an export of one architecture gets its own class back."""
    from transformers.models.cohere_compass import modeling_cohere_compass as compass
    from transformers.models.qwen3_vl import modeling_qwen3_vl as qwen3_vl

    name = "BaseModelOutputWithDeepstackFeatures"
    assert getattr(compass, name) is not getattr(qwen3_vl, name)
    for module, architecture in ((qwen3_vl, "Qwen3VLVisionModel"), (compass, "CohereCompassModel")):
        for _ in range(2):  # and again from the lookup's memory
            assert resolve_output_class(name, architecture) is getattr(module, name)
