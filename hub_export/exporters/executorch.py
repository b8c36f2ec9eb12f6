"""``ExecutorchExporter``: lower the traced program with an ExecuTorch delegate and save it as ``model.pte``.

ExecuTorch plans every buffer ahead of time for the largest shape it may see, so every dynamic dim needs an
upper bound. With ``dynamic=True`` the bounds come from the model's config (see :meth:`dynamic_bounds`); explicit
``dynamic_shapes`` are used exactly as given and must bound every dim (``Dim("sequence", min=1, max=256)``).
The bounds the program was planned for are recorded in the manifest (``dims``) and an input beyond them raises
:class:`~hub_export.errors.InputBoundsError` before the runtime is called.
"""

from __future__ import annotations

import math
import platform
import sys
import weakref
from pathlib import Path
from typing import Any, ClassVar

from ..configs import ExecutorchConfig, ExportConfig
from ..errors import DeviceUnavailableError, ExportError, UnsafeExportError
from ..formats import ExportFormat, layout_for
from ..manifest import ComponentEntry
from ._trace import DimBounds, Traced
from .base import HfExporter

__all__ = ["ExecutorchExporter", "pte_bytes"]

# Config attributes giving the longest sequence a model accepts, tried in order, per dim role.
_LIMITS = ("max_position_embeddings", "n_positions", "max_target_positions", "max_source_positions", "n_ctx")
_ROLE_LIMITS = {
    "decoder_sequence": ("max_target_positions", "max_decoder_position_embeddings", *_LIMITS),
    "encoder_sequence": ("max_source_positions", "max_encoder_position_embeddings", *_LIMITS),
}
_SEQUENCE_ROLES = {"sequence", "total_sequence", "past_sequence", "decoder_sequence", "encoder_sequence"}
_RUNTIME_BACKENDS = {"xnnpack": "XnnpackBackend", "cuda": "CudaBackend", "mlx": "MLXBackend"}

# .pte bytes of programs loaded from disk: the runtime Program cannot serialize itself back.
_LOADED_BYTES: weakref.WeakKeyDictionary[Any, bytes] = weakref.WeakKeyDictionary()


