"""Split a generative model into the graphs its generation loop calls, from one real ``generate`` run.

:func:`decompose_for_generation` runs ``model.generate`` for two (or three) new tokens with ``model.forward``
(and the encoder's ``forward``) wrapped, records the kwargs of every call (tensors cloned, caches deep-copied
before the call mutates them), then restores the original methods. The recorded calls are the sample inputs
of the components:

* decoder-only: ``prefill`` (the prompt, empty cache) and ``decode`` (one token against the filled cache);
* encoder-decoder: ``encoder`` (``model.get_encoder()`` with the kwargs ``generate`` gave it), ``prefill`` (the
  first decoder step: ``encoder_outputs`` and an empty cache, which fills the cross-attention cache) and
  ``decode`` (one decoder token against the self- and cross-attention ``EncoderDecoderCache``);
* multimodal (vision/audio-language): ``image_encoder`` / ``audio_encoder``, the projector, ``embed_tokens``,
  ``language_model``, ``lm_head`` and ``decode`` (see :mod:`hub_export.generation.multimodal`).

It works for any architecture whose ``generate`` calls ``forward`` with kwargs: no per-model glue.

Example::

    from hub_export.utils import decompose_for_generation

    components = decompose_for_generation(model, tokenizer("Hello", return_tensors="pt"))
    # {"prefill": (model, {...}), "decode": (model, {"input_ids": ..., "past_key_values": DynamicCache, ...})}
    for name, (module, kwargs) in components.items():
        eager = module(**kwargs)  # each captured call runs as is
"""

from __future__ import annotations

import copy
import inspect
from contextlib import ExitStack
from typing import Any

from ..errors import ExportError
from ._rope_index import rope_entry
from .multimodal import (
    encoder_output_components,
    encoder_output_watches,
    feature_watches,
    find_parts,
    multimodal_components,
    recording,
)

__all__ = ["Capture", "capture_generation", "decompose_for_generation", "decompose_with_capture"]

_ENCODER_OUTPUTS = "encoder_outputs"


class Capture:
    """What one ``generate`` run passed to the model.

    Attributes:
        calls: The kwargs of each ``model.forward`` call, in order (deep copies taken before the call).
        encoder_calls: The kwargs of each encoder ``forward`` call (encoder-decoder models).
        watched: The kwargs of each call of the other methods watched (multimodal feature functions, projectors).
        sequences: The token ids ``generate`` returned.
        multimodal: The plan entries chaining a multimodal model's components (None for text-only models).
        encoder_outputs: The plan entries of the feature components whose outputs the prompt step takes
            (``mm_encoder_outputs``, for a multimodal model not exported as a split chain); empty otherwise.
        unchained: Why the split chain of a multimodal model does not serve ``generate()``, when it was not used.
        rope_index: The plan entry of the rotary positions of a prompt step that takes encoder outputs (None when
            its positions follow the mask).
        full_length_cache: ``generate`` ran with a plain ``DynamicCache`` instead of its sliding-window layers.
        no_cache: ``generate`` ran the model without a cache, each step on the whole sequence.
    """

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.encoder_calls: list[dict[str, Any]] = []
        self.watched: dict[str, list[dict[str, Any]]] = {}
        self.sequences: Any = None
        self.multimodal: dict[str, Any] | None = None
        self.encoder_outputs: list[dict[str, Any]] = []
        self.unchained: str | None = None
        self.rope_index: dict[str, Any] | None = None
        self.no_cache = False
        self.full_length_cache = False


def _clone_inputs(inputs: Any) -> dict[str, Any]:
    if not hasattr(inputs, "items"):
        raise ExportError("inputs must be a mapping of the model's kwargs (e.g. a tokenizer or processor output).")
    return {name: copy.deepcopy(value) for name, value in inputs.items()}


