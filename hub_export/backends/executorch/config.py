"""``ExecutorchConfig``: export to an ExecuTorch ``.pte`` program."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ...configs import ExportConfig
from ...errors import ConfigError
from ...formats import ExportFormat, FileLayout

__all__ = ["FORMAT", "LAYOUT", "SHARED_WEIGHTS", "ExecutorchConfig"]

FORMAT = ExportFormat.declare("executorch")
#: One ``<component>.pte`` program per component, in ``executorch/`` on the Hub, with its weights in
#: ``<component>.ptd`` when they are kept outside the program (``ExecutorchConfig.external_data``), or in
#: :data:`SHARED_WEIGHTS` when several components read the same weights.
SHARED_WEIGHTS = "shared.ptd"
LAYOUT = FileLayout(
    subfolder="executorch",
    files=((".pte", "program"),),
    optional=((".ptd", "weights"),),
    shared=((SHARED_WEIGHTS, "weights"),),
    stems=("model",),
)


@dataclass
class ExecutorchConfig(ExportConfig):
    """Export to an ExecuTorch ``.pte`` program.

    Attributes:
        backend: Delegate to lower to: ``"xnnpack"`` (CPU), ``"cuda"`` or ``"mlx"``.
        alloc_graph_input: Memory-plan graph inputs.
        alloc_graph_output: Memory-plan graph outputs.
        alloc_mutable_buffers: Memory-plan mutable buffers.
        external_data: Keep the weights in a ``.ptd`` data file next to the ``.pte`` (ExecuTorch's external
            constants) instead of inside it: True, False, or None to decide: outside when they are large
            (``ExecutorchExporter.external_data_min_bytes``, 1 GiB by default: a ``.pte`` flatbuffer cannot address
            more than 2 GB) or tied (the ``.ptd`` stores a weight several names share once; a ``.pte`` stores it for
            the delegate and again for the portable kernels).
    """

    export_format: ClassVar[ExportFormat] = FORMAT
    backend: str = "xnnpack"
    alloc_graph_input: bool = True
    alloc_graph_output: bool = True
    alloc_mutable_buffers: bool = True
    external_data: bool | None = None
    metadata: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        for name, value in (self.metadata or {}).items():
            values = value if isinstance(value, list) else [value]
            if not name.isidentifier() or not values or not all(isinstance(v, (int, float, bool)) for v in values):
                raise ConfigError(
                    f"ExecutorchConfig.metadata[{name!r}] must be an int, float or bool, or a list of them, under an "
                    f"identifier; got {value!r}."
                )
        if self.backend not in ("xnnpack", "cuda", "mlx"):
            raise ConfigError(f"ExecutorchConfig.backend must be 'xnnpack', 'cuda' or 'mlx', got {self.backend!r}.")
