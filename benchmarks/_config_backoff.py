"""Validate a shrunk config with the config class's own validators and back off where they refuse it.

``coverage.py --all`` shrinks every size field of a config by name (``_tiny_configs.py``); a config class with
strict validators (``validate_architecture``) refuses a few of the results: sizes the class ties together
("num_attention_heads (4) must be the same as num_key_value_heads (2)", "index_topk (4) must be divisible by
index_kpool (16)", "hidden_size should be equal to the last value in out_features"), or defaults that do not even
validate on their own ("hidden_size_per_layer_input must be 0, got 256"). :func:`construct` reads the refusal,
applies the fix it states (by rule, for every class), and tries again; a refusal no rule reads restores the
fields it names to their defaults, then the layer counts (:func:`construct`'s ``unshrunk``).
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable
from typing import Any

__all__ = ["construct", "fix_from_message", "levels", "restore_defaults"]

_NAME = r"`?(?P<{0}>[A-Za-z_][\w.]*)`?"
#: "a (x) must be the same as / equal b (y)": a := y
_EQUAL = re.compile(
    _NAME.format("a") + r"\s*\((?P<av>-?\d+)\)\s*must (?:be the same as|equal|be equal to|match)\s*"
    r"`?(?P<b>[^()`]+?)`?\s*\((?P<bv>-?\d+)\)"
)
#: "a (x) must be divisible by b (y)": b := gcd(x, y)
_DIVISIBLE = re.compile(
    _NAME.format("a")
    + r"\s*\(=?\s*(?P<av>\d+)\)\s*must be divisible by\s*"
    + _NAME.format("b")
    + r"\s*\(=?\s*(?P<bv>\d+)\)"
)
#: "a must be 0 / False / None, got v": a := that value
_MUST_BE = re.compile(_NAME.format("a") + r"\s+must be\s+`?(?P<v>-?\d+|False|True|None)`?,\s*got")
#: "a should be equal to the last value in b. a = x, b = y": a := y
_SHOULD_EQUAL = re.compile(r"(?P<a>\w+) should be equal to .*?(?P=a) = (?P<av>-?\d+), \w+ = (?P<bv>-?\d+)")
_LITERALS: dict[str, Any] = {"False": False, "True": True, "None": None}


def levels(d: dict[str, Any]) -> list[dict[str, Any]]:
    """``d`` and every config level nested in it (sub-configs; not the label maps)."""
    found = [d]
    for k, v in d.items():
        if isinstance(k, str) and isinstance(v, dict) and k not in ("id2label", "label2id"):
            found += levels(v)
    return found


def _set(d: dict[str, Any], name: str, value: Any, where: Any = None, create: bool = False) -> bool:
    """Set ``name`` (a dotted path, or a key at any level, preferring levels where it equals ``where``)."""
    if "." in name:
        *path, key = name.split(".")
        level: Any = d
        for part in path:
            level = level.get(part) if isinstance(level, dict) else None
        if isinstance(level, dict) and (key in level or create):
            level[key] = value
            return True
        name = key
    holders = [level for level in levels(d) if name in level]
    matching = [level for level in holders if where is not None and level[name] == where]
    for level in matching or holders:
        level[name] = value
    if not holders and create:
        d[name] = value
        return True
    return bool(holders)


def fix_from_message(d: dict[str, Any], text: str, create: bool = False) -> str | None:
    """Apply the fix a validator's message states to ``d`` in place; its note, or None when no rule reads it."""
    match = _EQUAL.search(text)
    if match and _set(d, match["a"], int(match["bv"]), int(match["av"]), create):
        return f"{match['a']}={match['bv']} (validator: equal to {match['b'].strip()})"
    match = _DIVISIBLE.search(text)
    if match:
        value = math.gcd(int(match["av"]), int(match["bv"])) or 1
        if _set(d, match["b"], value, int(match["bv"]), create):
            return f"{match['b']}={value} (validator: must divide {match['a']})"
    match = _MUST_BE.search(text)
    if match:
        raw = match["v"]
        value = _LITERALS[raw] if raw in _LITERALS else int(raw)
        if _set(d, match["a"], value, None, create):
            return f"{match['a']}={raw} (validator)"
    match = _SHOULD_EQUAL.search(text)
    if match and _set(d, match["a"], int(match["bv"]), int(match["av"]), create):
        return f"{match['a']}={match['bv']} (validator)"
    return None


def _named_keys(d: dict[str, Any], text: str) -> list[str]:
    words = set(re.findall(r"[A-Za-z_]\w*", text))
    return sorted({k for level in levels(d) for k in level if isinstance(k, str) and k in words})


def restore_defaults(d: dict[str, Any], default: Any, keep: Callable[[str, Any], bool]) -> bool:
    """Back sizes off: set every key of ``d`` (at any config level) for which ``keep(key, default value)`` holds to
    the value at the same path of ``default``; whether anything changed."""
    changed = False
    if not isinstance(default, dict):
        return changed
    for k, v in list(d.items()):
        if not isinstance(k, str) or k in ("id2label", "label2id"):
            continue
        if k in default and keep(k, default[k]) and default[k] != v:
            d[k] = copy.deepcopy(default[k])
            changed = True
        elif isinstance(v, dict):
            changed = restore_defaults(v, default.get(k), keep) or changed
    return changed


def construct(
    build: Callable[[dict[str, Any]], Any],
    shrunk: dict[str, Any],
    default: dict[str, Any] | None = None,
    unshrunk: Callable[[], dict[str, Any]] | None = None,
    notes: list[str] | None = None,
    attempts: int = 8,
    create: bool = False,
) -> Any:
    """``build(shrunk)``, fixing ``shrunk`` from the validator's refusals until it validates.

    Args:
        build: Makes the config from a dict (``config_cls.from_dict``).
        shrunk: The shrunk dict (changed in place by the fixes).
        default: The unshrunk defaults: a refusal no rule reads restores the fields it names from them.
        unshrunk: Makes the dict again with the layer counts kept (the last back-off).
        notes: Receives one note per fix.
        attempts: How many refusals to read before giving up.
        create: A fix may add a key ``shrunk`` lacks (``shrunk`` holds constructor arguments, not a full config).

    Raises:
        Exception: The last refusal, when no fix made the config validate.
    """
    notes = notes if notes is not None else []
    kept_layers = False
    for _ in range(attempts):
        try:
            return build(shrunk)
        except Exception as exc:  # noqa: BLE001 - a refusal to read (StrictDataclassClassValidationError...)
            text = f"{exc} {exc.__cause__ or ''}"
            note = fix_from_message(shrunk, text, create)
            if note and note not in notes:
                notes.append(note)
                continue
            keys = _named_keys(shrunk, text)
            if any(re.search(r"ind(ex|ices|exes)", k) for k in keys) and unshrunk is not None and not kept_layers:
                keys = []  # layer indices: keep the layers they index rather than indices past the last layer
            if default is not None and keys and restore_defaults(shrunk, default, lambda k, _: k in keys):
                notes.append(f"{', '.join(keys)} kept at the defaults (validator)")
                continue
            if unshrunk is not None and not kept_layers:
                kept_layers = True
                shrunk.clear()
                shrunk.update(unshrunk())
                notes.append("layer counts kept (validator)")
                continue
            raise
    return build(shrunk)