def capture_generation(
    model: Any,
    inputs: dict[str, Any],
    *,
    generation_config: Any = None,
    steps: int = 2,
    watches: dict[str, tuple[Any, str]] | None = None,
) -> Capture:
    """Run ``model.generate(**inputs)`` for ``steps`` new tokens and record every forward call.

    ``watches`` names more methods to record, ``{key: (owner, method name)}``, into ``capture.watched[key]``.

    The model is put in eval mode for the run and restored; ``inputs`` and ``generation_config`` are copied,
    so neither the caller's model, inputs nor config change.

    Raises:
        ExportError: The model has no ``generate`` or it failed on these inputs.
    """
    import torch

    if not hasattr(model, "generate"):
        raise ExportError(f"{type(model).__name__} has no generate(); export_for_generation needs a generative model.")
    capture = Capture()
    config = copy.deepcopy(
        generation_config if generation_config is not None else getattr(model, "generation_config", None)
    )
    settings = {"max_new_tokens": steps, "min_new_tokens": steps, "do_sample": False}
    kwargs: dict[str, Any] = dict(settings)
    if config is not None:  # the capture's settings go on the (copied) config: generate() refuses both at once
        for name in ("max_length", "min_length", "num_beams", "num_return_sequences"):
            if hasattr(config, name):
                setattr(config, name, None if name.endswith("length") else 1)
        for name, value in settings.items():
            setattr(config, name, value)
        kwargs = {"generation_config": config}
    full_cache = _full_length_cache(model, inputs, config)
    if full_cache is not None:
        kwargs["past_key_values"] = full_cache
        capture.full_length_cache = True
    encoder = model.get_encoder() if _is_encoder_decoder(model) else None
    was_training = model.training
    model.eval()
    try:
        with ExitStack() as stack:
            stack.enter_context(recording(model, "forward", capture.calls))
            if encoder is not None and encoder is not model:
                stack.enter_context(recording(encoder, "forward", capture.encoder_calls))
            for key, (owner, method) in (watches or {}).items():
                stack.enter_context(recording(owner, method, capture.watched.setdefault(key, [])))
            stack.enter_context(torch.no_grad())
            capture.sequences = model.generate(**_clone_inputs(inputs), **kwargs)
    except ExportError:
        raise
    except Exception as exc:
        raise ExportError(
            f"{type(model).__name__}.generate failed while capturing the prefill and decode calls: "
            f"{type(exc).__name__}: {str(exc)[:1000]}. Check that generate(**inputs) runs in eager mode."
        ) from exc
    finally:
        model.train(was_training)
    if hasattr(capture.sequences, "sequences"):
        capture.sequences = capture.sequences.sequences
    return capture


def _full_length_cache(model: Any, inputs: Any, config: Any) -> Any:
    """A plain ``DynamicCache`` for a model with sliding-window layers, else None.

    ``generate`` gives such models ``DynamicSlidingWindowLayer`` caches, which keep only the last window of keys
    and track their length in a Python int: a graph traced on one would bake in that length and those shapes.
    With full-length layers the window comes from the attention mask alone (transformers builds the sliding mask
    from positions), which computes the same attention; the exported graphs then take and return plain caches.
    """
    text_config: Any = getattr(model, "config", None)
    text_config = text_config.get_text_config() if hasattr(text_config, "get_text_config") else text_config
    declared = bool({"sliding_attention", "hybrid_sliding"} & set(getattr(text_config, "layer_types", None) or ()))
    sliding = declared or (_windowed_attention_only(text_config) and _window_in_the_mask(model))
    implementation = getattr(config, "cache_implementation", None)
    if (
        not sliding
        or implementation not in (None, "dynamic")
        or "past_key_values" in inputs
        or _is_encoder_decoder(model)
    ):
        return None
    return full_length_cache(model)


def full_length_cache(model: Any) -> Any:
    """An empty ``DynamicCache`` whose attention layers keep every position (see :func:`_full_length_cache`).

    For an attention-only model, a plain ``DynamicCache`` (it builds its layers as they are used). For a model
    whose layers are not all attention (LFM's convolutions beside sliding-window attention), the cache ``generate``
    builds from the config, every layer of the kind it would be, with each sliding-window attention part made
    full-length."""
    from transformers import cache_utils

    text_config: Any = getattr(model, "config", None)
    text_config = text_config.get_text_config() if hasattr(text_config, "get_text_config") else text_config
    try:
        types = set(cache_utils.get_layer_types_and_kwargs(text_config)[0])
    except Exception:  # noqa: BLE001 - a config transformers cannot read layer types from
        types = set()
    if types <= {*_WINDOWED, "full_attention"}:
        return cache_utils.DynamicCache()
    cache = cache_utils.DynamicCache(config=model.config)
    for index, layer in enumerate(cache.layers):
        if isinstance(layer, cache_utils.LinearAttentionAndSlidingWindowAttentionLayer):
            cache.layers[index] = cache_utils.LinearAttentionAndFullAttentionLayer(layer.number_of_states)
        elif isinstance(layer, cache_utils.DynamicSlidingWindowLayer):
            cache.layers[index] = cache_utils.DynamicLayer()
    return cache


#: cache layer types whose window or chunk the attention mask applies too (the rest are plain attention layers)
_WINDOWED = ("sliding_attention", "chunked_attention")


