"""torch's thread pool during ``generate()`` over graphs that another runtime runs.

Between two steps, transformers' loop does a little torch work on the logits: the logits processors
(``min_new_tokens`` masks the end-of-sequence ids), the float32 copy of the last position, the argmax. Over a large
vocabulary (Qwen2's 151936 ids) each of these is above torch's parallel grain, so torch wakes its OpenMP threads for
it, and a woken thread waits for a core that the runtime's own threads (ONNX Runtime, OpenVINO) or other processes
hold: on a busy 2-core machine one ``masked_fill`` of the logits took 27-48 ms instead of 0.05 ms (measured;
docs/benchmarks.md, "Runtime speed"). On one thread the same work is a fraction of a millisecond and never waits.

:func:`loop_threads` runs a ``generate()`` call on one torch thread when none of the export's runners computes with
torch's pool (``ModelRunner.uses_torch_threads``), and restores the count after. The count is process-wide
(``torch.set_num_threads``): torch work on other threads of the process during the call runs on one thread too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..formats import backend_for

__all__ = ["loop_threads", "torch_free"]


def torch_free(components: dict[str, Any]) -> bool:
    """Whether no component of an export runs on torch's thread pool (their runners say so)."""
    classes = [backend_for(c.export_format).runner_class for c in components.values()]
    return bool(classes) and not any(cls.uses_torch_threads for cls in classes)


@contextlib.contextmanager
def loop_threads(components: dict[str, Any]) -> Iterator[None]:
    """One torch thread for the block when the export's runtime is not torch (see the module docstring)."""
    import torch

    before = torch.get_num_threads()
    if before == 1 or not torch_free(components):
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
