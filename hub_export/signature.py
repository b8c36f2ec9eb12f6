"""The traced signature of an export: named flat tensors in and out, their dims, and the structures around them.

Every backend runs one flat graph: a tuple of named tensors in, a tuple of named tensors out. A
:class:`Signature` is that graph's contract as plain data: its :class:`TensorSpec` inputs and outputs (each axis an
int, a dim name or a size expression over dim names), the :class:`~hub_export.dims.Dim` of every name, the
structure trees mapping the model's kwargs and output class to the flat tensors (:mod:`hub_export.structure`), and
the constants applied while tracing. It validates a call before a runtime sees it and rebuilds the model's output.

When a name is both read and written (a cache updated in place), the pair becomes ``input.<name>`` /
``output.<name>``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .dims import Dim, dims_from_json, dims_to_json
from .errors import ExportError, InputBoundsError, InputError, ManifestError
from .structure import CONSTANT_TYPES, count_tensors, flatten_value, unflatten

__all__ = [
    "TRAINING_ONLY_INPUTS",
    "Signature",
    "TensorSpec",
    "dtype_name",
    "fixed_constant",
    "fixed_tensor",
    "is_fixed",
    "pair_names",
    "split_kwargs",
    "torch_dtype",
]

TRAINING_ONLY_INPUTS = frozenset(
    {"labels", "start_positions", "end_positions", "next_sentence_label", "mc_labels", "return_loss", "decoder_labels"}
)

#: The most elements an integer input fixed by the export may hold (``export.json``'s schema says the same).
MAX_FIXED_NUMEL = 4096
_FIXED_KEYS = frozenset({"dtype", "shape", "values"})
_FIXED_DTYPES = ("int64", "int32", "int16", "int8", "uint8")


@dataclass(frozen=True)
class TensorSpec:
    """One flat graph input or output.

    Attributes:
        name: Graph name (``input_ids``, ``past_key_values.0.key``).
        dtype: torch dtype name without ``torch.`` (``int64``, ``float32``).
        shape: Each dim an int (static) or a symbolic name (``batch``).
    """

    name: str
    dtype: str
    shape: tuple[int | str, ...]

    def to_json(self) -> dict[str, Any]:
        """The spec as JSON data."""
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TensorSpec:
        """Rebuild a spec from :meth:`to_json` output."""
        return cls(data["name"], data["dtype"], tuple(data["shape"]))


def dtype_name(dtype: Any) -> str:
    """``torch.float32`` -> ``"float32"``."""
    return str(dtype).removeprefix("torch.")


def torch_dtype(name: str) -> Any:
    """``"float32"`` -> ``torch.float32``."""
    import torch

    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype):
        raise ManifestError(f"Unknown dtype {name!r}.")
    return value


@dataclass(frozen=True)
class Signature:
    """The contract of one exported graph.

    Attributes:
        inputs: The flat graph inputs, in order.
        outputs: The flat graph outputs, in order.
        input_structure: ``(kwarg, structure node)`` per traced kwarg, in order (indices into ``inputs``).
        output_structure: The structure node of the model's output (indices into ``outputs``).
        constants: Non-tensor kwargs applied while tracing (``use_cache``, ``return_dict``, ...).
        dims: The :class:`~hub_export.dims.Dim` of every symbolic name in the shapes. A dim with ``min == max`` is
            an axis the model's code fixed while tracing.
    """

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    input_structure: tuple[tuple[str, dict[str, Any]], ...]
    output_structure: dict[str, Any]
    constants: dict[str, Any] = field(default_factory=dict)
    dims: dict[str, Dim] = field(default_factory=dict)

    @property
    def input_names(self) -> list[str]:
        """The traced kwargs, in order."""
        return [name for name, _ in self.input_structure]

    def replace(self, **changes: Any) -> Signature:
        """A copy with some fields changed (``dims=...`` after a backend narrowed the bounds, say)."""
        return dataclasses.replace(self, **changes)

    def concrete_shape(self, spec: TensorSpec) -> tuple[int | str, ...]:
        """``spec.shape`` with the dims that admit one size (pinned axes) replaced by that size: what a backend
        declares static in its graph."""
        return tuple(
            self.dims[d].min if isinstance(d, str) and d in self.dims and self.dims[d].pinned else d for d in spec.shape
        )

    def in_place_pairs(self) -> dict[int, int]:
        """``{output index: input index}`` of the ``input.X``/``output.X`` pairs of one shape and dtype: a buffer the
        graph updates in place (a static KV cache), which runners write into the caller's tensor."""
        by_name = {spec.name: i for i, spec in enumerate(self.inputs)}
        pairs = {}
        for j, spec in enumerate(self.outputs):
            if not spec.name.startswith("output."):
                continue
            i = by_name.get("input." + spec.name[len("output.") :])
            if i is None or self.inputs[i].dtype != spec.dtype:
                continue
            if self.concrete_shape(self.inputs[i]) == self.concrete_shape(spec):
                pairs[j] = i
        return pairs

    def describe(self) -> str:
        """``name: dtype[shape], ...`` of the inputs (for error messages), then the inputs fixed to values."""
        fixed = [f"{name} = {_show(value)}" for name, value in self.constants.items() if is_fixed(value)]
        return ", ".join([f"{s.name}: {s.dtype}{list(s.shape)}" for s in self.inputs] + fixed)

    def check_fixed(self, kwargs: Mapping[str, Any]) -> None:
        """Check the inputs whose values the export fixed (``constants`` from :func:`fixed_constant`).

        Raises:
            InputError: A fixed input is missing.
            InputBoundsError: A fixed input holds other values than the export was built for.
        """
        import torch

        for name, value in self.constants.items():
            if not is_fixed(value):
                continue
            given = kwargs.get(name)
            if given is None:
                raise InputError(f"Missing input {name!r}; this export expects: {self.describe()}.")
            given = torch.as_tensor(given)
            if (
                given.is_floating_point()
                or given.is_complex()
                or given.shape != tuple(value["shape"])
                or (given.flatten().tolist() != list(value["values"]))
            ):
                raise InputBoundsError(
                    f"Input {name!r} holds {_show(fixed_constant(given))}, but this export was built for {name} = "
                    f"{_show(value)}: the model's code derives sizes from these values, so the export fixed them. "
                    "Pass these values, or re-export with a sample holding the values you will run."
                )

    def flatten_inputs(self, kwargs: Mapping[str, Any], known: Mapping[str, list[Any]] | None = None) -> list[Any]:
        """Map the model's kwargs to the flat, validated graph inputs (kwargs the export did not trace are ignored:
        the caller decides whether to warn).

        Args:
            kwargs: The model's kwargs.
            known: Flat tensors already known for some kwargs, in this signature's order (a runner's own cache fed
                back to it: see :class:`~hub_export.runner.ModelRunner`); their structure is not walked again, their
                tensors are still checked.

        Raises:
            InputError: A traced input is missing, has another structure, dtype, rank or static size.
            InputBoundsError: A size lies outside its dim's bounds.
        """
        import torch

        flat: list[Any] = []
        for name, node in self.input_structure:
            if known is not None and name in known:
                flat.extend(known[name])
                continue
            if name not in kwargs or kwargs[name] is None:
                raise InputError(f"Missing input {name!r}; this export expects: {self.describe()}.")
            leaves: list[tuple[str, Any]] = []
            value = kwargs[name]
            if isinstance(value, (list, tuple)) and value and not isinstance(value[0], torch.Tensor):
                value = torch.as_tensor(value)
            got = flatten_value(value, (name,), leaves)
            if count_tensors(node) != len(leaves) or got.get("type") != node.get("type"):
                raise InputError(
                    f"Input {name!r} has a different structure ({len(leaves)} tensors) than traced "
                    f"({count_tensors(node)}); this export expects: {self.describe()}."
                )
            flat.extend(t for _, t in leaves)
        self.check_inputs(flat)
        if self.fixed_names:
            self.check_fixed(kwargs)
        return flat

    @functools.cached_property
    def fixed_names(self) -> tuple[str, ...]:
        """The inputs the export fixed to the sample's values (see :func:`fixed_constant`)."""
        return tuple(name for name, value in self.constants.items() if is_fixed(value))

    @functools.cached_property
    def _input_checks(self) -> list[tuple[Any, int, tuple[tuple[int, Any], ...]]]:
        """Per input: its torch dtype (None when torch has no such dtype), rank, and the axes to check (a static
        size or a :class:`Dim`), computed once: a generation loop checks every step."""
        checks = []
        for spec in self.inputs:
            try:
                dtype = torch_dtype(spec.dtype)
            except ManifestError:
                dtype = None
            axes = tuple(
                (axis, dim if isinstance(dim, int) else self.dims[dim])
                for axis, dim in enumerate(spec.shape)
                if isinstance(dim, int) or dim in self.dims
            )
            checks.append((dtype, len(spec.shape), axes))
        return checks

    def check_inputs(self, tensors: list[Any]) -> None:
        """Check flat tensors against the inputs: dtype, rank, static sizes and dim bounds.

        Raises:
            InputError: A tensor has the wrong dtype, rank or static size.
            InputBoundsError: A size lies outside its dim's bounds.
        """
        for spec, (dtype, rank, axes), tensor in zip(self.inputs, self._input_checks, tensors):
            if tensor.dtype != dtype or tensor.dim() != rank:
                self._refuse(spec, tensor)
            shape = tensor.shape
            for axis, dim in axes:
                size = shape[axis]
                if isinstance(dim, int):
                    if size != dim:
                        self._refuse(spec, tensor)
                elif not (
                    size >= dim.min
                    and (dim.max is None or size <= dim.max)
                    and (dim.multiple_of == 1 or size % dim.multiple_of == 0)
                ):
                    self._refuse(spec, tensor)

    def _refuse(self, spec: TensorSpec, tensor: Any) -> None:
        """Raise the error that says how ``tensor`` differs from ``spec`` (the checks of :meth:`check_inputs`, one
        by one, with their messages)."""
        got = dtype_name(tensor.dtype)
        if got != spec.dtype:
            raise InputError(
                f"Input {spec.name!r} has dtype {got}, expected {spec.dtype}. Expected signature: {self.describe()}."
            )
        if tensor.dim() != len(spec.shape):
            raise InputError(
                f"Input {spec.name!r} has rank {tensor.dim()} (shape {list(tensor.shape)}), expected rank "
                f"{len(spec.shape)} {list(spec.shape)}. Expected signature: {self.describe()}."
            )
        for axis, (size, dim) in enumerate(zip(tensor.shape, spec.shape)):
            if isinstance(dim, int):
                if size != dim:
                    raise InputError(
                        f"Input {spec.name!r} has size {size} on axis {axis}, but this export is static there "
                        f"({dim}). Expected signature: {self.describe()}. Re-export with dynamic=True to accept "
                        "other sizes."
                    )
            elif dim in self.dims:
                self.dims[dim].check(int(size), f"Input {spec.name!r}", axis)

    def unflatten_outputs(self, tensors: list[Any], architecture: str | None = None) -> Any:
        """The model's output object (its ``ModelOutput`` class, caches rebuilt) from the flat outputs."""
        return unflatten(self.output_structure, tensors, architecture, "output_structure")

    def to_json(self) -> dict[str, Any]:
        """The signature's fields of a component in ``export.json``."""
        return {
            "inputs": [s.to_json() for s in self.inputs],
            "outputs": [s.to_json() for s in self.outputs],
            "input_structure": [[name, node] for name, node in self.input_structure],
            "output_structure": self.output_structure,
            "constants": dict(self.constants),
            "dims": dims_to_json(self.dims),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "$") -> Signature:
        """Rebuild from validated JSON data (a component of ``export.json``).

        Raises:
            ManifestError: A fixed input's values do not fill its shape.
        """
        for value in data["constants"].values():
            if is_fixed(value):
                fixed_tensor(value)  # its values fill its shape, or ManifestError now rather than at the first call
        return cls(
            inputs=tuple(TensorSpec.from_json(s) for s in data["inputs"]),
            outputs=tuple(TensorSpec.from_json(s) for s in data["outputs"]),
            input_structure=tuple((name, node) for name, node in data["input_structure"]),
            output_structure=data["output_structure"],
            constants=dict(data["constants"]),
            dims=dims_from_json(data["dims"], f"{where}.dims"),
        )


