"""Split a vision/audio-language model into graphs that ``generate()`` can chain without the model's Python code.

A multimodal ``generate`` runs, per modality, the encoder's feature function (``get_image_features``: the vision
tower, a feature selection, the projector), embeds the prompt, writes the features over the placeholder tokens
(``image_token_id``), runs the language model on those embeddings, then ``lm_head``. The components are found
through ``get_encoder(modality=...)``, ``get_decoder()``, the projector attribute (``multi_modal_projector``,
``connector``, ``embed_vision``, ``embed_audio``), ``get_input_embeddings()`` and ``get_output_embeddings()``,
and their sample inputs are the kwargs each received during one real ``generate`` run:

* ``image_encoder`` / ``audio_encoder``: the model's own ``get_<modality>_features`` up to the projector's input,
  so the model's feature selection (e.g. LLaVA's hidden layer -2 without the CLS token) is inside the graph
  and no per-model glue is needed at run time; without a projector, its whole output (the merged features);
* the projector (``multi_modal_projector``, ...) on that input;
* ``embed_tokens`` (token ids -> embeddings), ``language_model`` (embeddings, mask, positions -> hidden
  states and the KV cache), ``lm_head`` (last hidden state -> logits);
* ``decode``: the whole model for one token against the cache, as for text-only models.

The glue between them (features written over the placeholder tokens in order, positions from the mask) is
plain data in the generation plan, and it is checked against the captured run when exporting: an
architecture whose glue is different (e.g. Qwen2-VL's 3D rotary positions) still exports every component, but
its plan says why ``generate()`` cannot chain them.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from ..errors import ExportError
from ._glue import TOKEN_TYPE_INPUTS, positions_per_row
from ._rope_index import rope_entry
from ._wrap import with_forward

__all__ = [
    "MultimodalParts",
    "encoder_output_components",
    "encoder_output_watches",
    "find_parts",
    "multimodal_components",
]

_PROJECTORS = {
    "image": ("multi_modal_projector", "connector", "embed_vision"),
    "audio": ("embed_audio", "multi_modal_projector", "connector"),
}
_TOKEN_IDS = {"image": ("image_token_id", "image_token_index"), "audio": ("audio_token_id", "audio_token_index")}


class MultimodalParts:
    """The submodules of a multimodal generative model (see the module docstring)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.base = getattr(model, "base_model", model)
        self.encoders: dict[str, Any] = {}
        self.projectors: dict[str, tuple[str, Any]] = {}
        for modality in ("image", "audio"):
            try:
                encoder = model.get_encoder(modality=modality)
            except (ValueError, AttributeError):
                continue
            if encoder is None or encoder is model or encoder is self.base:
                continue
            if getattr(self.base, f"get_{modality}_features", None) is None:
                continue
            self.encoders[modality] = encoder
            for name in _PROJECTORS[modality]:
                module = getattr(self.base, name, None) or getattr(model, name, None)
                if module is not None and all(module is not p for _, p in self.projectors.values()):
                    self.projectors[modality] = (name, module)
                    break
        self.decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
        self.embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
        self.lm_head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None

    @property
    def complete(self) -> bool:
        """An encoder, a language model distinct from the model, embeddings and an output head."""
        decoder_ok = self.decoder is not None and self.decoder is not self.model and self.decoder is not self.base
        return bool(self.encoders) and decoder_ok and self.embeddings is not None and self.lm_head is not None

    def token_id(self, modality: str) -> int | None:
        config = getattr(self.model, "config", None)
        for name in _TOKEN_IDS[modality]:
            value = getattr(config, name, None)
            if isinstance(value, int):
                return value
        return None


def find_parts(model: Any) -> MultimodalParts | None:
    """The multimodal parts of ``model``, or None for a text-only (or unrecognised) model."""
    if not hasattr(model, "get_encoder"):
        return None
    parts = MultimodalParts(model)
    return parts if parts.complete else None


