"""Candidate sample inputs of a tiny model, built from its config and forward signature (eager is the oracle)."""

from __future__ import annotations

import inspect
import math
import re
from typing import Any

from _sample_inputs import _get
from _tiny_fields import HIDDEN, IMAGE, PATCH, VOCAB, _int
from _tiny_missing import documented_shape
from _tiny_shrink import special_token_ids


def _size(value: Any) -> tuple[int, int]:
    if isinstance(value, dict):
        return int(value.get("height", value.get("shortest_edge", IMAGE))), int(
            value.get("width", value.get("shortest_edge", IMAGE))
        )
    if isinstance(value, (list, tuple)):
        return (int(value[0]), int(value[-1])) if value else (IMAGE, IMAGE)
    return int(value), int(value)


def _params(model: Any) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def _required(model: Any) -> list[str]:
    """The forward's parameters without a default."""
    return [
        name
        for name, p in inspect.signature(model.forward).parameters.items()
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


class _Ids:
    """Random token ids that avoid the special ids (placeholders, bos/eos...) of the config."""

    def __init__(self, config: Any) -> None:
        text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
        vocab = _get(text, "vocab_size", default=None) or _get(config, "vocab_size", default=None)
        self.vocab = int(vocab or _sub_vocab(config) or VOCAB)
        specials = special_token_ids(config)
        self.allowed = [i for i in range(3, self.vocab) if i not in specials] or list(range(self.vocab))

    def __call__(self, batch: int, seq: int, seed: int) -> Any:
        import torch

        gen = torch.Generator().manual_seed(seed)
        pick = torch.randint(0, len(self.allowed), (batch, seq), generator=gen)
        return torch.tensor(self.allowed)[pick]


def _sub_vocab(config: Any) -> int | None:
    """The smallest vocab of a composite config's sub-configs (FastSpeech2 + HiFi-GAN: the text encoder's, under
    ``model_config``), where the config itself holds none."""
    sizes = [
        v.vocab_size
        for v in vars(config).values()
        if hasattr(v, "to_dict") and _int(getattr(v, "vocab_size", None)) and v.vocab_size > 0
    ]
    return min(sizes) if sizes else None


def _ones(batch: int, seq: int) -> Any:
    import torch

    return torch.ones(batch, seq, dtype=torch.int64)


def _decoder_ids(model: Any, ids: Any, batch: int, length: int, seed: int) -> Any:
    """``decoder_input_ids``: ``(batch, length)``, or ``(batch, length, codebooks)`` where the forward documents
    one id per codebook, ``(batch_size * num_codebooks, ...)`` (Dia: its decoder config's channels)."""
    shape = " ".join(documented_shape(model.forward, "decoder_input_ids") or [])
    decoder = _get(model.config, "decoder_config", default=model.config)
    codebooks = _get(model.config, "num_codebooks", default=None) or _get(decoder, "num_codebooks", "num_channels")
    if "batch_size * num_codebooks" not in shape or not _int(codebooks):
        return ids(batch, length, seed)
    return ids(batch, length * codebooks, seed).reshape(batch, length, codebooks)


def _text(model: Any, ids: _Ids, batch: int, seq: int, seed: int, pad_left: int = 0) -> dict[str, Any]:
    import torch

    params = _params(model)
    codebooks = _get(model.config, "num_codebooks", default=1)
    per_codebook = "batch_size * num_codebooks" in (model.forward.__doc__ or "")  # the forward's documented layout
    rows = batch * codebooks if _int(codebooks) and codebooks > 1 and per_codebook else batch  # MusicGen: a row each
    inputs: dict[str, Any] = {"input_ids": ids(rows, seq, seed)}
    if "attention_mask" in params:
        mask = torch.ones(batch, seq, dtype=torch.int64)
        if pad_left:
            mask[0, :pad_left] = 0
        inputs["attention_mask"] = mask
    if "decoder_input_ids" in params and getattr(model.config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"] = _decoder_ids(model, ids, batch, max(2, seq // 2 - 1), seed + 7)
    return inputs


def _image_inputs(model: Any, batch: int, seed: int) -> list[dict[str, Any]]:
    import torch

    config = model.config
    vision = _get(config, "vision_config", default=config)
    size = _size(_get(vision, "image_size", "img_size", default=_get(config, "image_size", default=IMAGE)))
    channels = _get(vision, "num_channels", "in_channels", default=3)
    channels = channels if _int(channels) else 3
    gen = torch.Generator().manual_seed(seed)
    layouts = [(batch, channels, *size)]
    if size != (IMAGE, IMAGE):
        layouts.append((batch, channels, IMAGE, IMAGE))
    frames = _get(vision, "num_frames", default=_get(config, "num_frames", default=None))
    if _int(frames):  # video: (batch, frames, channels, height, width)
        layouts.insert(0, (batch, frames, channels, *size))
    layouts.append((batch, 2, channels, *size))  # keypoint matchers: a pair of images per row
    layouts.append((batch, channels, size[0] // 2, size[1]))  # half the height: the model stacks a prompt on it
    processed = _processor_size(model)
    if processed and processed not in (size, (IMAGE, IMAGE)):  # the size its image processor makes (OCR: 48 x 320)
        layouts.append((batch, channels, *processed))
    candidates = [{"pixel_values": torch.randn(*shape, generator=gen)} for shape in layouts]
    return [*candidates, _flat_patches(model, batch, gen)]


def _processor_size(model: Any, largest: int = 512) -> tuple[int, int] | None:
    """The (height, width) the model type's image processor resizes to by default (its class's ``size``), where
    it is fixed and at most ``largest`` a side; else None."""
    try:
        from transformers.models.auto.image_processing_auto import (
            IMAGE_PROCESSOR_MAPPING_NAMES,
            get_image_processor_class_from_name,
        )

        names = IMAGE_PROCESSOR_MAPPING_NAMES.get(model.config.model_type)
        name = (names.get("torchvision") or next(iter(names.values()))) if isinstance(names, dict) else names
        size = getattr(get_image_processor_class_from_name(name), "size", None) if name else None
    except Exception:  # noqa: BLE001 - no image processor to read
        return None
    if not isinstance(size, dict) or not _int(size.get("height")) or not _int(size.get("width")):
        return None
    height, width = size["height"], size["width"]
    return (height, width) if max(height, width) <= largest else None


def _flat_patches(model: Any, batch: int, gen: Any) -> dict[str, Any]:
    """Images as flattened patches, ``(batch, patches, C*P*P)`` (a processor-free convention of NaFlex towers,
    Siglip2 and Fuyu: the patch embedding is a Linear), a square grid of up to 4 x 4 patches; with their grid
    ``spatial_shapes`` and ``pixel_attention_mask`` where the forward takes them."""
    import torch

    vision = _get(model.config, "vision_config", default=model.config)
    patch = _get(vision, "patch_size", default=PATCH)
    patch = patch if _int(patch) else PATCH
    channels = _get(vision, "num_channels", default=3)
    channels = channels if _int(channels) else 3
    image = _size(_get(vision, "image_size", default=IMAGE))[0]
    side = max(2, min(4, image // patch))
    inputs = {"pixel_values": torch.randn(batch, side * side, channels * patch * patch, generator=gen)}
    params = _params(model) | _inner_params(model)
    if "spatial_shapes" in params:
        inputs["spatial_shapes"] = torch.tensor([[side, side]] * batch)
    if "pixel_attention_mask" in params:
        inputs["pixel_attention_mask"] = torch.ones(batch, side * side, dtype=torch.int64)
    return inputs


def _inner_params(model: Any) -> set[str]:
    """The forward parameters of the base model and encoder a head passes its ``**kwargs`` on to."""
    import torch

    inner: set[str] = set()
    stack = [getattr(model, name, None) for name in ("model", "encoder")]
    while stack:
        module = stack.pop()
        if isinstance(module, torch.nn.Module):
            inner |= _params(module)
            stack += [getattr(module, name, None) for name in ("model", "encoder")]
    return inner


def _audio_feature_inputs(model: Any, batch: int, frames: int, seed: int) -> list[dict[str, Any]]:
    import torch

    config = model.config
    names = ("feature_projection_input_dim", "num_mel_bins", "feature_size", "input_feat_per_channel", "n_mels")
    audio = _get(config, "audio_config", "encoder_config", default=config)
    if _get(audio, *names) is None:  # the mel size held by another tower (CLVP's decoder_config)
        subs = [v for v in vars(config).values() if hasattr(v, "to_dict") and _get(v, *names) is not None]
        audio = subs[0] if subs else audio
    mels = _get(audio, *names, default=16)
    for factor in ("input_channels", "num_stacked_frames"):  # channels; low-frame-rate stacking (mels x frames)
        times = _get(audio, factor, default=1)
        mels = mels * times if _int(times) and times > 1 else mels
    gen = torch.Generator().manual_seed(seed)
    candidates = []
    for shape in ((batch, mels, frames), (batch, frames, mels)):
        candidates.append({"input_features": torch.randn(*shape, generator=gen)})
    params = _params(model)
    masks = [n for n in ("attention_mask", "input_features_mask", "feature_attention_mask") if n in params]
    for mask in masks:  # some encoders need the frame mask
        for shape in ((batch, mels, frames), (batch, frames, mels)):
            features = torch.randn(*shape, generator=gen)
            candidates.append({"input_features": features, mask: torch.ones(batch, frames, dtype=torch.int64)})
    return candidates


def _waveform_inputs(model: Any, batch: int, samples: int, seed: int, latents: bool = False) -> list[dict[str, Any]]:
    """Waveform candidates; ``latents``: the forward names its input ``hidden_states`` (an audio tokenizer's decoder
    alone takes latents, ``(batch, hidden_size, frames)``, a frame per 500 samples)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    candidates = [
        {"input_values": torch.randn(batch, samples, generator=gen)},
        {"input_values": torch.randn(batch, 1, samples, generator=gen)},
    ]
    hidden = _get(model.config, "hidden_size", default=None)
    if latents and _int(hidden):
        candidates.append({"input_values": torch.randn(batch, hidden, max(2, samples // 500), generator=gen)})
    mels = _get(model.config, "num_mel_bins", default=None)
    if _int(mels):  # spectrogram transformers: (batch, frames, mel bins), frames fixed by the config
        frames = _get(model.config, "max_length", default=64)
        candidates.append({"input_values": torch.randn(batch, frames, mels, generator=gen)})
    return candidates


def _decoder_inputs(model: Any, ids: _Ids, inputs: dict[str, Any], batch: int, dec: int, seed: int) -> None:
    params = _params(model)
    if "decoder_input_ids" in params and getattr(model.config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"] = _decoder_ids(model, ids, batch, dec, seed + 7)


def _eager(model: Any, inputs: dict[str, Any]) -> Any:
    import torch

    with torch.no_grad():
        return model(**inputs)


def _own_cache_class(model: Any, inputs: dict[str, Any]) -> bool:
    """Whether eager returns a cache of the model's own class, outside transformers' ``Cache`` hierarchy (xLSTM's
    ``xLSTMCache``), which no export carries: hub_export refuses it and says to pass ``use_cache=False``."""
    from hub_export.errors import ExportError
    from hub_export.structure import flatten_value

    try:
        flatten_value(_eager(model, inputs), (), [])
    except ExportError as exc:
        return "use_cache=False" in str(exc)
    except Exception:  # noqa: BLE001 - another refusal is the export's to report
        return False
    return False


def _builders(model: Any, name: str, inputs: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    """Candidates for an input the forward asked for by its error (``_tiny_missing``), from the builder of its
    kind; [] where none builds it (then the shape the forward documents is used)."""
    from _tiny_missing import _batch

    batch = _batch(inputs)
    if name == "input_features":  # beside a waveform (an audio codec's semantic branch): its frame rate
        wave = inputs.get("input_values")
        ratios = _get(model.config, "downsampling_ratios", default=None)
        hop = math.prod(ratios) if isinstance(ratios, (list, tuple)) and ratios else None
        frames = wave.shape[-1] // hop if wave is not None and hop else 64
        return _audio_feature_inputs(model, batch, max(frames, 2), seed)
    if name == "pixel_values":
        return _image_inputs(model, batch, seed)
    if name in ("input_ids", "decoder_input_ids"):
        return [{name: _Ids(model.config)(batch, 7 if name == "input_ids" else 3, seed + 7)}]
    if name == "flattened_patches":
        return [_row_col_patches(model, batch, seed)]
    if name == "image_attention_mask" and "input_ids" in inputs:  # IDEFICS: which images each token attends to
        import torch

        pixels = inputs.get("pixel_values")
        images = pixels.shape[1] if pixels is not None and pixels.dim() == 5 else 1
        return [{name: torch.ones(batch, inputs["input_ids"].shape[1], images, dtype=torch.int64)}]
    return []


def _row_col_patches(model: Any, batch: int, seed: int, side: int = 4) -> dict[str, Any]:
    """Pix2Struct-style flattened patches, ``(batch, patches, 2 + C*P*P)``: each patch's row and column (from 1;
    0 pads) before its pixels, a ``side`` x ``side`` grid."""
    import torch

    vision = _get(model.config, "vision_config", default=model.config)
    patch = _get(vision, "patch_size", default=PATCH)
    width = _get(vision, "patch_embed_hidden_size", default=None) or 3 * patch * patch
    pixels = torch.randn(batch, side * side, width, generator=torch.Generator().manual_seed(seed + 5))
    rows = torch.arange(1, side + 1).repeat_interleave(side).float()
    cols = torch.arange(1, side + 1).repeat(side).float()
    grid = torch.stack([rows, cols], -1).expand(batch, -1, -1)
    return {"flattened_patches": torch.cat([grid, pixels], -1)}


def _complete(model: Any, inputs: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    """``inputs`` with the inputs eager's errors ask for added, once eager runs on them (``_tiny_missing``)."""
    from _tiny_missing import run_completing

    return run_completing(model, inputs, _builders, seed)


def _first_running(model: Any, candidates: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, BaseException | None]:
    """The first candidate eager runs; else the error of the candidate that ran furthest (the deepest traceback:
    a size mismatch inside a layer says more than the forward refusing a layout at its door)."""
    import traceback

    error, depth = None, -1
    for inputs in candidates:
        try:
            return _complete(model, inputs), None
        except Exception as exc:  # noqa: BLE001 - the oracle: the next candidate
            frames = len(traceback.extract_tb(exc.__traceback__))
            if frames > depth:
                error, depth = exc, frames
    return None, error


_MISMATCH = re.compile(r"tokens:?\s*(\d+),?\s*features:?\s*(\d+)", re.IGNORECASE)


def _grid_pixels(model: Any, batch: int, gen: Any, layout: int = 0) -> dict[str, Any]:
    """Qwen-VL-style images: flattened patches (rows = t*h*w per image, C*T*P*P each) and their (t, h, w) grid.
    ``layout`` 1: a temporal patch of 2 the config does not state; 2: patches as (C, P, P) images."""
    import torch

    vision = _get(model.config, "vision_config", default=model.config)
    patch = _get(vision, "patch_size", "spatial_patch_size", default=PATCH)
    temporal = _get(vision, "temporal_patch_size", "patch_temporal", default=2 if layout == 1 else 1)
    merge = _get(vision, "spatial_merge_size", "merge_size", default=2)
    channels = _get(vision, "in_channels", "in_chans", "num_channels", default=3)
    side = 2 * merge
    rows = batch * side * side
    if layout == 2:
        pixels = torch.randn(rows, channels, patch, patch, generator=gen)
    else:
        pixels = torch.randn(rows, channels * temporal * patch * patch, generator=gen)
    return {"pixel_values": pixels, "image_grid_thw": torch.tensor([[1, side, side]] * batch)}


def _patch_positions(model: Any, batch: int, gen: Any, name: str = "pixel_position_ids") -> dict[str, Any]:
    """Images as flattened patches (batch, patches, C*P*P) with their (x, y) grid positions under ``name``: a
    square grid whose side is twice the pooling kernel (Gemma 4 pools k x k patches into one soft token)."""
    import torch

    vision = _get(model.config, "vision_config", default=model.config)
    patch = _get(vision, "model_patch_size", "patch_size", default=PATCH)
    channels = _get(vision, "num_channels", default=3)
    side = 2 * (_get(vision, "pooling_kernel_size", default=1) or 1)
    ys, xs = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    grid = torch.stack([xs.flatten(), ys.flatten()], dim=-1)
    return {
        "pixel_values": torch.rand(batch, side * side, channels * patch * patch, generator=gen),
        name: grid.expand(batch, -1, -1).clone(),
    }


def _vlm_inputs(model: Any, ids: _Ids, batch: int, text: int, seed: int) -> tuple[dict[str, Any], BaseException | None]:
    """input_ids with image placeholders (between the vision start/end tokens where the config has them) +
    the images; the placeholder count is read from the model's mismatch error (tokens: N, features: M) when the
    first guess is wrong."""
    import torch

    config = model.config
    vision = _get(config, "vision_config", default=config)
    size = _size(_get(vision, "image_size", default=IMAGE))
    patch = _get(vision, "patch_size", default=PATCH)
    patch = patch if _int(patch) else PATCH
    params = _params(model)
    gen = torch.Generator().manual_seed(seed)
    inner = params | _inner_params(model)  # a head passing **kwargs on to its base model and encoder (DiffusionGemma)
    positions = next((n for n in ("image_position_ids", "pixel_position_ids") if n in inner), None)
    if "image_grid_thw" in params:
        image_sets = [_grid_pixels(model, batch, gen, layout) for layout in (0, 1, 2)]
        count = 4
    elif getattr(model, "main_input_name", None) == "flattened_patches":  # Pix2Struct: patches, row and column
        image_sets = [_row_col_patches(model, batch, seed)]
        count = 0
    elif positions:  # Gemma 4: flattened patches and their (x, y) positions
        image_sets = [_patch_positions(model, batch, gen, positions)]
        count = 4
    else:
        channels = _get(vision, "num_channels", default=3)
        pixels = torch.randn(batch, channels if _int(channels) else 3, *size, generator=gen)
        image_sets = [{"pixel_values": pixels}, {"pixel_values": pixels[:, None]}]  # (B, C, H, W), (B, 1, C, H, W)
        flat = _flat_patches(model, batch, gen)  # (B, patches, C*P*P)
        image_sets.append(flat)
        high = _get(config, "high_res_vision_config", default=None)
        if "high_res_pixel_values" in params and high is not None:  # DeepSeek-VL hybrid: a second, larger view
            hsize = _size(_get(high, "image_size", default=2 * IMAGE))
            image_sets = [
                {**images, "high_res_pixel_values": torch.randn(batch, 3, *hsize, generator=gen)}
                for images in image_sets
            ]
        if "image_sizes" in params:  # LLaVA-NeXT / Pixtral towers need them; a CLIP tower refuses them
            sizes = torch.tensor([list(size)] * batch)
            image_sets += [{**images, "image_sizes": sizes} for images in image_sets]
        count = _get(config, "image_seq_length", "mm_tokens_per_image", "num_query_tokens", default=None) or (
            size[0] // patch
        ) * (size[1] // patch)
    first_error: BaseException | None = None
    for images in image_sets:
        inputs, error = _placeholders(model, ids, images, count, batch, text, seed)
        if error is None:
            return inputs, None
        if first_error is None or (_config_fix(error) and not _config_fix(first_error)):
            first_error = error  # the first layout's, unless a later one got as far as a config fix (M-RoPE sections)
        patches = re.search(r"got split_sizes=\[(\d+)", str(error))
        if patches and images["pixel_values"].dim() == 4:  # LLaVA-NeXT: (B, patches, C, H, W), patches per image
            tiles = images["pixel_values"][:, None].expand(-1, int(patches.group(1)), -1, -1, -1).contiguous()
            image_sets.append({**images, "pixel_values": tiles})
    return {}, first_error


def _config_fix(error: BaseException) -> bool:
    """Whether the build's config rules read a fix from ``error`` (a size back-off aside)."""
    from _tiny_adjust import _SIZE_BACKOFFS, _adjustment

    return _adjustment(error, {}, [note for note, _keep in _SIZE_BACKOFFS]) is not None


def _placeholders(
    model: Any, ids: _Ids, images: dict[str, Any], count: int, batch: int, text: int, seed: int
) -> tuple[dict[str, Any], BaseException | None]:
    import torch

    config = model.config
    params = _params(model)
    token = _get(config, "image_token_id", "image_token_index", default=None)
    if token is None:  # no placeholders: the image features are prepended (BLIP-2's legacy path) or cross-attended
        inputs = {**_text(model, ids, batch, text, seed), **images}
        if "input_ids" not in params:  # the encoder reads the image alone (Pix2Struct): the text is the decoder's
            inputs = {k: v for k, v in inputs.items() if k in images or k.startswith("decoder_")}
        marks = next((n for n in params if n.startswith("image") and n.endswith("position_mask")), None)
        latents = _get(config, "latent_query_num", default=None)
        if marks and _int(latents) and "pixel_values" in params:  # Kosmos-2: the positions its latent queries fill
            seq = 2 + latents + text
            inputs.update(_text(model, ids, batch, seq, seed))
            inputs[marks] = torch.zeros(batch, seq, dtype=torch.int64)
            inputs[marks][:, 2 : 2 + latents] = 1
        if "bbox" in params:  # a layout model (UDOP): the tokens' boxes
            inputs["bbox"] = _boxes(model, *inputs["input_ids"].shape, torch.Generator().manual_seed(seed + 3))
        if "qformer_input_ids" in params:
            inputs["qformer_input_ids"] = ids(batch, 4, seed + 2)
            inputs["qformer_attention_mask"] = _ones(batch, 4)
        try:
            return _complete(model, inputs, seed), None
        except Exception as exc:  # noqa: BLE001
            return {}, exc
    start = _get(config, "vision_start_token_id", "image_start_token_id", "boi_token_id", default=None)
    end = _get(config, "vision_end_token_id", "image_end_token_id", "eoi_token_id", default=None)
    error: BaseException | None = None
    hidden = _get(config.get_text_config(decoder=True), "hidden_size", default=HIDDEN)
    queue, tried = [count], set()
    while queue and len(tried) < 6:
        count = queue.pop(0)
        if count in tried or count <= 0:
            continue
        tried.add(count)
        input_ids = placeholder_ids(ids, batch, text, seed, int(token), count, start, end)
        inputs: dict[str, Any] = {"input_ids": input_ids}
        if "attention_mask" in params:
            inputs["attention_mask"] = torch.ones_like(input_ids)
        inputs.update(images)
        if "qformer_input_ids" in params:  # InstructBLIP: the Q-Former's own prompt
            inputs["qformer_input_ids"] = ids(batch, 4, seed + 2)
            inputs["qformer_attention_mask"] = _ones(batch, 4)
        if "mm_token_type_ids" in params:  # M-RoPE: 1 marks an image token
            inputs["mm_token_type_ids"] = (input_ids == int(token)).long()
        _decoder_inputs(model, ids, inputs, batch, 3, seed)  # an encoder-decoder VLM (T5Gemma 2)
        try:
            return _complete(model, inputs, seed), None
        except Exception as exc:  # noqa: BLE001
            match = _MISMATCH.search(str(exc))
            error = exc if match is None or error is None or _MISMATCH.search(str(error)) else error  # the telling one
            if match:  # the feature count is per batch, or of a flattened (rows x hidden) tensor
                features = int(match.group(2))
                for div in (batch, 1, batch * hidden, hidden):
                    if features % div == 0:
                        queue.append(features // div)
    return {}, error


def placeholder_ids(
    ids: _Ids, batch: int, text: int, seed: int, token: int, count: int, start: Any = None, end: Any = None
) -> Any:
    """Two text tokens, ``count`` placeholders ``token`` (between the ``start`` / ``end`` tokens where the config
    has them), then ``text`` text tokens: ``(batch, length)`` ids."""
    import torch

    parts = [ids(batch, 2, seed)]
    parts += [torch.full((batch, 1), int(start))] if _int(start) else []
    parts.append(torch.full((batch, count), token))
    parts += [torch.full((batch, 1), int(end))] if _int(end) else []
    parts.append(ids(batch, text, seed + 1))
    return torch.cat(parts, dim=1)


def _image_like(name: str) -> bool:
    """A forward input shaped like the image (another view, a prompt image, a segmentation mask of it)."""
    return name.endswith("pixel_values") or name in ("prompt_masks", "pixel_masks", "prompt_pixel_values")


def _extras(model: Any, ids: _Ids, inputs: dict[str, Any], seed: int) -> dict[str, Any]:
    """``inputs`` plus the other modalities the forward takes (dual encoders: text + image; layout: boxes)."""
    import torch

    params = _params(model)
    first = next(iter(inputs.values()))
    batch = first.shape[0]
    out = dict(inputs)
    gen = torch.Generator().manual_seed(seed + 3)
    if "pixel_values" in params and "pixel_values" not in out:
        out.update(_image_inputs(model, batch, seed)[0])
    if "input_ids" in params and "input_ids" not in out:
        out.update(_text(model, ids, batch, 7, seed))
    if "pixel_values" in out:  # required images besides the main one (SegGPT's prompt image and its mask)
        for name in _required(model):
            if _image_like(name) and name not in out:
                out[name] = torch.randn(out["pixel_values"].shape, generator=gen)
    required = _required(model)
    if "input_values" in required and "input_values" not in out:  # audio-text dual encoders
        out["input_values"] = torch.randn(batch, 1, 4000, generator=gen)
    if "input_features" in params and "input_features" not in out:  # audio-text models (CLVP, speech LMs)
        out.update(_audio_feature_inputs(model, batch, 64, seed)[0])
    if "bbox" in params and "input_ids" in out:
        out["bbox"] = _boxes(model, *out["input_ids"].shape, gen)
    return out


def _boxes(model: Any, batch: int, seq: int, gen: Any) -> Any:
    """A layout model's token boxes, ``(batch, seq, 4)``: (x0, y0, x1, y1) with x0 < x1, y0 < y1, within 1000 and
    within its (shrunk) coordinate table, ``max_2d_position_embeddings``."""
    import torch

    table = _get(model.config, "max_2d_position_embeddings", default=1024)
    half = min(1000, table if _int(table) else 1024) // 2
    corners = torch.randint(0, half, (batch, seq, 2), generator=gen)
    return torch.cat([corners, corners + torch.randint(1, half, (batch, seq, 2), generator=gen)], -1)


def _same_layout(candidate: dict[str, Any], sample: dict[str, Any], frames_axis: int) -> bool:
    other_axis = 3 - frames_axis
    same_mask = ("attention_mask" in candidate) == ("attention_mask" in sample)
    return same_mask and candidate["input_features"].shape[other_axis] == sample["input_features"].shape[other_axis]


def _with_decoder(model: Any, ids: _Ids, candidates: list[dict[str, Any]], batch: int, dec: int, seed: int) -> list:
    for inputs in candidates:
        _decoder_inputs(model, ids, inputs, batch, dec, seed)
    return candidates


_SIZES = re.compile(
    r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton dimension 1"
)


def _wanted_length(error: BaseException | None, tried: list[int]) -> int | None:
    """The sequence length a size mismatch on axis 1 asks for, where the other size is one of the ``tried``."""
    match = _SIZES.search(str(error))
    if not match:
        return None
    a, b = int(match.group(1)), int(match.group(2))
    return b if a in tried and b not in tried else a if b in tried and a not in tried else None
