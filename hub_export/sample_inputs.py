"""Sample inputs built from a model's config, for exports made without user inputs (CLI, sync, Action)."""

from __future__ import annotations

from typing import Any

from .errors import ExportError

__all__ = ["default_inputs", "dummy_inputs", "implied_inputs"]


def _get(config: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return default


def dummy_inputs(model: Any, *, batch: int = 2, sequence: int = 8) -> dict[str, Any]:
    """Kwargs for one forward call of ``model``, shaped from its config (random ids, all-ones mask).

    The batch and sequence are >= 2 so that ``dynamic=True`` keeps them symbolic.

    Raises:
        ExportError: The model's main input is not one this function knows how to build.
    """
    import torch

    config = model.config
    text = getattr(config, "get_text_config", lambda **_: config)(decoder=True)
    main = getattr(model, "main_input_name", "input_ids")
    gen = torch.Generator().manual_seed(0)
    inputs: dict[str, Any] = {}
    if main == "input_ids":
        vocab = _get(text, "vocab_size", default=100)
        inputs["input_ids"] = torch.randint(min(3, vocab - 1), vocab, (batch, sequence), generator=gen)
        inputs["attention_mask"] = torch.ones(batch, sequence, dtype=torch.int64)
    elif main == "pixel_values":
        vision = _get(config, "vision_config", default=config)
        image_size = _get(vision, "image_size", default=224)  # an int, {"height": h, "width": w} or (h, w)
        if isinstance(image_size, dict):
            image_size = image_size["height"]
        size = int(image_size if isinstance(image_size, int) else image_size[0])
        channels = _get(vision, "num_channels", default=3)
        inputs["pixel_values"] = torch.randn(batch, channels, size, size, generator=gen)
    elif main == "input_features":
        mels = _get(config, "num_mel_bins", "feature_size", default=80)
        frames = 2 * _get(config, "max_source_positions", default=1500)
        inputs["input_features"] = torch.randn(batch, mels, frames, generator=gen)
    elif main == "input_values":
        inputs["input_values"] = torch.randn(batch, 16000, generator=gen)
    else:
        raise ExportError(
            f"Cannot build sample inputs for main input {main!r}; export from Python with your own inputs."
        )
    if getattr(config, "is_encoder_decoder", False):
        start = _get(config, "decoder_start_token_id", "bos_token_id", default=0)
        inputs["decoder_input_ids"] = torch.full((batch, max(2, sequence // 2)), int(start), dtype=torch.int64)
    return inputs


def implied_inputs(model: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """``inputs`` with the inputs the model's config implies and its ``forward`` takes, when they are missing.

    A model with several token types (BERT: ``type_vocab_size=2``) gets all-zero ``token_type_ids`` (what it
    uses when given none), so that its export takes what its tokenizer produces instead of dropping it.
    """
    import inspect

    import torch

    ids = inputs.get("input_ids")
    config = getattr(model, "config", None)
    if "token_type_ids" in inputs or not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        return inputs
    if (getattr(config, "type_vocab_size", 0) or 0) < 2 or getattr(config, "is_encoder_decoder", False):
        return inputs
    try:
        accepted = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return inputs
    if "token_type_ids" not in accepted:
        return inputs
    return {**inputs, "token_type_ids": torch.zeros_like(ids)}


def default_inputs(signature: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the inputs a model fills in itself when a call gives none, where ``signature`` (a component's
    :class:`Signature`) traced them: all-zero ``token_type_ids`` (segment A) and an all-ones ``attention_mask``
    (every token attended), each the shape of ``input_ids`` (``input_values`` for audio), so that an export traced
    with them runs without them, as the model does. A graph taking a cache keeps its mask required (its length
    covers the cache too)."""
    traced = dict(signature.input_structure)
    missing = [name for name in ("token_type_ids", "attention_mask") if name in traced and kwargs.get(name) is None]
    if not missing:
        return kwargs
    reference = kwargs.get("input_ids", kwargs.get("input_values"))
    if reference is None:
        return kwargs
    import torch

    reference = torch.as_tensor(reference)
    filled = dict(kwargs)
    if "token_type_ids" in missing and kwargs.get("input_ids") is not None:
        filled["token_type_ids"] = torch.zeros_like(reference)
    takes_cache = any(spec.name.startswith("input.") for spec in signature.inputs)
    if "attention_mask" in missing and not takes_cache and reference.dim() == 2:
        from .signature import torch_dtype

        spec = next(s for s in signature.inputs if s.name == "attention_mask")
        filled["attention_mask"] = torch.ones(reference.shape, dtype=torch_dtype(spec.dtype))
    return filled
