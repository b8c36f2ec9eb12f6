"""Config fixes read from a tiny model's own errors (sizes the defaults hide in the modeling code)."""

from __future__ import annotations

import copy
import re
from typing import Any

from _config_backoff import levels, restore_defaults
from _tiny_fields import (
    _EXPERTS,
    _HEADS,
    _IMAGE,
    _KV_HEADS,
    _LAYER_KEYS,
    _MEL,
    _NO_SHRINK,
    _PATCH,
    _POSITIONS,
    _SPECIAL,
    _STAGE_DEPTHS,
    _STAGE_SIZES,
    _TOP_K,
    _VOCAB,
    _WINDOW,
    HEAD_DIM,
    _int,
)
from _tiny_shrink import _INDEX_LIST, _min_vocab

_SPLIT_SUM = re.compile(r"split_sizes to sum exactly to (\d+)")


def _adjustment(exc: BaseException, default: dict[str, Any], notes: list[str] = ()) -> tuple[str, Any] | None:
    """A config fix read from the model's own error (a size the defaults hide in the modeling code);
    ``default``: the unshrunk defaults, for fixes that back a size off to its default; ``notes``: the fixes
    already applied (a back-off goes one step further each time)."""
    text = str(exc)
    match = _SPLIT_SUM.search(text)
    if match:  # M-RoPE sections default to [8, 12, 12] in the modeling code: split the shrunk rotary dim
        total = int(match.group(1))
        section = [total - 2 * (total // 3), total // 3, total // 3]

        def mrope(d: dict[str, Any]) -> None:
            for level in levels(d):
                if isinstance(level.get("rope_parameters"), dict):
                    level["rope_parameters"]["mrope_section"] = section

        return f"mrope_section={section}", mrope
    if "got (NoneType)" in text and "ne()" in text:  # a pad token id the checkpoint sets, compared with the ids

        def pad(d: dict[str, Any]) -> None:
            for level in levels(d):
                if "pad_token_id" in level and level["pad_token_id"] is None:
                    level["pad_token_id"] = 1

        return "pad_token_id=1", pad
    if re.search(r"rotates \d+ of head_dim=\d+ dims", text):  # partial rotary factor leaves too few dims

        def wider(d: dict[str, Any]) -> None:
            for level in levels(d):
                if level.get("head_dim") == HEAD_DIM:
                    level["head_dim"] = 4 * HEAD_DIM

        return f"head_dim={4 * HEAD_DIM}", wider
    if (
        "is not finite (the tiny random model" in text or "the tiny random model's activations vanish" in text
    ):  # activations vanished (or overflowed) through the stack
        wider = "initializer_range x5 (the random model's outputs were not finite, or vanished)"
        factor = 5.0 if wider not in notes else 1 / 25  # still not finite: they overflowed, narrower than the default

        def init(d: dict[str, Any]) -> None:
            for level in levels(d):
                if isinstance(level.get("initializer_range"), float):
                    level["initializer_range"] *= factor

        return (wider, init) if factor > 1 else ("initializer_range /5 (wider still overflowed)", init)
    missing = _MISSING_ID.search(text)
    if missing:  # the modeling code reads a token id its config class does not declare (the checkpoint's does)
        name = missing.group(1)

        def token(d: dict[str, Any]) -> None:
            d[name] = _min_vocab(d) - 9 - len(name) % 4  # a free id near the top of the vocab

        return f"{name} set", token
    if "Could not find a `sliding_window` argument in the config" in text:  # a window the checkpoint sets

        def window(d: dict[str, Any]) -> None:
            for level in levels(d):
                if "sliding_window" in level and level["sliding_window"] is None:
                    level["sliding_window"] = 4

        return "sliding_window=4 set", window
    rate = _MISSING_RATE.search(text)
    if rate:  # a dropout rate the composite config copies onto its sub-configs (T5Gemma 2's encoder alone): none
        name = rate.group(1)

        def dropout(d: dict[str, Any]) -> None:
            for level in levels(d):
                level.setdefault(name, 0.0)

        return f"{name}=0.0 set", dropout
    attribute = _MISSING_CONFIG_FIELD.search(text)
    if attribute and _elsewhere(default, attribute.group(1)) is not None:  # a field the checkpoint's sub-config has
        name = attribute.group(1)

        def field(d: dict[str, Any]) -> None:
            value = _elsewhere(d, name)  # the shrunk value (a head count shrunk with the others)
            value = _elsewhere(default, name) if value is None else value
            for level in levels(d):
                if "model_type" in level:
                    level.setdefault(name, copy.deepcopy(value))

        return f"{name} copied to the config levels lacking it", field
    if _NOTHING_TO_TIE.search(text):  # weights shared by the layers of one kind (Zamba's shared transformer)

        def twice(d: dict[str, Any]) -> None:
            for level in levels(d):
                _repeat_layers(level)

        return "layers repeated (the model ties the weights of the layers of one kind: two of each)", twice
    if _SIZE_MISMATCH.search(text):  # sizes tied in the modeling code: back off, the narrowest first
        for note, keep in _SIZE_BACKOFFS:
            if note not in notes:

                def restore(d: dict[str, Any], keep: Any = keep) -> None:
                    restore_defaults(d, default, keep)

                return note, restore
    return None


def _is_size(k: str, v: Any) -> bool:
    """A width / head / channel size (not a layer count, layer list, vocab, position, image size or token id)."""
    if k in _LAYER_KEYS or k in _NO_SHRINK or _STAGE_DEPTHS.match(k) or _INDEX_LIST.search(k):
        return False
    if k.startswith("num_") and not (_HEADS.match(k) or _KV_HEADS.match(k)):  # counts (queries, labels...)
        return False
    if any(p.match(k) for p in (_VOCAB, _POSITIONS, _IMAGE, _SPECIAL, _EXPERTS, _TOP_K, _WINDOW, _MEL)):
        return False
    ints = v if isinstance(v, list) else [v]
    return bool(ints) and all(_int(x) for x in ints)


#: (note, which default keys to restore) after a size mismatch, tried in this order
_SIZE_BACKOFFS: list[tuple[str, Any]] = [
    ("patch sizes kept (the stem's stride is fixed in the modeling code)", lambda k, v: bool(_PATCH.match(k))),
    ("channel lists kept (the modeling code ties them)", lambda k, v: bool(_STAGE_SIZES.match(k))),
    ("widths kept, layers shrunk (the modeling code ties them)", _is_size),
]


_MISSING_CONFIG_FIELD = re.compile(r"'\w+Config' object has no attribute '(\w+)'")


def _elsewhere(default: dict[str, Any], name: str) -> Any:
    """The value of ``name`` at another level of the defaults (another sub-config, or a dict field such as
    ``rope_parameters``), where the modeling code reads it from a config level that does not declare it (DBRX's
    attention config, its ``rope_theta``): None when no level holds it."""
    return next((level[name] for level in levels(default) if level.get(name) is not None), None)


_MISSING_ID = re.compile(r"object has no attribute '(\w+_token_id)'")
_MISSING_RATE = re.compile(r"object has no attribute '(\w*dropout\w*)'")
_NOTHING_TO_TIE = re.compile(r"tie_weights_keys.*to tie into \[\]", re.DOTALL)


def _repeat_layers(level: dict[str, Any]) -> None:
    """Repeat the (shrunk) layer stack of one config level once: its count and every per-layer list."""
    for key in _LAYER_KEYS:
        n = level.get(key)
        if not _int(n) or n <= 0:
            continue
        for k, v in list(level.items()):
            if isinstance(k, str) and k != key and isinstance(v, list) and len(v) == n:
                level[k] = v + v
        level[key] = 2 * n
        return


_SIZE_MISMATCH = re.compile(
    r"must match the size of tensor|is invalid for input of size|shapes cannot be multiplied|Sizes of tensors must match|"
    r"expected input with shape|to have \d+ channels"
)
