"""The ``dynamo`` backend: the ``torch.export`` ExportedProgram itself (``.pt2``), run by PyTorch."""

from __future__ import annotations

from ...formats import Backend, register_backend
from . import io, safety
from .config import FORMAT, LAYOUT, DynamoConfig
from .exporter import DynamoExporter
from .runner import DynamoRunner

__all__ = ["BACKEND", "DynamoConfig", "DynamoExporter", "DynamoRunner"]

BACKEND = register_backend(
    Backend(
        name=str(FORMAT),
        config_class=DynamoConfig,
        exporter_class=DynamoExporter,
        runner_class=DynamoRunner,
        layout=LAYOUT,
        save_program=io.save_program,
        load_program=io.load_program,
        check_files=safety.check,
        card_tags=("pt2", "torch-export"),
        description="torch.export ExportedProgram (.pt2), run by PyTorch on CPU or CUDA",
    )
)
