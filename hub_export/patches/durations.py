"""FastSpeech2-Conformer's length regulator traced with the spectrogram length a data-dependent size.

``length_regulator`` (transformers/models/fastspeech2_conformer/modeling_fastspeech2_conformer.py) repeats each
phoneme's hidden state by its predicted duration: it branches on ``if duration_labels.sum() == 0`` (a Python ``if``
on a tensor's value: ``GuardOnDataDependentSymNode``) and fills the output row by row (a Python loop over the batch,
``repeat_interleave`` by each row's durations). :func:`length_regulator_gathered` computes the same output at once:
the all-zero durations replaced by ones as a select, and every output frame ``t`` of a row reads the phoneme whose
cumulative duration first exceeds ``t`` (zero past the row's total), a gather of the same values (bit-identical).
The frame count, ``max`` of the rows' totals, stays a data-dependent size of the graph.

The decoder's relative positional encoding (``FastSpeech2ConformerRelPositionalEncoding.extend_pos_enc``) keeps a
table of 5000 positions and rebuilds it, in eager, when a sequence needs more (``if table >= 2 * length - 1``):
for that data-dependent length :func:`positions_within_table` asserts the frames fit the table (a run-time check
of the program: at most 5000 spectrogram frames) and reads it, as upstream does for every shorter output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["length_regulator_gathered", "positions_within_table"]


def length_regulator_gathered(original: Callable[..., Any]) -> Callable[..., Any]:
    """``length_regulator`` without the branch on the durations' values and the loop over the batch."""

    def length_regulator(encoded_embeddings: Any, duration_labels: Any, speaking_speed: float = 1.0) -> Any:
        import torch

        if speaking_speed <= 0:  # upstream's refusal
            return original(encoded_embeddings, duration_labels, speaking_speed)
        if speaking_speed != 1.0:
            duration_labels = torch.round(duration_labels.float() * speaking_speed).long()
        # upstream: if every duration is 0, the rows summing to 0 (all of them) get 1 (in place, as upstream)
        duration_labels.copy_(torch.where(duration_labels.sum() == 0, 1, duration_labels))
        totals = duration_labels.sum(dim=1)
        frames = totals.max().item()
        torch._check(frames >= 0)
        steps = torch.arange(frames, device=encoded_embeddings.device)
        ends = duration_labels.cumsum(dim=1)
        phoneme = (ends[:, None, :] <= steps[None, :, None]).sum(-1).clamp(max=encoded_embeddings.shape[1] - 1)
        index = phoneme[:, :, None].expand(-1, -1, encoded_embeddings.shape[2])
        repeated = torch.gather(encoded_embeddings, 1, index).to(torch.float)
        inside = (steps[None, :] < totals[:, None])[:, :, None]
        return torch.where(inside, repeated, torch.zeros((), dtype=torch.float, device=repeated.device))

    return length_regulator


def positions_within_table(original: Callable[..., Any]) -> Callable[..., Any]:
    """``extend_pos_enc`` reading the table for a data-dependent length, asserted to fit it."""

    def extend_pos_enc(self: Any, x: Any, pos_enc: Any = None) -> Any:
        import torch
        from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

        length = x.size(1)
        if pos_enc is None or not isinstance(length, torch.SymInt) or not free_unbacked_symbols(length):
            return original(self, x, pos_enc)
        torch._check(pos_enc.size(1) >= length * 2 - 1)
        return pos_enc.to(dtype=x.dtype, device=x.device)

    return extend_pos_enc
