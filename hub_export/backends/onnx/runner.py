"""Run an ONNX program in an ONNX Runtime ``InferenceSession``.

A loaded program opens its saved ``.onnx`` file (ONNX Runtime reads the weights from ``.onnx.data`` beside it,
through symlinks too); a program built in memory is first written to a temporary folder that lives as long as
the runner. On CPU, inputs go in as numpy views of the torch tensors and outputs come back as torch views of
ONNX Runtime's arrays (no copies); on CUDA, inputs and outputs are bound to device buffers (I/O binding).
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
from .io import program_path, save_program

__all__ = ["OnnxRunner", "execution_providers"]

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


def _default_session_options() -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    # ORT sizes its pool from every core of the machine, not the ones this process may run on
    options.intra_op_num_threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    options.log_severity_level = 3
    return options


class OnnxRunner(ModelRunner):
    """Runs an ONNX graph with ONNX Runtime.

    Attributes:
        session: The ``onnxruntime.InferenceSession``.
    """

    options = ("providers", "session_options")

    def __init__(self, session: Any, metadata: ComponentEntry, device: str, keepalive: Any = None) -> None:
        super().__init__(metadata, device)
        import torch

        self.session = session
        self._keepalive = keepalive  # the temporary folder of an in-memory program
        self._torch_device = torch.device(device)
        graph_inputs = {i.name for i in session.get_inputs()}
        # the exporter may drop an input the graph never reads: it is validated, then not fed
        self._feed = [(i, spec.name) for i, spec in enumerate(metadata.signature.inputs) if spec.name in graph_inputs]
        self._outputs = [spec.name for spec in metadata.signature.outputs]
        missing = sorted({o.name for o in session.get_outputs()} ^ set(self._outputs))
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
        **options: Any,
    ) -> OnnxRunner:
        """Open an ``InferenceSession`` for ``program`` (an ``onnx_ir.Model``).

        Args:
            program: The ONNX program; a loaded one is opened from its file.
            metadata: The component's signature.
            device: ``cpu`` (default) or ``cuda[:N]``.
            providers: ONNX Runtime providers (names or ``(name, options)`` pairs), instead of ``device``.
            session_options: An ``onnxruntime.SessionOptions``.

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
        try:
            session = ort.InferenceSession(path, session_options or _default_session_options(), providers=chosen)
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
            source, position = self._shared.get(j, (None, None))
            buffer = kept[position] if source is not None else None
            if buffer is not None and buffer.numel() and buffer.data_ptr() == tensors[source].data_ptr():
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
    main = save_program(program, folder.name, "model")[0]
    return os.path.join(folder.name, main), folder
