"""The runner protocol: call an exported program with the model's kwargs, get the model's ModelOutput back."""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

from ..errors import InputError
from ..formats import ExportFormat
from ..manifest import ComponentEntry
from ..signature import check_inputs_match, flatten_value, unflatten

__all__ = ["ModelRunner"]


class ModelRunner:
    """Runs one exported component on its backend.

    Subclasses implement :meth:`from_program` and :meth:`run_flat`; :meth:`__call__` is shared: it drops
    kwargs the export did not trace (one warning), validates the rest against the traced signature, flattens
    caches, runs, and rebuilds the model's own output class.

    Attributes:
        metadata: The component's manifest entry (signature, structures, dims).
        device: The device the runner executes on.
    """

    export_format: ClassVar[ExportFormat]

    def __init__(self, metadata: ComponentEntry, device: str | None = None) -> None:
        self.metadata = metadata
        self.device = device
        self._warned: set[frozenset[str]] = set()
        self._traced = [name for name, _ in metadata.input_structure]

    @classmethod
    def from_program(
        cls, program: Any, metadata: ComponentEntry, device: str | None = None, **options: Any
    ) -> ModelRunner:
        """Build a runner for ``program`` on ``device``."""
        raise NotImplementedError

    def run_flat(self, tensors: list[Any]) -> list[Any]:
        """Run the graph on flat input tensors (signature order) and return its flat outputs as torch tensors."""
        raise NotImplementedError

    def flatten_inputs(self, kwargs: dict[str, Any]) -> list[Any]:
        """Map the model's kwargs to the flat, validated graph inputs.

        Raises:
            InputError: A traced input is missing or does not match the signature.
        """
        import torch

        ignored = sorted(set(kwargs) - set(self._traced))
        changed = [k for k in ignored if k in self.metadata.constants and kwargs[k] != self.metadata.constants[k]]
        key = frozenset(ignored)
        if ignored and key not in self._warned:
            self._warned.add(key)
            note = f" ({changed} differ from the traced constants {self.metadata.constants})" if changed else ""
            warnings.warn(f"Ignoring inputs {ignored} that this export did not trace{note}.", UserWarning, stacklevel=3)
        expected = ", ".join(f"{s.name}: {s.dtype}{list(s.shape)}" for s in self.metadata.inputs)
        flat: list[Any] = []
        for name, node in self.metadata.input_structure:
            if name not in kwargs or kwargs[name] is None:
                raise InputError(f"Missing input {name!r}; this export expects: {expected}.")
            leaves: list[tuple[str, Any]] = []
            value = kwargs[name]
            if isinstance(value, (list, tuple)) and value and not isinstance(value[0], torch.Tensor):
                value = torch.as_tensor(value)
            got = flatten_value(value, (name,), leaves)
            if _count(node) != len(leaves) or got.get("type") != node.get("type"):
                raise InputError(
                    f"Input {name!r} has a different structure ({len(leaves)} tensors) than traced ({_count(node)}); "
                    f"this export expects: {expected}."
                )
            flat.extend(t for _, t in leaves)
        check_inputs_match(
            list(self.metadata.inputs), flat, self.metadata.dims, self.metadata.extra.get("pinned_axes", ())
        )
        return flat

    def __call__(self, **kwargs: Any) -> Any:
        """Run with the model's kwargs; returns the model's output class (caches rebuilt)."""
        outputs = self.run_flat(self.flatten_inputs(kwargs))
        return unflatten(self.metadata.output_structure, outputs, self.metadata.architecture, "output_structure")


def _count(node: dict[str, Any]) -> int:
    kind = node.get("type")
    if kind == "tensor":
        return 1
    if kind in ("tuple", "list"):
        return sum(_count(n) for n in node["items"])
    if kind in ("dict", "model_output"):
        return sum(_count(n) for _, n in node.get("items", node.get("fields", [])))
    if kind == "cache":
        total = 0
        for layer in node["layers"]:
            parts = [layer["decoder"], layer["encoder"]] if "decoder" in layer else [layer]
            total += sum(sum(_count(n) for n in p.values()) for p in parts)  # key/value/length, conv/recurrent
        return total
    return 0
