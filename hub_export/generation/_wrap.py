"""One way to put a forward in front of a module for tracing (used by the generation components)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["with_forward"]


def with_forward(module: Any, forward: Callable[..., Any]) -> Any:
    """A ``torch.nn.Module`` holding ``module`` (as ``.model``) whose ``forward(**kwargs)`` is
    ``forward(module, **kwargs)``.

    It is named after ``module``'s class (the manifest records the component's architecture from it), keeps its
    ``config``, and starts in ``module``'s training mode (a new Module starts in training mode; ``trace()``
    restores this mode).
    """
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = module
            self.config = getattr(module, "config", None)

        def forward(self, **kwargs: Any) -> Any:
            return forward(self.model, **kwargs)

    Wrapped.__name__ = Wrapped.__qualname__ = type(module).__name__
    return Wrapped().train(getattr(module, "training", False))
