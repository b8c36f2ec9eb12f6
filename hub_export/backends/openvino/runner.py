"""Run an ``openvino.Model`` with OpenVINO Runtime: compiled once per device, one reused infer request.

A stateful program (a generation ``decode`` exported with ``stateful=True``) keeps its KV cache inside the infer
request, one sequence at a time::

    decode = exported.runners["decode"]
    decode.reset()                                                  # new sequence: forget the cache
    out = decode(input_ids=..., attention_mask=..., position_ids=..., past_key_values=prefill_cache)  # seeds it
    out = decode(input_ids=..., attention_mask=..., position_ids=...)  # continues from the state;
    # out.past_key_values is None: the cache stays inside OpenVINO

Passing the cache seeds the state with it (and returns the updated cache, read back from the state), so a
stateful runner also computes exactly what the stateless one does.
"""

from __future__ import annotations

import weakref
from typing import Any

from ...errors import ConfigError, DeviceUnavailableError, InputError, ManifestError, UnsafeExportError
from ...manifest import ComponentEntry
from ...runner import ModelRunner
from ...signature import torch_dtype
from ...structure import unflatten
from ._stateful import BEAM_INPUT
from .io import PRECISION_KEY, core

__all__ = ["KV_CACHE_PRECISIONS", "OpenVINORunner", "kv_cache_precision", "openvino_device"]

#: torch-style device type -> OpenVINO device name
_DEVICES = {"cpu": "CPU", "xpu": "GPU", "npu": "NPU"}
_OV_NAMES = ("AUTO", "CPU", "GPU", "NPU", "MULTI", "HETERO")

# program -> {(device, properties): CompiledModel}; entries go away with the program
_COMPILED: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], Any]] = weakref.WeakKeyDictionary()


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


def _compile_properties(
    program: Any,
    device: str,
    options: dict[str, Any] | None,
    num_threads: int | None = None,
    cpu_pinning: bool = False,
    kv_cache_precision: str | None = None,
) -> dict[str, Any]:
    """Compile properties: float32 inference unless the export stored fp16 weights (CPUs with bf16 support default
    to bf16), the KV cache precision on CPU (``kv_cache_precision``, see :func:`kv_cache_precision`), the latency
    hint, the CPU's threads unpinned (pinned threads cannot move off a core another process keeps busy) and
    ``num_threads`` when given; ``options`` (the runner's ``config``) apply last, over the per-device defaults too."""
    per_device: dict[str, Any] = {}
    if program.has_rt_info(PRECISION_KEY):
        per_device["INFERENCE_PRECISION_HINT"] = program.get_rt_info(PRECISION_KEY).astype(str)
    cpu: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY", "ENABLE_CPU_PINNING": bool(cpu_pinning)}
    if kv_cache_precision is None and per_device.get("INFERENCE_PRECISION_HINT") == "f32":
        kv_cache_precision = "f32"
    if kv_cache_precision is not None:
        cpu["KV_CACHE_PRECISION"] = kv_cache_precision
    if num_threads is not None:
        cpu["INFERENCE_NUM_THREADS"] = int(num_threads)
    properties: dict[str, Any] = {}
    if device.startswith(("AUTO", "MULTI", "HETERO")):
        devices = list(core().available_devices)
        # a default set per device is overridden by the caller's value of the same property (which AUTO would
        # otherwise not pass on over the per-device one)
        given = options or {}
        properties["DEVICE_PROPERTIES"] = {
            d: {k: given.get(k, v) for k, v in {**per_device, **(cpu if d.split(".", 1)[0] == "CPU" else {})}.items()}
            for d in devices
        }
    else:
        properties.update(per_device)
        if device.split(".", 1)[0] == "CPU":
            properties.update(cpu)
    properties.update(options or {})
    return properties


#: KV cache precisions an export may name in ``extra["kv_cache_precision"]`` (OpenVINO's element type names).
KV_CACHE_PRECISIONS = ("f32", "f16", "bf16", "u8")