class ExecutorchExporter(HfExporter):
    """Export to an ExecuTorch program (``model.pte``) for the XNNPACK (CPU), CUDA or MLX delegate.

    Class attributes:
        max_batch: Upper bound of the ``batch`` dim with ``dynamic=True``.
        max_sequence: Upper bound of sequence dims when the model's config gives no maximum length.
        max_sequence_cap: Cap on a config's maximum length (buffers are planned for the bound, so a 128k-token
            ``max_position_embeddings`` would plan gigabytes); pass explicit ``dynamic_shapes`` to go beyond it.
    """

    export_format = ExportFormat.EXECUTORCH
    config_class = ExecutorchConfig
    packages = ("executorch",)
    distributions = ("torch", "transformers", "executorch", "torchao")
    extra = "executorch"
    parity_atol = 1e-3
    max_batch: ClassVar[int] = 8
    max_sequence: ClassVar[int] = 512
    max_sequence_cap: ClassVar[int] = 4096

    # -- backend verbs ----------------------------------------------------------------------------------
    def check_available(self, config: ExportConfig) -> None:
        """Also check the delegate can lower and run here (CUDA device, Apple Silicon for MLX), before tracing.

        Raises:
            BackendUnavailableError: executorch is not installed.
            DeviceUnavailableError: The delegate or its device is unavailable; the message says why.
        """
        super().check_available(config)
        reason = _unavailable_reason(getattr(config, "backend", "xnnpack"))
        if reason:
            raise DeviceUnavailableError(f"Cannot export to ExecuTorch backend {config.backend!r}: {reason}")

    def dynamic_bounds(self, module: Any, config: ExportConfig) -> DimBounds:
        """Bounds for ``dynamic=True``, from the model's config.

        ``batch``: [1, :attr:`max_batch`]. Sequence dims: [1, the config's maximum length for that role]
        (``max_position_embeddings``, ``n_positions``, ``max_target_positions`` for decoder sequences,
        ``max_source_positions`` for encoder ones), capped at :attr:`max_sequence_cap`, or :attr:`max_sequence`
        when the config has none. ``height``/``width``: up to ``image_size``. ``samples`` (raw audio into a
        convolutional feature encoder: Wav2Vec2, HuBERT): the samples that make :attr:`max_sequence` frames
        (``prod(config.conv_stride) * max_sequence``: 10.24 s of 16 kHz audio for Wav2Vec2-base; the
        attention over frames is planned for that). Any other dim: up to its sample size.
        A bound is never below the sample's size.
        """
        model_config = getattr(module, "config", None)

        def bounds(role: str, leaf: str, axis: int, size: int) -> tuple[int, int]:
            if role == "batch":
                high = self.max_batch
            elif role in _SEQUENCE_ROLES:
                limit = _config_limit(model_config, _ROLE_LIMITS.get(role, _LIMITS))
                high = min(limit, self.max_sequence_cap) if limit else self.max_sequence
            elif role in ("height", "width"):
                high = _image_size(model_config, 0 if role == "height" else 1) or size
            elif role == "samples" and getattr(model_config, "conv_stride", None):
                high = math.prod(model_config.conv_stride) * self.max_sequence
            else:
                high = size
            return 1, max(high, size)

        return bounds

    def export_program(self, traced: Traced, config: ExportConfig) -> Any:
        """``to_edge_transform_and_lower`` with the delegate's partitioner, then ``to_executorch`` with the memory plan.

        Also narrows ``traced.dims`` to the bounds the program was planned for (the metadata is built from it).

        Raises:
            ExportError: A dynamic dim has no upper bound, or lowering failed.
        """
        from ..patches.executorch import contiguous_attention_outputs, retrace_without_size_one_hints

        unbounded = sorted(name for name, bounds in traced.dims.items() if bounds.get("max") is None)
        if unbounded:
            raise ExportError(
                f"ExecuTorch plans memory for the largest input, but dims {unbounded} have no upper bound. Export with "
                "dynamic=True (bounds from the model config) or give each Dim a max: Dim('sequence', min=1, max=256)."
            )
        try:
            program = retrace_without_size_one_hints(traced.program, traced.inputs, traced.sample, traced.dims)
        except Exception as exc:
            raise ExportError(
                f"Re-tracing with the size-1 dims widened to 2 failed ({type(exc).__name__}: {str(exc)[:800]}); "
                "export with sample inputs whose dynamic dims (batch, sequence) are at least 2."
            ) from exc
        contiguous_attention_outputs(program)
        import torch

        try:
            # no autograd: a program updating an input in place (a StaticCache) trips "leaf Variable that requires
            # grad is being used in an in-place operation" while ExecuTorch's passes re-run its ops
            with torch.no_grad():
                manager = _lower(program, config)
        except ExportError:
            raise
        except Exception as exc:  # executorch raises many types; keep the cause
            hint = ""
            if config.quantizer is not None and "dependency cycles" in str(exc) and config.dynamic:
                hint = (
                    "\nXNNPACK's partitioner cannot group dynamically quantized linears under dynamic shapes here (shared "
                    "choose_qparams chains, see pytorch/executorch#18397): export with dynamic=False, or calibrate a "
                    "static quantization config (is_dynamic=False) instead."
                )
            raise ExportError(
                f"ExecuTorch lowering to {config.backend!r} failed for {traced.architecture}: "
                f"{type(exc).__name__}: {str(exc)[:2000]}{hint}"
            ) from exc
        traced.dims = _planned_dims(manager.exported_program(), traced)
        return manager

    def component_extra(self, traced: Traced, config: ExportConfig) -> dict[str, Any]:
        """The delegate and the memory-planning flags."""
        return {
            "backend": config.backend,
            "memory_planning": {
                "alloc_graph_input": config.alloc_graph_input,
                "alloc_graph_output": config.alloc_graph_output,
                "alloc_mutable_buffers": config.alloc_mutable_buffers,
            },
        }

    @classmethod
    def save_program(cls, program: Any, directory: Path, component: str) -> list[str]:
        """Write ``<component>.pte``: streamed from an ``ExecutorchProgramManager``, or a loaded program's bytes.

        Raises:
            ExportError: The program keeps tensor data outside the ``.pte`` (a ``.ptd`` file), or cannot be saved.
        """
        (name,) = layout_for(cls.export_format).files(component)
        path = Path(directory) / name
        if hasattr(program, "write_to_file"):
            if getattr(program, "_tensor_data", None):
                raise ExportError("This ExecuTorch program keeps weights in .ptd files, which hub_export cannot save.")
            with open(path, "wb") as handle:
                program.write_to_file(handle)
        else:
            path.write_bytes(pte_bytes(program))
        return [name]

    @classmethod
    def load_program(cls, directory: Path, component: str, entry: ComponentEntry) -> Any:
        """The ``.pte`` as an ``executorch.runtime.Program`` (the export-time manager cannot be rebuilt from it)."""
        from executorch.runtime import Runtime, Verification

        data = (Path(directory) / entry.files[0].path).read_bytes()
        try:  # full flatbuffer verification: the file may come from an untrusted repo
            program = Runtime.get().load_program(data, verification=Verification.InternalConsistency)
        except RuntimeError as exc:
            raise UnsafeExportError(
                f"{entry.files[0].path}: the ExecuTorch runtime refused the program ({exc})."
            ) from None
        _LOADED_BYTES[program] = data
        return program

    @classmethod
    def runner_class(cls) -> type:
        """:class:`~hub_export.runners.executorch.ExecutorchRunner`."""
        from ..runners.executorch import ExecutorchRunner

        return ExecutorchRunner


