"""Workarounds applied while tracing with ``torch.export`` (every format traces through here)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ._base import patch_attribute

__all__ = ["size_one_dims_stay_dynamic", "tracing_patches"]


@contextlib.contextmanager
def size_one_dims_stay_dynamic() -> Iterator[None]:
    """Keep size-0/1 sample dims symbolic under ``Dim.AUTO``.

    torch.export specializes any dim whose sample size is 0 or 1 ("0/1 specialization",
    pytorch/pytorch#106289), so ``tokenizer("Hello")`` (batch 1) silently yields a batch-1-only graph.
    ``backed_size_oblivious`` makes the tracer reason about such dims as if they were >= 2.
    """
    import torch.fx.experimental._config as fx_config

    with patch_attribute(fx_config, "backed_size_oblivious", True, reason="0/1 specialization (pytorch/pytorch#106289)"):
        yield


@contextlib.contextmanager
def tracing_patches(dynamic: bool) -> Iterator[None]:
    """Every patch needed while tracing an export."""
    with contextlib.ExitStack() as stack:
        if dynamic:
            stack.enter_context(size_one_dims_stay_dynamic())
        yield
