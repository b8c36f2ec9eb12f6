"""Export configs: one dataclass per format, JSON round-trip, and :class:`AutoExportConfig`.

``to_dict()`` / ``from_dict()`` round-trip exactly, including ``torch.export.Dim`` objects, which are written
as ``{"dim": {"name", "min", "max"}}`` (``max: null`` for unbounded) and dim hints as ``{"dim": "AUTO"}``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from .dims import is_unbounded
from .errors import ConfigError
from .formats import ExportFormat, backend_for, parse_format

__all__ = [
    "ExportConfig",
    "AutoExportConfig",
    "dim_to_json",
    "dim_from_json",
]

_HINTS = ("AUTO", "DYNAMIC", "STATIC")


def dim_to_json(dim: Any) -> Any:
    """Encode one entry of a ``dynamic_shapes`` axis spec as JSON.

    Raises:
        ConfigError: The value is a derived dim (``2 * batch``) or another object that has no JSON form.
    """
    import torch

    if dim is None or isinstance(dim, int):
        return dim
    hint_type = getattr(dim, "type", None)
    if type(dim).__name__ == "_DimHint" and hint_type is not None:
        return {"dim": hint_type.name}
    if isinstance(dim, torch.export.dynamic_shapes.Dim) and type(dim).__name__ == "Dim":
        upper = dim.max
        return {"dim": {"name": dim.__name__, "min": int(dim.min), "max": None if is_unbounded(upper) else int(upper)}}
    raise ConfigError(
        f"Cannot save dynamic shape entry {dim!r}: only torch.export.Dim(name, min=, max=), Dim.AUTO/DYNAMIC/STATIC, "
        "ints and None are supported. Replace derived dims (e.g. 2*batch) with their own Dim."
    )


def dim_from_json(value: Any) -> Any:
    """Decode what :func:`dim_to_json` wrote back into a ``torch.export.Dim`` or hint."""
    import torch

    if value is None or isinstance(value, int):
        return value
    if not isinstance(value, dict) or set(value) != {"dim"}:
        raise ConfigError(f"Invalid dynamic shape entry {value!r}: expected null, an int or {{'dim': ...}}.")
    spec = value["dim"]
    if isinstance(spec, str):
        if spec not in _HINTS:
            raise ConfigError(f"Unknown dim hint {spec!r}; expected one of {', '.join(_HINTS)}.")
        return getattr(torch.export.Dim, spec)
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise ConfigError(f"Invalid dim {spec!r}: expected {{'name': str, 'min': int, 'max': int | null}}.")
    kwargs = {"min": spec.get("min", 0)}
    if spec.get("max") is not None:
        kwargs["max"] = spec["max"]
    return torch.export.Dim(spec["name"], **kwargs)


def _shapes_to_json(shapes: Any) -> Any:
    if isinstance(shapes, dict):
        return {"type": "dict", "items": [[str(k), _shapes_to_json(v)] for k, v in shapes.items()]}
    if isinstance(shapes, (list, tuple)):
        return {"type": type(shapes).__name__, "items": [_shapes_to_json(v) for v in shapes]}
    return dim_to_json(shapes)


def _shapes_from_json(value: Any, top: bool = False) -> Any:
    if isinstance(value, dict) and value.get("type") in {"dict", "list", "tuple"}:
        items = value.get("items", [])
        if value["type"] == "dict":
            # axis keys are ints inside a tensor's spec; kwarg names at the top level stay strings
            return {(k if top or not k.lstrip("-").isdigit() else int(k)): _shapes_from_json(v) for k, v in items}
        decoded = [_shapes_from_json(v) for v in items]
        return decoded if value["type"] == "list" else tuple(decoded)
    return dim_from_json(value)


@dataclass
class ExportConfig:
    """Options shared by every format.

    Attributes:
        export_format: The target format (set by each subclass).
        dynamic: Mark every tensor dimension dynamic (``Dim.AUTO``).
        strict: Trace with TorchDynamo's strict mode.
        dynamic_shapes: Explicit ``dynamic_shapes`` keyed by kwarg name, forwarded to ``torch.export.export``.
        prefer_deferred_runtime_asserts_over_guards: Emit data-dependent guards as runtime asserts.
        quantizer: An export quantizer, or None.
    """

    export_format: ClassVar[ExportFormat]
    dynamic: bool = False
    strict: bool = False
    dynamic_shapes: dict[str, Any] | None = None
    prefer_deferred_runtime_asserts_over_guards: bool = False
    quantizer: Any = None

    def __post_init__(self) -> None:
        for name in ("dynamic", "strict", "prefer_deferred_runtime_asserts_over_guards"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{type(self).__name__}.{name} must be a bool, got {getattr(self, name)!r}.")
        if self.dynamic_shapes is not None and not isinstance(self.dynamic_shapes, dict):
            raise ConfigError(
                "dynamic_shapes must be a dict keyed by the model's kwarg names, e.g. {'input_ids': {0: batch}}."
            )
        if self.dynamic and self.dynamic_shapes is not None:
            raise ConfigError("Pass either dynamic=True or explicit dynamic_shapes, not both.")

    def to_dict(self) -> dict[str, Any]:
        """The config as JSON-compatible data; :meth:`from_dict` rebuilds an equal config."""
        data: dict[str, Any] = {"export_format": self.export_format.value}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "dynamic_shapes" and value is not None:
                value = _shapes_to_json(value)
            elif f.name == "quantizer" and value is not None:
                to_dict = getattr(value, "to_dict", None)
                if to_dict is None:
                    raise ConfigError(f"Quantizer {type(value).__name__} cannot be saved: it has no to_dict().")
                value = to_dict()
            data[f.name] = value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExportConfig:
        """Build a config from :meth:`to_dict` output.

        Raises:
            ConfigError: A field is unknown, or ``export_format`` names another format.
        """
        data = dict(data)
        fmt = data.pop("export_format", cls.export_format.value)
        if parse_format(fmt) is not cls.export_format:
            raise ConfigError(
                f"{cls.__name__} is for {cls.export_format.value!r}, not {fmt!r}; use AutoExportConfig.from_dict."
            )
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"Unknown {cls.__name__} field(s) {unknown}; known fields: {sorted(known)}.")
        if data.get("dynamic_shapes") is not None:
            data["dynamic_shapes"] = _shapes_from_json(data["dynamic_shapes"], top=True)
        if data.get("quantizer") is not None:
            raise ConfigError(
                "Rebuilding a quantizer from a saved config is not supported yet; pass the quantizer object."
            )
        return cls(**data)

    def replace(self, **changes: Any) -> ExportConfig:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)


class AutoExportConfig:
    """Picks the config class from a dict's ``export_format``."""

    @staticmethod
    def config_class(export_format: ExportFormat | str) -> type[ExportConfig]:
        """The config class of a format.

        Raises:
            UnknownFormatError: The format is unknown; the message lists the known ones.
        """
        return backend_for(export_format).config_class

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExportConfig:
        """Build the right config from a dict with an ``export_format`` key.

        Raises:
            ConfigError: ``export_format`` is missing or a field is unknown.
            UnknownFormatError: The format is unknown.
        """
        if not isinstance(data, dict) or "export_format" not in data:
            raise ConfigError(
                "An export config dict needs an 'export_format' key (dynamo, onnx, executorch or openvino)."
            )
        return cls.config_class(data["export_format"]).from_dict(data)
