"""``AutoHfExporter`` and the exporter registry keyed by :class:`ExportFormat`."""

from __future__ import annotations

import importlib

from ..configs import AutoExportConfig, ExportConfig
from ..errors import HubExportError, UnknownFormatError
from ..formats import ExportFormat, parse_format

__all__ = ["AutoHfExporter", "exporter_class", "register_exporter"]

# format -> "module:Class" inside hub_export (fixed here, never read from a manifest)
_REGISTRY: dict[ExportFormat, str] = {
    ExportFormat.DYNAMO: "hub_export.exporters.dynamo:DynamoExporter",
    ExportFormat.ONNX: "hub_export.exporters.onnx:OnnxExporter",
    ExportFormat.EXECUTORCH: "hub_export.exporters.executorch:ExecutorchExporter",
    ExportFormat.OPENVINO: "hub_export.exporters.openvino:OpenVINOExporter",
}


def register_exporter(export_format: ExportFormat, target: str | type) -> None:
    """Register an exporter for a format that has none yet.

    Raises:
        HubExportError: The format already has an exporter.
    """
    fmt = parse_format(export_format)
    if fmt in _REGISTRY:
        raise HubExportError(f"An exporter for {fmt.value!r} is already registered ({_REGISTRY[fmt]}).")
    _REGISTRY[fmt] = target if isinstance(target, str) else f"{target.__module__}:{target.__qualname__}"


def exporter_class(export_format: ExportFormat | str) -> type:
    """The exporter class of a format.

    Raises:
        UnknownFormatError: No exporter is registered; the message lists the registered formats.
    """
    fmt = parse_format(export_format)
    if fmt not in _REGISTRY:
        raise UnknownFormatError(f"No exporter for {fmt.value!r}; registered: {', '.join(f.value for f in _REGISTRY)}.")
    module, _, name = _REGISTRY[fmt].partition(":")
    return getattr(importlib.import_module(module), name)


class AutoHfExporter:
    """Picks the exporter from a config (the transformers auto-class pattern)."""

    @staticmethod
    def from_config(config: ExportConfig | dict) -> object:
        """An exporter instance for ``config`` (a config object or a dict with ``export_format``)."""
        if isinstance(config, dict):
            config = AutoExportConfig.from_dict(config)
        return exporter_class(config.export_format)()

    @staticmethod
    def from_format(export_format: ExportFormat | str) -> object:
        """An exporter instance for a format name."""
        return exporter_class(export_format)()
