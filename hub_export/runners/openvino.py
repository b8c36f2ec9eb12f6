"""Run an ``openvino.Model`` with OpenVINO Runtime: compiled once per device, one reused infer request."""

from __future__ import annotations

import functools
import weakref
from typing import Any

from ..errors import DeviceUnavailableError, InputError
from ..formats import ExportFormat
from ..manifest import ComponentEntry
from .base import ModelRunner

__all__ = ["OpenVINORunner", "core", "openvino_device"]

#: torch-style device type -> OpenVINO device name
_DEVICES = {"cpu": "CPU", "xpu": "GPU", "npu": "NPU"}
_OV_NAMES = ("AUTO", "CPU", "GPU", "NPU", "MULTI", "HETERO")
_PRECISION_KEY = ["runtime_options", "INFERENCE_PRECISION_HINT"]

# program -> {(device, properties): CompiledModel}; entries go away with the program
_COMPILED: weakref.WeakKeyDictionary[Any, dict[tuple[str, tuple], Any]] = weakref.WeakKeyDictionary()


@functools.lru_cache(maxsize=1)
def core() -> Any:
    """The process-wide ``openvino.Core``."""
    import openvino

    return openvino.Core()


def openvino_device(device: str | None) -> str:
    """The OpenVINO device for a torch-style name: None -> ``AUTO``, ``cpu`` -> ``CPU``, ``xpu[:i]`` -> ``GPU[.i]``,
    ``npu`` -> ``NPU``; OpenVINO's own names (``CPU``, ``GPU.1``, ``AUTO``) pass through.

    Raises:
        DeviceUnavailableError: The name is unknown, or OpenVINO does not see that device here.
    """
    available = list(core().available_devices)
    if device is None:
        name = "AUTO"
    else:
        text = str(device).strip()
        kind, _, index = text.partition(":")
        if kind.lower() in _DEVICES and (not index or index.isdigit()):
            name = _DEVICES[kind.lower()] + (f".{index}" if index and kind.lower() != "cpu" else "")
        elif kind.split(".", 1)[0].upper() in _OV_NAMES:
            name = text.upper()  # OpenVINO's own spelling: CPU, GPU.1, AUTO:GPU,CPU, HETERO:GPU,CPU
        else:
            raise DeviceUnavailableError(
                f"OpenVINO cannot run on {device!r}; use device=None (AUTO), 'cpu', 'xpu' (Intel GPU) or 'npu'. "
                f"Devices OpenVINO sees here: {available}."
            )
    if name.startswith(("AUTO", "MULTI", "HETERO")):
        if not available:
            raise DeviceUnavailableError("OpenVINO sees no device at all; check the openvino installation.")
        return name
    base = name.split(".", 1)[0]
    bases = {d.split(".", 1)[0] for d in available}
    # OpenVINO lists a single GPU as "GPU" and several as "GPU.0", "GPU.1": accept both spellings of the first
    if name not in available and not (base in bases and name in (base, f"{base}.0")):
        raise DeviceUnavailableError(
            f"device={device!r} maps to OpenVINO device {name!r}, which is not available here "
            f"(available: {available}); use one of those (e.g. device='cpu') or device=None for AUTO."
        )
    return name


def _compile_properties(program: Any, device: str, options: dict[str, Any] | None) -> dict[str, Any]:
    """float32 inference unless the export stored fp16 weights (CPUs with bf16 support default to bf16)."""
    properties: dict[str, Any] = {}
    if program.has_rt_info(_PRECISION_KEY):
        precision = program.get_rt_info(_PRECISION_KEY).astype(str)
        if device.startswith(("AUTO", "MULTI", "HETERO")):
            devices = list(core().available_devices)
            properties["DEVICE_PROPERTIES"] = {d: {"INFERENCE_PRECISION_HINT": precision} for d in devices}
        else:
            properties["INFERENCE_PRECISION_HINT"] = precision
    properties.update(options or {})
    return properties


def _compiled(program: Any, device: str, properties: dict[str, Any]) -> Any:
    key = (device, repr(sorted(properties.items())))
    cache = _COMPILED.setdefault(program, {})
    if key not in cache:
        cache[key] = core().compile_model(program, device, properties)
    return cache[key]


class OpenVINORunner(ModelRunner):
    """Runs an ``openvino.Model`` compiled for one device, through one infer request.

    Inputs and outputs live in host memory whatever the device; outputs are copied out of OpenVINO's
    buffers, so a later call never overwrites tensors an earlier call returned.
    """

    export_format = ExportFormat.OPENVINO

    def __init__(self, compiled: Any, metadata: ComponentEntry, device: str | None = None) -> None:
        super().__init__(metadata, device)
        self.compiled_model = compiled
        self.request = compiled.create_infer_request()
        ports = {name: port for port in compiled.inputs for name in port.get_names()}
        self._inputs = [(i, ports[s.name]) for i, s in enumerate(metadata.inputs) if s.name in ports]
        outputs = {name: port for port in compiled.outputs for name in port.get_names()}
        missing = [s.name for s in metadata.outputs if s.name not in outputs]
        if missing:
            raise InputError(f"The OpenVINO model has no output port(s) {missing}; it does not match its manifest.")
        self._outputs = [outputs[s.name] for s in metadata.outputs]

    @classmethod
    def from_program(
        cls,
        program: Any,
        metadata: ComponentEntry,
        device: str | None = None,
        config: dict[str, Any] | None = None,
        **options: Any,
    ) -> OpenVINORunner:
        """Compile ``program`` for ``device`` (cached per program and device) and build the runner.

        Args:
            program: An ``openvino.Model``.
            metadata: The component's manifest entry.
            device: None (``AUTO``), ``cpu``, ``xpu`` (Intel GPU), ``npu`` or an OpenVINO device name.
            config: OpenVINO compile properties, applied over the defaults (float32 inference precision).

        Raises:
            DeviceUnavailableError: OpenVINO does not see the device.
        """
        if options:
            raise TypeError(
                f"Unknown OpenVINORunner option(s) {sorted(options)}; pass OpenVINO compile properties as config={{...}}."
            )
        name = openvino_device(device)
        compiled = _compiled(program, name, _compile_properties(program, name, config))
        return cls(compiled, metadata, name)

    def run_flat(self, tensors: list[Any]) -> list[Any]:
        """Run on flat torch inputs (signature order); returns torch tensors in ``metadata.outputs`` order."""
        import torch

        feed = {port: tensors[i].detach().cpu().contiguous().numpy() for i, port in self._inputs}
        # share_inputs=True lets OpenVINO keep pointers into our arrays across calls; with inputs whose shapes
        # change between calls (generation) that corrupted the heap (seen on T5 decode), so inputs are copied.
        results = self.request.infer(feed, share_inputs=False, share_outputs=False)
        return [torch.from_numpy(results[port]) for port in self._outputs]