def kv_cache_precision(metadata: ComponentEntry) -> str | None:
    """The KV cache precision a runner compiles a component with on CPU, unless its ``config`` says otherwise.

    The CPU plugin's attention fused with the cache state (see ``_stateful.py``) stores the cache in u8 by default,
    which moves float32 logits by ~1e-3. The export records its choice in ``extra["kv_cache_precision"]``: ``f32``
    for every export whose inference precision is float32, weight-compressed ones included (a u8 cache was not
    faster there on a 2-core x86 CPU, see docs/benchmarks.md, and it adds an error of its own to the weights').
    None (an export made before the field existed, or whose inference precision is not float32): the inference
    precision decides (float32: an f32 cache; else the plugin's default).

    Raises:
        ManifestError: The export names another precision.
    """
    recorded = metadata.extra.get("kv_cache_precision")
    if recorded is None:
        return None
    if recorded not in KV_CACHE_PRECISIONS:
        raise ManifestError(
            f"extra.kv_cache_precision is {recorded!r}; expected one of {', '.join(KV_CACHE_PRECISIONS)}."
        )
    return str(recorded)


def _compiled(program: Any, device: str, properties: dict[str, Any]) -> Any:
    key = (device, repr(sorted(properties.items())))
    cache = _COMPILED.setdefault(program, {})
    if key not in cache:
        try:
            cache[key] = core().compile_model(program, device, properties)
        except RuntimeError as exc:  # a loaded IR OpenVINO cannot compile: damaged, or crafted past the checks
            raise UnsafeExportError(
                f"OpenVINO could not compile the IR for {device} with properties {sorted(properties)} "
                f"({str(exc)[:300]}): the IR is damaged or crafted, or a property does not apply to this device."
            ) from None
    return cache[key]


