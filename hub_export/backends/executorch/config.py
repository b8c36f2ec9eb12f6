"""``ExecutorchConfig``: export to an ExecuTorch ``.pte`` program."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...configs import ExportConfig
from ...errors import ConfigError
from ...formats import ExportFormat, FileLayout

__all__ = ["FORMAT", "LAYOUT", "ExecutorchConfig"]

FORMAT = ExportFormat.declare("executorch")
#: One ``<component>.pte`` program per component, in ``executorch/`` on the Hub.
LAYOUT = FileLayout(subfolder="executorch", files=((".pte", "program"),))


@dataclass
class ExecutorchConfig(ExportConfig):
    """Export to an ExecuTorch ``.pte`` program.

    Attributes:
        backend: Delegate to lower to: ``"xnnpack"`` (CPU), ``"cuda"`` or ``"mlx"``.
        alloc_graph_input: Memory-plan graph inputs.
        alloc_graph_output: Memory-plan graph outputs.
        alloc_mutable_buffers: Memory-plan mutable buffers.
    """

    export_format: ClassVar[ExportFormat] = FORMAT
    backend: str = "xnnpack"
    alloc_graph_input: bool = True
    alloc_graph_output: bool = True
    alloc_mutable_buffers: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.backend not in ("xnnpack", "cuda", "mlx"):
            raise ConfigError(f"ExecutorchConfig.backend must be 'xnnpack', 'cuda' or 'mlx', got {self.backend!r}.")
