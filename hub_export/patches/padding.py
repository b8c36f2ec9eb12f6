"""Encoders that pad the sequence to a multiple of a block only when it is not one, traced with the padding done first.

Block-local attention needs the sequence to be a multiple of its block: the encoder pads it inside ``forward``
under a branch on the remainder and cuts the padding off the result:

* ``LongformerModel.forward`` (transformers/models/longformer/modeling_longformer.py: ``_pad_to_window_size``,
  ``if padding_len > 0``, then ``hidden_states[:, : hidden_states.shape[1] - padding_len]`` in
  ``LongformerEncoder.forward``) and ``LEDEncoder.forward`` (transformers/models/led/modeling_led.py, the same
  helpers) to a multiple of ``config.attention_window``;
* ``PegasusXEncoder.forward`` (transformers/models/pegasus_x/modeling_pegasus_x.py:
  ``if seq_len % self.config.block_size != 0``, then ``hidden_states[:, :seq_len]``) to a multiple of
  ``config.block_size``.

Traced on a symbolic sequence, the branch guards on the sample's remainder and the cut (a strided slice whose copy
checks whether anything was cut) guards ``padding != 0``: the export admits only the lengths that pad like the
sample's (``[5, 7]`` from a sample of 6 and a block of 4). :func:`padded_to_multiple` calls the encoder on inputs
already padded to ``block * ceil(sequence / block)`` (a multiple of the block by construction, so the encoder's own
padding is empty on every length) and cuts the first output back to the sequence into a contiguous copy. The inputs
are padded as the model pads them: token and position ids with ``pad_token_id``, attention, global-attention masks
and token types with 0 (a missing attention mask is all ones first), so every padded position is masked out of
every real token's attention as upstream's; Longformer and LED pad the token ids themselves, so their outputs are
bit-identical. Pegasus-X pads its embedded states with zeros where the patch pads token ids: the padded positions
differ, are masked out, and are cut. Embedding inputs (``inputs_embeds``), hidden states and attentions as outputs
run upstream's forward unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["padded_to_multiple"]

#: the value each padded input takes past the sequence (None: the model's ``pad_token_id``)
_PAD_VALUES: dict[str, int | None] = {
    "input_ids": None,
    "position_ids": None,
    "attention_mask": 0,
    "global_attention_mask": 0,
    "token_type_ids": 0,
}


def padded_to_multiple(block: Callable[[Any], int]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The replacement of an encoder ``forward`` that pads its inputs to a multiple of ``block(config)`` first."""

    def replacement(original: Callable[..., Any]) -> Callable[..., Any]:
        import inspect

        signature = inspect.signature(original)

        def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
            import torch
            from torch import nn

            bound = signature.bind(self, *args, **kwargs)
            arguments = bound.arguments
            config = self.config
            flags = {**arguments.get("kwargs", {}), **arguments}
            input_ids = arguments.get("input_ids")
            extra = (
                arguments.get("inputs_embeds") is not None
                or (flags.get("output_attentions") or config.output_attentions)
                or (flags.get("output_hidden_states") or config.output_hidden_states)
            )
            if input_ids is None or extra:
                return original(self, *args, **kwargs)
            size = block(config)
            length = input_ids.shape[1]
            padding = (length + size - 1) // size * size - length
            if arguments.get("attention_mask") is None:
                arguments["attention_mask"] = torch.ones_like(input_ids)
            for name, value in _PAD_VALUES.items():
                if arguments.get(name) is not None:
                    fill = config.pad_token_id if value is None else value
                    arguments[name] = nn.functional.pad(arguments[name], (0, padding), value=fill)
            outputs = original(*bound.args, **bound.kwargs)
            last = outputs[0][:, :length].clone(memory_format=torch.contiguous_format)
            if isinstance(outputs, tuple):
                return (last, *outputs[1:])
            outputs["last_hidden_state"] = last
            return outputs

        forward.__signature__ = signature  # type: ignore[attr-defined]  # callers reading it see upstream's
        return forward

    return replacement


def attention_window(config: Any) -> int:
    """Longformer's and LED's padding multiple: the largest attention window."""
    window = config.attention_window
    return window if isinstance(window, int) else max(window)


def block_size(config: Any) -> int:
    """Pegasus-X's padding multiple: its local attention block."""
    return int(config.block_size)
