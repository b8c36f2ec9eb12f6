"""``ExecutorchExporter``: lower the traced program with an ExecuTorch delegate and save it as ``model.pte``.

ExecuTorch plans every buffer ahead of time for the largest shape it may see, so every dynamic dim needs an
upper bound. With ``dynamic=True`` the bounds come from the model's config (see :meth:`dynamic_bounds`); explicit
``dynamic_shapes`` are used exactly as given and must bound every dim (``Dim("sequence", min=1, max=256)``).
The bounds the program was planned for are recorded in the manifest (``dims``) and an input beyond them raises
:class:`~hub_export.errors.InputBoundsError` before the runtime is called.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import math
import platform
import sys
from typing import Any, ClassVar

from ...configs import ExportConfig
from ...dims import Dim
from ...errors import ConfigError, DeviceUnavailableError, ExportError
from ...export.exporter import HfExporter, Lowered
from ...export.trace import DimBounds, Traced
from ...manifest import ComponentEntry
from ...patches.experts import dense_experts_forward
from ...patches.graph import all_true_checks_as_all, views_after_permutes_as_reshapes
from ...patches.tracing import gathered_experts_forward
from ...quantization.nncf_quant import NNCFQuantizationConfig, NNCFQuantizer
from ...signature import Signature
from ._bounds import bounds_pass
from ._complex import complex_as_real_pairs
from ._conv3d import convolutions_in_two_dims
from ._op_rewrites import op_rewrites
from ._pages import release_freed_heap
from ._spill import external_weights_spilled
from .config import FORMAT, ExecutorchConfig
from .io import ProgramFiles, load_runtime_program
from .llm_runner import LLM_COMPONENT, RUNTIME, export_llm_runner
from .patches import (
    contiguous_attention_outputs,
    executorch_patches,
    integer_powers_as_products,
    python_modulo_of_sizes,
    retrace_without_size_one_hints,
    upper_bound,
    weights_shared_by_deep_copies,
)
from .runner import ExecutorchRunner

__all__ = ["ExecutorchExporter"]

# Config attributes giving the longest sequence a model accepts, tried in order, per dim role.
_LIMITS = ("max_position_embeddings", "n_positions", "max_target_positions", "max_source_positions", "n_ctx")
_ROLE_LIMITS = {
    "decoder_sequence": ("max_target_positions", "max_decoder_position_embeddings", *_LIMITS),
    "encoder_sequence": ("max_source_positions", "max_encoder_position_embeddings", *_LIMITS),
}
#: The axes of ``input_features`` (mel bins then frames for Whisper, frames then mel bins for FastConformer's Canary
#: and Parakeet): bounded like a sequence; an axis the model's weights fix (Whisper's 80 bins, its 3000 frames) stays
#: fixed whatever the bound.
_AUDIO_ROLES = {"features", "frames"}
_SEQUENCE_ROLES = {"sequence", "total_sequence", "past_sequence", "decoder_sequence", "encoder_sequence"}
_RUNTIME_BACKENDS = {"xnnpack": "XnnpackBackend", "cuda": "CudaBackend", "mlx": "MLXBackend"}
#: The external-data tag every weight of an export with ``external_data`` gets (one ``.ptd`` per program).
_DATA_TAG = "model"


class ExecutorchExporter(HfExporter):
    """Export to an ExecuTorch program (``model.pte``) for the XNNPACK (CPU), CUDA or MLX delegate.

    Class attributes:
        max_batch: Upper bound of the ``batch`` dim with ``dynamic=True``.
        max_sequence: Upper bound of sequence dims when the model's config gives no maximum length.
        max_audio_seconds: Upper bound of raw audio (``samples``) in seconds where the config gives no strides (10 s,
            as Wav2Vec2-base's 512 frames: Moonshine Streaming's attention over 80-sample frames planned 51.5 GiB at
            30 s).
        max_patches: Upper bound of the ``patches`` dim with ``dynamic=True`` (the image patches that grid-driven
            vision models pack as the rows of one tensor, Qwen2-VL's family: 1024 is one 448 x 448 image at patch
            14; the attention over them is planned for that many).
        max_sequence_cap: Cap on a config's maximum length (buffers are planned for the bound, so a 128k-token
            ``max_position_embeddings`` would plan gigabytes); pass explicit ``dynamic_shapes`` to go beyond it.
        external_data_min_bytes: With ``ExecutorchConfig(external_data=None)``, weights of at least this many bytes
            go to a ``.ptd`` file beside the ``.pte``.
        max_planned_bytes: Largest activation memory plan accepted (the runtime allocates it when loading).
    """

    export_format = FORMAT
    config_class = ExecutorchConfig
    parity_atol = 1e-3
    max_batch: ClassVar[int] = 8
    max_sequence: ClassVar[int] = 512
    max_sequence_cap: ClassVar[int] = 4096
    max_patches: ClassVar[int] = 1024
    max_audio_seconds: ClassVar[int] = 10
    external_data_min_bytes: ClassVar[int] = 1 << 30
    max_planned_bytes: ClassVar[int] = 8 << 30
    #: Whether a decoder-only generation export also gets the program ExecuTorch's LLM runner runs (:mod:`.llm_runner`).
    llm_runner: ClassVar[bool] = True
    #: One method serves the prompt and every step (``generation/_one_graph.py``): XNNPACK packs every linear layer's
    #: weights into its own layout per loaded method, so two programs held two packed copies while generating. The
    #: cache axis is traced bounded from 1 (:meth:`dynamic_bounds`) but the runtime and XNNPACK run a zero-length
    #: cache, which the signature admits and the export's check runs against eager.
    one_generation_graph = True

    def export_for_generation(self, model: Any, inputs: dict[str, Any], *, config: Any = None, **kwargs: Any) -> Any:
        """See :meth:`HfExporter.export_for_generation`; the weights go to a ``.ptd`` unless a config says otherwise
        (``external_data=None``: outside), so that where the export keeps a prefill and a decode program (the
        one-graph check failed, a static cache, an encoder-decoder) they share one weights file (``shared.ptd``).

        A decoder-only export whose one graph serves the prompt also gets the ``llm`` component (``model.pte``):
        the program ExecuTorch's LLM runner and optimum-executorch run (:mod:`.llm_runner`), unless
        :attr:`llm_runner` is False; the plan's ``runtimes`` names it, or says why it is missing."""
        exported = super().export_for_generation(model, inputs, config=_weights_outside(config), **kwargs)
        plan = exported.generation
        if plan.get("kind") != "decoder_only" or plan.get("one_graph") is not True:
            return exported
        if not self.llm_runner:
            plan["runtimes"] = {RUNTIME: "not exported: ExecutorchExporter.llm_runner is False"}
            return exported
        try:
            component = export_llm_runner(self, model, inputs, exported.export_config)
        except Exception as exc:  # noqa: BLE001 - an extra program: whatever stops it, the export goes on without it
            plan["runtimes"] = {RUNTIME: f"not exported: {type(exc).__name__}: {str(exc)[:300]}"}
        else:
            exported.components[LLM_COMPONENT] = component
            plan["runtimes"] = {RUNTIME: LLM_COMPONENT}
        return exported

    # -- backend verbs ----------------------------------------------------------------------------------
    def check_available(self, config: ExportConfig) -> None:
        """Also check the delegate can lower and run here (CUDA device, Apple Silicon for MLX), before tracing.

        Also refuses the quantizers whose output XNNPACK cannot lower: NNCF full quantization (XNNPACK's partitioner
        takes none of NNCF's quantized linears, whose outputs stay float, so their quantize/dequantize ops are left
        outside the delegate and ``to_executorch`` fails "Missing out variants", executorch 1.5.1) and NNCF int4
        weight compression (its int4 unpacking is not valid edge dialect: ``SpecViolationError`` in ``to_edge``).

        Raises:
            BackendUnavailableError: executorch is not installed.
            DeviceUnavailableError: The delegate or its device is unavailable; the message says why.
            ConfigError: A quantizer ExecuTorch cannot lower.
        """
        super().check_available(config)
        backend = getattr(config, "backend", "xnnpack")
        reason = _unavailable_reason(backend)
        if reason:
            raise DeviceUnavailableError(f"Cannot export to ExecuTorch backend {backend!r}: {reason}")
        quantizer = config.quantizer
        if isinstance(quantizer, NNCFQuantizer) and isinstance(quantizer.config, NNCFQuantizationConfig):
            raise ConfigError(
                "NNCF full int8 quantization (NNCFQuantizationConfig) does not lower to ExecuTorch: XNNPACK cannot take "
                "its quantized linears (float outputs), so their quantize/dequantize ops are left outside the delegate; "
                "use PT2EQuantizer(XNNPACKQuantizer(...)) for ExecuTorch, or NNCFWeightCompressionConfig(mode='int8_asym')."
            )
        if isinstance(quantizer, NNCFQuantizer) and quantizer.config.mode.startswith("int4"):
            raise ConfigError(
                f"NNCF {quantizer.config.mode} weight compression does not lower to ExecuTorch (its int4 unpacking is not "
                "valid edge dialect); use mode='int8_asym'/'int8_sym', or PT2EQuantizer for ExecuTorch."
            )

    def experts_forward(self, module: Any, config: ExportConfig) -> Any:
        """transformers' ``batched_mm`` (static shapes): ExecuTorch's runtime cannot run the per-expert loop's
        data-dependent row counts; an experts class with a forward of its own (DBRX, Switch Transformers) runs
        every expert on every token, weighted by the routing (:func:`~hub_export.patches.experts.dense_experts_forward`)."""
        dense = dense_experts_forward(module)
        return dense if dense is not None else gathered_experts_forward(module)

    def dynamic_bounds(self, module: Any, config: ExportConfig) -> DimBounds:
        """Bounds for ``dynamic=True``, from the model's config.

        ``batch``: [1, :attr:`max_batch`]. ``patches``: [1, :attr:`max_patches`]. Sequence dims: [1, the config's maximum length for that role]
        (``max_position_embeddings``, ``n_positions``, ``max_target_positions`` for decoder sequences,
        ``max_source_positions`` for encoder ones), capped at :attr:`max_sequence_cap`, or :attr:`max_sequence`
        when the config has none. ``height``/``width``: up to ``image_size``. ``samples`` (raw audio into a
        convolutional feature encoder: Wav2Vec2, HuBERT): the samples that make :attr:`max_sequence` frames
        (``prod(config.conv_stride) * max_sequence``: 10.24 s of 16 kHz audio for Wav2Vec2-base; the
        attention over frames is planned for that; for an encoder whose config gives no strides, Moonshine's
        convolutions or Moonshine Streaming's 80-sample frames: :attr:`max_audio_seconds` at the config's sampling
        rate, 16 kHz when it gives none). The axes of ``input_features`` (``features``, ``frames``): up
        to :attr:`max_sequence` (either may be time). Any other dim: up to its sample size.
        A bound is never below the sample's size.
        """
        model_config: Any = getattr(module, "config", None)

        def bounds(role: str, leaf: str, axis: int, size: int) -> tuple[int, int]:
            if role == "batch":
                high = self.max_batch
            elif role == "patches":
                high = self.max_patches
            elif role in _SEQUENCE_ROLES:
                limit = _config_limit(model_config, _ROLE_LIMITS.get(role, _LIMITS))
                high = min(limit, self.max_sequence_cap) if limit else self.max_sequence
            elif role in ("height", "width"):
                high = _image_size(model_config, 0 if role == "height" else 1) or size
            elif role == "samples":
                high = self._max_samples(model_config)
            elif role in _AUDIO_ROLES:  # time for some models: Canary's input_features are (batch, frames, mels)
                high = self.max_sequence
            else:
                high = size
            return 1, max(high, size)

        return bounds

    def _max_samples(self, model_config: Any) -> int:
        """The ``samples`` bound (:meth:`dynamic_bounds`)."""
        strides = getattr(model_config, "conv_stride", None)
        if strides:
            return math.prod(strides) * self.max_sequence
        configs = [
            model_config,
            getattr(model_config, "encoder_config", None),
            getattr(model_config, "audio_config", None),
        ]
        rates = [getattr(c, name, None) for c in configs for name in ("sampling_rate", "sample_rate")]
        rate = next((r for r in rates if isinstance(r, int) and not isinstance(r, bool) and r > 0), 16_000)
        return rate * self.max_audio_seconds

    def export_program(self, traced: Traced, config: ExportConfig) -> Any:
        """``to_edge_transform_and_lower`` with the delegate's partitioner, then ``to_executorch`` with the memory plan.

        Returns the program with the signature narrowed to the sizes the program was planned for, and the delegate
        and memory-planning flags as the component's ``extra``.

        Raises:
            ExportError: A dynamic dim has no upper bound, or lowering failed.
        """
        if not isinstance(config, ExecutorchConfig):
            raise ExportError(f"ExecutorchExporter lowers with an ExecutorchConfig, got {type(config).__name__}.")
        signature = traced.signature
        unbounded = sorted(name for name, dim in signature.dims.items() if dim.max is None)
        if unbounded:
            raise ExportError(
                f"ExecuTorch plans memory for the largest input, but dims {unbounded} have no upper bound. Export with "
                "dynamic=True (bounds from the model config) or give each Dim a max: Dim('sequence', min=1, max=256)."
            )
        try:
            program = retrace_without_size_one_hints(traced.program, signature, traced.sample)
        except Exception as exc:
            raise ExportError(
                f"Re-tracing with the size-1 dims widened to 2 failed ({type(exc).__name__}: {str(exc)[:800]}); "
                "export with sample inputs whose dynamic dims (batch, sequence) are at least 2."
            ) from exc
        contiguous_attention_outputs(program)
        program = convolutions_in_two_dims(program)  # the runtime has no 3-D convolution
        program = complex_as_real_pairs(program)  # nor complex numbers
        if config.alloc_graph_output:  # the outputs alone already over the limit: refuse before minutes of lowering
            bounded = signature.replace(dims=_planned_dims(program, signature))
            self._refuse_plan(_output_bytes(bounded), bounded, "its outputs alone")
        import torch

        try:
            # no autograd: a program updating an input in place (a StaticCache) trips "leaf Variable that requires
            # grad is being used in an in-place operation" while ExecuTorch's passes re-run its ops
            external = self._external_data(program, config)
            # layouts the decompositions change; tensor checks and other ops outside the core ATen opset
            with (
                torch.no_grad(),
                views_after_permutes_as_reshapes(program),
                all_true_checks_as_all(program),
                op_rewrites(program),
            ):
                manager = _lower(program, config, external)
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
        extra: dict[str, Any] = {
            "backend": config.backend,
            "memory_planning": {
                "alloc_graph_input": config.alloc_graph_input,
                "alloc_graph_output": config.alloc_graph_output,
                "alloc_mutable_buffers": config.alloc_mutable_buffers,
            },
        }
        planned = signature.replace(dims=_planned_dims(manager.exported_program(), signature))
        self._check_planned_memory(manager, planned)
        if external:
            extra["external_data"] = True
        files = _write(manager)
        del manager, program  # collected with the traced program before the parity runner loads (parity_runner)
        return Lowered(load_runtime_program(files, traced.architecture or "the lowered program"), planned, extra)

    def parity_runner(self, program: Any, metadata: ComponentEntry) -> Any:
        """A runner whose method (and the delegate's packed copy of the weights) goes with it
        (:meth:`ExecutorchRunner.for_parity`), not kept with the exported program.

        What lowering left (its programs hold reference cycles) is collected and the C heap trimmed first; XNNPACK's
        packed copy (1.0x the weights it runs: every linear layer and a tied ``lm_head``) is what the check adds."""
        gc.collect()
        release_freed_heap()
        return ExecutorchRunner.for_parity(program, metadata)

    def _external_data(self, program: Any, config: ExportConfig) -> bool:
        """Whether the weights go to a ``.ptd`` file: as the config says; else when they are large, or when several
        names share a weight (tied embeddings: the ``.ptd`` stores it once, a ``.pte`` once per user of it)."""
        choice = getattr(config, "external_data", None)
        if choice is not None:
            return bool(choice)
        storages = [
            t.untyped_storage().data_ptr() for t in program.state_dict.values() if hasattr(t, "untyped_storage")
        ]
        tied = len(set(storages)) < len(storages)
        return tied or _weight_bytes(program) >= self.external_data_min_bytes

    def _check_planned_memory(self, manager: Any, signature: Signature) -> None:
        """Refuse a program whose memory plan (every activation at the dims' upper bounds) exceeds
        :attr:`max_planned_bytes`: the runtime would fail to allocate it when loading."""
        plans = manager.executorch_program.execution_plan
        self._refuse_plan(max((sum(plan.non_const_buffer_sizes) for plan in plans), default=0), signature)

    def _refuse_plan(self, planned: int, signature: Signature, what: str = "") -> None:
        """Raise when ``planned`` bytes (the memory plan, or ``what`` part of it) exceed :attr:`max_planned_bytes`."""
        if planned > self.max_planned_bytes:
            bounds = ", ".join(f"{name} <= {dim.max}" for name, dim in signature.dims.items() if dim.max is not None)
            raise ExportError(
                f"ExecuTorch plans {planned / 2**30:.1f} GiB of activation memory ({what or 'the memory plan'}) for "
                f"the largest inputs ({bounds}), over the {self.max_planned_bytes / 2**30:.0f} GiB limit: bound the "
                "dims to the sizes you will run, "
                "with dynamic_shapes (Dim('sequence', min=1, max=256)) or ExecutorchExporter.max_batch / "
                "max_sequence_cap (a large vocabulary's logits grow with batch x sequence)."
            )