def split_kwargs(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split sample kwargs into traced values (tensors, caches) and trace-time constants (flags).

    Raises:
        ExportError: A training-only input such as ``labels`` is present.
    """
    training = sorted(TRAINING_ONLY_INPUTS & set(kwargs))
    if training:
        raise ExportError(
            f"Training-only input(s) {training} cannot be exported: exports run inference. Remove them from the sample inputs."
        )
    traced: dict[str, Any] = {}
    constants: dict[str, Any] = {}
    for name, value in kwargs.items():
        (constants if isinstance(value, CONSTANT_TYPES) else traced)[name] = value
    return traced, constants


def pair_names(input_names: list[str], output_names: list[str]) -> tuple[list[str], list[str]]:
    """Rename names that are both a graph input and output to ``input.<name>`` / ``output.<name>``."""
    shared = set(input_names) & set(output_names)
    return (
        [f"input.{n}" if n in shared else n for n in input_names],
        [f"output.{n}" if n in shared else n for n in output_names],
    )


def fixed_constant(tensor: Any) -> dict[str, Any]:
    """The ``constants`` entry of an integer input whose values the export fixes: dtype, shape, flat values."""
    return {"dtype": dtype_name(tensor.dtype), "shape": list(tensor.shape), "values": tensor.flatten().tolist()}


def is_fixed(value: Any) -> bool:
    """Whether a ``constants`` entry is an input fixed to values (:func:`fixed_constant`), not a flag."""
    return isinstance(value, Mapping) and set(value) == _FIXED_KEYS


def fixed_tensor(value: Mapping[str, Any]) -> Any:
    """The tensor of a :func:`fixed_constant` entry.

    Raises:
        ManifestError: The entry's dtype is not an integer type or its values do not fill its shape.
    """
    import math

    import torch

    shape = [int(size) for size in value["shape"]]
    if value["dtype"] not in _FIXED_DTYPES or len(value["values"]) != math.prod(shape):
        raise ManifestError(
            f"A fixed input holds {len(value['values'])} {value['dtype']} values for shape {shape}; expected "
            f"{math.prod(shape)} integers of {_FIXED_DTYPES}. Re-export the model."
        )
    try:
        return torch.tensor(list(value["values"]), dtype=torch_dtype(value["dtype"])).reshape(shape)
    except (OverflowError, RuntimeError, TypeError) as exc:
        raise ManifestError(f"A fixed input's values do not fit {value['dtype']}: {exc}. Re-export the model.") from exc


def _show(value: Mapping[str, Any]) -> str:
    """A fixed input's values as nested lists (cut after 64 values)."""
    values = list(value["values"])
    if len(values) > 64:
        return f"{value['dtype']}{list(value['shape'])} [{', '.join(map(str, values[:64]))}, ...]"
    return str(fixed_tensor(value).tolist())
