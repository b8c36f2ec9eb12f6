"""Every model type of transformers' auto mappings with the head it is exported with, and why a type is skipped."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from _tiny_overrides import SKIPS

#: (head, auto mapping) in the order a model type's head is chosen; the first mapping holding the type wins
HEADS: list[tuple[str, str]] = [
    ("image-text-to-text", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES"),
    ("speech-seq2seq", "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES"),
    ("seq2seq-lm", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
    ("ctc", "MODEL_FOR_CTC_MAPPING_NAMES"),
    ("masked-lm", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    ("causal-lm", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    ("image-classification", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES"),
    ("sequence-classification", "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"),
    ("token-classification", "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES"),
    ("feature-extraction", "MODEL_MAPPING_NAMES"),
]


@dataclass
class Arch:
    """One enumerated model type: the head it is exported with and, if it cannot run here, why."""

    model_type: str
    head: str
    model_class: str
    skip: str | None = None


class BuildSkip(Exception):
    """The architecture cannot be built in this environment (its reason is a skip, not a failure)."""


# ---- enumeration ---------------------------------------------------------------------------------------------
#: main input names :func:`build_case` knows how to build
MAIN_INPUTS = (
    "input_ids",
    "pixel_values",
    "input_features",
    "input_values",
    "inputs",
    "past_values",
    "states",
    "pixel_values_videos",
)


def _heads() -> list[tuple[str, dict[str, Any]]]:
    from transformers.models.auto import modeling_auto

    return [(head, getattr(modeling_auto, name)) for head, name in HEADS]


def arch_of(model_type: str, mappings: list[tuple[str, dict[str, Any]]] | None = None) -> Arch:
    """The head, model class and skip reason of one model type (imports only its own model class)."""
    import torch
    import transformers

    mappings = mappings or _heads()
    head, names = next((h, m[model_type]) for h, m in mappings if model_type in m)
    class_name = names if isinstance(names, str) else names[0]
    arch = Arch(model_type, head, class_name)
    try:
        model_cls = getattr(transformers, class_name)
        main = getattr(model_cls, "main_input_name", "input_ids")
    except (ImportError, AttributeError) as exc:
        arch.skip = skip_reason(exc) or f"{class_name} not importable: {_one_line(exc)}"
        return arch
    if model_type in SKIPS:
        arch.skip = SKIPS[model_type]
    elif getattr(model_cls, "forward", None) is torch.nn.Module.forward:
        arch.skip = f"{class_name} has no forward (generation-only wrapper)"
    elif head != "image-text-to-text" and main not in MAIN_INPUTS:
        arch.skip = f"main input {main!r} (no sample-input builder for it)"
    return arch


@functools.lru_cache(maxsize=1)
def enumerate_architectures() -> list[Arch]:
    """Every model type of the :data:`HEADS` mappings, sorted, with its head (first mapping holding it)."""
    mappings = _heads()
    types = sorted({t for _head, mapping in mappings for t in mapping})
    return [arch_of(model_type, mappings) for model_type in types]


def _one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    return text if len(text) <= 200 else text[:197] + "..."


_PACKAGE = re.compile(r"(?:requires the |No module named |pip install )['\"`]?([A-Za-z0-9_\-]+)")


def skip_reason(exc: BaseException) -> str | None:
    """The skip reason of a build failure that is the environment's, not the shrinker's or the model's."""
    text = f"{type(exc).__name__}: {exc}"
    low = text.lower()
    if isinstance(exc, BuildSkip):
        return str(exc)
    if "huggingface.co" in low or "localentrynotfound" in low or "offline mode" in low or "hf_hub_offline" in low:
        return "checkpoint-only component: builds a sub-model from a Hub checkpoint (no network here)"
    if "trust_remote_code" in low or "remote code" in low:
        return "remote code"
    if isinstance(exc, (ImportError, ModuleNotFoundError)) or "requires the" in low or "pip install" in low:
        match = _PACKAGE.search(text)
        return f"needs a package not installed: {match.group(1) if match else _one_line(exc)}"
    if ("cuda" in low and ("kernel" in low or "not available" in low or "requires" in low)) or "flash_attn" in low:
        return f"GPU-only kernel: {_one_line(exc)}"
    return None
