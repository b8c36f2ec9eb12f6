"""The runner protocol: call an exported program with the model's kwargs, get the model's ModelOutput back."""

from __future__ import annotations

import warnings
import weakref
from typing import Any

from .errors import ConfigError
from .manifest import ComponentEntry
from .signature import Signature, is_fixed
from .structure import held_tensors, walk

__all__ = ["ModelRunner"]


class ModelRunner:
    """Runs one exported component on its backend.

    Subclasses implement :meth:`from_program` and :meth:`run_flat`; :meth:`__call__` is shared: it drops
    kwargs the export did not trace (one warning), validates the rest against the traced
    :class:`~hub_export.signature.Signature`, flattens caches, runs, and rebuilds the model's own output class.

    A cache the runner returned and is given back unchanged (the next generation step) is not walked again: the
    runner remembers the flat tensors it built that cache from and feeds them as they are, once it has checked that
    the cache still holds exactly those tensors (a cache cropped or reordered for beam search holds others and is
    flattened as any other value). Its tensors are still checked against the signature.

    Class attributes:
        options: The runner options it accepts (``from_program(..., **options)``); any other raises ``ConfigError``.
        uses_torch_threads: Whether the program runs on torch's intra-op threads (see
            :func:`hub_export.generation.mixin.loop_threads`).

    Attributes:
        metadata: The component's manifest entry (signature, files, parity).
        device: The device the runner executes on.
    """

    options: tuple[str, ...] = ()
    #: Whether the runtime computes with torch's intra-op thread pool. ``generate()`` over runners that do not
    #: (ONNX Runtime, OpenVINO) runs its own per-step torch work (logits processors, argmax) on one thread.
    uses_torch_threads: bool = True

    def __init__(self, metadata: ComponentEntry, device: str | None = None) -> None:
        self.metadata = metadata
        self.signature = metadata.signature
        self.device = device
        self._warned: set[frozenset[str]] = set()
        self._feedback = _feedback(self.signature)
        # input name -> (the cache object this runner last returned for it, its flat tensors in input order)
        self._returned: dict[str, tuple[Any, list[Any]]] = {}  # weak references

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
        return signature.flatten_inputs(kwargs, known=self._known(kwargs) if self._returned else None)

    def __call__(self, **kwargs: Any) -> Any:
        """Run with the model's kwargs; returns the model's output class (caches rebuilt)."""
        outputs = self.run_flat(self.flatten_inputs(kwargs))
        result = self.signature.unflatten_outputs(outputs, self.metadata.architecture)
        self._remember(result, outputs)
        return result

    def _remember(self, result: Any, outputs: list[Any]) -> None:
        """Note the caches of ``result`` a next call may take back, with the flat tensors they hold (weakly: the
        runner keeps no cache alive)."""
        self._returned.clear()
        for name, (field, order, _) in self._feedback.items():
            cache = result.get(field) if hasattr(result, "get") else None
            if cache is None:
                continue
            try:
                self._returned[name] = (weakref.ref(cache), [weakref.ref(outputs[j]) for j in order])
            except TypeError:  # no weak references to it: flattened as given
                continue

    def _known(self, kwargs: dict[str, Any]) -> dict[str, list[Any]]:
        """The flat tensors of the caches in ``kwargs`` this runner returned and that still hold what it put in."""
        known = {}
        for name, (ref, refs) in self._returned.items():
            cache = kwargs.get(name)
            if cache is None or cache is not ref():
                continue
            held = held_tensors(self._feedback[name][2], cache)
            tensors = [r() for r in refs]
            if held is not None and len(held) == len(tensors) and all(a is b for a, b in zip(held, tensors)):
                known[name] = tensors
        return known


def _feedback(signature: Signature) -> dict[str, tuple[str, list[int], dict[str, Any]]]:
    """The attention caches a runner returns in the shape it takes them back (a decode graph's ``past_key_values``):
    ``{input name: (output field, output index of each of its input tensors in input order, its input structure
    node)}``. Caches with other parts (state-space layers, a static cache's lengths) are left out: they are flattened
    as given."""
    fields = {}
    node = signature.output_structure
    if node.get("type") == "model_output":
        fields = {key: child for key, child in node["fields"] if child.get("type") == "cache"}
    found = {}
    for name, given in signature.input_structure:
        shape = _cache_shape(given)
        field = next((f for f, out in fields.items() if shape is not None and _cache_shape(out) == shape), None)
        if field is None:
            continue
        outputs = dict(walk(fields[field]))
        inputs = sorted(walk(given), key=lambda item: item[1]["index"])
        found[name] = (field, [outputs[path]["index"] for path, _ in inputs], given)
    return found


def _cache_shape(node: dict[str, Any]) -> Any:
    """A DynamicCache/EncoderDecoderCache node of attention layers (with the ``class`` and ``state`` of layers that
    carry more, such as sparse attention's indexer keys) without its flat indices, else None."""
    if node.get("type") != "cache" or node.get("class") not in ("DynamicCache", "EncoderDecoderCache"):
        return None
    for layer in node["layers"]:
        parts = [layer[p] for p in ("decoder", "encoder")] if "decoder" in layer else [layer]
        if any(set(part) - {"key", "value", "class", "state"} for part in parts):
            return None
    return _without_indices(node)


def _without_indices(node: Any) -> Any:
    """A structure node as a hashable value, its flat indices left out."""
    if isinstance(node, dict):
        return tuple(sorted((key, _without_indices(value)) for key, value in node.items() if key != "index"))
    if isinstance(node, list):
        return tuple(_without_indices(item) for item in node)
    return node
