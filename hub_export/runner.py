"""The runner protocol: call an exported program with the model's kwargs, get the model's ModelOutput back."""

from __future__ import annotations

import warnings
import weakref
from typing import Any

from .errors import ConfigError
from .manifest import ComponentEntry
from .signature import Signature, is_fixed
from .structure import walk

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
        for name, (field, order, _, _) in self._feedback.items():
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
            _, _, places, counts = self._feedback[name]
            held = _held(cache, places, counts)
            tensors = [r() for r in refs]
            if held is not None and len(held) == len(tensors) and all(a is b for a, b in zip(held, tensors)):
                known[name] = tensors
        return known


#: A layer part of a cache node -> the attribute of a transformers cache layer that holds it.
_LAYER_ATTRIBUTES = {"key": "keys", "value": "values"}


def _feedback(
    signature: Signature,
) -> dict[str, tuple[str, list[int], list[tuple[str, int, str]], dict[str, int]]]:
    """The attention caches a runner returns in the shape it takes them back (a decode graph's ``past_key_values``):
    ``{input name: (output field, output index of each of its input tensors in input order, where each tensor
    lives in the cache object (sub-cache, layer, attribute), the layer count of each sub-cache)}``. Caches with
    other parts (state-space layers, a static cache's lengths) are left out: they are flattened as given."""
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
        order = [outputs[path]["index"] for path, _ in inputs]
        places = [_place(path) for path, _ in inputs]
        layers = given["layers"]
        counts = (
            {"decoder": len(layers), "encoder": len(layers)} if layers and "decoder" in layers[0] else {"": len(layers)}
        )
        found[name] = (field, order, places, counts)
    return found


def _cache_shape(node: dict[str, Any]) -> tuple[Any, ...] | None:
    """A DynamicCache/EncoderDecoderCache node of attention layers without its flat indices, else None."""
    if node.get("type") != "cache" or node.get("class") not in ("DynamicCache", "EncoderDecoderCache"):
        return None
    layers = []
    for layer in node["layers"]:
        parts = [layer[p] for p in ("decoder", "encoder")] if "decoder" in layer else [layer]
        if any(set(part) - {"key", "value"} for part in parts):
            return None
        layers.append(tuple(tuple(sorted((k, v["type"]) for k, v in part.items())) for part in parts))
    return (node["class"], tuple(layers))


def _place(path: str) -> tuple[str, int, str]:
    """``layers[3].decoder.key`` -> ``("decoder", 3, "keys")``; ``layers[0].value`` -> ``("", 0, "values")``."""
    head, *rest = path.split(".")
    index = int(head[len("layers[") : -1])
    part = rest[0] if len(rest) == 2 else ""
    return part, index, _LAYER_ATTRIBUTES[rest[-1]]


def _held(cache: Any, places: list[tuple[str, int, str]], counts: dict[str, int]) -> list[Any] | None:
    """The tensors ``cache`` holds at ``places`` (None when it no longer has that shape: other layer counts)."""
    try:
        parts: dict[str, Any] = {
            "": getattr(cache, "layers", None),
            "decoder": getattr(getattr(cache, "self_attention_cache", None), "layers", None),
            "encoder": getattr(getattr(cache, "cross_attention_cache", None), "layers", None),
        }
        if any(len(parts[part]) != count for part, count in counts.items()):
            return None
        return [getattr(parts[part][index], attribute) for part, index, attribute in places]
    except (AttributeError, IndexError, KeyError, TypeError):
        return None
