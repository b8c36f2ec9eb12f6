"""The generation loop over an export made by ``export_for_generation``, on any backend.

It only talks to ``exported.runners[...]`` (every runner takes the model's kwargs and returns its
``ModelOutput`` with the cache rebuilt), following the plain-data plan in ``exported.generation``.

Example::

    exported = ExportedModel.from_pretrained("tiny-llama-onnx")
    ids = exported.generate(**tokenizer(["Hi", "Hello there"], padding=True, padding_side="left",
                                         return_tensors="pt"), max_new_tokens=8)
    # greedy by default; do_sample=True with temperature / top_k / top_p (and seed=) samples instead
"""

from __future__ import annotations

from typing import Any

from ..errors import HubExportError, InputError
from ._prompt import fit_prompt

__all__ = ["generate", "merge_features", "positions_from_mask"]


def _traced_inputs(runner: Any) -> set[str]:
    return {name for name, _ in runner.metadata.signature.input_structure}


def _select(runner: Any, candidates: dict[str, Any]) -> dict[str, Any]:
    names = _traced_inputs(runner)
    missing = sorted(names - set(candidates) - set(getattr(runner, "state_inputs", ())))  # state: kept by the runner
    if missing:
        raise InputError(f"generate() has no value for the traced input(s) {missing}; pass them as keyword arguments.")
    return {name: candidates[name] for name in names if name in candidates}


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


def positions_from_mask(mask: Any) -> Any:
    """Position ids from a (left-padded) mask, as transformers computes them: cumsum - 1, 1 where masked."""
    positions = mask.long().cumsum(-1) - 1
    return positions.masked_fill(mask == 0, 1)


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
    step = {plan["embeds_input"]: embeds}
    if mask is not None:
        step["attention_mask"] = mask
    if positions is not None:
        step["position_ids"] = positions
    hidden = language(**_select(language, step))
    logits = runners[plan["stages"]["lm_head"]](hidden_states=hidden[plan["hidden"]][:, -1:])["logits"]
    return {plan["logits"]: logits, plan["cache"]: hidden[plan["cache"]]}