class OpenVINORunner(ModelRunner):
    """Runs an ``openvino.Model`` compiled for one device, through one infer request.

    Inputs and outputs live in host memory whatever the device; outputs are copied out of OpenVINO's
    buffers, so a later call never overwrites tensors an earlier call returned.

    Attributes:
        stateful: Whether the program keeps cache tensors as OpenVINO state (see the module docstring).
    """

    options = ("config", "num_threads", "cpu_pinning")
    uses_torch_threads = False

    def __init__(self, compiled: Any, metadata: ComponentEntry, device: str | None = None) -> None:
        super().__init__(metadata, device)
        self.compiled_model = compiled
        self.request = compiled.create_infer_request()
        ports = {name: port for port in compiled.inputs for name in port.get_names()}
        self._inputs = [(i, ports[s.name]) for i, s in enumerate(metadata.signature.inputs) if s.name in ports]
        # a stateful export's batch rows to keep (see _stateful.py): fed as 0..batch-1, batch read from the main input
        self._beam = ports.get(BEAM_INPUT)
        self._main = next((ports[n] for n in ("input_ids", "inputs_embeds") if n in ports), None)
        outputs = {name: port for port in compiled.outputs for name in port.get_names()}
        self._state = _state_slots(metadata, {state.name for state in self.request.query_state()})
        state_outputs = {j for _, j, _ in self._state}
        missing = [
            s.name for j, s in enumerate(metadata.signature.outputs) if s.name not in outputs and j not in state_outputs
        ]
        if missing:
            raise InputError(f"The OpenVINO model has no output port(s) {missing}; it does not match its manifest.")
        self._outputs = [
            (j, outputs[s.name]) for j, s in enumerate(metadata.signature.outputs) if j not in state_outputs
        ]
        self._seeded = False
        self._weight_views: dict[str, Any] = {}  # a parity runner's weight inputs (for_parity)
        self._stateless_view: ModelRunner | None = None
        if self._state:
            self._stateless_view = ModelRunner(_without_state(metadata, self._state))
            self._state_kwargs = _state_kwargs(metadata, self._state)

    @property
    def stateful(self) -> bool:
        """Whether the program keeps cache tensors as OpenVINO state."""
        return bool(self._state)

    @property
    def state_inputs(self) -> list[str]:
        """The kwargs (``past_key_values``) a call may omit because the runner keeps them as state."""
        return list(self._state_kwargs) if self._state else []

    def reset(self) -> None:
        """Start a new sequence: clear the OpenVINO state (a no-op for stateless programs)."""
        if self._state:
            self.request.reset_state()
            self._seeded = False

    def reorder_state(self, index: Any) -> None:
        """Keep the batch rows ``index`` of the state, in that order (beam search: each beam continues from the
        cache of the beam it was taken from). A no-op for stateless programs or before the state is seeded."""
        if not self._state or not self._seeded:
            return
        import numpy as np
        import openvino

        rows = np.asarray(index.detach().cpu() if hasattr(index, "detach") else index, dtype=np.int64)
        states = {state.name: state for state in self.request.query_state()}
        for i, _, variable in self._state:
            shape = list(self.metadata.signature.inputs[i].shape)
            axis = shape.index("batch") if "batch" in shape else 0
            current = states[variable].state
            kept = np.take(current.data.view(_bits(current.data)), rows, axis=axis)
            replaced = openvino.Tensor(current.element_type, openvino.Shape(list(kept.shape)))
            replaced.data.view(kept.dtype)[...] = kept
            states[variable].state = replaced

    @classmethod
    def from_program(
        cls,
        program: Any,
        metadata: ComponentEntry,
        device: str | None = None,
        config: dict[str, Any] | None = None,
        num_threads: int | None = None,
        cpu_pinning: bool = False,
        **options: Any,
    ) -> OpenVINORunner:
        """Compile ``program`` for ``device`` (cached per program and device) and build the runner.

        Args:
            program: An ``openvino.Model``.
            metadata: The component's manifest entry.
            device: None (``AUTO``), ``cpu``, ``xpu`` (Intel GPU), ``npu`` or an OpenVINO device name.
            config: OpenVINO compile properties, applied over the defaults (float32 inference precision, the KV
                cache precision the export records, the latency hint, unpinned CPU threads), e.g.
                ``{"KV_CACHE_PRECISION": "f32"}`` for a float32 cache in a weight-compressed export.
            num_threads: CPU inference threads (``INFERENCE_NUM_THREADS``; default: OpenVINO's choice, one per
                physical core).
            cpu_pinning: Pin the CPU inference threads to cores (``ENABLE_CPU_PINNING``). Default False: pinned
                threads wait for a core another process keeps busy instead of moving to a free one.

        Raises:
            DeviceUnavailableError: OpenVINO does not see the device.
            ConfigError: An unknown option (OpenVINO compile properties go in ``config={...}``).
        """
        cls.check_options(options)
        if num_threads is not None and (
            isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 0
        ):
            raise ConfigError(f"num_threads must be an int >= 0 (0: OpenVINO's choice), got {num_threads!r}.")
        if not isinstance(cpu_pinning, bool):
            raise ConfigError(f"cpu_pinning must be True or False, got {cpu_pinning!r}.")
        if config is not None and not isinstance(config, dict):
            raise ConfigError(f"config must be a dict of OpenVINO compile properties, got {type(config).__name__}.")
        name = openvino_device(device)
        properties = _compile_properties(
            program,
            name,
            config,
            num_threads=num_threads,
            cpu_pinning=cpu_pinning,
            kv_cache_precision=kv_cache_precision(metadata),
        )
        compiled = _compiled(program, name, properties)
        return cls(compiled, metadata, name)

    #: The parity runner feeds floating-point constants of at least this many bytes as inputs (:meth:`for_parity`).
    parity_weight_input_bytes: int = 1 << 20

    @classmethod
    def for_parity(cls, program: Any, metadata: ComponentEntry) -> OpenVINORunner:
        """A runner for the export's parity check (it runs once), which holds no second copy of the weights.

        The CPU plugin repacks every constant weight of a linear layer into its own layout when it compiles: a full
        copy of the weights, on top of the model's own that the export still holds. So the check compiles a clone of
        the program whose large floating-point constants (:attr:`parity_weight_input_bytes`) are inputs, fed the
        constants' own memory (which the converted program shares with the PyTorch model): the same graph computed by
        the same plugin, with the weights read in place instead of repacked (the runtime's matrix multiplications on
        an input rather than a constant: results within float32 rounding of the repacked ones). The compiled model
        is not cached with the program and goes with the runner. The inputs' shapes are :func:`_weight_input_shape`'s.
        """
        name = openvino_device(None)
        light, weights = _weights_as_inputs(program, cls.parity_weight_input_bytes)
        runner = cls(core().compile_model(light, name, _compile_properties(program, name, None)), metadata, name)
        for port, tensor in weights.items():  # set once: the request reads them in place on every call
            runner.request.set_tensor(port, tensor)
        runner._weight_views = weights  # the views keep the constants' memory alive as long as the request
        return runner

    def run_flat(self, tensors: list[Any]) -> list[Any]:
        """Run on flat torch inputs (signature order); returns torch tensors in ``metadata.signature.outputs`` order.

        A stateful program's cache inputs seed its state and its cache outputs are read back from the state.
        """
        if self._state:
            self._set_state([tensors[i] for i, _, _ in self._state])
        outputs = self._infer({port: tensors[i] for i, port in self._inputs})
        if self._state:
            states = {state.name: state for state in self.request.query_state()}
            specs = self.metadata.signature.outputs
            for _, j, variable in self._state:
                outputs[j] = _from_openvino(states[variable].state.data.copy(), specs[j].dtype)
        return outputs

    def __call__(self, **kwargs: Any) -> Any:
        """Run with the model's kwargs. A stateful runner called without its cache continues from its state
        (empty after :meth:`reset`) and returns the output with the cache field None."""
        if not self._state or all(kwargs.get(name) is not None for name in self._state_kwargs):
            return super().__call__(**kwargs)
        view = self._stateless_view
        assert view is not None  # built in __init__ whenever the runner has state
        flat = view.flatten_inputs(kwargs)
        ports = [port for _, port in self._inputs]
        if not self._seeded:
            self._set_state(_empty_state(self.metadata, self._state, view.metadata.signature.inputs, flat))
        outputs = self._infer(dict(zip(ports, flat)))
        result = unflatten(
            self.metadata.signature.output_structure, outputs, self.metadata.architecture, "output_structure"
        )
        for name in self._state_kwargs:
            if name in result:
                result[name] = None
        return result

    def _infer(self, feed: dict[Any, Any]) -> list[Any]:
        import numpy as np

        arrays = {}
        for port, tensor in feed.items():
            value = _to_openvino(tensor)
            if isinstance(value, np.ndarray):
                arrays[port] = value
            else:  # bfloat16: copied into the request's own tensor, as share_inputs=False copies the arrays
                target = self.request.get_tensor(port)
                target.shape = list(value.shape)
                target.data.view(np.int16)[...] = value.data.view(np.int16)
        # share_inputs=True lets OpenVINO keep pointers into our arrays across calls; with inputs whose shapes
        # change between calls (generation) that corrupted the heap (seen on T5 decode), so inputs are copied. An
        # openvino.Tensor in the feed would be kept the same way (whatever share_inputs says): bfloat16 inputs too
        # corrupted the heap on T5 decode, so they are written into the request's tensors above.
        if self._beam is not None and self._main is not None and self._main in feed:
            arrays[self._beam] = np.arange(feed[self._main].shape[0], dtype=np.int32)
        results = self.request.infer(arrays, share_inputs=False, share_outputs=False)
        specs = self.metadata.signature.outputs
        outputs: list[Any] = [None] * len(specs)
        for j, port in self._outputs:
            outputs[j] = _from_openvino(results[port], specs[j].dtype)
        return outputs

    def _set_state(self, tensors: list[Any]) -> None:
        import openvino

        states = {state.name: state for state in self.request.query_state()}
        for (_, _, variable), tensor in zip(self._state, tensors):
            value = _to_openvino(tensor)
            states[variable].state = value if isinstance(value, openvino.Tensor) else openvino.Tensor(value)
        self._seeded = True