def _windowed_attention_only(text_config: Any) -> bool:
    """Whether the cache ``generate`` builds for this config has sliding-window (or chunked) attention layers and
    otherwise plain ones, by the layer types transformers derives itself (``get_layer_types_and_kwargs``: a
    config's ``layer_types``, else ``sliding_window`` / ``attention_chunk_size`` on every layer): a model whose
    every layer slides without saying so in ``layer_types`` (Mistral) gets sliding-window cache layers too."""
    try:
        from transformers.cache_utils import get_layer_types_and_kwargs

        types = set(get_layer_types_and_kwargs(text_config)[0])
    except Exception:  # noqa: BLE001 - a config transformers cannot read layer types from: as declared
        types = set(getattr(text_config, "layer_types", None) or ())
    return bool(types & set(_WINDOWED)) and types <= {*_WINDOWED, "full_attention"}


def _window_in_the_mask(model: Any) -> bool:
    """Whether the modeling code of ``model`` builds its window into the attention mask (transformers'
    ``create_sliding_window_causal_mask`` / ``create_chunked_causal_mask``), so full-length caches compute the same
    attention. A model that builds a plain causal mask and lets the sliding cache drop old keys (Moshi) does not:
    with a full-length cache it would attend past its window, and its sliding cache layers stay."""
    import sys

    modules = {sys.modules.get(type(m).__module__) for m in model.modules()}
    names = ("create_sliding_window_causal_mask", "create_chunked_causal_mask")
    return any(module is not None and any(hasattr(module, n) for n in names) for module in modules)


def _is_encoder_decoder(model: Any) -> bool:
    return bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False)) and hasattr(model, "get_encoder")


def _empty_cache(value: Any) -> bool:
    """True for a cache holding no tokens (the prefill's fresh cache)."""
    if _is_state_cache(value):
        return not any(layer.has_previous_state[0] for layer in value.layers)
    get_len = getattr(value, "get_seq_length", None)
    if get_len is None or type(value).__name__ == "StaticCache":
        return False
    try:
        return int(get_len()) == 0
    except Exception:
        return False


def _is_state_cache(value: Any) -> bool:
    """A state-space cache (Mamba-2's ``DynamicCache`` of ``LinearAttentionLayer``: conv and SSM states)."""
    layers = getattr(value, "layers", None) or ()
    return bool(layers) and all(type(layer).__name__ == "LinearAttentionLayer" for layer in layers)


def cache_kwarg(call: dict[str, Any]) -> str:
    """The kwarg carrying the cache in a captured call: ``past_key_values``, or ``cache_params`` (state-space models)."""
    state = call.get("past_key_values") is None and _is_state_cache(call.get("cache_params"))
    return "cache_params" if state else "past_key_values"


def _without_empty_caches(kwargs: dict[str, Any]) -> dict[str, Any]:
    # a fresh cache has no tensors to trace: the model creates its own when it gets none (use_cache=True)
    return {name: value for name, value in kwargs.items() if not _empty_cache(value)}


def _cache_length(cache: Any) -> int | None:
    try:
        return int(cache.get_seq_length()) if cache is not None else None
    except Exception:
        return None


def _restore_masks(model: Any, calls: list[dict[str, Any]], inputs: Any, input_name: str) -> None:
    """Give every captured call an attention mask when ``generate`` dropped an all-ones one.

    ``generate`` omits a mask without padding, but the export must take one so that left-padded batches run
    through the same graph; an all-ones mask computes exactly what no mask does.
    """
    import torch

    try:
        accepts = "attention_mask" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        accepts = False
    if not accepts or any(call.get("attention_mask") is not None for call in calls):
        return
    user_mask = inputs.get("attention_mask") if hasattr(inputs, "get") else None
    dtype = user_mask.dtype if isinstance(user_mask, torch.Tensor) else torch.int64
    total = 0
    for call in calls:
        ids = call.get(input_name)
        if not isinstance(ids, torch.Tensor):
            return
        past = _cache_length(call.get("past_key_values"))
        total = (total if past is None else past) + ids.shape[1]  # a state cache has no length: count the tokens
        if _is_state_cache(call.get("cache_params")) and not _empty_cache(call["cache_params"]):
            continue  # generate() masks only a state-space model's prompt: a new token is never padding
        call["attention_mask"] = torch.ones((ids.shape[0], total), dtype=dtype, device=ids.device)