def _token_ids(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


def _resolve(name: str, explicit: Any, config: Any) -> Any:
    return explicit if explicit is not None else getattr(config, name, None)


def _filter_logits(logits: Any, temperature: float, top_k: int | None, top_p: float | None) -> Any:
    import torch

    if temperature <= 0:
        raise InputError(f"temperature must be > 0, got {temperature}; use do_sample=False for greedy decoding.")
    logits = logits / temperature
    if top_k is not None and top_k > 0:
        k = min(top_k, logits.shape[-1])
        threshold = torch.topk(logits, k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < threshold, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        remove = cumulative - sorted_logits.softmax(-1) >= top_p  # keep the smallest set reaching top_p (>= 1 token)
        sorted_logits = sorted_logits.masked_fill(remove, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    return logits


def _next_tokens(
    logits: Any, sample: bool, temperature: float, top_k: int | None, top_p: float | None, generator: Any
) -> Any:
    import torch

    logits = logits.float()
    if not sample:
        return logits.argmax(-1)
    probs = _filter_logits(logits, temperature, top_k, top_p).softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


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


def generate(
    exported: Any,
    input_ids: Any = None,
    attention_mask: Any = None,
    *,
    max_new_tokens: int,
    generation_config: Any = None,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | list[int] | None = None,
    pad_token_id: int | None = None,
    streamer: Any = None,
    seed: int | None = None,
    generator: Any = None,
    **model_inputs: Any,
) -> Any:
    """Generate token ids with the components of ``exported`` (greedy unless ``do_sample``).

    Args:
        exported: An ``ExportedModel`` made by ``export_for_generation`` (or loaded from one).
        input_ids: The prompt ``[batch, sequence]``, left-padded for batches (encoder input for seq2seq).
        attention_mask: 1 for tokens, 0 for left padding (all ones if omitted).
        max_new_tokens: How many tokens to generate at most.
        generation_config: Overrides ``exported.generation_config`` for EOS/pad ids.
        do_sample, temperature, top_k, top_p: Sampling instead of greedy argmax.
        eos_token_id: Stop a row once it emits one of these (then it emits ``pad_token_id``).
        pad_token_id: The id finished rows emit (defaults to the config's, else the first EOS id).
        streamer: An object with ``put(ids)`` and ``end()`` (transformers' streamers).
        seed, generator: Seed or ``torch.Generator`` for sampling.
        **model_inputs: Other traced inputs (``input_features``, ``decoder_input_ids``, ``pixel_values``, ...).

    Returns:
        A ``[batch, length]`` int64 tensor like transformers' ``generate``: the prompt (decoder prompt for
        seq2seq, unless the model's own ``generate`` drops it) followed by the new tokens.
    """
    import torch

    plan = exported.generation
    if not plan or plan.get("version") != 1:
        raise HubExportError(f"This export's generation plan is missing or of an unknown version: {plan!r}.")
    if plan["kind"] == "multimodal" and plan.get("runnable") is not True:
        raise HubExportError(
            f"generate() cannot chain this export's components: {plan.get('runnable')}. Every component still runs "
            "through exported.runners[name]."
        )
    if max_new_tokens < 1:
        raise InputError(f"max_new_tokens must be >= 1, got {max_new_tokens}.")
    config = generation_config if generation_config is not None else exported.generation_config
    eos = _token_ids(_resolve("eos_token_id", eos_token_id, config))
    pad = _resolve("pad_token_id", pad_token_id, config)
    if pad is None:
        pad = eos[0] if eos else 0
    if generator is None and seed is not None:
        generator = torch.Generator().manual_seed(seed)
    runners = exported.runners
    stages = plan["stages"]
    stateful = {runners[name] for name in plan.get("stateful") or ()}
    for stateful_runner in stateful:
        stateful_runner.reset()  # a new sequence: the cache kept inside the runner starts empty
    token_input, cache_name, logits_name = plan["token_input"], plan["cache"], plan["logits"]
    user = dict(model_inputs)
    if input_ids is not None:
        user["input_ids"] = input_ids
    if attention_mask is not None:
        user["attention_mask"] = attention_mask

    constant: dict[str, Any] = {}
    if plan["kind"] == "encoder_decoder":
        encoder = runners[stages["encoder"]]
        encoder_out = encoder(**_select(encoder, user))
        constant[plan["encoder_output"]] = encoder_out
        if plan.get("attention_mask") == "fixed" and "attention_mask" in user:
            constant["attention_mask"] = user["attention_mask"]
        prompt = user.get("decoder_input_ids")
        if prompt is None:
            batch = int(next(iter(encoder_out.values())).shape[0])
            prompt = torch.full((batch, 1), int(plan["decoder_start_token_id"]), dtype=torch.int64)
        mask = None
    else:
        prompt = user.get(token_input)
        if prompt is None:
            raise InputError(f"generate() needs {token_input}= (the prompt token ids).")
        mask = user.get("attention_mask")
        if mask is None and plan.get("attention_mask") == "extend":
            mask = torch.ones_like(prompt)
        constant.update({k: v for k, v in user.items() if k not in (token_input, "attention_mask")})
    prompt = torch.as_tensor(prompt).long()
    batch = prompt.shape[0]
    finished = torch.zeros(batch, dtype=torch.bool)
    tokens = [prompt]
    if streamer is not None:
        streamer.put(prompt.cpu())

    start = prompt.shape[1]  # the prompt tokens the prefill takes; the decode graph takes the others one by one
    if plan["kind"] == "decoder_only":
        prompt, mask, start = fit_prompt(
            runners[stages["prefill"]], runners[stages["decode"]], token_input, prompt, mask, pad
        )
    step_inputs = {**constant, token_input: prompt[:, :start]}
    if mask is not None:
        step_inputs["attention_mask"] = mask[:, :start]
    if plan.get("position_ids"):
        positions = (
            positions_from_mask(mask) if mask is not None else torch.arange(prompt.shape[1])[None].expand(batch, -1)
        )
        step_inputs["position_ids"] = positions[:, :start]
    multimodal = plan["kind"] == "multimodal"
    runner = runners[stages["language_model" if multimodal else "prefill"]]
    capacity = _static_capacity(runner, cache_name)
    if capacity is not None:  # a static cache: the graphs fill preallocated buffers, starting from zeros
        if prompt.shape[1] + max_new_tokens - 1 > capacity:
            raise InputError(
                f"The prompt ({prompt.shape[1]} tokens) plus max_new_tokens={max_new_tokens} needs "
                f"{prompt.shape[1] + max_new_tokens - 1} cache positions, but this export's static cache holds "
                f"max_cache_len={capacity}; shorten them or re-export with a larger max_cache_len."
            )
        step_inputs[cache_name] = _empty_cache(runner, cache_name, batch)
    elif plan["kind"] == "decoder_only" and prompt.shape[1] < _min_length(runner, token_input):
        # torch.export bounds a traced prompt axis below by 2: a shorter prompt runs the decode graph on an empty cache
        runner = runners[stages["decode"]]
        step_inputs[cache_name] = _empty_cache(runner, cache_name, batch)
    window = _decode_window(plan, runners[stages["decode"]], bool(stateful))
    for step in range(max_new_tokens):
        if multimodal and step == 0:
            outputs = _multimodal_prompt(exported, plan, user, prompt, mask, step_inputs.get("position_ids"))
        elif step == 0 and start < prompt.shape[1]:
            outputs = _prompt_in_steps(runners, plan, step_inputs, constant, prompt, mask, start)
            runner = runners[stages["decode"]]
        else:
            outputs = runner(**_select(runner, step_inputs))
        logits = outputs[logits_name][:, -1, :]
        new = _next_tokens(logits, do_sample, temperature, top_k, top_p, generator).to(torch.int64).cpu()
        new = torch.where(finished, torch.full_like(new, pad), new)
        tokens.append(new[:, None])
        if streamer is not None:
            streamer.put(new.cpu())
        if eos:
            finished |= torch.isin(new, torch.tensor(eos))
            if bool(finished.all()):
                break
        if step + 1 == max_new_tokens:
            break
        fed = torch.as_tensor(step_inputs[token_input])[:, -1:]
        step_inputs = {**constant, token_input: new[:, None] if window == 1 else torch.cat([fed, new[:, None]], dim=-1)}
        following = runners[stages["decode"]]
        if following is not runner or following not in stateful:
            # a stateful decode is seeded once, then keeps its cache; a two-token window re-feeds the last token
            step_inputs[cache_name] = outputs[cache_name] if window == 1 else _shortened(outputs[cache_name])
        if mask is not None:
            mask = torch.cat([mask, torch.ones((batch, 1), dtype=mask.dtype)], dim=-1)
            step_inputs["attention_mask"] = mask
        if plan.get("position_ids"):
            total = prompt.shape[1] + step + 1
            step_inputs["position_ids"] = (
                positions_from_mask(mask)[:, -window:]
                if mask is not None
                else torch.arange(total - window, total)[None].expand(batch, -1)
            )
        runner = runners[stages["decode"]]
    if streamer is not None:
        streamer.end()
    sequences = torch.cat(tokens, dim=-1)
    if not plan.get("returns_prompt", True):
        sequences = sequences[:, tokens[0].shape[1] :]
    return sequences
