"""The runner protocol: call an exported program with the model's kwargs, get the model's ModelOutput back."""

from __future__ import annotations

import warnings
from typing import Any

from .errors import ConfigError
from .manifest import ComponentEntry
from .signature import is_fixed

__all__ = ["ModelRunner"]


class ModelRunner:
    """Runs one exported component on its backend.

    Subclasses implement :meth:`from_program` and :meth:`run_flat`; :meth:`__call__` is shared: it drops
    kwargs the export did not trace (one warning), validates the rest against the traced
    :class:`~hub_export.signature.Signature`, flattens caches, runs, and rebuilds the model's own output class.

    Class attributes:
        options: The runner options it accepts (``from_program(..., **options)``); any other raises ``ConfigError``.

    Attributes:
        metadata: The component's manifest entry (signature, files, parity).
        device: The device the runner executes on.
    """

    options: tuple[str, ...] = ()

    def __init__(self, metadata: ComponentEntry, device: str | None = None) -> None:
        self.metadata = metadata
        self.signature = metadata.signature
        self.device = device
        self._warned: set[frozenset[str]] = set()

    @classmethod
    def from_program(
        cls, program: Any, metadata: ComponentEntry, device: str | None = None, **options: Any
    ) -> ModelRunner:
        """Build a runner for ``program`` on ``device``."""
        raise NotImplementedError

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> None:
        """Refuse runner options this backend does not take (the same mistake, the same error on every backend).

        Raises:
            ConfigError: An unknown option; the message lists the known ones.
        """
        unknown = sorted(set(options) - set(cls.options))
        if unknown:
            known = ", ".join(cls.options) or "none"
            raise ConfigError(f"{cls.__name__} does not take the option(s) {unknown}; its options: {known}.")

    def run_flat(self, tensors: list[Any]) -> list[Any]:
        """Run the graph on flat input tensors (signature order) and return its flat outputs as torch tensors."""
        raise NotImplementedError

    def flatten_inputs(self, kwargs: dict[str, Any]) -> list[Any]:
        """Map the model's kwargs to the flat, validated graph inputs (one warning per set of ignored kwargs).

        Raises:
            InputError: A traced input is missing or does not match the signature.
        """
        signature = self.signature
        fixed = {name for name, value in signature.constants.items() if is_fixed(value)}  # checked, not ignored
        ignored = sorted(set(kwargs) - set(signature.input_names) - fixed)
        changed = [k for k in ignored if k in signature.constants and kwargs[k] != signature.constants[k]]
        key = frozenset(ignored)
        if ignored and key not in self._warned:
            self._warned.add(key)
            note = f" ({changed} differ from the traced constants {signature.constants})" if changed else ""
            warnings.warn(f"Ignoring inputs {ignored} that this export did not trace{note}.", UserWarning, stacklevel=3)
        return signature.flatten_inputs(kwargs)

    def __call__(self, **kwargs: Any) -> Any:
        """Run with the model's kwargs; returns the model's output class (caches rebuilt)."""
        outputs = self.run_flat(self.flatten_inputs(kwargs))
        return self.signature.unflatten_outputs(outputs, self.metadata.architecture)
