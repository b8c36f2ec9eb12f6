"""Multimodal rotary positions (M-RoPE: the Qwen2-VL family, GLM-4V, ...) for an exported ``generate()``.

The language model of these models takes positions of shape ``(3, batch, sequence)`` (temporal, height, width),
or ``(4, batch, sequence)`` with the text positions first, that the base model's ``get_rope_index`` computes
from the token ids, the modality marks (``mm_token_type_ids``), the image / video grids and the mask: an image's
tokens share a temporal position and count rows and columns, and the text after it continues from the largest.
Each decode step then feeds the text position plus the prompt's ``rope_deltas`` on every row.

``generate()`` computes them with that same method of the installed transformers, run on a weightless instance of
the base model class: made without ``__init__`` (no submodule, no weight), holding only the export's config. The
plan names the class (:func:`rope_entry`); :func:`model_class` accepts only a model class of transformers itself,
so nothing an export names is imported or executed beyond it. The export checks, while exporting, that the method
gives exactly the positions the model's own ``generate`` fed its language model; otherwise the plan says why
``generate()`` cannot chain the components, as before.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from ..errors import HubExportError

__all__ = ["decode_positions", "model_class", "prompt_positions", "rope_entry", "rope_inputs"]

_NAME = re.compile(r"^[A-Z][A-Za-z0-9_]{0,127}$")
#: token-type inputs of a decode step: every new token is text
TOKEN_TYPES = ("mm_token_type_ids",)


def model_class(name: Any) -> type:
    """The transformers model class ``name`` (a plain class name exported by ``transformers``).

    Raises:
        HubExportError: ``name`` is not one.
    """
    import transformers
    from transformers import PreTrainedModel

    cls = getattr(transformers, name, None) if isinstance(name, str) and _NAME.match(name) else None
    if not (isinstance(cls, type) and issubclass(cls, PreTrainedModel)):
        raise HubExportError(f"The generation plan names {name!r} for its rotary positions: not a transformers model.")
    return cls


def _weightless(cls: Any, config: Any) -> Any:
    import torch

    instance = cls.__new__(cls)
    torch.nn.Module.__init__(instance)
    instance.config = config
    return instance


def _method_inputs(cls: Any) -> list[str]:
    return [n for n in inspect.signature(cls.get_rope_index).parameters if n not in ("self", "args", "kwargs")]


def rope_inputs(entry: dict[str, Any]) -> list[str]:
    """The inputs the plan's ``get_rope_index`` reads (``image_grid_thw``, ``mm_token_type_ids``, ...)."""
    return _method_inputs(model_class(entry["class"]))


def prompt_positions(entry: dict[str, Any], config: Any, inputs: dict[str, Any]) -> tuple[Any, Any]:
    """The prompt's positions in the layout the language model takes, and the per-row deltas of later steps."""
    import torch

    cls = model_class(entry["class"])
    given = {name: inputs[name] for name in _method_inputs(cls) if inputs.get(name) is not None}
    with torch.no_grad():
        positions, deltas = _weightless(cls, config).get_rope_index(**given)
    if entry.get("text_row"):
        mask = inputs.get("attention_mask")
        ids = inputs["input_ids"]
        text = _text_positions(mask, ids)
        positions = torch.cat([text[None].to(positions.dtype), positions], dim=0)
    return positions, deltas


def _text_positions(mask: Any, ids: Any) -> Any:
    import torch

    from ._glue import positions_from_mask

    if mask is None:
        return torch.arange(ids.shape[1]).expand(ids.shape[0], -1)
    return positions_from_mask(mask)


def decode_positions(entry: dict[str, Any], positions: Any, deltas: Any) -> Any:
    """A decode step's positions: its text positions ``(batch, length)`` plus the prompt's deltas on every rope row
    (a batch expanded since the prompt, by beam search, repeats each row's delta)."""
    import torch

    if deltas.shape[0] != positions.shape[0]:
        deltas = deltas.repeat_interleave(positions.shape[0] // deltas.shape[0], dim=0)
    rope = (positions + deltas.to(positions.dtype))[None].expand(int(entry.get("axes", 3)), -1, -1)
    return torch.cat([positions[None], rope], dim=0) if entry.get("text_row") else rope


def rope_entry(base: Any, prompt: dict[str, Any], expected: Any) -> dict[str, Any] | None:
    """The plan entry when ``base.get_rope_index`` (on a weightless instance, as ``generate()`` will run it) gives
    exactly the ``expected`` language-model positions of the captured prompt; None otherwise."""
    import torch

    cls = type(base)
    if getattr(cls, "get_rope_index", None) is None or expected is None or expected.dim() != 3:
        return None
    try:
        model_class(cls.__name__)
    except HubExportError:
        return None
    # the language model's rows: the method's own (HunYuan-VL returns all four), or a text row before its three
    for text_row in (False, True):
        entry: dict[str, Any] = {"class": cls.__name__, "text_row": text_row}
        if int(expected.shape[0]) - text_row != 3:
            entry["axes"] = int(expected.shape[0]) - text_row  # rope rows a decode step gets (3 unless said)
        try:
            positions, _ = prompt_positions(entry, base.config, prompt)
        except Exception:  # noqa: BLE001 - a method that needs more than the config: generate() cannot run it
            return None
        if positions.shape == expected.shape and torch.equal(positions, expected):
            return entry
    return None
