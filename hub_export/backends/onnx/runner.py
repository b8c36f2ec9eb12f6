"""Run an ONNX program in an ONNX Runtime ``InferenceSession``.

A loaded program opens its saved ``.onnx`` file (ONNX Runtime reads the weights from ``.onnx.data`` beside it,
through symlinks too); a program built in memory is first written to a temporary folder that lives as long as
the runner. On CPU, inputs go in as numpy views of the torch tensors and outputs come back as torch views of
ONNX Runtime's arrays (no copies); on CUDA, inputs and outputs are bound to device buffers (I/O binding).

Threads (see "Runtime speed" in ``docs/benchmarks.md``): the intra-op pool has one thread per core this process may
run on, and its threads sleep when idle instead of spinning (``allow_spinning=False``, where ONNX Runtime's default
spins): spinning threads take the cores from the work they wait for when other processes share them, and a generation
export's prefill and decode sessions each have a pool.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from ...errors import ConfigError, DeviceUnavailableError, ExportError, UnsafeExportError
from ...manifest import ComponentEntry
from ...runner import ModelRunner
from ._fusions import runnable_on
from .conventions import graph_input_name, graph_output_name
from .io import program_path, save_program

__all__ = ["OnnxRunner", "available_cores", "execution_providers", "make_session_options"]

_CUDA = "CUDAExecutionProvider"
_GPU_PROVIDERS = {_CUDA: "cuda", "TensorrtExecutionProvider": "cuda"}
# dtypes numpy cannot hold: such graphs run through I/O binding on CPU too
_NON_NUMPY = {"bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"}


def execution_providers(device: str | None, providers: list[Any] | None = None) -> list[Any]:
    """ONNX Runtime providers for ``device`` (``cpu``/None, ``cuda``, ``cuda:N``), or ``providers`` checked.

    Raises:
        DeviceUnavailableError: The device or a provider is not in this ONNX Runtime build.
        ConfigError: Both ``device`` and ``providers`` were given.
    """
    import onnxruntime as ort

    available = ort.get_available_providers()
    if providers is not None:
        if device is not None:
            raise ConfigError(
                f"Pass either device={device!r} or providers=, not both: the providers choose the device "
                "(e.g. [('CUDAExecutionProvider', {'device_id': 1})])."
            )
        names = [p[0] if isinstance(p, (tuple, list)) else p for p in providers]
        unknown = [n for n in names if n not in available]
        if not names or unknown:
            raise DeviceUnavailableError(
                f"Execution provider(s) {unknown or names} are not available in this ONNX Runtime build; "
                f"available: {available}."
            )
        return list(providers)
    kind, _, index = (device or "cpu").partition(":")
    if kind == "cpu":
        return ["CPUExecutionProvider"]
    if kind == "cuda":
        if _CUDA not in available:
            raise DeviceUnavailableError(
                f"device={device!r} needs ONNX Runtime's {_CUDA}, which this build lacks (available: {available}); "
                "install onnxruntime-gpu, or use device='cpu'."
            )
        return [(_CUDA, {"device_id": int(index or 0)}), "CPUExecutionProvider"]
    raise DeviceUnavailableError(
        f"ONNX Runtime cannot run on device={device!r}: use 'cpu' or 'cuda[:N]', or pass providers= "
        f"(available: {available})."
    )


def available_cores() -> int:
    """The cores this process may run on (its affinity mask), else every core."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def make_session_options(
    base: Any = None,
    *,
    intra_op_num_threads: int | None = None,
    allow_spinning: bool | None = None,
    session_config: dict[str, Any] | None = None,
) -> Any:
    """The ``SessionOptions`` a runner opens its session with.

    Without ``base``, hub_export's defaults: one intra-op thread per available core (ONNX Runtime counts every core
    of the machine, not the ones this process may use) and no spinning. A given ``base`` is used as is, except for
    the options passed explicitly.

    Args:
        base: An ``onnxruntime.SessionOptions`` to start from (not modified: a copy is made when options apply).
        intra_op_num_threads: Threads of the intra-op pool (None: the default; 1: the calling thread only).
        allow_spinning: Whether idle pool threads spin (``session.intra_op.allow_spinning``).
        session_config: More session config entries (``{"session.dynamic_block_base": "4"}``).

    Raises:
        ConfigError: A value of the wrong type, or a negative thread count.
    """
    import onnxruntime as ort

    if intra_op_num_threads is not None and (
        isinstance(intra_op_num_threads, bool) or not isinstance(intra_op_num_threads, int) or intra_op_num_threads < 0
    ):
        raise ConfigError(
            f"intra_op_num_threads must be an int >= 0 (0: ONNX Runtime's choice), got {intra_op_num_threads!r}."
        )
    if allow_spinning is not None and not isinstance(allow_spinning, bool):
        raise ConfigError(f"allow_spinning must be True or False, got {allow_spinning!r}.")
    if session_config is not None and not isinstance(session_config, dict):
        raise ConfigError(
            f"session_config must be a dict of session config entries, got {type(session_config).__name__}."
        )
    entries = {str(k): str(v) for k, v in (session_config or {}).items()}
    if base is None:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.intra_op_num_threads = available_cores() if intra_op_num_threads is None else intra_op_num_threads
        entries.setdefault(_SPINNING, "1" if allow_spinning else "0")
    else:
        if intra_op_num_threads is None and allow_spinning is None and not entries:
            return base
        options = _copy_options(ort, base)
        if intra_op_num_threads is not None:
            options.intra_op_num_threads = intra_op_num_threads
        if allow_spinning is not None:
            entries[_SPINNING] = "1" if allow_spinning else "0"
    for key, value in entries.items():
        options.add_session_config_entry(key, value)
    return options