def _weights_outside(config: Any) -> Any:
    """``config`` (one config, a dict of them, or None) with ``external_data=True`` where it is None."""
    import dataclasses

    if isinstance(config, dict):
        return {name: _weights_outside(each) for name, each in config.items()}
    if config is None:
        return ExecutorchConfig(external_data=True)
    if isinstance(config, ExecutorchConfig) and config.external_data is None:
        return dataclasses.replace(config, external_data=True)
    return config


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


def _weight_bytes(program: Any) -> int:
    """Bytes of the program's parameters, buffers and constants, each storage counted once."""
    seen: dict[int, int] = {}
    for value in [*program.state_dict.values(), *program.constants.values()]:
        storage = getattr(value, "untyped_storage", None)
        if storage is not None:
            seen[storage().data_ptr()] = storage().nbytes()
    return sum(seen.values())


def _tag_external(program: Any) -> None:
    """Mark every parameter, buffer and constant of ``program`` for the ``.ptd`` file: the delegate's weights (read by
    XNNPACK as named data) and the ones left to the portable kernels alike (``external_constants``)."""
    signature = program.graph_signature
    lifted = {**signature.inputs_to_parameters, **signature.inputs_to_buffers}
    lifted.update(signature.inputs_to_lifted_tensor_constants)
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in lifted:
            node.meta.setdefault("custom", {})["delegate_constant_tag"] = _DATA_TAG


