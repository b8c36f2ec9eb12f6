"""``AutoHfExporter``: the exporter of a config or format name, from the registry (:mod:`hub_export.formats`)."""

from __future__ import annotations

from typing import Any

from ..configs import AutoExportConfig, ExportConfig
from ..formats import ExportFormat, backend_for

__all__ = ["AutoHfExporter", "exporter_class"]


def exporter_class(export_format: ExportFormat | str) -> type:
    """The exporter class of a registered format.

    Raises:
        UnknownFormatError: No backend of that name; the message lists the registered formats.
    """
    return backend_for(export_format).exporter_class


class AutoHfExporter:
    """Picks the exporter from a config (the transformers auto-class pattern)."""

    @staticmethod
    def from_config(config: ExportConfig | dict[str, Any]) -> Any:
        """An exporter instance for ``config`` (a config object or a dict with ``export_format``)."""
        if isinstance(config, dict):
            config = AutoExportConfig.from_dict(config)
        return exporter_class(config.export_format)()

    @staticmethod
    def from_format(export_format: ExportFormat | str) -> Any:
        """An exporter instance for a format name."""
        return exporter_class(export_format)()