def _bind(signature: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    bound = dict(kwargs)
    if args:
        if signature is None:
            raise ExportError("a multimodal submodule was called with positional arguments that cannot be named.")
        names = [n for n, p in signature.parameters.items() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        bound.update(dict(zip(names, args)))
    return {name: copy.deepcopy(value) for name, value in bound.items() if value is not None}


@contextmanager
def recording(owner: Any, attribute: str, record: list[dict[str, Any]]) -> Iterator[None]:
    """Wrap the bound method ``owner.<attribute>`` (an instance attribute, removed on exit) to record each call's
    kwargs, positional arguments bound by name."""
    had_own = attribute in vars(owner)
    previous = vars(owner).get(attribute)
    original = getattr(owner, attribute)
    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        signature = None

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        record.append(_bind(signature, args, kwargs))
        return original(*args, **kwargs)

    setattr(owner, attribute, wrapper)
    try:
        yield
    finally:
        if had_own:
            setattr(owner, attribute, previous)
        else:
            delattr(owner, attribute)


def feature_watches(parts: MultimodalParts) -> dict[str, tuple[Any, str]]:
    """What to record during the ``generate`` run: each modality's feature function and projector."""
    watches: dict[str, tuple[Any, str]] = {}
    for modality in parts.encoders:
        watches[f"{modality}_features"] = (parts.base, f"get_{modality}_features")
        if modality in parts.projectors:
            watches[f"{modality}_projector"] = (parts.projectors[modality][1], "forward")
    return watches


#: the modalities ``generate`` encodes before the prompt step (transformers' ``mm_encoder_outputs``)
_PRE_ENCODED = ("image", "video")


def encoder_output_watches(model: Any) -> dict[str, tuple[Any, str]]:
    """What to record during the ``generate`` run of a model that ``find_parts`` cannot split: the feature function
    ``generate`` itself calls before the prompt step (``base_model.get_<modality>_features``), whose output the
    prompt step then takes as ``mm_encoder_outputs``."""
    base = getattr(model, "base_model", model)
    return {
        f"{modality}_features": (base, f"get_{modality}_features")
        for modality in _PRE_ENCODED
        if callable(getattr(base, f"get_{modality}_features", None))
    }


def encoder_output_components(
    model: Any, watched: dict[str, list[dict[str, Any]]], prefill: dict[str, Any]
) -> tuple[dict[str, tuple[Any, dict[str, Any]]], list[dict[str, Any]]]:
    """The feature components of a prompt step that took ``mm_encoder_outputs`` (transformers' ``generate``
    encodes the images first, with ``get_<modality>_features``, and hands the prompt step their output), and the
    plan entries that feed them: ``{"modality", "component", "inputs"}``. The prompt step's graph then merges the
    features, positions and all, with the model's own code.

    Raises:
        ExportError: The prompt step took encoder outputs of a modality whose feature call was not recorded.
    """
    import torch

    given = prefill.get("mm_encoder_outputs")
    if not isinstance(given, dict) or not given:
        return {}, []
    base = getattr(model, "base_model", model)
    components: dict[str, tuple[Any, dict[str, Any]]] = {}
    entries = []
    for modality in list(given):
        calls = watched.get(f"{modality}_features") or []
        if not calls:
            raise ExportError(
                f"{type(model).__name__}'s prompt step took {modality} encoder outputs that generate() did not make "
                f"with get_{modality}_features; cannot export the step that makes them."
            )
        kept, joined = _fields_read(model, prefill, modality)
        given[modality] = _chosen(given[modality], kept, joined)
        name = f"{modality}_encoder_outputs"
        components[name] = (_feature_function(base, modality, kept, joined), calls[0])
        inputs = sorted(k for k, v in calls[0].items() if isinstance(v, torch.Tensor))
        entries.append({"modality": modality, "component": name, "inputs": inputs})
    return components, entries


def _chosen(output: Any, fields: list[str], joined: list[str]) -> Any:
    """``output`` (a feature function's ``ModelOutput``) with ``fields`` only, each of ``joined`` (a tuple of
    tensors, one per image) as one tensor of all their rows in a one-element tuple."""
    values = {field: output[field] for field in fields}
    for field in joined:
        values[field] = _joined(values[field])
    return type(output)(**values)


def _joined(value: Any) -> Any:
    """A tuple of per-image tensors as a one-element tuple of their rows; nested tuples (one per layer: deepstack
    features) joined inside."""
    import torch

    if all(isinstance(item, torch.Tensor) for item in value):
        return (torch.cat(list(value), dim=0),)
    return type(value)(_joined(item) for item in value)


def _joinable(value: Any) -> bool:
    """Whether ``value`` is a tuple (or tuples of tuples) of tensors, one of them holding several of one layout."""
    import torch

    if not isinstance(value, (list, tuple)) or not value:
        return False
    if all(isinstance(item, torch.Tensor) for item in value):
        return len(value) > 1 and all(t.dim() >= 1 for t in value) and len({t.shape[1:] for t in value}) == 1
    return all(isinstance(item, (list, tuple)) for item in value) and any(_joinable(item) for item in value)


def _fields_read(model: Any, prefill: dict[str, Any], modality: str) -> tuple[list[str], list[str]]:
    """What the prompt step reads of its ``mm_encoder_outputs[modality]``: the fields its logits depend on (each
    other field is left out in turn, and kept when the eager prompt step then fails or gives other logits: the
    feature function also returns the vision tower's hidden states, which the prompt step does not read and whose
    ``None`` entries no graph returns), and of those the tuples of per-image tensors it takes joined as well (it
    concatenates them itself: one tensor, however many images the prompt has)."""
    import torch

    outputs = prefill["mm_encoder_outputs"][modality]

    def same_logits(fields: list[str], joined: list[str]) -> bool:
        chosen = _chosen(outputs, fields, joined)
        kwargs = {**prefill, "mm_encoder_outputs": {**prefill["mm_encoder_outputs"], modality: chosen}}
        try:
            with torch.no_grad():
                return bool(torch.equal(model(**copy.deepcopy(kwargs)).logits, reference))
        except Exception:  # noqa: BLE001 - the prompt step needs what was left out
            return False

    kept = [field for field, value in outputs.items() if value is not None]
    with torch.no_grad():
        reference = model(**copy.deepcopy(prefill)).logits
    for field in list(kept):
        trial = [other for other in kept if other != field]
        if same_logits(trial, []):
            kept = trial
    joined = [field for field in kept if _joinable(outputs[field]) and same_logits(kept, [field])]
    return kept, joined


def _feature_function(base: Any, modality: str, fields: list[str], joined: list[str]) -> Any:
    """``base.get_<modality>_features`` as a module's forward, returning its output as :func:`_chosen` gives it."""

    def forward(inner: Any, **kwargs: Any) -> Any:
        return _chosen(getattr(inner, f"get_{modality}_features")(**kwargs), fields, joined)

    return with_forward(base, forward)


class _Reached(Exception):
    """Raised by the projector inside :func:`_until_projector` to hand back its input."""

    def __init__(self, value: Any) -> None:
        super().__init__("projector reached")
        self.value = value


def _as_tensor(value: Any) -> Any:
    import torch

    if hasattr(value, "pooler_output"):
        value = value.pooler_output
    if isinstance(value, (list, tuple)):
        value = torch.cat([v.reshape(-1, v.shape[-1]) for v in value], dim=0)
    return value


def _encoder_component(parts: MultimodalParts, modality: str) -> Any:
    """``get_<modality>_features`` up to the projector's input (or entirely, without a projector)."""
    features = getattr(parts.base, f"get_{modality}_features")
    projector = parts.projectors.get(modality, (None, None))[1]
    output = f"{modality}_features"

    def forward(encoder: Any, **kwargs: Any) -> Any:
        if projector is None:
            return {output: _as_tensor(features(**kwargs))}

        def stop(*args: Any, **inner: Any) -> Any:
            raise _Reached(args[0] if args else next(iter(inner.values())))

        previous = vars(projector).get("forward")
        projector.forward = stop  # an instance attribute, restored below
        try:
            features(**kwargs)
        except _Reached as reached:
            return {output: reached.value}
        finally:
            if previous is None:
                del projector.forward
            else:
                projector.forward = previous
        raise ExportError(f"get_{modality}_features did not call its projector; cannot split the encoder from it.")

    return with_forward(parts.encoders[modality], forward)


def _single_input(module: Any, input_name: str, output_name: str) -> Any:
    """``module(x)`` as ``forward(<input_name>=x) -> {<output_name>: ...}`` (readable graph I/O names)."""

    def forward(inner: Any, **kwargs: Any) -> Any:
        return {output_name: inner(kwargs[input_name])}

    return with_forward(module, forward)


def _base_as_language(parts: MultimodalParts, language: dict[str, Any], prefill: dict[str, Any]) -> dict[str, Any]:
    """The kwargs of the base model as the language component, when its language model received a mask per layer
    type (a dict the base model builds from the 2D mask and the token types: Gemma 3 attends both ways within an
    image). The base model on the merged embeddings, the 2D mask and the token types (no pixels: no encoder runs)
    builds those masks inside the graph, so ``generate()`` feeds it what it feeds a language model, and the token
    types the user passed."""
    import torch

    accepted = inspect.signature(parts.base.forward).parameters
    kwargs = {"inputs_embeds": language["inputs_embeds"], "attention_mask": prefill.get("attention_mask")}
    for name in (*TOKEN_TYPE_INPUTS, "position_ids", "use_cache"):
        value = prefill.get(name) if name in TOKEN_TYPE_INPUTS else language.get(name)
        if name in accepted and (isinstance(value, (torch.Tensor, bool))):
            kwargs[name] = value
    return {k: v for k, v in kwargs.items() if v is not None}


def _first_tensor(call: dict[str, Any]) -> tuple[str, Any]:
    """The name and value of the first tensor a recorded call received."""
    import torch

    return next((k, v) for k, v in call.items() if isinstance(v, torch.Tensor))


def multimodal_components(
    parts: MultimodalParts,
    watched: dict[str, list[dict[str, Any]]],
    prefill: dict[str, Any],
    input_name: str,
    inputs: dict[str, Any] | None = None,
) -> tuple[dict[str, tuple[Any, dict[str, Any]]], dict[str, Any]]:
    """The components of the prompt step and the plan entries that chain them.

    ``watched`` holds the recorded feature-function and projector calls; ``prefill`` the model's first forward
    kwargs (masks restored); ``inputs`` what ``generate`` was given (image grids for rotary positions). The prompt
    step is replayed with the embeddings, language model and head recorded.

    Returns:
        ``({name: (module, kwargs)}, plan)``; ``plan["runnable"]`` is True, or a sentence saying why the captured
        run does not follow the chain ``generate()`` implements.
    """
    import torch

    calls: dict[str, list[dict[str, Any]]] = {"embeddings": [], "language_model": [], "lm_head": []}
    with ExitStack() as stack, torch.no_grad():
        stack.enter_context(recording(parts.embeddings, "forward", calls["embeddings"]))
        stack.enter_context(recording(parts.decoder, "forward", calls["language_model"]))
        stack.enter_context(recording(parts.lm_head, "forward", calls["lm_head"]))
        replay = parts.model(**copy.deepcopy(prefill))
    missing = [name for name, recorded in calls.items() if not recorded]
    if missing:
        raise ExportError(
            f"{type(parts.model).__name__}'s prompt step did not call its {missing}; cannot split it for generation."
        )
    components: dict[str, tuple[Any, dict[str, Any]]] = {}
    modalities = []
    for modality in parts.encoders:
        feature_calls = watched.get(f"{modality}_features") or []
        if not feature_calls:
            continue  # the prompt has no input of this modality
        name = f"{modality}_encoder"
        kwargs = {k: v for k, v in feature_calls[0].items() if k != "return_dict"}
        components[name] = (_encoder_component(parts, modality), kwargs)
        entry: dict[str, Any] = {
            "modality": modality,
            "encoder": name,
            "inputs": sorted(k for k, v in kwargs.items() if isinstance(v, torch.Tensor)),
            "features": f"{modality}_features",
            "projector": None,
            "token_id": parts.token_id(modality),
        }
        if modality in parts.projectors:
            projector_name, projector = parts.projectors[modality]
            projector_input, value = _first_tensor(watched[f"{modality}_projector"][0])
            components[projector_name] = (
                _single_input(projector, projector_input, f"{modality}_embeds"),
                {projector_input: value},
            )
            entry.update(projector=projector_name, projector_input=projector_input, embeds=f"{modality}_embeds")
        modalities.append(entry)
    if not modalities:
        raise ExportError(
            f"{type(parts.model).__name__}.generate computed no image/audio features: pass the prompt's pixel_values "
            "(or audio features) in inputs so the encoders can be captured."
        )
    components["embed_tokens"] = (
        _single_input(parts.embeddings, "input_ids", "inputs_embeds"),
        {"input_ids": _first_tensor(calls["embeddings"][0])[1]},
    )
    language = calls["language_model"][0]  # the caller drops its empty cache, as for a text-only prefill
    broadcast = positions_per_row(language)  # the model's own positions, the same on every row
    components["language_model"] = (parts.decoder, language)
    if isinstance(language.get("attention_mask"), dict):  # masks per layer type, built by the base model
        base = _base_as_language(parts, language, prefill)
        try:
            _eager((parts.base, base))
        except Exception:  # noqa: BLE001 - a base model that needs more (Gemma 4's per-layer inputs from the ids)
            pass  # the language model stays; the chain check says why generate() cannot feed it
        else:
            language = base
            components["language_model"] = (parts.base, language)
    components["lm_head"] = (
        _single_input(parts.lm_head, "hidden_states", "logits"),
        {"hidden_states": _first_tensor(calls["lm_head"][0])[1]},
    )
    plan: dict[str, Any] = {"modalities": modalities, "embeds_input": "inputs_embeds", "hidden": "last_hidden_state"}
    if broadcast:
        plan["prompt_positions"] = "arange"
    given = {**(inputs or {}), **{k: v for k, v in prefill.items() if isinstance(v, torch.Tensor)}}
    rope = rope_entry(parts.base, given, language.get("position_ids"))
    if rope is not None:
        plan["rope_index"] = rope
    try:
        plan["runnable"] = _check_chain(
            modalities,
            components,
            prefill,
            language,
            replay,
            input_name,
            rope is not None,
            plan.get("prompt_positions"),
        )
    except Exception as exc:  # noqa: BLE001 - a part that takes more than the chain gives it (Mistral 3's projector)
        plan["runnable"] = f"the chain's components do not run on what it feeds them ({type(exc).__name__}: {exc})"
    return components, plan


def _eager(component: tuple[Any, dict[str, Any]]) -> Any:
    import torch

    module, kwargs = component
    with torch.no_grad():
        return module(**copy.deepcopy(kwargs))


def _check_chain(
    modalities: list[dict[str, Any]],
    components: dict[str, Any],
    prefill: dict[str, Any],
    language: dict[str, Any],
    replay: Any,
    input_name: str,
    rope: bool = False,
    prompt_positions: str | None = None,
) -> bool | str:
    """Replay the chain ``generate()`` runs on the captured prompt with the eager components; True when it gives
    exactly the captured language-model inputs and logits, else the reason it does not."""
    import torch

    from ._glue import positions_from_mask
    from .loop import arange_positions, merge_features

    ids = prefill.get(input_name)
    if not isinstance(ids, torch.Tensor):
        return f"the prompt step got no {input_name}"
    chained = {"inputs_embeds", "attention_mask", "position_ids", "past_key_values", *TOKEN_TYPE_INPUTS}
    unfed = sorted(k for k, v in language.items() if isinstance(v, torch.Tensor) and k not in chained)
    if unfed:  # e.g. Qwen3-VL's deepstack features, added to the hidden states of the first layers
        return f"the language model takes {unfed} besides the embeddings, which the chain does not make"
    embeds = _eager(components["embed_tokens"])["inputs_embeds"]
    for entry in modalities:
        if entry["token_id"] is None:
            return f"the model config names no {entry['modality']} placeholder token id"
        features = _eager(components[entry["encoder"]])[entry["features"]]
        if entry["projector"]:
            features = _eager((components[entry["projector"]][0], {entry["projector_input"]: features}))[
                entry["embeds"]
            ]
        try:
            embeds = merge_features(embeds, ids, features, entry["token_id"], entry["modality"])
        except Exception as exc:
            return f"the {entry['modality']} features do not fill the placeholder tokens one per position ({exc})"
    if not torch.equal(embeds, language.get("inputs_embeds", torch.empty(0))):
        return "the language model's input embeddings are not the token embeddings with the features written over the placeholders"
    if isinstance(language.get("attention_mask"), dict):
        return "the language model takes masks per layer type, which its base model builds from more than the mask"
    positions = language.get("position_ids")
    mask = prefill.get("attention_mask")
    # rotary positions the plan computes were already checked against these (rope_entry)
    if prompt_positions == "arange":
        fed = arange_positions(ids)
    else:
        fed = positions_from_mask(mask) if mask is not None else None
    if not rope and positions is not None and (fed is None or not torch.equal(positions, fed)):
        return "the language model takes positions other than cumsum(attention_mask) - 1 (e.g. 3D multimodal rotary positions)"
    hidden = _eager(components["language_model"]).last_hidden_state
    head_input = components["lm_head"][1]["hidden_states"]
    if not torch.equal(hidden[:, -head_input.shape[1] :], head_input):
        return "the language model's last hidden state is not what lm_head received"
    logits = _eager(components["lm_head"])["logits"]
    expected = getattr(replay, "logits", None)
    if expected is None or not torch.equal(logits, expected[:, -logits.shape[1] :]):
        return "lm_head on the language model's last hidden state does not give the model's logits"
    return True
