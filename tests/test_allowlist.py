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


def test_no_model_module_defines_a_class_named_like_a_shared_output_class() -> None:
    """The lookup takes ``transformers.modeling_outputs``' class before the architecture's module (which it then never
    imports): right only while no model defines its own class of one of those names (read from the sources)."""
    import re
    from pathlib import Path

    import transformers
    from transformers import modeling_outputs

    shared = {name for name, value in vars(modeling_outputs).items() if _allowlist._is_output_class(value)}
    assert "CausalLMOutputWithPast" in shared
    defined = re.compile(rb"^class (\w+)\(", re.MULTILINE)
    models = Path(transformers.__file__).parent / "models"
    clashes = [
        f"{path.parent.name}: {name}"
        for path in sorted(models.glob("*/modeling_*.py"))
        for name in sorted(shared.intersection(n.decode() for n in defined.findall(path.read_bytes())))
    ]
    assert not clashes


def test_a_shared_output_class_is_found_without_importing_the_architectures_module() -> None:
    import sys

    candidates = {
        "BloomForCausalLM": "bloom",
        "GPTJForCausalLM": "gptj",
        "OPTForCausalLM": "opt",
        "XGLMForCausalLM": "xglm",
    }
    unloaded = [(a, f"transformers.models.{m}.modeling_{m}") for a, m in candidates.items()]
    unloaded = [(a, m) for a, m in unloaded if m not in sys.modules]
    if not unloaded:
        pytest.skip("every candidate modeling module is already imported in this process")
    architecture, module = unloaded[0]
    assert resolve_output_class("CausalLMOutputWithPast", architecture) is CausalLMOutputWithPast
    assert module not in sys.modules