def _weight_input_shape(constant: Any) -> Any:
    """The shape of the parity input that replaces ``constant``: dynamic except where the CPU plugin needs a size.

    An input of fully static shape is given memory of its own when the model is compiled (openvino 2026.4's CPU
    plugin: compiling added 1.06x the weights of a 4-layer Qwen2.5-0.5B, and the check held 1.17x at full depth).
    A dynamic dim prevents that, but the plugin needs some sizes: a convolution's weights are static (it refuses
    dynamic ones: "Doesn't support dynamic weights shape"), and a matrix multiplication's weights keep their
    output channels (the plugin fuses a bias into the layer and checks its size against them: "data.size() == OC
    ... OC: 0" with every dim dynamic). A constant read by anything but a ``MatMul`` (as its weights), a ``Gather``
    (an embedding) or a ``Convert`` on the way to one of them keeps its static shape."""
    import openvino

    shape = constant.get_output_partial_shape(0)
    rank = shape.rank.get_length()
    if rank < 2:
        return shape
    kept: set[int] = set()
    pending = list(constant.output(0).get_target_inputs())
    while pending:
        target = pending.pop()
        node = target.get_node()
        kind = node.get_type_name()
        if kind == "Convert":
            pending.extend(node.output(0).get_target_inputs())
        elif kind == "MatMul" and target.get_index() == 1:
            kept.add(rank - 2 if node.get_attributes()["transpose_b"] else rank - 1)
        elif not (kind == "Gather" and target.get_index() == 0):
            return shape  # a convolution, or a reader not known to take a dynamic one
    return openvino.PartialShape([shape[i] if i in kept else openvino.Dimension.dynamic() for i in range(rank)])


