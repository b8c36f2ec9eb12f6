"""``export_for_generation``: export each captured generation stage and describe the loop that drives them.

The loop description (``ExportedModel.generation``, the manifest's ``generation`` field) is plain data, so a
runtime in any language can drive the components from ``export.json`` alone::

    {
      "version": 1,
      "kind": "decoder_only" | "encoder_decoder" | "multimodal",
      "stages": {"encoder": "encoder", "prefill": "prefill", "decode": "decode"},  # stage -> component
      "token_input": "input_ids",            # the kwarg fed the prompt, then each new token
      "cache": "past_key_values",            # kwarg and output field carrying the KV cache between steps
                                             # ("cache_params": a state-space model's conv and SSM states)
      "cache_implementation": "dynamic" | "static",  # static: generate() allocates the StaticCache buffers
                                             # (max_cache_len positions) and every graph updates them in place
      "logits": "logits",                    # output field with the next-token scores (last position)
      "encoder_output": "encoder_outputs",   # kwarg taking the encoder's output (encoder-decoder only)
      "attention_mask": "extend" | "fixed" | null,  # extended by one 1 per token, the encoder's mask, or none
      "position_ids": false,                 # true: pass cumsum(mask) - 1 (1 where masked) for the new tokens
      "decoder_start_token_id": null,        # the first decoder token (encoder-decoder)
      "returns_prompt": true,                # whether generate() returns the prompt before the new tokens
      "multi_token_decode": false,           # the decode graph takes any number of query tokens
      "stateful": [],                        # components keeping the cache as backend state (OpenVINO)
      "one_graph": true | "why not",         # decoder-only: the decode graph serves the prompt too (stages
                                             # prefill -> "decode"), or why the export has a prefill graph
      # multimodal only: the prompt step runs encoders -> projector -> features written over the placeholder
      # tokens of embed_tokens(input_ids) -> language_model -> lm_head(last hidden state); then decode as above
      "modalities": [{"modality": "image", "encoder": "image_encoder", "inputs": ["pixel_values"],
                      "features": "image_features", "projector": "multi_modal_projector",
                      "projector_input": "image_features", "embeds": "image_embeds", "token_id": 32000}],
      "embeds_input": "inputs_embeds", "hidden": "last_hidden_state",
      "rope_index": {"class": "Qwen2VLModel", "text_row": true},  # multimodal rotary positions, if any: the
                                             # transformers class whose get_rope_index gives them (run without
                                             # weights on the config); text_row: the text positions come first
      "runnable": true,                      # or why generate() cannot chain the components
    }
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from ..configs import ExportConfig
from ..errors import ConfigError, ExportError, HubExportError
from ..model import exported_model_class
from ..signature import split_kwargs
from ._one_graph import CACHE_DIM, QUERY_DIM, check_one_graph, one_graph_refusal, one_token_step, prompt_step_refusal
from ._wrap import with_forward
from .decompose import cache_kwarg, decompose_with_capture, full_length_cache

logger = logging.getLogger(__name__)

__all__ = ["GENERATION_PLAN_VERSION", "export_for_generation"]

GENERATION_PLAN_VERSION = 1


def _component_config(config: Any, name: str) -> ExportConfig | None:
    if not isinstance(config, dict):
        return config
    if name in config:
        return config[name]
    if "default" in config:
        return config["default"]
    raise ConfigError(
        f"config is a dict per component but has no entry for {name!r} (nor 'default'); keys: {sorted(config)}."
    )


def _main_config(exporter: Any, config: Any) -> ExportConfig:
    if isinstance(config, dict):
        unknown = [v for v in config.values() if not isinstance(v, ExportConfig)]
        if unknown:
            raise ConfigError(f"config dict values must be export configs, got {[type(v).__name__ for v in unknown]}.")
        return exporter._check_config(config.get("decode", config.get("default", next(iter(config.values()), None))))
    return exporter._check_config(config)


#: kwargs whose tensors all share the batch axis (axis 0) in a generation step
_BATCHED = (
    "input_ids",
    "attention_mask",
    "position_ids",
    "token_type_ids",
    "decoder_input_ids",
    "inputs_embeds",
    "decoder_attention_mask",
    "decoder_position_ids",
    "past_key_values",
    "encoder_outputs",
    "input_features",
    "cache_params",
)


def _cache_lengths(leaves: list[tuple[str, Any]]) -> list[Any]:
    """The length axis (2) of each self-attention key and value of a flattened ``past_key_values`` (a cross-attention
    cache, ``...encoder.key``, holds the encoder's length)."""
    return [
        t.shape[2]
        for name, t in leaves
        if name.endswith((".key", ".value")) and ".encoder." not in name and t.dim() == 4
    ]


def _lengths_tied(sample: dict[str, Any]) -> bool:
    """Whether the sample's cache grows (a ``DynamicCache``, or the self-attention half of an
    ``EncoderDecoderCache``) and its self-attention keys and values all have one length (the tie :func:`_batch_tied`
    gives ``torch.export``). A ``StaticCache``'s buffers have the length it was made with, which the trace fixes."""
    from ..structure import flatten_value

    cache = sample.get("past_key_values")
    if cache is None:
        return False
    leaves: list[tuple[str, Any]] = []
    node = flatten_value(cache, ("past_key_values",), leaves)
    if node.get("type") != "cache" or node.get("class") not in ("DynamicCache", "EncoderDecoderCache"):
        return False
    return len({int(n) for n in _cache_lengths(leaves)}) == 1


def _batch_axes(kwargs: dict[str, Any]) -> dict[str, int]:
    """The batch axis of each flattened tensor of ``kwargs``' batched inputs (:data:`_BATCHED`), by name: axis 0, or
    axis 1 of a 3-D ``...position_ids`` (multimodal rotary positions are (sections, batch, sequence): Qwen2-VL's
    ``position_ids``, the ``indexer_position_ids`` a cache layer keeps). A tensor whose size there is not the
    prompt's batch size (a state of fixed shape) has no batch axis and is left out."""
    from ..structure import flatten_value

    leaves: list[tuple[str, Any]] = []
    for name, value in kwargs.items():
        if name in _BATCHED:
            flatten_value(value, (name,), leaves)
    axes = {name: 1 if name.endswith("position_ids") and t.dim() == 3 else 0 for name, t in leaves if t.dim()}
    ids: Any = kwargs.get("input_ids", kwargs.get("decoder_input_ids", kwargs.get("inputs_embeds")))
    batch = ids.shape[0] if hasattr(ids, "shape") and len(ids.shape) else None
    if batch is None:
        return axes
    shapes = dict(leaves)
    return {name: axis for name, axis in axes.items() if shapes[name].shape[axis] == batch}


def _batch_tied(module: Any, sample: dict[str, Any] | None = None) -> Any:
    """``module`` behind a forward that tells ``torch.export`` every batched input has the same batch size, and,
    where the ``sample`` shows it, that every self-attention cache has one length.

    With ``Dim.AUTO`` each input gets its own batch symbol; broadcasting ``position_ids`` against the hidden
    states then guards ``batch != 1``, so the graph would refuse a batch of one at run time. Each key and value of
    the cache also got a length symbol of its own (nothing in attention compares them), and every layer's ops were
    traced on its own symbols: one length for all of them made ``torch.export`` of Qwen2.5-0.5B's decode graph take
    10.6 s instead of 12.8 s (``benchmarks/export_profile.py``), and the graph states what the cache is. (Tying
    the attention mask's length to the cache's plus the tokens' too saved 0.5 s more, but the mask's dim then
    became an expression whose minimum came from the sample, 2, which refused a one-token prompt.)
    """
    import torch

    from ..structure import flatten_value

    caches_tied = _lengths_tied(sample or {})
    axes = _batch_axes(sample) if sample is not None else None

    def forward(model: Any, **kwargs: Any) -> Any:
        leaves: list[tuple[str, Any]] = []
        for name, value in kwargs.items():
            if name in _BATCHED:
                flatten_value(value, (name,), leaves)
        found = _batch_axes(dict(kwargs)) if axes is None else axes
        sizes = [t.shape[found[name]] for name, t in leaves if name in found]
        for size in sizes[1:]:
            torch._check(size == sizes[0])
        lengths = _cache_lengths([(n, t) for n, t in leaves if n.startswith("past_key_values.")])
        if caches_tied and lengths:
            for length in lengths[1:]:
                torch._check(length == lengths[0])
        keep = kwargs.get("logits_to_keep")
        ids = kwargs.get("input_ids", kwargs.get("decoder_input_ids"))
        if type(keep) is int and keep > 0 and isinstance(ids, torch.Tensor):
            # int logits_to_keep slices hidden states into a strided view, whose reshape in lm_head guards
            # batch != 1; the same positions as an index tensor gather a contiguous copy instead
            length = ids.shape[1]
            kwargs["logits_to_keep"] = torch.arange(length - keep, length, device=ids.device)
        return model(**kwargs)

    return with_forward(module, forward)


def _with_full_length_cache(module: Any) -> Any:
    """``module`` behind a forward that starts from an empty full-length ``DynamicCache``
    (:func:`hub_export.generation.decompose.full_length_cache`): without one, the model would build its own
    sliding-window cache and return keys cut to the window, which the decode graph (traced on full-length
    caches) does not take."""

    def forward(model: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("past_key_values", full_length_cache(model))
        return model(**kwargs)

    return with_forward(module, forward)


def _batch_of_two(inputs: Any) -> Any:
    """A batch-1 capture repeated to batch 2: torch.export specializes size-1 axes, so a batch-1 sample would
    export graphs that only take batch 1 (a dynamic export must take any batch)."""
    import torch

    tensors = [v for v in inputs.values() if isinstance(v, torch.Tensor)]
    if not tensors or any(t.dim() == 0 or t.shape[0] != 1 for t in tensors):
        return inputs
    return {k: v.repeat(2, *([1] * (v.dim() - 1))) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def _plan(
    components: dict[str, tuple[Any, dict[str, Any]]], capture: Any, multi_token_decode: bool, cache: str
) -> dict[str, Any]:
    encoder_decoder = "encoder" in components
    multimodal = capture.multimodal is not None
    prefill = capture.calls[0] if multimodal else components["prefill"][1]
    token_input = "decoder_input_ids" if "decoder_input_ids" in prefill else "input_ids"
    prompt_len = int(prefill[token_input].shape[1])
    new_tokens = len(capture.calls)
    if encoder_decoder:
        mask_mode = "fixed" if "attention_mask" in prefill else None
    else:
        mask_mode = "extend" if "attention_mask" in prefill else None
    start = None
    if encoder_decoder:
        start = int(prefill[token_input][0, 0])
    stages = {name: name for name in components}
    if "decode" not in components:  # generated without a cache: the prompt's graph runs every step
        stages["decode"] = "prefill"
    plan: dict[str, Any] = {
        "version": GENERATION_PLAN_VERSION,
        "kind": "encoder_decoder" if encoder_decoder else "multimodal" if multimodal else "decoder_only",
        "stages": stages,
        "token_input": token_input,
        "cache": None if capture.no_cache else cache_kwarg(components["decode"][1]),
        "cache_implementation": cache,
        "logits": "logits",
        "encoder_output": "encoder_outputs" if encoder_decoder else None,
        "attention_mask": mask_mode,
        "position_ids": "position_ids" in prefill or "decoder_position_ids" in prefill,
        "decoder_start_token_id": start,
        "returns_prompt": int(capture.sequences.shape[1]) >= prompt_len + new_tokens,
        "multi_token_decode": bool(multi_token_decode),
    }
    if multimodal:
        plan.update(capture.multimodal)
    if capture.encoder_outputs:
        plan["encoder_outputs"] = capture.encoder_outputs
    if capture.rope_index is not None:
        plan["rope_index"] = capture.rope_index
    return plan


def export_for_generation(
    exporter: Any,
    model: Any,
    inputs: dict[str, Any],
    *,
    config: Any = None,
    generation_config: Any = None,
    multi_token_decode: bool = False,
) -> Any:
    """See :meth:`hub_export.export.exporter.HfExporter.export_for_generation`."""
    main = _main_config(exporter, config)
    exporter.check_available(main)
    if main.dynamic:
        inputs = _batch_of_two(inputs)
    gen_config = copy.deepcopy(
        generation_config if generation_config is not None else getattr(model, "generation_config", None)
    )
    cache = getattr(gen_config, "cache_implementation", None) or "dynamic"
    why_not = one_graph_refusal(exporter, model, config, main, generation_config)
    if why_not is None:
        try:
            one = _export_one_graph(exporter, model, inputs, config, main, generation_config, multi_token_decode, cache)
        except HubExportError as exc:  # the two graphs may still export: their own errors speak for themselves
            one = f"the decode graph did not export on several tokens: {type(exc).__name__}: {str(exc)[:300]}"
        if isinstance(one, tuple):
            exported, plan = one
            return _exported(exporter, model, main, exported, gen_config, plan)
        why_not = one
    components, capture = decompose_with_capture(
        model, inputs, generation_config=generation_config, multi_token_decode=multi_token_decode
    )
    _refuse_several_ids_per_position(model, components, capture)
    try:
        exported = _export_components(
            exporter, model, components, capture, config, main, generation_config, multi_token_decode
        )
    except HubExportError as exc:
        if capture.unchained is None:
            raise
        # the whole prompt step did not export: the split chain's components still do, for runners[name]
        logger.warning("%s: the prompt step did not export (%s); exporting the split chain.", type(model).__name__, exc)
        try:
            components, capture = decompose_with_capture(
                model,
                inputs,
                generation_config=generation_config,
                multi_token_decode=multi_token_decode,
                chain_only=True,
            )
            exported = _export_components(
                exporter, model, components, capture, config, main, generation_config, multi_token_decode
            )
        except Exception:  # noqa: BLE001 - the chain, which generate() could not run anyway, does not export either
            raise exc from None
    plan = {**_plan(components, capture, multi_token_decode, cache), "stateful": _stateful(exported)}
    if plan["kind"] == "decoder_only":
        plan["one_graph"] = why_not
    return _exported(exporter, model, main, exported, gen_config, plan)


def _refuse_several_ids_per_position(model: Any, components: dict[str, Any], capture: Any) -> None:
    """``generate()`` chains one token id per position; a model whose ids are ``(batch, length, codebooks)`` (Dia's
    audio codebooks, with its own delay pattern) is refused before any graph is traced."""
    first = capture.calls[0] if capture.multimodal is not None else components["prefill"][1]
    for name in ("decoder_input_ids", "input_ids"):
        ids = first.get(name)
        if ids is not None and getattr(ids, "dim", lambda: 2)() != 2:
            raise ExportError(
                f"{type(model).__name__}.generate feeds {name} of shape {tuple(ids.shape)} (several ids per "
                "position, e.g. one per audio codebook); an exported generate() chains one id per position: export "
                "the model with export() instead."
            )


def _exported(
    exporter: Any, model: Any, main: ExportConfig, exported: dict[str, Any], gen_config: Any, plan: dict[str, Any]
) -> Any:
    return exported_model_class(plan)(
        exporter.export_format,
        main,
        exported,
        config=getattr(model, "config", None),
        generation_config=gen_config,
        source=getattr(model, "_hub_export_source", None),
        generation=plan,
    )


def _export_components(
    exporter: Any,
    model: Any,
    components: dict[str, tuple[Any, dict[str, Any]]],
    capture: Any,
    config: Any,
    main: ExportConfig,
    generation_config: Any,
    multi_token_decode: bool,
    lower_mins: dict[str, int] | None = None,
    also_check: Any = None,
) -> dict[str, Any]:
    """Export each captured stage with its config (``lower_mins``, ``also_check``: see
    ``HfExporter.export_component``)."""
    configs = {
        name: exporter._check_config(_component_config(config, name)) if isinstance(config, dict) else main
        for name in components
    }
    configs = _calibrated_per_component(model, configs, generation_config, multi_token_decode)
    exported = {}
    for name, (module, kwargs) in components.items():
        component_config = configs[name]
        if capture.full_length_cache and "past_key_values" not in kwargs and name in ("prefill", "language_model"):
            module = _with_full_length_cache(module)
        module = _batch_tied(module, kwargs) if component_config.dynamic else module
        exported[name] = exporter.export_component(
            name, module, kwargs, component_config, lower_mins=lower_mins, also_check=also_check
        )
    return exported


def _export_one_graph(
    exporter: Any,
    model: Any,
    inputs: dict[str, Any],
    config: Any,
    main: ExportConfig,
    generation_config: Any,
    multi_token_decode: bool,
    cache: str,
) -> tuple[dict[str, Any], dict[str, Any]] | str:
    """The decode graph alone, serving the prompt and every step (see :mod:`._one_graph`): the exported
    components and the plan, or why it does not serve them."""
    components, capture = decompose_with_capture(
        model, inputs, generation_config=generation_config, multi_token_decode=True
    )
    plan = {**_plan(components, capture, multi_token_decode, cache), "stateful": []}
    why_not = prompt_step_refusal(components, capture, plan["cache"])
    step = one_token_step(capture, plan["token_input"])
    if why_not is not None or step is None:
        return why_not or "generate() made no one-token decode step to check the graph on"
    prompt = components["prefill"][1]
    module, decode = components["decode"]
    if not multi_token_decode and "logits_to_keep" in prompt:
        decode = {**decode, "logits_to_keep": prompt["logits_to_keep"]}  # the last position, as the prefill's
    only = {"decode": (module, decode)}
    checked: list[str | None] = []

    def check(runner: Any, metadata: Any) -> None:  # on the parity runner: one compilation of the weights
        checked.append(check_one_graph(runner, metadata, model, prompt, step, plan))

    exported = _export_components(
        exporter,
        model,
        only,
        capture,
        config,
        main,
        generation_config,
        True,
        lower_mins={QUERY_DIM: 1, CACHE_DIM: 0},
        also_check=check,
    )
    why_not = checked[0] if checked else "the decode graph was not checked"
    if why_not is not None:
        return why_not
    plan.update(stages={"prefill": "decode", "decode": "decode"}, stateful=_stateful(exported), one_graph=True)
    return exported, plan


def _calibrated_per_component(
    model: Any, configs: dict[str, ExportConfig], generation_config: Any, multi_token_decode: bool
) -> dict[str, ExportConfig]:
    """Give each component's calibrating quantizer the kwargs that component receives on the calibration prompts.

    A quantizer's ``calibration_dataset`` holds ``generate`` inputs (prompts); each one is decomposed like the
    sample, and component ``c`` calibrates on what ``c`` got (its recipe counts one sample per prompt).
    """
    import dataclasses

    datasets: dict[int, list[dict[str, Any]]] = {}
    for config in configs.values():
        quantizer = config.quantizer
        if quantizer is not None and quantizer.needs_calibration and quantizer.calibration_dataset:
            datasets.setdefault(id(quantizer), quantizer.calibration_dataset)
    if not datasets:
        return configs
    captured: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for key, prompts in datasets.items():
        per_component: dict[str, list[dict[str, Any]]] = {}
        for prompt in prompts:
            stages, _ = decompose_with_capture(
                model, prompt, generation_config=generation_config, multi_token_decode=multi_token_decode
            )
            for name, (_, kwargs) in stages.items():
                traced, _constants = split_kwargs(kwargs)  # flags (use_cache, ...) are the trace's constants
                per_component.setdefault(name, []).append(traced)
        captured[key] = per_component
    result = {}
    for name, config in configs.items():
        quantizer = config.quantizer
        if quantizer is None or id(quantizer) not in captured:
            result[name] = config
            continue
        copied = copy.copy(quantizer)
        copied.calibration_dataset = captured[id(quantizer)].get(name) or None
        result[name] = dataclasses.replace(config, quantizer=copied)
    return result


def _stateful(exported: dict[str, Any]) -> list[str]:
    """The components that keep the cache as backend state (OpenVINO ``stateful=True``): generate() resets them
    per call, seeds them once with the cache of the stage before, then passes them no cache."""
    return [name for name, component in exported.items() if component.metadata.extra.get("state")]