_SPINNING = "session.intra_op.allow_spinning"
_COPIED = (
    "intra_op_num_threads",
    "inter_op_num_threads",
    "execution_mode",
    "graph_optimization_level",
    "log_severity_level",
    "enable_cpu_mem_arena",
    "enable_mem_pattern",
    "enable_mem_reuse",
    "enable_profiling",
    "profile_file_prefix",
    "optimized_model_filepath",
    "use_deterministic_compute",
)


def _copy_options(ort: Any, base: Any) -> Any:
    """A new ``SessionOptions`` with ``base``'s settings (its config entries cannot be listed, so they are not kept:
    pass them in ``session_config``)."""
    options = ort.SessionOptions()
    for name in _COPIED:
        if hasattr(base, name):
            setattr(options, name, getattr(base, name))
    return options


class OnnxRunner(ModelRunner):
    """Runs an ONNX graph with ONNX Runtime.

    Attributes:
        session: The ``onnxruntime.InferenceSession``.
    """

    options = ("providers", "session_options", "intra_op_num_threads", "allow_spinning", "session_config")
    uses_torch_threads = False

    def __init__(self, session: Any, metadata: ComponentEntry, device: str, keepalive: Any = None) -> None:
        super().__init__(metadata, device)
        import torch

        self.session = session
        self._keepalive = keepalive  # the temporary folder of an in-memory program
        self._torch_device = torch.device(device)
        graph_inputs = {i.name for i in session.get_inputs()}
        graph_outputs = {o.name for o in session.get_outputs()}
        # each input by its graph name (conventions.py), or its own name in an export made before those; the
        # exporter may drop an input the graph never reads: it is validated, then not fed
        feed = [
            (i, _graph_name(spec.name, graph_input_name, graph_inputs))
            for i, spec in enumerate(metadata.signature.inputs)
        ]
        self._feed = [(i, name) for i, name in feed if name in graph_inputs]
        self._outputs = [
            _graph_name(spec.name, graph_output_name, graph_outputs) for spec in metadata.signature.outputs
        ]
        missing = sorted(graph_outputs ^ set(self._outputs))
        if missing:
            raise ExportError(f"The ONNX graph's outputs differ from the export's signature at {missing}.")
        dtypes = {s.dtype for s in (*metadata.signature.inputs, *metadata.signature.outputs)}
        # a static KV cache (input.X -> output.X of one shape): I/O binding makes ORT write each such output into
        # the caller's input buffer, so the cache is never copied between steps
        fed = {i: k for k, (i, _) in enumerate(self._feed)}  # input index -> position among the fed inputs
        self._shared = {j: (i, fed[i]) for j, i in metadata.signature.in_place_pairs().items() if i in fed}
        self._binding = self._torch_device.type != "cpu" or bool(dtypes & _NON_NUMPY) or bool(self._shared)

    @classmethod
    def from_program(
        cls,
        program: Any,
        metadata: ComponentEntry,
        device: str | None = None,
        *,
        providers: list[Any] | None = None,
        session_options: Any = None,
        intra_op_num_threads: int | None = None,
        allow_spinning: bool | None = None,
        session_config: dict[str, Any] | None = None,
        **options: Any,
    ) -> OnnxRunner:
        """Open an ``InferenceSession`` for ``program`` (an ``onnx_ir.Model``).

        Args:
            program: The ONNX program; a loaded one is opened from its file.
            metadata: The component's signature.
            device: ``cpu`` (default) or ``cuda[:N]``.
            providers: ONNX Runtime providers (names or ``(name, options)`` pairs), instead of ``device``.
            session_options: An ``onnxruntime.SessionOptions`` (instead of hub_export's defaults, see
                :func:`make_session_options`).
            intra_op_num_threads: Intra-op threads (default: the cores this process may run on).
            allow_spinning: Let idle intra-op threads spin (default False: they sleep; faster on an idle machine by
                a few percent, much slower when other processes share the cores).
            session_config: More ``SessionOptions`` config entries, e.g. ``{"session.dynamic_block_base": "4"}``.

        Raises:
            DeviceUnavailableError: The device or a provider is unavailable, or the session fell back from it.
            ConfigError: An unknown option.
            UnsafeExportError: ONNX Runtime refused the graph (a loaded file it cannot read).
        """
        import onnxruntime as ort

        cls.check_options(options)
        chosen = execution_providers(device, providers)
        program = runnable_on(program, chosen)  # q/k norms inside GroupQueryAttention: CUDA only (a copy otherwise)
        path, keepalive = program_path(program), None
        if path is None:
            path, keepalive = _write_temporary(program)
        settings = make_session_options(
            session_options,
            intra_op_num_threads=intra_op_num_threads,
            allow_spinning=allow_spinning,
            session_config=session_config,
        )
        try:
            session = ort.InferenceSession(path, settings, providers=chosen)
        except Exception as exc:  # noqa: BLE001 - ORT's Fail/InvalidGraph/InvalidArgument share no base but Exception
            where = Path(path).name if keepalive is None else "the ONNX graph"
            raise UnsafeExportError(f"{where}: ONNX Runtime refused the graph ({str(exc)[:300]}).") from None
        first = chosen[0][0] if isinstance(chosen[0], (tuple, list)) else chosen[0]
        if first not in session.get_providers():
            raise DeviceUnavailableError(
                f"ONNX Runtime could not start {first} (session providers: {session.get_providers()}); "
                "check the driver/CUDA installation or use device='cpu'."
            )
        return cls(session, metadata, _session_device(session), keepalive)

    @classmethod
    def for_parity(cls, program: Any, metadata: ComponentEntry) -> OnnxRunner:
        """A CPU runner for one check of an in-memory program, on the weights' own memory (see :mod:`._memory`):
        no temporary file, no copy of the weights, no graph optimizations. A loaded program opens its file."""
        if program_path(program) is not None:
            return cls.from_program(program, metadata)
        from ._memory import memory_session

        providers = execution_providers(None)
        session, keepalive = memory_session(runnable_on(program, providers), providers)
        return cls(session, metadata, "cpu", keepalive)

    def run_flat(self, tensors: list[Any]) -> list[Any]:
        """Run the session on the flat inputs; outputs come back as torch tensors in signature order."""
        if self._binding:
            return self._run_bound(tensors)
        import torch

        feed = {name: _to_numpy(tensors[i]) for i, name in self._feed}
        return [torch.from_numpy(array) for array in self.session.run(self._outputs, feed)]

    def _run_bound(self, tensors: list[Any]) -> list[Any]:
        """I/O binding on the session's device: floats bound where ORT runs, integers on host."""
        import torch

        device = self._torch_device
        on_gpu = device.type == "cuda"
        binding = self.session.io_binding()
        kept = []
        for i, name in self._feed:
            tensor = tensors[i].detach()
            # integer inputs mostly feed shape computations that ORT runs on the CPU
            tensor = tensor.to(device) if on_gpu and tensor.is_floating_point() else tensor.cpu()
            tensor = tensor.contiguous()
            buffer = tensor if tensor.numel() else torch.empty(1, dtype=tensor.dtype, device=tensor.device)
            kept.append(buffer)
            where = (buffer.device.type, buffer.device.index or 0)
            binding.bind_input(name, *where, _onnx_type(tensor.dtype), list(tensor.shape), buffer.data_ptr())
        in_place: dict[int, Any] = {}
        for j, name in enumerate(self._outputs):
            shared = self._shared.get(j)
            source = None if shared is None else shared[0]
            buffer = None if shared is None else kept[shared[1]]
            if (
                source is not None
                and buffer is not None
                and buffer.numel()
                and buffer.data_ptr() == tensors[source].data_ptr()
            ):
                # an updated-in-place cache (input.X -> output.X of one shape): ORT writes into the caller's buffer
                where = (buffer.device.type, buffer.device.index or 0)
                binding.bind_output(name, *where, _onnx_type(buffer.dtype), list(buffer.shape), buffer.data_ptr())
                in_place[j] = tensors[source]
            else:
                binding.bind_output(name, device.type, device.index or 0)
        if on_gpu:
            torch.cuda.current_stream(device).synchronize()  # ORT runs on its own stream
        self.session.run_with_iobinding(binding)
        binding.synchronize_outputs()
        outputs = []
        for j, (spec, value) in enumerate(zip(self.metadata.signature.outputs, binding.get_outputs())):
            if j in in_place:
                outputs.append(in_place[j])
                continue
            out = torch.from_dlpack(value)
            outputs.append(out.view(torch.bool) if spec.dtype == "bool" and out.dtype != torch.bool else out)
        return outputs


def _session_device(session: Any) -> str:
    provider = session.get_providers()[0]
    if provider in _GPU_PROVIDERS:
        index = session.get_provider_options().get(provider, {}).get("device_id", "0")
        return f"{_GPU_PROVIDERS[provider]}:{int(index)}"
    return "cpu"


def _to_numpy(tensor: Any) -> Any:
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    return tensor.contiguous().numpy()


def _onnx_type(dtype: Any) -> int:
    from onnx_ir.tensor_adapters import from_torch_dtype

    return int(from_torch_dtype(dtype))


def _write_temporary(program: Any) -> tuple[str, Any]:
    """Save an in-memory program to a temporary folder kept alive (and cleaned up) with the runner."""
    folder = tempfile.TemporaryDirectory(prefix="hub_export_onnx_")  # removed when the runner is collected
    main = save_program(program, Path(folder.name), "model")[0]
    return os.path.join(folder.name, main), folder


def _graph_name(name: str, convention: Any, names: set[str]) -> str:
    """``name`` as the graph has it: as :mod:`.conventions` names it, else as it is (an export made before)."""
    return name if name in names else convention(name)