def _write(manager: Any) -> ProgramFiles:
    """The lowered program written to a temporary folder (``model.pte``, and ``model.ptd`` for external weights),
    which lives as long as the returned :class:`ProgramFiles` (and so the program loaded from them)."""
    import tempfile
    from pathlib import Path

    folder = tempfile.TemporaryDirectory(prefix="hub_export_executorch_")
    root = Path(folder.name)
    with open(root / "model.pte", "wb") as handle:
        manager.write_to_file(handle)
    data = list(getattr(manager, "_tensor_data", None) or {})
    if len(data) > 1:
        raise ExportError(f"The ExecuTorch program keeps its weights in {len(data)} data files; hub_export saves one.")
    ptd = None
    if data:
        ptd = root / "model.ptd"
        with open(ptd, "wb") as handle:
            _stream_data(manager._tensor_data[data[0]], handle)
    return ProgramFiles(root / "model.pte", ptd, folder)


def _stream_data(cord: Any, handle: Any) -> None:
    """Write the ``.ptd``'s bytes (an ExecuTorch ``Cord``) to ``handle``, deleting each weight's temporary file
    (:mod:`._spill`) as soon as it is copied, so the temporary files and the ``.ptd`` do not both hold every weight
    on disk (the manager that references them is dropped next)."""
    items = list(getattr(cord, "_buffers", None) or [])
    if not items:
        cord.write_to_file(handle)
        return
    uses = collections.Counter(id(item) for item in items)
    for item in items:
        if isinstance(item, (bytes, bytearray, memoryview)):
            handle.write(item)
            continue
        item.write_to_file(handle)
        uses[id(item)] -= 1
        if uses[id(item)] == 0 and callable(getattr(item, "close", None)):
            item.close()  # FileBackedData(cleanup=True): its file goes; others have nothing to close


