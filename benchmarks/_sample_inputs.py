"""Sample inputs of the model families whose main input is neither text, image nor audio (``coverage.py --all``).

Built from the config and the forward's signature, eager PyTorch as the oracle (``_tiny_configs._find_inputs``
calls :func:`special_inputs` first):

* time series (``past_values``): Informer / Time Series Transformer (``past_time_features``,
  ``past_observed_mask``; the history is ``context_length`` + the largest lag), PatchTST / PatchTSMixer
  (``(batch, context, channels)``), TimesFM (``past_values_padding``, ``freq``);
* offline reinforcement learning (``states``): Decision Transformer's states, actions, rewards, returns-to-go and
  timesteps;
* video (``pixel_values_videos``): ``(batch, frames, channels, height, width)`` (+ text for a video-text model);
* a Q-Former alone (``query_embeds``): the query embeddings and the vision features it cross-attends to.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["SPECIAL_MAIN_INPUTS", "special_inputs"]

#: main / required input names :func:`special_inputs` builds
SPECIAL_MAIN_INPUTS = ("past_values", "states", "pixel_values_videos", "query_embeds")


def _get(config: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return default


def _series(model: Any, params: set[str], batch: int, seed: int, longer: int) -> dict[str, Any]:
    import torch

    config = model.config
    gen = torch.Generator().manual_seed(seed)
    context = int(_get(config, "context_length", default=32))
    lags = _get(config, "lags_sequence", default=None)
    length = context + (max(lags) if lags else 0) + (longer if "past_observed_mask" not in params else 0)
    channels = int(_get(config, "input_size", "num_input_channels", default=1))
    if "past_time_features" in params:  # Informer / Time Series Transformer: (batch, history[, input_size])
        shape = (batch, length) if channels == 1 else (batch, length, channels)
        values = torch.randn(*shape, generator=gen)
        features = int(_get(config, "num_time_features", default=0))
        inputs = {
            "past_values": values,
            "past_time_features": torch.randn(batch, length, features, generator=gen),
            "past_observed_mask": torch.ones_like(values),
        }
        if "static_real_features" in params and _get(config, "num_static_real_features", default=0):
            inputs["static_real_features"] = torch.randn(batch, config.num_static_real_features, generator=gen)
        return inputs
    if "past_values_padding" in params:  # TimesFM: (batch, context) + padding + frequency class
        values = torch.randn(batch, length, generator=gen)
        return {
            "past_values": values,
            "past_values_padding": torch.zeros_like(values),
            "freq": torch.zeros(batch, 1, dtype=torch.long),
        }
    if _get(config, "num_input_channels", default=None) is not None:  # PatchTST / PatchTSMixer
        return {"past_values": torch.randn(batch, context, channels, generator=gen)}
    return {"past_values": torch.randn(batch, length, generator=gen)}


def _decisions(model: Any, batch: int, seed: int, steps: int) -> dict[str, Any]:
    import torch

    config = model.config
    gen = torch.Generator().manual_seed(seed)
    return {
        "states": torch.randn(batch, steps, config.state_dim, generator=gen),
        "actions": torch.randn(batch, steps, config.act_dim, generator=gen),
        "rewards": torch.randn(batch, steps, 1, generator=gen),
        "returns_to_go": torch.randn(batch, steps, 1, generator=gen),
        "timesteps": torch.arange(steps).expand(batch, steps).clone(),
        "attention_mask": torch.ones(batch, steps, dtype=torch.long),
    }


def _video(model: Any, batch: int, seed: int) -> dict[str, Any]:
    import torch

    config = model.config
    vision = _get(config, "vision_config", default=config)
    size = _get(vision, "image_size", default=64)
    height, width = (size, size) if isinstance(size, int) else (size[0], size[-1])
    frames = int(_get(vision, "num_frames", default=4))
    channels = int(_get(vision, "num_channels", default=3))
    gen = torch.Generator().manual_seed(seed)
    return {"pixel_values_videos": torch.randn(batch, frames, channels, height, width, generator=gen)}


def _queries(model: Any, batch: int, seed: int, features: int) -> dict[str, Any]:
    import torch

    config = model.config
    gen = torch.Generator().manual_seed(seed)
    queries = int(_get(config, "num_query_tokens", default=8))
    inputs = {"query_embeds": torch.randn(batch, queries, config.hidden_size, generator=gen)}
    width = _get(config, "encoder_hidden_size", default=None)
    if width:
        inputs["encoder_hidden_states"] = torch.randn(batch, features, width, generator=gen)
    return inputs


def special_inputs(
    model: Any, params: set[str], required: list[str], text: Callable[[int, int, int], dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any], str] | None:
    """(sample, other, note) for a model whose inputs this module builds, else None.

    ``text(batch, length, seed)``: text inputs, for a model that takes text besides its main input.
    Raises what eager raises on the built inputs.
    """
    main = getattr(model, "main_input_name", None)
    names = {main, *required}
    if "past_values" in names:
        sample, other = (_series(model, params, b, s, more) for b, s, more in ((2, 0, 0), (3, 1, 0)))
        note = "other: another batch at the same history length (the config fixes it)"
    elif "states" in names:
        sample, other = _decisions(model, 2, 0, 5), _decisions(model, 3, 1, 9)
        note = ""
    elif "pixel_values_videos" in names:
        sample, other = _video(model, 2, 0), _video(model, 3, 1)
        note = ""
        if "input_ids" in required:  # a video-text model: text positions may be few (VideoPrism's 8)
            sample.update(text(2, 7, 0))
            other.update(text(3, 7, 1))
            note = "other: another batch at the same text length"
    elif "query_embeds" in names:
        sample, other = _queries(model, 2, 0, 16), _queries(model, 3, 1, 24)
        note = ""
    else:
        return None
    return sample, other, note
