"""The ``executorch`` backend: ExecuTorch programs (``.pte``) for the XNNPACK (CPU), CUDA or MLX delegate."""

from __future__ import annotations

from ...formats import Backend, register_backend
from . import io, llm_runner, safety
from .config import FORMAT, LAYOUT, ExecutorchConfig
from .exporter import ExecutorchExporter
from .runner import ExecutorchRunner

__all__ = ["BACKEND", "ExecutorchConfig", "ExecutorchExporter", "ExecutorchRunner"]

BACKEND = register_backend(
    Backend(
        name=str(FORMAT),
        config_class=ExecutorchConfig,
        exporter_class=ExecutorchExporter,
        runner_class=ExecutorchRunner,
        layout=LAYOUT,
        save_program=io.save_program,
        save_programs=io.save_programs,
        load_program=io.load_program,
        check_files=safety.check,
        file_stem=llm_runner.file_stem,
        outdated_layout=llm_runner.outdated,
        packages=("executorch",),
        distributions=("executorch", "torchao"),
        extra="executorch",
        card_tags=("executorch",),
        description="ExecuTorch program (.pte) for XNNPACK (CPU), CUDA or MLX",
    )
)