def _lower(program: Any, config: Any, external: bool = False) -> Any:
    """The ExportedProgram lowered for ``config.backend`` and memory-planned: an ``ExecutorchProgramManager``; with
    ``external``, every weight goes to one external data file (``<tag>.ptd``), kept in temporary files rather than
    memory until it is written (:func:`._spill.external_weights_spilled`)."""
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass

    passes, compile_config = None, EdgeCompileConfig()
    if config.backend == "mlx":  # as executorch's own MLX examples lower
        from executorch.backends.mlx.passes import get_default_passes

        passes, compile_config = get_default_passes(), EdgeCompileConfig(_check_ir_validity=False, _skip_dim_order=True)
    memory_plan = MemoryPlanningPass(
        alloc_graph_input=config.alloc_graph_input,
        alloc_graph_output=config.alloc_graph_output,
        alloc_mutable_buffers=config.alloc_mutable_buffers,
    )
    if external:
        _tag_external(program)
    spilled = external_weights_spilled() if external else contextlib.nullcontext()
    with executorch_patches(), weights_shared_by_deep_copies(program), spilled:
        edge = _to_edge(program, config.backend, compile_config, passes, config.metadata)
        for method in edge.methods:
            integer_powers_as_products(edge.exported_program(method))
            python_modulo_of_sizes(edge.exported_program(method))
        return edge.to_executorch(
            ExecutorchBackendConfig(
                memory_planning_pass=memory_plan,
                external_constants=(lambda node: _DATA_TAG) if external else False,
                sym_shape_eval_pass=bounds_pass(),
            )
        )