def _static_cache_inputs(calls: list[dict[str, Any]], inputs: Any, input_name: str) -> None:
    """Make the calls of a static-cache ``generate`` exportable with the same loop as a dynamic cache.

    ``generate`` hands the prefill a lazily allocated ``StaticCache`` and later steps a 4D mask built for
    ``torch.compile``. The prefill's cache is allocated here (zeros, the decode's head shapes) so both graphs
    take the preallocated buffers and update them in place, and every call gets the 2D mask (the user's, then
    ones) the model turns into that same 4D mask itself.
    """
    import torch

    caches: list[Any] = [call.get("past_key_values") for call in calls]
    if not any(type(c).__name__ == "StaticCache" for c in caches):
        return
    filled: Any = next((c for c in caches if c is not None and all(layer.is_initialized for layer in c.layers)), None)
    ids = calls[0].get(input_name)
    if filled is None or not isinstance(ids, torch.Tensor):
        return
    for cache in caches:
        if type(cache).__name__ == "StaticCache" and not all(layer.is_initialized for layer in cache.layers):
            for layer, model in zip(cache.layers, filled.layers):
                empty = model.keys.new_zeros((ids.shape[0], model.num_heads, 0, model.k_head_dim))
                layer.lazy_initialization(empty, model.values.new_zeros((*empty.shape[:3], model.v_head_dim)))
    user_mask = inputs.get("attention_mask") if hasattr(inputs, "get") else None
    base = user_mask if isinstance(user_mask, torch.Tensor) and user_mask.dim() == 2 else torch.ones_like(ids)
    for call in calls:
        mask = call.get("attention_mask")
        if mask is not None and mask.dim() == 2:
            continue
        tokens = call[input_name].shape[1]
        total = (_cache_length(call.get("past_key_values")) or 0) + tokens
        call["attention_mask"] = torch.cat(
            [base, base.new_ones((base.shape[0], max(total - base.shape[1], 0)))], dim=-1
        )[:, :total]


def _without_cache(first: dict[str, Any], later: dict[str, Any], input_name: str) -> bool:
    """Whether ``generate`` ran the model without a cache: a later step got no cache and the whole sequence again
    (MPT, Pix2Struct as their configs set them). A step that got fewer tokens keeps a state of its own (XLNet's
    ``mems``, RWKV's ``state``), which is not this."""
    import torch

    ids, again = first.get(input_name), later.get(input_name)
    if "past_key_values" in later or "cache_params" in later:
        return False
    return isinstance(ids, torch.Tensor) and isinstance(again, torch.Tensor) and again.shape[-1] > ids.shape[-1]


def _merge_decode_calls(first: dict[str, Any], second: dict[str, Any], input_name: str) -> dict[str, Any]:
    """Two consecutive one-token decode calls as one two-token call from the first call's cache."""
    import torch

    merged = dict(first)
    if "logits_to_keep" in merged:  # every query position's logits (e.g. to verify speculative tokens)
        merged["logits_to_keep"] = 0
    for name, value in second.items():
        old = first.get(name)
        if not isinstance(value, torch.Tensor) or not isinstance(old, torch.Tensor):
            continue
        if name in (input_name, "position_ids", "decoder_position_ids", "cache_position", "token_type_ids"):
            merged[name] = torch.cat([old, value], dim=-1)
        elif (
            name in ("attention_mask", "decoder_attention_mask")
            and value.dim() == 2
            and value.shape[-1] > old.shape[-1]
        ):
            merged[name] = value  # the longer 2D mask covers both new tokens
    return merged