def _weights_as_inputs(program: Any, min_bytes: int) -> tuple[Any, dict[str, Any]]:
    """A clone of ``program`` (sharing its constants' memory) whose floating-point constants of at least
    ``min_bytes`` are inputs instead (of :func:`_weight_input_shape`), and ``{input name: tensor viewing the
    constant's memory}``."""
    import openvino
    import openvino.opset13 as ops

    light = program.clone()
    floats = {openvino.Type.f32, openvino.Type.f16, openvino.Type.bf16}
    weights: dict[str, Any] = {}
    params: list[Any] = []
    for op in light.get_ordered_ops():
        if op.get_type_name() != "Constant" or op.get_byte_size() < min_bytes:
            continue
        if op.get_output_element_type(0) not in floats:
            continue
        name = f"hub_export.parity_weight.{len(params)}"
        param = ops.parameter(_weight_input_shape(op), op.get_output_element_type(0), name=name)
        param.output(0).get_tensor().set_names({name})
        for target in list(op.output(0).get_target_inputs()):
            target.replace_source_output(param.output(0))
        weights[name] = op.get_tensor_view()
        params.append(param)
    if params:
        light.add_parameters(params)
        light.validate_nodes_and_infer_types()
    return light, weights


def _bits(array: Any) -> Any:
    """The numpy integer dtype of ``array``'s item size (to copy values as raw bits)."""
    import numpy as np

    return {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}.get(array.dtype.itemsize, array.dtype)