def _to_edge(program: Any, backend: str, compile_config: Any, passes: Any, constants: Any = None) -> Any:
    """``to_edge_transform_and_lower`` for ``backend``: for XNNPACK, first with its ops kept whole by one
    decomposition table (:func:`._decompose.one_table_partitioner`: two ``run_decompositions`` instead of three),
    and when XNNPACK then refuses a node kept whole (:func:`._decompose.is_kept_node_refused`), again with XNNPACK's
    own node-by-node choice. When XNNPACK fails to compile a partition, the partitions it cannot compile are found
    and left to the portable kernels (:mod:`._refused`). Any other failure is raised as it is: another lowering would
    only repeat it (a model whose quantized linears XNNPACK cannot group lowered twice to fail twice). ``constants``
    become the program's constant methods (``ExecutorchConfig.metadata``)."""
    from executorch.exir import to_edge_transform_and_lower

    def lower(partitioner: Any) -> Any:
        return to_edge_transform_and_lower(
            program,
            partitioner=[partitioner],
            compile_config=compile_config,
            transform_passes=passes,
            constant_methods=constants,
        )

    if backend != "xnnpack":
        return to_edge_transform_and_lower(
            program,
            partitioner=_partitioners(backend),
            compile_config=compile_config,
            transform_passes=passes,
            constant_methods=constants,
        )
    from ._decompose import is_kept_node_refused, one_table_partitioner, unbacked_symbols_restorer
    from ._refused import partitioner_without, warn_refused, xnnpack_preprocess_watch

    restore = unbacked_symbols_restorer(program)  # a failed lowering's data-dependent sizes, put back
    with xnnpack_preprocess_watch() as watch:
        try:
            return lower(one_table_partitioner())
        except Exception as exc:
            if not watch.failed and not is_kept_node_refused(exc):
                raise
        if not watch.failed:  # a node kept whole that XNNPACK refuses: its own node-by-node choice decomposes it
            restore()
            try:
                return lower(_partitioners(backend)[0])
            except Exception:
                if not watch.failed:
                    raise
        restore()
        watch.survey, watch.compiled = True, 0
        surveyed = lower(partitioner_without([]))  # every partition compiled; the ones that fail recorded
        if not watch.refused:  # the failure was the kept-whole lowering's only
            return surveyed
        del surveyed
        restore()
        warn_refused(watch)
        watch.survey = False  # a partition failing now fails the export
        return lower(partitioner_without(watch.refused))


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