def decompose_for_generation(
    model: Any, inputs: dict[str, Any], *, generation_config: Any = None, multi_token_decode: bool = False
) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Capture the real kwargs of each generation stage of ``model`` on ``inputs``.

    Args:
        model: A transformers generative model (``...ForCausalLM``, ``...ForConditionalGeneration``).
        inputs: The kwargs of ``generate`` (a tokenizer/processor output); keep them small.
        generation_config: Passed to ``generate`` (e.g. a static-cache config); the model's own by default.
        multi_token_decode: Capture ``decode`` as two tokens at once (from three generated tokens) so its query
            axis stays symbolic under ``dynamic=True``.

    Returns:
        ``{name: (module, kwargs)}``: ``prefill`` and ``decode`` for decoder-only models; ``encoder``, ``prefill``
        and ``decode`` for encoder-decoder models; ``image_encoder`` (and/or ``audio_encoder``), the projector
        (``multi_modal_projector``, ...), ``embed_tokens``, ``language_model``, ``lm_head`` and ``decode`` for
        multimodal models. Calling ``module(**kwargs)`` reproduces the captured step.

    Raises:
        ExportError: ``generate`` failed or did not call the model the expected number of times.
    """
    return decompose_with_capture(
        model, inputs, generation_config=generation_config, multi_token_decode=multi_token_decode
    )[0]


def decompose_with_capture(
    model: Any,
    inputs: dict[str, Any],
    *,
    generation_config: Any = None,
    multi_token_decode: bool = False,
    chain_only: bool = False,
) -> tuple[dict[str, tuple[Any, dict[str, Any]]], Capture]:
    """:func:`decompose_for_generation`, also returning the :class:`Capture` it was built from.

    A multimodal model whose split chain ``generate()`` cannot run (its glue differs: features packed per image,
    deepstack features, positions of its own; ``plan["runnable"]`` says why) is decomposed instead as
    transformers' ``generate`` runs it: feature graphs whose outputs the prompt step takes
    (``mm_encoder_outputs``), then the whole model's prompt step and decode (``capture.unchained`` keeps why the
    chain did not serve). ``chain_only`` keeps the split chain (the caller's fallback when that does not export).
    """
    steps = 3 if multi_token_decode else 2
    encoder_decoder = _is_encoder_decoder(model)
    parts = None if encoder_decoder else find_parts(model)
    watches = None if encoder_decoder else encoder_output_watches(model)
    if parts is not None:
        watches = {**(watches or {}), **feature_watches(parts)}
    # one step more than needed: a one-token cache (seq2seq's first decoder step) would export a static axis
    capture = capture_generation(model, inputs, generation_config=generation_config, steps=steps + 1, watches=watches)
    if len(capture.calls) < steps + 1:
        raise ExportError(
            f"{type(model).__name__}.generate called forward {len(capture.calls)} time(s) for {steps + 1} new tokens; "
            "expected one prefill and decode calls (is use_cache disabled in the generation config?)."
        )
    input_name = "decoder_input_ids" if "decoder_input_ids" in capture.calls[0] else "input_ids"
    if not _is_encoder_decoder(model):
        _static_cache_inputs(capture.calls, inputs, input_name)
        _restore_masks(model, capture.calls, inputs, input_name)
    first = 2 if _cache_length(capture.calls[1].get("past_key_values")) == 1 else 1
    prefill = _without_empty_caches(capture.calls[0])
    decode = capture.calls[first]
    capture.no_cache = _without_cache(capture.calls[0], capture.calls[first], input_name)
    if multi_token_decode and not capture.no_cache:
        decode = _merge_decode_calls(capture.calls[first], capture.calls[first + 1], input_name)
    if not capture.no_cache and "past_key_values" not in decode and cache_kwarg(decode) != "cache_params":
        if "cache_params" in decode:
            raise ExportError(
                f"{type(model).__name__} carries a state-space cache (cache_params: {type(decode['cache_params']).__name__}) "
                "of a kind export_for_generation does not export (it exports key/value caches and DynamicCache of "
                "LinearAttentionLayer, as Mamba-2 uses); export the forward pass with exporter.export(model, inputs) instead."
            )
        raise ExportError(
            f"{type(model).__name__}'s decode step got no past_key_values; export_for_generation needs a KV cache."
        )
    components: dict[str, tuple[Any, dict[str, Any]]] = {}
    if _is_encoder_decoder(model):
        if not capture.encoder_calls:
            raise ExportError(f"{type(model).__name__}.generate did not call its encoder (get_encoder()).")
        components["encoder"] = (model.get_encoder(), capture.encoder_calls[0])
    if parts is not None:
        prompt_components, capture.multimodal = multimodal_components(
            parts, capture.watched, capture.calls[0], input_name, inputs
        )
        language, kwargs = prompt_components["language_model"]
        prompt_components["language_model"] = (language, _without_empty_caches(kwargs))
        why_not = capture.multimodal["runnable"]
        if why_not is not True and not chain_only and isinstance(prefill.get("mm_encoder_outputs"), dict):
            capture.multimodal, capture.unchained = None, why_not
        else:
            components.update(prompt_components)
    if parts is None or capture.multimodal is None:
        features, capture.encoder_outputs = encoder_output_components(model, capture.watched, prefill)
        components.update(features)
        components["prefill"] = (model, prefill)
        if capture.no_cache and not _is_encoder_decoder(model):
            return components, capture  # the prompt's graph runs every step (its sequence axis is dynamic)
        if capture.encoder_outputs:  # multimodal rotary positions (sections, batch, sequence), as the chain's
            given = {**inputs, **{k: v for k, v in capture.calls[0].items() if hasattr(v, "shape")}}
            base = getattr(model, "base_model", model)
            capture.rope_index = rope_entry(base, given, capture.calls[0].get("position_ids"))
    components["decode"] = (model, decode)
    return components, capture
