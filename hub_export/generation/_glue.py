"""Plain values the generation loop and the multimodal plan share (a leaf module: it imports nothing of ours)."""

from __future__ import annotations

from typing import Any

__all__ = ["TOKEN_TYPE_INPUTS", "positions_per_row", "positions_from_mask"]

#: inputs marking the tokens' modality, from which a base model builds its attention masks (bidirectional images)
TOKEN_TYPE_INPUTS = ("token_type_ids", "mm_token_type_ids")


def positions_from_mask(mask: Any) -> Any:
    """Position ids from a (left-padded) mask, as transformers computes them: cumsum - 1, 1 where masked."""
    positions = mask.long().cumsum(-1) - 1
    return positions.masked_fill(mask == 0, 1)


#: each positions input and the inputs whose batch size it has
_POSITIONS = {
    "position_ids": ("input_ids", "inputs_embeds"),
    "decoder_position_ids": ("decoder_input_ids", "decoder_inputs_embeds"),
}


def positions_per_row(call: dict[str, Any]) -> bool:
    """Give ``call`` its positions per batch row where the model built them for a batch of one and broadcast them
    (``arange(n)[None]``: Exaone 4.5's language model), so that the export takes positions per row, as
    ``generate()`` feeds them; the model computes the same values. Rotary positions of shape (sections, batch,
    sequence) are expanded on axis 1. Returns whether it expanded any: such positions ignore the padding, and
    ``generate()`` must feed them so (``arange`` on every row, not the mask's cumulative sum)."""
    expanded = False
    for name, batch_from in _POSITIONS.items():
        positions: Any = call.get(name)
        source = next((call[key] for key in batch_from if hasattr(call.get(key), "shape")), None)
        if not hasattr(positions, "shape") or source is None or positions.dim() not in (2, 3):
            continue
        axis, batch = positions.dim() - 2, int(source.shape[0])
        if batch > 1 and positions.shape[axis] == 1:
            shape = list(positions.shape)
            shape[axis] = batch
            call[name] = positions.expand(shape).clone()
            expanded = True
    return expanded