def _output_bytes(signature: Signature) -> int:
    """Bytes of the program's outputs at the dims' upper bounds (an unbounded or unknown size counts 0)."""
    import torch

    from ...dims import parse_size

    maxes = {name: dim.max for name, dim in signature.dims.items() if dim.max is not None}
    total = 0
    for spec in signature.outputs:
        sizes = []
        for size in signature.concrete_shape(spec):
            try:
                sizes.append(size if isinstance(size, int) else max(0, parse_size(size).evaluate(maxes)))
            except (KeyError, ValueError, ZeroDivisionError, OverflowError):  # an estimate: never fails the export
                sizes.append(0)
        itemsize = getattr(torch, spec.dtype, torch.float32).itemsize if isinstance(spec.dtype, str) else 4
        total += math.prod(sizes) * itemsize
    return total


def _planned_dims(lowered: Any, signature: Signature) -> dict[str, Dim]:
    """The signature's dims with each max narrowed to what the lowered program was planned for (lowering can tighten
    it, or specialize a dim to one size)."""
    dims = dict(signature.dims)
    placeholders = {n.name: n for n in lowered.graph.nodes if n.op == "placeholder"}
    for spec, node_name in zip(signature.inputs, lowered.graph_signature.user_inputs):
        value = placeholders[node_name].meta.get("val")
        for axis, name in enumerate(signature.concrete_shape(spec)):
            if not isinstance(name, str) or value is None:
                continue
            node = getattr(value.shape[axis], "node", None)
            pinned = int(value.shape[axis]) if node is None else node.maybe_as_int()
            if pinned is not None:  # the lowering specialized this dim to one size
                dims[name] = Dim(name, pinned, pinned)
                continue
            upper = upper_bound(value.shape[axis])
            known = dims[name]
            if upper is not None and known.max is not None:
                dims[name] = Dim(name, known.min, max(known.min, min(upper, known.max)), known.multiple_of)
    return dims
