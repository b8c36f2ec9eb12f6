"""The graph steps of generation over an export made by ``export_for_generation``, on any backend.

transformers' ``GenerationMixin`` is the loop (see :mod:`hub_export.generation.mixin`); these helpers run one
step on the exported graphs: the prompt through the prefill graph (in steps for a state-space prefill of fixed
length, through the multimodal chain for vision/audio-language models), the empty and static caches the graphs
take, and the cache tricks of a ``multi_token_decode`` graph. They only talk to ``exported.runners[...]`` (every
runner takes the model's kwargs and returns its ``ModelOutput`` with the cache rebuilt), following the
plain-data plan in ``exported.generation``.
"""

from __future__ import annotations

from typing import Any

from ..errors import HubExportError, InputError
from ._glue import TOKEN_TYPE_INPUTS, positions_from_mask
from ._rope_index import prompt_positions

__all__ = ["arange_positions", "encoder_outputs", "merge_features", "positions_from_mask"]


def _traced_inputs(runner: Any) -> set[str]:
    return {name for name, _ in runner.metadata.signature.input_structure}


def _select(runner: Any, candidates: dict[str, Any]) -> dict[str, Any]:
    names = _traced_inputs(runner)
    missing = sorted(names - set(candidates) - set(getattr(runner, "state_inputs", ())))  # state: kept by the runner
    if missing:
        raise InputError(f"generate() has no value for the traced input(s) {missing}; pass them as keyword arguments.")
    return {name: candidates[name] for name in names if name in candidates}


def _fixed_length(runner: Any, name: str) -> int | None:
    """The length (axis 1) that ``runner``'s input ``name`` was traced fixed at; None where it is symbolic."""
    spec = next((s for s in runner.metadata.signature.inputs if s.name == name), None)
    return spec.shape[1] if spec is not None and len(spec.shape) >= 2 and isinstance(spec.shape[1], int) else None


def _min_length(runner: Any, name: str) -> int:
    spec = next((s for s in runner.metadata.signature.inputs if s.name == name), None)
    if spec is None or len(spec.shape) < 2 or isinstance(spec.shape[1], int):
        return 0
    return runner.signature.dims[spec.shape[1]].min if spec.shape[1] in runner.signature.dims else 0


def _empty_cache(runner: Any, name: str, batch: int) -> Any:
    """The cache input of ``runner`` holding no tokens: every symbolic axis but the batch is 0."""
    import torch

    from ..signature import torch_dtype
    from ..structure import unflatten

    flat = [
        torch.zeros(
            [batch if d == "batch" else (d if isinstance(d, int) else 0) for d in runner.signature.concrete_shape(s)],
            dtype=torch_dtype(s.dtype),
        )
        for s in runner.metadata.signature.inputs
    ]
    node = dict(runner.metadata.signature.input_structure)[name]
    if node.get("class") == "StaticCache":  # preallocated buffers: every layer holds max_cache_len positions
        for layer in node["layers"]:
            for part in ("key", "value"):
                index = layer[part]["index"]
                shape = list(flat[index].shape)
                flat[index] = torch.zeros([*shape[:2], int(node["max_cache_len"]), shape[3]], dtype=flat[index].dtype)
    return unflatten(node, flat)


def _static_capacity(runner: Any, name: str) -> int | None:
    node = dict(runner.metadata.signature.input_structure).get(name) or {}
    return int(node["max_cache_len"]) if node.get("class") == "StaticCache" else None


def _prompt_in_steps(
    runners: Any,
    plan: dict[str, Any],
    step_inputs: dict[str, Any],
    constant: dict[str, Any],
    prompt: Any,
    mask: Any,
    start: int,
) -> Any:
    """The prefill on the first ``start`` prompt tokens, then the decode graph on each other prompt token (a
    stateful decode is seeded by its first call, which gets the cache); returns the last step's outputs."""
    import torch

    prefill, decode = runners[plan["stages"]["prefill"]], runners[plan["stages"]["decode"]]
    outputs = prefill(**_select(prefill, step_inputs))
    for i in range(start, prompt.shape[1]):
        step = {**constant, plan["token_input"]: prompt[:, i : i + 1]}
        if outputs.get(plan["cache"]) is not None:
            step[plan["cache"]] = outputs[plan["cache"]]
        if mask is not None:
            step["attention_mask"] = mask[:, : i + 1]
        if plan.get("position_ids"):
            positions = (
                positions_from_mask(mask)
                if mask is not None
                else torch.arange(prompt.shape[1]).expand(prompt.shape[0], -1)
            )
            step["position_ids"] = positions[:, i : i + 1]
        outputs = decode(**_select(decode, step))
    return outputs


