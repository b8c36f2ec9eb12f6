"""transformers' logits processors with their per-step work done once per ``generate()`` call.

``generate()`` runs its logits processors on every step. Two of transformers' own redo work whose result never changes
during a call: ``MinLengthLogitsProcessor`` and ``MinNewTokensLengthLogitsProcessor`` (``min_length``,
``min_new_tokens``) build the vocabulary's end-of-sequence mask (``torch.isin`` over an ``arange`` of the vocabulary)
on every step, and ``LogitsProcessorList`` reads each processor's signature (``inspect.signature``) on every step.
On a small model at one token a step that is a sizeable share of the step. :func:`cheaper` returns the same processors,
in the same order, computing the same scores: the two min-length processors are replaced by subclasses that keep the
mask of the vocabulary size they saw (still instances of transformers' classes), and the list by one that reads each
processor's signature once. Processors of other classes are kept as they are.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

from transformers import LogitsProcessorList
from transformers.generation.logits_process import MinLengthLogitsProcessor, MinNewTokensLengthLogitsProcessor

__all__ = ["cheaper"]


class _EosMask:
    """The vocabulary's end-of-sequence mask, built on first use for a vocabulary size and device."""

    eos_token_id: Any

    def _eos_mask(self, scores: Any) -> Any:
        import torch

        key = (scores.shape[-1], scores.device)
        cached = getattr(self, "_mask", None)
        if cached is None or cached[0] != key:
            vocab = torch.arange(scores.shape[-1], device=scores.device)
            cached = (key, torch.isin(vocab, self.eos_token_id.to(scores.device)))
            self._mask = cached
        return cached[1]


class _MinLength(_EosMask, MinLengthLogitsProcessor):
    """``MinLengthLogitsProcessor`` with the end-of-sequence mask kept between steps."""

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if input_ids.shape[-1] < self.min_length:
            return scores.masked_fill(self._eos_mask(scores), -math.inf)
        return scores.clone()


class _MinNewTokens(_EosMask, MinNewTokensLengthLogitsProcessor):
    """``MinNewTokensLengthLogitsProcessor`` with the end-of-sequence mask kept between steps."""

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if input_ids.shape[-1] - self.prompt_length_to_skip < self.min_new_tokens:
            return scores.masked_fill(self._eos_mask(scores), -math.inf)
        return scores.clone()


class _Processors(LogitsProcessorList):
    """``LogitsProcessorList`` that reads each processor's extra arguments once, not on every step."""

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        extras: dict[int, list[str]] = self.__dict__.setdefault("_extras", {})
        for processor in self:
            names = extras.get(id(processor))
            if names is None:
                names = list(inspect.signature(processor.__call__).parameters)[2:]
                extras[id(processor)] = names
            if names:
                missing = [name for name in names if name not in kwargs]
                if missing:
                    raise ValueError(
                        f"Make sure that all the required parameters: {names} for {processor.__class__} are passed "
                        "to the logits processor."
                    )
                scores = processor(input_ids, scores, **kwargs)
            else:
                scores = processor(input_ids, scores)
        return scores


def _cheaper_one(processor: Any) -> Any:
    replaced: Any
    if type(processor) is MinLengthLogitsProcessor:
        replaced = _MinLength.__new__(_MinLength)
    elif type(processor) is MinNewTokensLengthLogitsProcessor:
        replaced = _MinNewTokens.__new__(_MinNewTokens)
    else:
        return processor
    replaced.__dict__.update(vars(processor))
    return replaced


def cheaper(processors: LogitsProcessorList) -> LogitsProcessorList:
    """``processors`` with the min-length processors' mask and the list's signature reads done once (same scores)."""
    return _Processors(_cheaper_one(p) for p in processors)
