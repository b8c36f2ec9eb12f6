"""Audio-language prompts for the generation cells of ``coverage.py --all`` (``_coverage_generation``).

The forward columns run an audio-language model (Voxtral, GLM-ASR, Qwen3-ASR, AudioFlamingo 3...) on text alone,
which its forward accepts; its ``generate`` is what users export it for, on audio. :func:`audio_prompts` builds two
prompts of that kind: audio features (the layouts ``_tiny_inputs._audio_feature_inputs`` tries), and token ids with
as many audio placeholders (``audio_token_id``) as the audio encoder yields features, between the audio start/end
tokens where the config has them. The count is read from ``get_audio_features`` on the features, else from the
model's own mismatch error (``tokens: N, features: M``); eager runs each prompt (the oracle).
"""

from __future__ import annotations

import re
from typing import Any

from _sample_inputs import _get
from _tiny_fields import _int
from _tiny_inputs import _MISMATCH, _audio_feature_inputs, _complete, _Ids, placeholder_ids

__all__ = ["audio_prompts"]

_AUDIO_INPUTS = ("input_features", "input_values", "audio_values", "audio_features")
_START = ("audio_start_token_id", "audio_bos_token_id", "boa_token_id", "begin_audio_token_id")
_LENGTH = re.compile(r"features to be of length (\d+)")


class _FramesWanted(Exception):
    def __init__(self, frames: int) -> None:
        super().__init__(f"{frames} frames")
        self.frames = frames


_END = ("audio_end_token_id", "audio_eos_token_id", "eoa_token_id", "end_audio_token_id")


def audio_prompts(case: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """``(sample, other)`` generate prompts with audio for an audio-language model whose sample holds text only
    (two rows each; the other 4 text tokens longer, its first row left-padded by 2); None for another model.

    Raises:
        Exception: eager refused every prompt tried (its error for the last).
    """
    model = case.model
    if getattr(model, "get_audio_features", None) is None or any(name in case.sample for name in _AUDIO_INPUTS):
        return None
    token = _get(model.config, "audio_token_id", "audio_token_index", default=None)
    if token is None and "audio_token_id" in model.config.to_dict():  # unset by the class (Voxtral): a free id
        vocab = _get(model.config.get_text_config(decoder=True), "vocab_size", default=None)
        if not _int(vocab):
            return None
        token = model.config.audio_token_id = vocab - 1
        case.notes.append(f"audio_token_id={token} (the config leaves it unset)")
    if not _int(token):
        return None
    ids = _Ids(model.config)
    sample = _prompt(model, ids, int(token), text=5, seed=0)
    other = _prompt(model, ids, int(token), text=9, seed=1)
    if "attention_mask" in other:
        other["attention_mask"] = other["attention_mask"].clone()
        other["attention_mask"][0, :2] = 0
        other = _complete(model, other, 1)
    return sample, other


def _counts(model: Any, features: dict[str, Any], batch: int) -> list[int]:
    """Placeholder counts the audio encoder's output suggests (features per row), best guess first."""
    import torch

    try:
        with torch.no_grad():
            out = model.get_audio_features(**features)
    except Exception as exc:  # noqa: BLE001 - the layout the encoder refuses: the forward's error will tell
        wanted = _LENGTH.search(str(exc))
        if wanted:  # an encoder that takes one number of frames (Voxtral: 128 mel frames, as its error says)
            raise _FramesWanted(int(wanted.group(1))) from exc
        return []
    leaves = (
        [out]
        if isinstance(out, torch.Tensor)
        else [getattr(out, k, None) for k in ("pooler_output", "last_hidden_state")]
    )
    hidden = _get(model.config.get_text_config(decoder=True), "hidden_size", default=None)
    counts = []
    for leaf in leaves:
        if not isinstance(leaf, torch.Tensor) or leaf.dim() < 2:
            continue
        rows = leaf.numel() // leaf.shape[-1]
        if leaf.shape[-1] == hidden and rows % batch == 0:
            counts.append(rows // batch)
    return counts


def _prompt(model: Any, ids: _Ids, token: int, text: int, seed: int, batch: int = 2) -> dict[str, Any]:
    import torch

    config = model.config
    start, end = _get(config, *_START, default=None), _get(config, *_END, default=None)
    error: BaseException | None = None
    lengths = [32, 64]
    while lengths:
        frames = lengths.pop(0)
        for features in _audio_feature_inputs(model, batch, frames, seed):
            if "attention_mask" in features:
                continue  # a frame mask under the name the text's mask has: not for an audio-language model
            try:
                counts = _counts(model, features, batch)
            except _FramesWanted as wanted:
                if wanted.frames not in (32, 64, *lengths) and wanted.frames <= 4096:
                    lengths.append(wanted.frames)
                error = wanted.__cause__
                continue
            queue, tried = counts or [frames, frames // 2, frames // 4], set()
            while queue and len(tried) < 6:
                count = queue.pop(0)
                if count in tried or count <= 0:
                    continue
                tried.add(count)
                input_ids = placeholder_ids(ids, batch, text, seed, token, count, start, end)
                inputs = {**features, "input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
                try:
                    return _complete(model, inputs, seed)
                except Exception as exc:  # noqa: BLE001 - the next count or layout
                    error = exc
                    match = _MISMATCH.search(str(exc))
                    if match:
                        queue += [int(match.group(2)) // d for d in (batch, 1) if int(match.group(2)) % d == 0]
    assert error is not None
    raise error
