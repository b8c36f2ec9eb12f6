"""The only classes an export's output structure may name: transformers' ModelOutput and cache classes.

A manifest is data; loading one never imports a module or resolves a dotted path it names. Output classes
are looked up by bare identifier among transformers' own output classes: first ``transformers.modeling_outputs``
(no model module defines a class of one of its names: ``tests/test_allowlist.py`` checks it), then the architecture's
own modeling module (reached through transformers' public namespace: several models define classes of one name, e.g.
``BaseModelOutputWithDeepstackFeatures``), then the ModelOutput subclasses of already imported ``transformers.models``
modules. The shared classes come first because importing a modeling module imports ``transformers.modeling_utils``
(distributed tensors, the quantizer integrations, the loss functions): seconds that loading an export whose outputs
are a ``CausalLMOutputWithPast`` has no use for.
"""

from __future__ import annotations

import re
from typing import Any

from .errors import ManifestError

__all__ = ["CACHE_CLASSES", "IDENTIFIER", "LAYER_CLASSES", "cache_class", "layer_class", "resolve_output_class"]

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CACHE_CLASSES = ("DynamicCache", "EncoderDecoderCache", "StaticCache")
#: The layer classes of a ``DynamicCache`` an export may name (``transformers.cache_utils``): attention, sliding-window
#: attention (rebuilt as plain attention layers), state-space / linear attention, both in one layer, and the empty
#: placeholder of layers that keep no cache (shared key/values, MoE/MLP-only layers), attention with the indexer keys
#: of sparse attention (DeepSeek-V3.2, GLM-MoE-DSA: their ``state``). Any other layer class of a
#: model's cache is exported as the one of these its parts make (``structure._layer_kind``).
LAYER_CLASSES = (
    "DynamicLayer",
    "DynamicSlidingWindowLayer",
    "LinearAttentionLayer",
    "LinearAttentionAndFullAttentionLayer",
    "DummyLayer",
    "DynamicIndexedLayer",
)


def _subclasses(cls: type) -> list[type]:
    seen: list[type] = []
    stack: list[type] = [cls]
    while stack:
        subs: list[type] = stack.pop().__subclasses__()
        for sub in subs:
            if sub not in seen:
                seen.append(sub)
                stack.append(sub)
    return seen


#: output classes found by :func:`resolve_output_class`, by (name, architecture) (a runner resolves its class on every
#: call)
_FOUND_OUTPUT_CLASSES: dict[tuple[str, str | None], type] = {}


def _is_output_class(found: object) -> bool:
    from transformers.utils import ModelOutput

    return isinstance(found, type) and issubclass(found, ModelOutput) and found.__module__.startswith("transformers.")


def _architecture_module(architecture: str | None) -> Any:
    """The modeling module of a transformers model class named ``architecture``, or None (imports nothing else)."""
    if not architecture or not IDENTIFIER.match(architecture):
        return None
    import sys

    import transformers
    from transformers import PreTrainedModel

    model_cls = getattr(transformers, architecture, None)  # transformers' own lazy namespace, nothing else
    if not (isinstance(model_cls, type) and issubclass(model_cls, PreTrainedModel)):
        return None
    return sys.modules.get(model_cls.__module__)


def _find_output_class(name: str, architecture: str | None) -> type | None:
    from transformers import modeling_outputs
    from transformers.utils import ModelOutput

    shared = getattr(modeling_outputs, name, None)
    if _is_output_class(shared):
        return shared
    own = getattr(_architecture_module(architecture), name, None)
    if _is_output_class(own):
        return own
    return next((s for s in _subclasses(ModelOutput) if s.__name__ == name and _is_output_class(s)), None)


def resolve_output_class(name: str, architecture: str | None = None, where: str = "output_structure") -> type:
    """Resolve an output class name through the allow-list.

    Args:
        name: Bare class name recorded in the manifest (``CausalLMOutputWithPast``).
        architecture: The model class name (``LlamaForCausalLM``) whose modeling module is searched first: models
            define output classes of one name (Qwen3-VL's and Cohere Compass's ``BaseModelOutputWithDeepstackFeatures``).
        where: JSON path used in the error message.

    Raises:
        ManifestError: The name is not an identifier or not a transformers output class.
    """
    if not isinstance(name, str) or not IDENTIFIER.match(name):
        raise ManifestError(f"{where}: {name!r} is not a class name; only transformers output classes are allowed.")
    key = (name, architecture)
    found = _FOUND_OUTPUT_CLASSES.get(key)
    if found is None:
        found = _find_output_class(name, architecture)
    if found is None:
        raise ManifestError(
            f"{where}: {name!r} is not an allowed output class (transformers ModelOutput subclasses only)."
        )
    _FOUND_OUTPUT_CLASSES[key] = found  # a miss is not kept: importing the model's module may define the class later
    return found


def cache_class(name: str, where: str = "output_structure") -> type:
    """Resolve a cache class name among :data:`CACHE_CLASSES`.

    Raises:
        ManifestError: The name is not an allowed cache class.
    """
    if name not in CACHE_CLASSES:
        raise ManifestError(
            f"{where}: cache class {name!r} is not allowed; expected one of {', '.join(CACHE_CLASSES)}."
        )
    import transformers

    return getattr(transformers, name)


def is_model_output(value: Any) -> bool:
    """True for a transformers ModelOutput instance."""
    from transformers.utils import ModelOutput

    return isinstance(value, ModelOutput)


def layer_class(name: str, where: str = "output_structure") -> type:
    """Resolve a cache layer class name among :data:`LAYER_CLASSES` (a sliding-window layer is rebuilt as a plain
    ``DynamicLayer``: the export holds the whole window it was given).

    Raises:
        ManifestError: The name is not an allowed cache layer class.
    """
    if name not in LAYER_CLASSES:
        raise ManifestError(
            f"{where}: cache layer class {name!r} is not allowed; expected one of {', '.join(LAYER_CLASSES)}."
        )
    from transformers import cache_utils

    return getattr(cache_utils, "DynamicLayer" if name == "DynamicSlidingWindowLayer" else name)