def merge_features(embeds: Any, ids: Any, features: Any, token_id: int, modality: str) -> Any:
    """``embeds`` with the rows of ``features`` written over the ``token_id`` placeholders, in order.

    Raises:
        InputError: The prompt holds a different number of placeholders than the features have rows.
    """
    placeholders = ids == token_id
    rows = features.reshape(-1, embeds.shape[-1])
    if int(placeholders.sum()) != rows.shape[0]:
        raise InputError(
            f"The prompt holds {int(placeholders.sum())} {modality} placeholder tokens (id {token_id}) but the "
            f"{modality} inputs give {rows.shape[0]} feature vectors; build the prompt with the model's processor "
            f"(one placeholder per feature vector)."
        )
    return embeds.masked_scatter(placeholders[..., None].expand_as(embeds), rows.to(embeds.dtype))


def arange_positions(ids: Any) -> Any:
    """``0 .. n-1`` on every row of ``ids`` (positions a model builds without looking at the mask)."""
    import torch

    return torch.arange(ids.shape[1], device=ids.device).expand(ids.shape[0], -1)


def encoder_outputs(runners: Any, entries: list[dict[str, Any]], user: dict[str, Any]) -> dict[str, Any]:
    """``mm_encoder_outputs`` for a prompt step that takes them: each modality's feature graph (the plan's
    ``encoder_outputs`` entries) on the inputs the caller gave for it.

    Raises:
        InputError: A feature graph's inputs were not all given (the prompt step's graph takes every modality it
            was exported with).
    """
    outputs = {}
    for entry in entries:
        given = {name: user[name] for name in entry["inputs"] if user.get(name) is not None}
        if len(given) != len(entry["inputs"]):
            raise InputError(
                f"This export's prompt step takes {entry['modality']} features: generate() needs {entry['inputs']} "
                f"(got {sorted(given) or 'none of them'})."
            )
        outputs[entry["modality"]] = runners[entry["component"]](**given)
    return outputs


def _multimodal_prompt(
    exported: Any, plan: dict[str, Any], user: dict[str, Any], ids: Any, mask: Any, positions: Any
) -> dict[str, Any]:
    """The prompt step of a multimodal export: encoders, projectors, embeddings with the features merged,
    the language model and ``lm_head``; returns ``{logits, <cache>}`` like a prefill graph would."""
    runners = exported.runners
    embeds = runners[plan["stages"]["embed_tokens"]](input_ids=ids)["inputs_embeds"]
    for entry in plan["modalities"]:
        given = {name: user[name] for name in entry["inputs"] if name in user}
        if not given:
            continue
        if len(given) != len(entry["inputs"]):
            raise InputError(
                f"generate() got {sorted(given)} but the {entry['modality']} encoder needs {entry['inputs']}."
            )
        features = runners[entry["encoder"]](**given)[entry["features"]]
        if entry["projector"]:
            features = runners[entry["projector"]](**{entry["projector_input"]: features})[entry["embeds"]]
        embeds = merge_features(embeds, ids, features, entry["token_id"], entry["modality"])
    language = runners[plan["stages"]["language_model"]]
    if plan.get("prompt_positions") == "arange" and positions is not None:
        positions = arange_positions(ids)  # the model's own: the same on every row, padding or not
    rope = plan.get("rope_index")
    if rope is not None:  # multimodal rotary positions, by transformers' own method (see _rope_index)
        positions, exported.rope_deltas = prompt_positions(rope, exported.config, {**user, "attention_mask": mask})
    step = {plan["embeds_input"]: embeds, **{k: user[k] for k in TOKEN_TYPE_INPUTS if k in user}}
    if mask is not None:
        step["attention_mask"] = mask
    if positions is not None:
        step["position_ids"] = positions
    hidden = language(**_select(language, step))
    logits = runners[plan["stages"]["lm_head"]](hidden_states=hidden[plan["hidden"]][:, -1:])["logits"]
    return {plan["logits"]: logits, plan["cache"]: hidden[plan["cache"]]}


def _decode_window(plan: dict[str, Any], decode: Any, stateful: bool) -> int:
    """How many tokens each decode step feeds: 1, or 2 for a ``multi_token_decode`` graph whose query axis
    starts at 2 (torch.export bounds a symbolic query length below by 2): such a step re-feeds the previous
    token against the cache shortened by one, which recomputes exactly the entry it dropped."""
    if not plan.get("multi_token_decode") or _min_length(decode, plan["token_input"]) < 2:
        return 1
    if stateful:
        raise HubExportError(
            "generate() runs a multi_token_decode graph by re-feeding the previous token with the cache shortened by "
            "one, which a stateful (OpenVINO) decode cannot do: its cache is internal state. Export with "
            "OpenVINOConfig(stateful=False) or multi_token_decode=False for generate()."
        )
    return 2


def _shortened(cache: Any) -> Any:
    """``cache`` without its last position: a DynamicCache/EncoderDecoderCache from a runner (a fresh object) is
    cropped; a StaticCache's write position moves back one (the re-fed token overwrites the same entry)."""
    if type(cache).__name__ == "StaticCache":
        for layer in cache.layers:
            layer.cumulative_length.sub_(1)
        return cache
    cache.crop(-1)  # transformers >= 5: a negative count drops that many positions
    return cache
