"""Prompts of a length a state-space prefill graph does not take (the model's code fixed it while tracing).

* A model whose code loops over the sequence in Python (where no patch of :mod:`hub_export.patches.modeling`
  rewrites the loop): its prefill takes exactly the traced prompt length.
* Mamba-2 pads a prompt shorter than its convolution kernel in a Python branch: its prefill takes at least that
  many tokens, and its decode graph (one token against conv/SSM states) cannot take the prompt instead.

A shorter prompt is left-padded to the length the prefill takes, with ``attention_mask`` zeros there (the model
masks padding out of its states, as it does for a left-padded batch); a longer one runs the prefill on its first
tokens and the decode graph on each other prompt token (the recurrence the model's own scan computes).
"""

from __future__ import annotations

from typing import Any

from ..errors import InputError

__all__ = ["fit_prompt"]


def _carries_state(decode: Any) -> bool:
    """Whether ``decode`` takes a state-space cache (conv/recurrent states) rather than keys and values."""
    return any(
        "conv" in layer for _, node in decode.metadata.signature.input_structure for layer in node.get("layers", ())
    )


def _target_length(prefill: Any, decode: Any, token_input: str, length: int) -> int | None:
    spec = next((s for s in prefill.metadata.signature.inputs if s.name == token_input), None)
    if spec is None or len(spec.shape) < 2 or not _carries_state(decode):
        return None  # (a key/value decode graph takes a short prompt itself; a static one cannot take a long one)
    size = prefill.signature.concrete_shape(spec)[1]  # an axis the model's code fixed is a dim of one size
    if isinstance(size, int):
        return size
    low = prefill.signature.dims[size].min if size in prefill.signature.dims else 0
    return low if length < low else None


def fit_prompt(prefill: Any, decode: Any, token_input: str, prompt: Any, mask: Any, pad: int) -> tuple[Any, Any, int]:
    """The prompt and mask to generate from, and how many of their tokens the prefill graph takes.

    Returns ``(prompt, mask, length)``: unchanged with ``length = prompt.shape[1]`` when the prefill takes the
    prompt; left-padded to the prefill's length when shorter; unchanged with the prefill's length when longer
    (the caller feeds the other tokens through the decode graph).

    Raises:
        InputError: The prompt needs padding but the export takes no ``attention_mask``, or a longer prompt has
            padding past the tokens the prefill takes (the decode graph does not mask it).
    """
    import torch

    length = prompt.shape[1]
    target = _target_length(prefill, decode, token_input, length)
    if target is None or target == length:
        return prompt, mask, length
    if length < target:
        if mask is None:
            raise InputError(
                f"The prompt has {length} token(s) but this export's prefill takes {target} (the model's code fixed "
                "that length while tracing) and it takes no attention_mask to pad it with: pass a prompt of "
                f"{target} tokens, or export with a sample prompt of the length you will run."
            )
        fill = target - length
        prompt = torch.cat([torch.full((prompt.shape[0], fill), int(pad), dtype=prompt.dtype), prompt], dim=-1)
        return prompt, torch.cat([mask.new_zeros((mask.shape[0], fill)), mask], dim=-1), target
    if mask is not None and bool((mask[:, target:] == 0).any()):
        raise InputError(
            f"This export's prefill takes {target} tokens (the model's code fixed that length while tracing) and "
            f"runs the rest of a longer prompt one token at a time, without masking: left padding must lie within "
            f"the first {target} tokens. Batch prompts of closer lengths, or export with a longer sample prompt."
        )
    return prompt, mask, target
