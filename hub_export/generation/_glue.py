"""Plain values the generation loop and the multimodal plan share (a leaf module: it imports nothing of ours)."""

from __future__ import annotations

from typing import Any

__all__ = ["TOKEN_TYPE_INPUTS", "positions_from_mask"]

#: inputs marking the tokens' modality, from which a base model builds its attention masks (bidirectional images)
TOKEN_TYPE_INPUTS = ("token_type_ids", "mm_token_type_ids")


def positions_from_mask(mask: Any) -> Any:
    """Position ids from a (left-padded) mask, as transformers computes them: cumsum - 1, 1 where masked."""
    positions = mask.long().cumsum(-1) - 1
    return positions.masked_fill(mask == 0, 1)
