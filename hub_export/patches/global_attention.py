"""Longformer-style global attention traced for every mask: with and without global tokens, in one graph.

Longformer's encoder (``LongformerEncoder.forward`` in transformers/models/longformer/modeling_longformer.py, and
``LEDEncoder.forward`` in transformers/models/led/modeling_led.py) reads whether any token of the batch has global
attention (``attention_mask == 2``) back as a Python bool, ``is_global_attn = is_index_global_attn.flatten().any()
.item()``, and each self-attention layer (``LongformerSelfAttention.forward``, ``LEDEncoderSelfAttention.forward``)
branches on it (``if is_global_attn:``): a branch on the mask's values, which torch.export refuses
(``GuardOnDataDependentSymNode: Eq(u0, 1)``). Fixing the mask to the sample's values instead pins the batch and the
sequence (an export for one mask).

The global branch computes the same numbers as the local-only branch when no token is global: it concatenates
``max(global tokens per row) == 0`` global scores to the local ones (nothing), adds the global values' product over
those zero columns (exactly zero) and writes the global tokens' own outputs at zero positions (nothing). So
:func:`global_branch_always` runs the global branch for every mask (``is_global_attn=True`` whatever the encoder
read), which keeps both cases in one graph with the local result unchanged; and :func:`global_indices_bounded`
replaces ``_get_global_attn_indices`` with the same indices whose count ``max_num_global_attn_indices`` is read as
a size bounded by the sequence (``torch._check``), so the tracer keeps it symbolic instead of guarding on it. With
``output_attentions`` the outputs' structure depends on the branch (global probabilities are appended): the upstream
forward runs unchanged then.

The encoder still reads the flag (``.item()``): an unused data-dependent value whose range checks torch keeps in
the graph (``sym_ite(u0, 1, 0) <= 1``, a ``Piecewise`` that a ``.pt2`` safety check refuses).
:func:`global_flag_not_read` makes that one read, from the encoder's own ``forward``, return ``True``: the branch the
patched layers take anyway.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["global_branch_always", "global_flag_not_read", "global_indices_bounded"]


def global_branch_always(original: Callable[..., Any]) -> Callable[..., Any]:
    """A Longformer self-attention ``forward`` that takes the global branch whatever ``is_global_attn`` says.

    The same steps as upstream's forward through its own helpers (sliding-chunk scores, global key scores, the
    global and local value products, the global tokens' own attention); the one change besides the branch is the
    write of the global tokens' outputs, reshaped to ``(count, embed_dim)`` where upstream infers the width
    (``view(count, -1)``, undefined for zero global tokens)."""

    def forward(
        self: Any,
        hidden_states: Any,
        attention_mask: Any = None,
        is_index_masked: Any = None,
        is_index_global_attn: Any = None,
        is_global_attn: Any = None,
        output_attentions: bool = False,
    ) -> Any:
        import math

        import torch
        from torch import nn

        if output_attentions:  # the outputs' structure follows the branch: upstream's, unchanged
            return original(
                self, hidden_states, attention_mask, is_index_masked, is_index_global_attn, is_global_attn, True
            )
        window = self.one_sided_attn_window_size
        hidden_states = hidden_states.transpose(0, 1)
        seq_len, batch_size, embed_dim = hidden_states.size()
        query = self.query(hidden_states) / math.sqrt(self.head_dim)
        query = query.view(seq_len, batch_size, self.num_heads, self.head_dim).transpose(0, 1)
        key = self.key(hidden_states).view(seq_len, batch_size, self.num_heads, self.head_dim).transpose(0, 1)
        value = self.value(hidden_states).view(seq_len, batch_size, self.num_heads, self.head_dim).transpose(0, 1)

        scores = self._sliding_chunks_query_key_matmul(query, key, window)
        removed = (attention_mask != 0)[:, :, None, None]
        float_mask = removed.type_as(query).masked_fill(removed, torch.finfo(query.dtype).min)
        scores += self._sliding_chunks_query_key_matmul(float_mask.new_ones(size=float_mask.size()), float_mask, window)

        count, global_nonzero, local_global_nonzero, local_no_global_nonzero = self._get_global_attn_indices(
            is_index_global_attn
        )
        global_key_scores = self._concat_with_global_key_attn_probs(
            query_vectors=query,
            key_vectors=key,
            max_num_global_attn_indices=count,
            is_index_global_attn_nonzero=global_nonzero,
            is_local_index_global_attn_nonzero=local_global_nonzero,
            is_local_index_no_global_attn_nonzero=local_no_global_nonzero,
        )
        scores = torch.cat((global_key_scores, scores), dim=-1)
        probs = nn.functional.softmax(scores, dim=-1, dtype=torch.float32)
        probs = torch.masked_fill(probs, is_index_masked[:, :, None, None], 0.0).type_as(scores)
        probs = nn.functional.dropout(probs, p=self.dropout, training=self.training)

        attn_output = self._compute_attn_output_with_global_indices(
            value_vectors=value,
            attn_probs=probs,
            max_num_global_attn_indices=count,
            is_index_global_attn_nonzero=global_nonzero,
            is_local_index_global_attn_nonzero=local_global_nonzero,
        )
        attn_output = attn_output.transpose(0, 1).reshape(seq_len, batch_size, embed_dim).contiguous()
        global_output, _ = self._compute_global_attn_output_from_hidden(
            hidden_states=hidden_states,
            max_num_global_attn_indices=count,
            is_local_index_global_attn_nonzero=local_global_nonzero,
            is_index_global_attn_nonzero=global_nonzero,
            is_local_index_no_global_attn_nonzero=local_no_global_nonzero,
            is_index_masked=is_index_masked,
        )
        own = global_output[local_global_nonzero[0], :, local_global_nonzero[1]]
        attn_output[global_nonzero[::-1]] = own.reshape(own.shape[0], embed_dim)
        return (attn_output.transpose(0, 1),)

    return forward


def global_indices_bounded(original: Callable[..., Any]) -> Any:
    """``_get_global_attn_indices`` (a staticmethod) with the largest global-token count read as a bounded size."""

    def get_global_attn_indices(is_index_global_attn: Any) -> Any:
        import torch

        num_global_attn_indices = is_index_global_attn.long().sum(dim=1)
        # upstream keeps the count a 0-d tensor that every use reads back as a size; read it once, bounded. At least
        # one slot: without global tokens it is masked (its scores the dtype's minimum, a softmax weight of exactly
        # 0, written to no token), so no tensor is empty (ONNX Runtime's Reshape of an empty tensor crashed)
        max_num_global_attn_indices = num_global_attn_indices.max().clamp(min=1).item()
        torch._check(max_num_global_attn_indices >= 1)
        torch._check(max_num_global_attn_indices <= is_index_global_attn.shape[1])
        is_index_global_attn_nonzero = is_index_global_attn.nonzero(as_tuple=True)
        steps = torch.arange(max_num_global_attn_indices, device=is_index_global_attn.device)
        is_local_index_global_attn = steps < num_global_attn_indices.unsqueeze(dim=-1)
        return (
            max_num_global_attn_indices,
            is_index_global_attn_nonzero,
            is_local_index_global_attn.nonzero(as_tuple=True),
            (is_local_index_global_attn == 0).nonzero(as_tuple=True),
        )

    return staticmethod(get_global_attn_indices)


def global_flag_not_read(original: Callable[..., Any]) -> Callable[..., Any]:
    """A Longformer encoder ``forward`` whose ``is_global_attn = ....any().item()`` is ``True`` without reading the
    mask (see the module docstring); every other ``.item()`` is torch's. With ``output_attentions`` the flag decides
    which outputs exist: upstream's forward runs unchanged then."""
    import inspect
    import sys

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        import torch

        from ._base import patch_attribute

        if kwargs.get("output_attentions") or getattr(self.config, "output_attentions", False):
            return original(self, *args, **kwargs)
        item = torch.Tensor.item
        module = type(self).__module__

        def read(tensor: Any) -> Any:
            caller = sys._getframe(1)
            if (
                tensor.dtype == torch.bool
                and tensor.dim() == 0
                and caller.f_globals.get("__name__") == module
                and "is_global_attn" in caller.f_code.co_varnames
            ):
                return True
            return item(tensor)

        with patch_attribute(torch.Tensor, "item", read, reason="Longformer's is_global_attn read from the mask"):
            return original(self, *args, **kwargs)

    forward.__signature__ = inspect.signature(original)  # type: ignore[attr-defined]  # callers reading it see upstream's
    return forward
