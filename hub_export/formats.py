"""Export formats and each format's file layout."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .errors import UnknownFormatError

__all__ = ["ExportFormat", "FormatLayout", "layout_for", "parse_format"]


class ExportFormat(StrEnum):
    """The runtimes hub_export exports to."""

    DYNAMO = "dynamo"
    ONNX = "onnx"
    EXECUTORCH = "executorch"
    OPENVINO = "openvino"


@dataclass(frozen=True)
class FormatLayout:
    """Where one format's files live.

    Attributes:
        subfolder: Default Hub subfolder of this format (``onnx/``, ``pt2/``, ...).
        suffixes: File name suffixes of one component, main file first.
        prefix: Prefix of a component's file names (OpenVINO uses ``openvino_``).
    """

    subfolder: str
    suffixes: tuple[str, ...]
    prefix: str = ""

    def files(self, component: str) -> tuple[str, ...]:
        """Relative file names of a component, main file first."""
        return tuple(f"{self.prefix}{component}{suffix}" for suffix in self.suffixes)


_LAYOUTS = {
    ExportFormat.DYNAMO: FormatLayout("pt2", (".pt2",)),
    ExportFormat.ONNX: FormatLayout("onnx", (".onnx", ".onnx.data")),
    ExportFormat.EXECUTORCH: FormatLayout("executorch", (".pte",)),
    ExportFormat.OPENVINO: FormatLayout("openvino", (".xml", ".bin"), prefix="openvino_"),
}


def parse_format(value: ExportFormat | str) -> ExportFormat:
    """Turn a format name into an :class:`ExportFormat`.

    Raises:
        UnknownFormatError: The name is not a known format; the message lists the known ones.
    """
    if isinstance(value, ExportFormat):
        return value
    try:
        return ExportFormat(str(value).lower())
    except ValueError:
        known = ", ".join(f.value for f in ExportFormat)
        raise UnknownFormatError(f"Unknown export format {value!r}; known formats: {known}.") from None


def layout_for(export_format: ExportFormat | str) -> FormatLayout:
    """The file layout of a format."""
    return _LAYOUTS[parse_format(export_format)]