def pte_bytes(program: Any) -> bytes:
    """The serialized ``.pte`` of an ``ExecutorchProgramManager`` or of a program loaded by hub_export.

    Raises:
        ExportError: ``program`` is a runtime Program that hub_export did not load (its bytes are unknown).
    """
    if hasattr(program, "buffer") and hasattr(program, "write_to_file"):
        return program.buffer
    data = _LOADED_BYTES.get(program)
    if data is None:
        raise ExportError(
            f"Cannot serialize a {type(program).__name__}: only programs exported or loaded by hub_export keep "
            "their .pte bytes."
        )
    return data


def _unavailable_reason(backend: str) -> str | None:
    """Why ``backend`` cannot be lowered to and run here, or None."""
    if backend == "cuda":
        import torch

        if not torch.cuda.is_available():
            return "torch sees no CUDA device (the CUDA delegate builds its kernels for a local GPU); use xnnpack."
    if backend == "mlx" and not (sys.platform == "darwin" and platform.machine() == "arm64"):
        here = f"{sys.platform}/{platform.machine()}"
        return f"the MLX delegate runs on Apple Silicon (macOS arm64) only, this is {here}. Use backend='xnnpack'."
    from executorch.runtime import Runtime

    registered = Runtime.get().backend_registry.registered_backend_names
    name = _RUNTIME_BACKENDS[backend]
    if name not in registered:
        return (
            f"this executorch build's runtime has no {name} (it has {', '.join(registered) or 'none'}), so the program "
            "could not run here; install an executorch build with that delegate."
        )
    return None


def _lower(program: Any, config: Any) -> Any:
    """The ExportedProgram lowered for ``config.backend`` and memory-planned: an ``ExecutorchProgramManager``."""
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes import MemoryPlanningPass

    from ..patches.executorch import executorch_patches, integer_powers_as_products

    passes, compile_config = None, EdgeCompileConfig()
    if config.backend == "mlx":  # as executorch's own MLX examples lower
        from executorch.backends.mlx.passes import get_default_passes

        passes, compile_config = get_default_passes(), EdgeCompileConfig(_check_ir_validity=False, _skip_dim_order=True)
    memory_plan = MemoryPlanningPass(
        alloc_graph_input=config.alloc_graph_input,
        alloc_graph_output=config.alloc_graph_output,
        alloc_mutable_buffers=config.alloc_mutable_buffers,
    )
    with executorch_patches():
        edge = to_edge_transform_and_lower(
            program, partitioner=_partitioners(config.backend), compile_config=compile_config, transform_passes=passes
        )
        for method in edge.methods:
            integer_powers_as_products(edge.exported_program(method))
        return edge.to_executorch(ExecutorchBackendConfig(memory_planning_pass=memory_plan))


def _partitioners(backend: str) -> list[Any]:
    if backend == "cuda":
        from executorch.backends.cuda.cuda_backend import CudaBackend
        from executorch.backends.cuda.cuda_partitioner import CudaPartitioner

        return [CudaPartitioner([CudaBackend.generate_method_name_compile_spec("forward")])]
    if backend == "mlx":
        from executorch.backends.mlx import MLXPartitioner

        return [MLXPartitioner()]
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    return [XnnpackPartitioner()]


def _config_limit(model_config: Any, names: tuple[str, ...]) -> int | None:
    configs = [model_config]
    get_text = getattr(model_config, "get_text_config", None)
    if callable(get_text):
        configs.append(get_text())
    for cfg in configs:
        for name in names:
            value = getattr(cfg, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def _image_size(model_config: Any, index: int) -> int | None:
    size = getattr(model_config, "image_size", None)
    if isinstance(size, (list, tuple)) and len(size) > index:
        size = size[index]
    return size if isinstance(size, int) and size > 0 else None


def _planned_dims(lowered: Any, traced: Traced) -> dict[str, dict[str, int | None]]:
    """``traced.dims`` with each max narrowed to what the lowered program was planned for (lowering can tighten it)."""
    from ..patches.executorch import upper_bound

    dims = {name: dict(bounds) for name, bounds in traced.dims.items()}
    placeholders = {n.name: n for n in lowered.graph.nodes if n.op == "placeholder"}
    for spec, node_name in zip(traced.inputs, lowered.graph_signature.user_inputs):
        value = placeholders[node_name].meta.get("val")
        for axis, dim in enumerate(spec.shape):
            if not isinstance(dim, str) or value is None:
                continue
            node = getattr(value.shape[axis], "node", None)
            pinned = int(value.shape[axis]) if node is None else node.maybe_as_int()
            if pinned is not None:  # the lowering specialized this dim to one size
                dims[dim] = {"min": pinned, "max": pinned}
                continue
            upper = upper_bound(value.shape[axis])
            if upper is not None and dims[dim]["max"] is not None:
                dims[dim]["max"] = min(upper, dims[dim]["max"])
    return dims
