"""Recurrences over time traced as one loop operator instead of a Python loop unrolled at the sample's length.

A reference implementation that steps through the sequence in Python (``for t in range(seq_len)``) makes
torch.export unroll the loop at the traced length and pin the ``sequence`` axis. :func:`over_time` runs the same
step function under one of torch's control-flow operators, which torch.export keeps symbolic:

* ``scan`` (``torch._higher_order_ops.scan``): the default; torch.onnx lowers it to the ONNX ``Scan`` operator and
  ExecuTorch emits it as a loop.
* ``while_loop`` (``torch._higher_order_ops.while_loop``), every tensor the body reads carried through the loop:
  OpenVINO's PyTorch frontend converts ``while_loop`` (to its ``Loop``) but not ``scan``, and counts the loop's
  extra inputs as carried ones. A backend chooses with :func:`recurrences_as` (``HfExporter.recurrence``).

Each step runs the same ops on the same values as the upstream loop: the results are bit-identical in eager and
the exported programs match eager to float32 rounding.

The step functions here replace these upstream loops while tracing (:mod:`hub_export.patches.modeling` applies
them to models holding the owning class):

* ``mamba_selective_scan`` (transformers/models/{mamba,falcon_mamba,jamba,zamba}/modeling_*.py): without the CUDA
  kernels, its "sequential path" loops over the sequence; the associative-scan path is disabled while exporting
  (``not is_torchdynamo_exporting()``: "There is no onnx translation for this op").
* ``torch.nn.LSTM.forward``: ``aten.lstm`` is a composite op, decomposed into one cell per time step while tracing.
* ``RecurrentGemmaRglru._rnn_scan`` (transformers/models/recurrent_gemma/modeling_recurrent_gemma.py): the RG-LRU's
  linear mode loops over the sequence.
* ``rwkv_linear_attention_cpu`` (transformers/models/rwkv/modeling_rwkv.py): RWKV's WKV attention without its CUDA
  kernel loops over the sequence.
* ``MiniMaxLightningAttention.forward`` (transformers/models/minimax/modeling_minimax.py): the lightning
  attention loops over blocks of ``block_size`` tokens, carrying the decayed key-value state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any

__all__ = [
    "LOOP_OPERATORS",
    "lightning_attention_blocks",
    "lstm_forward",
    "mamba_selective_scan",
    "over_time",
    "recurrences_as",
    "rglru_scan",
    "rwkv_wkv_scan",
]

#: the control-flow operators a recurrence may be traced with
LOOP_OPERATORS = ("scan", "while_loop")
_LOOP: ContextVar[str] = ContextVar("hub_export_recurrence", default="scan")

Step = Callable[[list[Any], list[Any], list[Any]], tuple[list[Any], list[Any]]]


@contextlib.contextmanager
def recurrences_as(operator: str) -> Iterator[None]:
    """Trace the recurrences of :func:`over_time` with ``operator`` (one of :data:`LOOP_OPERATORS`) in the block."""
    if operator not in LOOP_OPERATORS:
        raise ValueError(f"recurrence operator {operator!r} is not one of {LOOP_OPERATORS}")
    token = _LOOP.set(operator)
    try:
        yield
    finally:
        _LOOP.reset(token)


def over_time(
    step: Step, init: Sequence[Any], xs: Sequence[Any], consts: Sequence[Any] = ()
) -> tuple[list[Any], list[Any]]:
    """Run ``step(carry, x_t, consts) -> (carry, y_t)`` over axis 0 of every tensor of ``xs``.

    ``consts`` are the other tensors the step reads (weights): passed explicitly, not captured, since a
    ``while_loop`` for OpenVINO carries them, and tensors a loop reads may not alias each other (pass copies of
    views of one tensor). Returns the final carry and the outputs ``y_t`` stacked on a new axis 0, as a Python
    loop over ``t`` would.
    """
    if _LOOP.get() == "scan":
        from torch._higher_order_ops.scan import scan

        def combine(carry: list[Any], x: list[Any]) -> tuple[list[Any], list[Any]]:
            return step(list(carry), list(x), list(consts))

        final, stacked = scan(combine, list(init), list(xs))
        return list(final), list(stacked)
    return _while_loop(step, list(init), list(xs), list(consts))


def _while_loop(step: Step, init: list[Any], xs: list[Any], consts: list[Any]) -> tuple[list[Any], list[Any]]:
    """:func:`over_time` as a ``while_loop`` carrying every tensor (OpenVINO's frontend takes no extra inputs): the
    first step runs before the loop, to size the output buffers."""
    import torch
    from torch._higher_order_ops.while_loop import while_loop

    carry, first = step(list(init), [x[0] for x in xs], consts)
    length = xs[0].shape[0]
    buffers = [y.new_zeros((length, *y.shape)).index_copy(0, _index(0, y.device), y.unsqueeze(0)) for y in first]
    n_carry, n_out, n_xs = len(carry), len(buffers), len(xs)

    def cond_fn(i: Any, *state: Any) -> Any:
        return i < state[n_carry + n_out].shape[0]

    def body_fn(i: Any, *state: Any) -> tuple[Any, ...]:
        at = i.reshape(1)
        inputs, read = state[n_carry + n_out : n_carry + n_out + n_xs], state[n_carry + n_out + n_xs :]
        new_carry, ys = step(list(state[:n_carry]), [x.index_select(0, at).squeeze(0) for x in inputs], list(read))
        written = [b.index_copy(0, at, y.unsqueeze(0)) for b, y in zip(state[n_carry : n_carry + n_out], ys)]
        return (
            i + 1,
            *new_carry,
            *written,
            *(x.clone(memory_format=torch.contiguous_format) for x in (*inputs, *read)),
        )

    # contiguous on both sides: a carried tensor's strides must match the body's copy of it (a ``movedim`` view's
    # symbolic strides do not equal the fresh ones of its copy, and while_loop refuses the pair)
    xs, consts = [x.contiguous() for x in xs], [c.contiguous() for c in consts]
    start = torch.ones((), dtype=torch.int64, device=xs[0].device)
    out = while_loop(cond_fn, body_fn, (start, *carry, *buffers, *xs, *consts))
    return list(out[1 : 1 + n_carry]), list(out[1 + n_carry : 1 + n_carry + n_out])


def _index(value: int, device: Any) -> Any:
    import torch

    return torch.full((1,), value, dtype=torch.int64, device=device)


def mamba_selective_scan(original: Callable[..., Any]) -> Callable[..., Any]:
    """Mamba's selective scan (sequential path) with its loop over time as :func:`over_time`."""

    def selective_scan(
        hidden_states: Any,
        dt: Any,
        A: Any,  # noqa: N803 - upstream's names
        B: Any,  # noqa: N803
        C: Any,  # noqa: N803
        D: Any = None,  # noqa: N803
        z: Any = None,
        delta_bias: Any = None,
        delta_softplus: bool = False,
        return_last_state: bool = False,
        **_: Any,
    ) -> Any:
        import torch
        import torch.nn.functional as F  # noqa: N812

        input_dtype = hidden_states.dtype
        batch, channels = hidden_states.shape[:2]
        if delta_bias is not None:
            dt = dt + delta_bias.to(dt.dtype)[..., None]
        if delta_softplus:
            dt = F.softplus(dt)
        # [batch, channels, time, state]: the discretized A and B times the input, as upstream
        decay = torch.exp(A[None, :, None, :] * dt[:, :, :, None])
        drive = dt[:, :, :, None] * B.transpose(1, 2)[:, None, :, :].float() * hidden_states[:, :, :, None].float()
        readout = C.transpose(1, 2)  # [batch, time, state]
        state_dtype = torch.promote_types(torch.promote_types(decay.dtype, input_dtype), drive.dtype)
        state = torch.zeros(batch, channels, A.shape[-1], dtype=state_dtype, device=hidden_states.device)

        def step(carry: list[Any], x: list[Any], _: list[Any]) -> tuple[list[Any], list[Any]]:
            a, b, c = x
            new = a * carry[0] + b
            # bmm and squeeze: upstream's matmul and [:, :, 0] on these shapes, but a slice inside the scan leaks
            # a size out of its body when torch.onnx re-traces it (run_decompositions)
            output = torch.bmm(new.to(input_dtype), c.unsqueeze(-1).to(input_dtype)).squeeze(-1)
            return [new.clone()], [output]  # a scan's carry may not alias an output

        final, (outputs,) = over_time(step, [state], [decay.movedim(2, 0), drive.movedim(2, 0), readout.movedim(1, 0)])
        scan_output = outputs.movedim(0, -1)  # [batch, channels, time]
        if D is not None:
            scan_output = scan_output + hidden_states * D[None, :, None]
        if z is not None:
            scan_output = scan_output * F.silu(z)
        return (scan_output, final[0]) if return_last_state else scan_output

    return selective_scan


def lstm_forward(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.nn.LSTM.forward`` with the recurrence of each layer as :func:`over_time`; the input projection of
    every step is one matmul before the loop. Bidirectional, projected (``proj_size``), packed, unbatched and
    training-with-dropout LSTMs run upstream's forward."""

    def forward(self: Any, input: Any, hx: Any = None) -> Any:  # noqa: A002 - upstream's name
        import torch
        import torch.nn.functional as F  # noqa: N812

        if (
            not isinstance(input, torch.Tensor)
            or input.dim() != 3
            or self.bidirectional
            or self.proj_size
            or (self.training and self.dropout)
        ):
            return original(self, input, hx)
        steps = input.transpose(0, 1) if self.batch_first else input  # [time, batch, features]
        if hx is None:
            size = (self.num_layers, steps.shape[1], self.hidden_size)
            hx = (steps.new_zeros(size), steps.new_zeros(size))  # two tensors: a scan's initial carries may not alias
        finals_h, finals_c = [], []
        for layer in range(self.num_layers):
            suffix = f"_l{layer}"
            # per gate (torch's order: input, forget, cell, output), split before the loop: a slice inside the
            # loop body leaks a size out of it when torch.onnx re-traces the scan (run_decompositions)
            # (cloned: tensors a loop body reads may not alias each other)
            w_hh = [w.clone() for w in getattr(self, "weight_hh" + suffix).chunk(4)]
            b_hh = [b.clone() for b in getattr(self, "bias_hh" + suffix).chunk(4)] if self.bias else [None] * 4
            w_ih = getattr(self, "weight_ih" + suffix).chunk(4)
            b_ih = getattr(self, "bias_ih" + suffix).chunk(4) if self.bias else (None,) * 4
            projected = [F.linear(steps, w, b) for w, b in zip(w_ih, b_ih)]

            def step(carry: list[Any], x: list[Any], weights: list[Any]) -> tuple[list[Any], list[Any]]:
                i, f, g, o = (
                    x[k] + F.linear(carry[0], weights[k], weights[4 + k] if self.bias else None) for k in range(4)
                )
                cell = torch.sigmoid(f) * carry[1] + torch.sigmoid(i) * torch.tanh(g)
                hidden = torch.sigmoid(o) * torch.tanh(cell)
                return [hidden.clone(), cell], [hidden]  # a carry may not alias an output

            consts = [*w_hh, *b_hh] if self.bias else w_hh
            (h, c), (steps,) = over_time(step, [hx[0][layer], hx[1][layer]], projected, consts)
            finals_h.append(h)
            finals_c.append(c)
        output = steps.transpose(0, 1) if self.batch_first else steps
        return output, (torch.stack(finals_h), torch.stack(finals_c))

    return forward


def rglru_scan(original: Callable[..., Any]) -> Callable[..., Any]:
    """RecurrentGemma's ``RecurrentGemmaRglru._rnn_scan`` with its linear-mode loop as :func:`over_time`; a one-step
    call (sampling mode, no loop) runs upstream's."""

    def rnn_scan(
        self: Any,
        hidden_states: Any,
        recurrent_gate: Any,
        reset: Any,
        recurrent_states: Any,
        acc_dtype: Any = None,
    ) -> Any:
        import torch

        acc_dtype = torch.float32 if acc_dtype is None else acc_dtype
        if hidden_states.shape[1] == 1:
            return original(self, hidden_states, recurrent_gate, reset, recurrent_states, acc_dtype)
        recurrent_gate = recurrent_gate * ~reset
        if recurrent_states is None:
            recurrent_states = torch.zeros(hidden_states[:, 0].shape, dtype=acc_dtype, device=hidden_states.device)

        def step(carry: list[Any], x: list[Any], _: list[Any]) -> tuple[list[Any], list[Any]]:
            state = x[0].type(acc_dtype) * carry[0]
            state = state + x[1].type(acc_dtype)
            return [state.clone()], [state.type(hidden_states.dtype)]  # a carry may not alias an output

        final, (states,) = over_time(
            step, [recurrent_states.clone()], [recurrent_gate.movedim(1, 0), hidden_states.movedim(1, 0)]
        )
        return states.movedim(0, 1), final[0]

    return rnn_scan


def rwkv_wkv_scan(original: Callable[..., Any]) -> Callable[..., Any]:
    """RWKV's ``rwkv_linear_attention_cpu`` (transformers/models/rwkv/modeling_rwkv.py, the path without its CUDA
    kernel) with its loop over time as :func:`over_time`: the same numerically stable WKV step (a running maximum
    beside the numerator and denominator states) on the same values."""

    def linear_attention(
        time_decay: Any, time_first: Any, key: Any, value: Any, state: Any = None, return_state: bool = False
    ) -> Any:
        import torch

        if state is None:
            zeros = torch.zeros_like(key[:, 0], dtype=torch.float32)
            num_state, den_state, max_state = zeros, zeros.clone(), zeros - 1e38
        else:
            num_state, den_state, max_state = (s.clone() for s in state)
        decay = -torch.exp(time_decay)

        def step(carry: list[Any], x: list[Any], consts: list[Any]) -> tuple[list[Any], list[Any]]:
            num, den, top = carry
            current_key, current_value = x[0].float(), x[1]
            first, decayed = consts
            max_for_output = torch.maximum(top, current_key + first)
            e1 = torch.exp(top - max_for_output)
            e2 = torch.exp(current_key + first - max_for_output)
            output = ((e1 * num + e2 * current_value) / (e1 * den + e2)).to(key.dtype)
            max_for_state = torch.maximum(top + decayed, current_key)
            e1 = torch.exp(top + decayed - max_for_state)
            e2 = torch.exp(current_key - max_for_state)
            return [e1 * num + e2 * current_value, e1 * den + e2, max_for_state.clone()], [output]

        (num_state, den_state, max_state), (outputs,) = over_time(
            step,
            [num_state, den_state, max_state],
            [key.movedim(1, 0), value.movedim(1, 0)],
            [time_first.clone(), decay],
        )
        output = outputs.movedim(0, 1)
        if return_state or state is not None:
            return output, [num_state, den_state, max_state]
        return output, None

    return linear_attention


def lightning_attention_blocks(original: Callable[..., Any]) -> Callable[..., Any]:
    """MiniMax's ``MiniMaxLightningAttention.forward`` (transformers/models/minimax/modeling_minimax.py) without a
    prior state (no cache, or a prompt's empty one), with its loop over blocks of ``block_size`` tokens as
    :func:`over_time`.

    Upstream loops ``for i in range(num_blocks)`` in Python, which pins the sequence to the traced number of blocks
    (a bound ``[(n - 1) * block_size + 1, n * block_size]``). Here the sequence is zero-padded to whole blocks and
    each block runs upstream's step (intra-block decayed attention, the inter-block state read and updated): zero
    keys and values add nothing to the outputs of the real positions, and the padded outputs are cut off. The state
    a cache keeps is upstream's: the carry also holds the state before the last block, and the last block's
    ``current_block_size`` decays are applied to it as upstream does. A call with a prior state (decoding) runs
    upstream's forward.
    """

    def forward(
        self: Any,
        hidden_states: Any,
        position_embeddings: Any,
        attention_mask: Any,
        past_key_values: Any = None,
        **kwargs: Any,
    ) -> Any:
        import sys

        import torch
        import torch.nn.functional as F  # noqa: N812

        if past_key_values is not None and past_key_values.get_linear_cache(self.layer_idx) is not None:
            return original(self, hidden_states, position_embeddings, attention_mask, past_key_values, **kwargs)
        batch_size, seq_len, _ = hidden_states.shape
        heads, head_dim, block = self.num_attention_heads, self.head_dim, self.block_size
        padding_mask = sys.modules[type(self).__module__].apply_mask_to_padding_states
        qkv_states = padding_mask(self.act_fn(self.qkv_proj(hidden_states)), attention_mask)
        qkv_states = qkv_states.reshape(batch_size, seq_len, heads, 3 * head_dim)
        num_blocks = (seq_len + block - 1) // block
        padded = F.pad(qkv_states, (0, 0, 0, 0, 0, num_blocks * block - seq_len))
        # [blocks, batch * heads, block, 3 * head_dim]: one block per step, batch and heads as one axis of bmm's
        # (matmul's 4-D decomposition inside the loop body leaks unbacked sizes out of it when torch.onnx re-traces
        # the scan); the keys transposed before the loop, as the step reads them
        blocks = padded.reshape(batch_size, num_blocks, block, heads, 3 * head_dim).permute(1, 0, 3, 2, 4)
        blocks = blocks.reshape(num_blocks, batch_size * heads, block, 3 * head_dim)
        query_blocks, key_blocks, value_blocks = torch.split(blocks, head_dim, dim=3)
        xs = [query_blocks.contiguous(), key_blocks.transpose(2, 3).contiguous(), value_blocks.contiguous()]
        state = qkv_states.new_zeros(batch_size * heads, head_dim, head_dim)

        def step(carry: list[Any], x: list[Any], _: list[Any]) -> tuple[list[Any], list[Any]]:
            query, key_t, value, query_decay, key_decay_t, diagonal_decay, block_decay = x
            intra = torch.bmm(torch.bmm(query, key_t) * diagonal_decay, value)
            inter = torch.bmm(query * query_decay, carry[0])
            new_state = carry[0] * block_decay + torch.bmm(key_t * key_decay_t, value)
            return [new_state, carry[0].clone()], [inter + intra]  # a carry may not alias an output

        # the decays per block, batch row and head, read as inputs of each step (not constants of the loop: torch.onnx
        # re-traces a loop whose constants have symbolic sizes into unbacked ones), without size-1 axes: the body is
        # traced with symbolic sizes, and a broadcast against a size-1 axis made symbolic fails there
        def per_step(decay: Any, *shape: Any) -> Any:
            return decay.expand(heads, *shape).repeat(num_blocks, batch_size, 1, 1).reshape(num_blocks, -1, *shape)

        xs += [
            per_step(self.query_decay, block, head_dim),
            per_step(self.key_decay.transpose(1, 2), head_dim, block),
            per_step(self.diagonal_decay[0], block, block),
            per_step(torch.exp(-self.slope_rate * block), head_dim, head_dim),
        ]
        (_, before_last), (outputs,) = over_time(step, [state, state.clone()], xs)
        # [blocks, batch, heads, block, head_dim] -> [batch, sequence, heads * head_dim], the padding cut off
        outputs = outputs.reshape(num_blocks, batch_size, heads, block, head_dim).permute(1, 0, 3, 2, 4)
        attn_output = outputs.reshape(batch_size, num_blocks * block, heads * head_dim)
        attn_output = self.norm(attn_output[:, :seq_len])
        attn_output = F.sigmoid(self.output_gate(hidden_states)) * attn_output
        attn_output = self.out_proj(attn_output)
        if past_key_values is None:
            return attn_output, None  # the state is a cache's only (the decoder layer drops it)
        # upstream's last block: `current_block_size` real tokens, key decays key_decay[:, -current_block_size:]
        last = seq_len - (num_blocks - 1) * block
        rows = (torch.arange(block, device=qkv_states.device) + (block - last)).clamp(max=block - 1)
        key_decay = self.key_decay.index_select(1, rows)  # the padded rows (zero keys) read the last decay
        shape = (batch_size, heads, block, head_dim)
        key, value = key_blocks[num_blocks - 1].reshape(shape), value_blocks[num_blocks - 1].reshape(shape)
        final = before_last.reshape(batch_size, heads, head_dim, head_dim) * torch.exp(-self.slope_rate * last)
        final = final + torch.matmul((key * key_decay).transpose(-1, -2), value)
        past_key_values.set_linear_cache(self.layer_idx, final)
        return attn_output, final

    return forward
