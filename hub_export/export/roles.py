"""The role of each input axis (``batch``, ``sequence``, ``patches``, ``samples``, ...): the name its dim takes in a
signature, and what a backend bounds it by (:data:`~hub_export.export.trace.DimBounds`).

An axis's role comes from its input's name and the axis (:func:`axis_role`), where those do not tell it from the
input's rank, dtype or companions (:func:`shape_roles`), and for an axis without one of its own, from a named axis
of the same sample size (:func:`bound_roles`); an axis without any is named after its input (:func:`input_axis_name`).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["axis_role", "bound_roles", "input_axis_name", "shape_roles"]

_SEQUENCE_INPUTS = {"input_ids", "attention_mask", "token_type_ids", "position_ids", "inputs_embeds", "cache_position"}
#: Inputs that hold the patches of every image as rows of one tensor in grid-driven vision models.
_PACKED_INPUTS = ("pixel_values", "pixel_values_videos", "hidden_states")

_SEMANTIC = {
    ("pixel_values", 1): "channels",
    ("pixel_values", 2): "height",
    ("pixel_values", 3): "width",
    ("input_features", 1): "features",
    ("input_features", 2): "frames",
    ("input_values", 1): "samples",
    ("encoder_outputs", 1): "encoder_sequence",
    ("encoder_hidden_states", 1): "encoder_sequence",
    ("decoder_input_ids", 1): "decoder_sequence",
    ("decoder_attention_mask", 1): "decoder_sequence",
    ("decoder_position_ids", 1): "decoder_sequence",
}


def bound_roles(leaves: list[tuple[str, Any]], cache_inputs: bool) -> dict[tuple[str, int], str]:
    """The role each input axis is bounded by: its own (:func:`axis_role`), or, for an axis past the batch that
    has none (named after its input, ``bbox_dim1``), the role of a named axis of the same sample size. A model often
    needs such an axis equal to a named one (LayoutLM-style ``bbox`` is [batch, sequence, 4]): bounded at its own
    sample size, the tracer's equality would narrow the named dim to that size too, and the export would refuse every
    longer sequence. An axis that is not the same dim keeps its own name, with a bound that is only larger."""
    shaped = shape_roles([(leaf, t.dim(), t.is_floating_point()) for leaf, t in leaves])
    named: dict[int, str] = {}
    for leaf, t in leaves:
        for axis in range(1, t.dim()):
            role = axis_role(leaf, axis, cache_inputs, shaped)
            if role != input_axis_name(leaf, axis):
                named.setdefault(int(t.shape[axis]), role)
    roles = {}
    for leaf, t in leaves:
        for axis in range(t.dim()):
            role = axis_role(leaf, axis, cache_inputs, shaped)
            if axis and role == input_axis_name(leaf, axis):
                role = named.get(int(t.shape[axis]), role)
            roles[leaf, axis] = role
    return roles


def input_axis_name(leaf: str, axis: int) -> str:
    """The name of an axis with no role of its own: its input's, then the axis (``bbox_dim1``)."""
    return f"{re.sub(r'[^A-Za-z0-9_]', '_', leaf.split('.')[0])}_dim{axis}"


def shape_roles(leaves: list[tuple[str, int, bool]]) -> dict[tuple[str, int], str]:
    """Roles that an input axis takes from its input's rank, dtype or companions, where the input's name alone does
    not tell them (``leaves``: ``(name, ndim, floating)``):

    * ``patches``: axis 0 of a 2-D :data:`_PACKED_INPUTS` beside a grid of one ``(t, h, w)`` row per image
      (``image_grid_thw``, ``grid_thw``: the Qwen2-VL family packs the patches of every image as rows of one tensor).
    * ``channels`` and ``samples``: axes 1 and 2 of a 3-D ``input_values`` (raw audio with channels, ``[batch,
      channels, samples]``: the audio codecs DAC, EnCodec, Mimi).
    * ``samples``: axis 1 of a 2-D floating ``inputs`` (the raw audio of ``SpeechEncoderDecoderModel``; Perceiver's
      integer ``inputs`` are tokens).
    """
    grid = any(name.split(".")[0].endswith("grid_thw") for name, _, _ in leaves)
    roles = {}
    for name, ndim, floating in leaves:
        kwarg = name.split(".")[0]
        if grid and kwarg in _PACKED_INPUTS and ndim == 2:
            roles[name, 0] = "patches"
        elif kwarg == "input_values" and ndim == 3:
            roles[name, 1], roles[name, 2] = "channels", "samples"
        elif kwarg == "inputs" and ndim == 2 and floating:
            roles[name, 1] = "samples"
    return roles


def axis_role(leaf: str, axis: int, cache_inputs: bool, shaped: dict[tuple[str, int], str] | None = None) -> str:
    """The role of an axis (``shaped``: the roles :func:`shape_roles` found from the inputs' ranks and dtypes)."""
    if shaped and (leaf, axis) in shaped:
        return shaped[leaf, axis]
    parts = leaf.split(".")
    kwarg = parts[0]
    if axis == 0:
        return "batch"
    if len(parts) > 1 and parts[-1] in ("key", "value") and axis == 2:
        return "encoder_sequence" if "encoder" in parts else "past_sequence"
    if len(parts) > 1 and parts[-1] == "indexer_keys" and axis == 1:  # [batch, past_sequence, dim]
        return "past_sequence"
    if (kwarg, axis) in _SEMANTIC:
        return _SEMANTIC[(kwarg, axis)]
    if kwarg in _SEQUENCE_INPUTS and axis == 1:
        return "total_sequence" if kwarg == "attention_mask" and cache_inputs else "sequence"
    return input_axis_name(leaf, axis)
