"""The ``dynamo`` backend: the ``torch.export`` ExportedProgram itself (``.pt2``), run by PyTorch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...formats import Backend, SafetyOptions, one_graph_stem, register_backend
from . import io, safety
from .config import FORMAT, LAYOUT, DynamoConfig
from .exporter import DynamoExporter
from .runner import DynamoRunner

__all__ = ["BACKEND", "DynamoConfig", "DynamoExporter", "DynamoRunner", "read_program"]

BACKEND = register_backend(
    Backend(
        name=str(FORMAT),
        config_class=DynamoConfig,
        exporter_class=DynamoExporter,
        runner_class=DynamoRunner,
        layout=LAYOUT,
        save_program=io.save_program,
        save_programs=io.save_programs,
        load_program=io.load_program,
        check_files=safety.check,
        file_stem=one_graph_stem,
        card_tags=("pt2", "torch-export"),
        description="torch.export ExportedProgram (.pt2), run by PyTorch on CPU or CUDA",
    )
)


def read_program(
    path: str | Path,
    *,
    label: str | None = None,
    options: SafetyOptions | None = None,
    expected_size: int | None = None,
) -> Any:
    """Read an untrusted ``.pt2`` archive into its ``ExportedProgram``, checked first as the ``dynamo`` backend checks
    its own files. For backends of other packages that store ``ExportedProgram`` archives (see docs/extending.md).

    Args:
        path: The archive.
        label: How messages name the file (default: its name).
        options: What the user trusts (default: nothing).
        expected_size: The size ``export.json`` lists for it, if known.

    Raises:
        UnsafeExportError: The archive would run code when read, or is not what ``torch.export.save`` writes.
    """
    return io.read_program(Path(path), label or Path(path).name, options or SafetyOptions(), expected_size)