def _to_openvino(tensor: Any) -> Any:
    """A torch tensor as OpenVINO takes it: a numpy copy-free view, or for bfloat16 (which numpy lacks) an
    ``openvino.Tensor`` of element type bf16 holding a copy of its bits."""
    import torch

    value = tensor.detach().cpu().contiguous()
    if value.dtype != torch.bfloat16:
        return value.numpy()
    import openvino

    out = openvino.Tensor(openvino.Type.bf16, openvino.Shape(list(value.shape)))
    bits = value.view(torch.int16).numpy()
    out.data.view(bits.dtype)[...] = bits
    return out


def _from_openvino(array: Any, dtype: str) -> Any:
    """An OpenVINO output array as a torch tensor of the manifest's ``dtype``: OpenVINO hands bf16 data out as a
    float16-typed array of the same bits, read back here as bfloat16 (not converted). A state read back in another
    type than its output's (the float32 state of a bfloat16 graph computed in float32: ``_widen.py``) is converted."""
    import torch

    if dtype == "bfloat16" and array.dtype.itemsize == 2:
        return torch.from_numpy(array.view(_bits(array))).view(torch.bfloat16)
    tensor = torch.from_numpy(array)
    wanted = getattr(torch, dtype, None)
    return tensor.to(wanted) if isinstance(wanted, torch.dtype) and tensor.dtype != wanted else tensor


def _state_slots(metadata: ComponentEntry, variables: set[str]) -> list[tuple[int, int, str]]:
    """(input index, output index, variable id) of each ``input.X``/``output.X`` pair kept as state
    (MakeStateful names the variable after the two names joined)."""
    outputs = {spec.name: j for j, spec in enumerate(metadata.signature.outputs)}
    slots = []
    for i, spec in enumerate(metadata.signature.inputs):
        twin = "output." + spec.name.removeprefix("input.")
        if spec.name.startswith("input.") and spec.name + twin in variables and twin in outputs:
            slots.append((i, outputs[twin], spec.name + twin))
    return slots


def _state_kwargs(metadata: ComponentEntry, slots: list[tuple[int, int, str]]) -> list[str]:
    """The top-level kwargs (``past_key_values``) whose every tensor is kept as state."""
    state = {metadata.signature.inputs[i].name.removeprefix("input.") for i, _, _ in slots}
    names = []
    for name, _ in metadata.signature.input_structure:
        leaves = [
            s.name.removeprefix("input.")
            for s in metadata.signature.inputs
            if s.name.removeprefix("input.").startswith(f"{name}.")
        ]
        if leaves and set(leaves) <= state:
            names.append(name)
    return names


def _without_state(metadata: ComponentEntry, slots: list[tuple[int, int, str]]) -> ComponentEntry:
    """The signature a stateful call takes: the manifest's inputs minus the cache kwargs kept as state."""
    import dataclasses

    state = set(_state_kwargs(metadata, slots))
    inputs = tuple(s for i, s in enumerate(metadata.signature.inputs) if i not in {i for i, _, _ in slots})
    structure = tuple((name, node) for name, node in metadata.signature.input_structure if name not in state)
    return dataclasses.replace(metadata, signature=metadata.signature.replace(inputs=inputs, input_structure=structure))


def _empty_state(metadata: ComponentEntry, slots: list[tuple[int, int, str]], specs: Any, flat: list[Any]) -> list[Any]:
    """Zero-length state tensors for a fresh sequence: the batch of the inputs, every other symbolic axis 0."""
    import torch

    batch = next((int(t.shape[0]) for s, t in zip(specs, flat) if s.shape and s.shape[0] == "batch"), 1)
    empty = []
    for i, _, _ in slots:
        spec = metadata.signature.inputs[i]
        shape = [
            batch if d == "batch" else (d if isinstance(d, int) else 0) for d in metadata.signature.concrete_shape(spec)
        ]
        empty.append(torch.zeros(shape, dtype=torch_dtype(spec.dtype)))
    return empty
