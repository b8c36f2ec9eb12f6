"""``OpenVINOExporter``: the traced ExportedProgram as an ``openvino.Model`` (``openvino_model.xml`` + ``.bin``).

The flat program goes through ``openvino.convert_model`` with one input spec per graph input: static dims stay
static, symbolic ones become ``Dimension(min, max)`` ranges from the trace (set after conversion instead when an
input is never read: see :func:`_name_inputs`). Every input and output port then
gets its manifest name (``input_ids``, ``logits``, ``past_key_values.0.key``) as its tensor name, so the IR
reads like the model's own signature. Weights stay float32 unless ``compress_to_fp16=True`` (OpenVINO's
``save_model`` compresses by default; this exporter never does unless asked).

Under ``export_for_generation`` with ``stateful=True`` (the default), every component that takes a KV cache
(``decode``) keeps it as internal OpenVINO state: each ``input.past_key_values.N.key`` Parameter and its
``output.past_key_values.N.key`` Result become a ``ReadValue``/``Assign`` pair on one variable (OpenVINO's
MakeStateful transformation; the variable id is the two names joined), laid out so that the CPU plugin fuses
attention with the state (a ``beam_idx`` input and state initializers, see :mod:`._stateful`). The runner then feeds
only the other inputs and keeps the cache inside its infer request between calls (see :class:`~hub_export.backends.openvino.runner.OpenVINORunner`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...configs import ExportConfig
from ...errors import ConfigError, ExportError
from ...export.exporter import HfExporter, Lowered
from ...export.trace import Traced
from ...manifest import ComponentEntry
from ...patches.direct_lowering import lowered_with_fallback
from ...quantization.base import calibration_for, find_quantizer
from ...quantization.nncf_quant import NNCFQuantizer, NNCFWeightCompressionConfig
from ...quantization.pt2e import PT2EQuantizer
from ...signature import Signature, TensorSpec
from ._size_rules import floor_mods_of_integers_as_mods
from ._stateful import fuse_state_attention
from ._widen import bfloat16_graph, widen_bfloat16
from .config import FORMAT, OpenVINOConfig
from .io import COMPRESS_KEY, PRECISION_KEY
from .patches import (
    conversion_patches,
    converted_without_retrace,
    hold_constant_memory,
    low_precision_constants_held,
    stable_top_k,
)
from .runner import OpenVINORunner

__all__ = ["OpenVINOExporter"]

_OV_TYPES = {
    "float32": "f32",
    "float16": "f16",
    "bfloat16": "bf16",
    "float64": "f64",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
    "bool": "boolean",
}


class OpenVINOExporter(HfExporter):
    """Export to OpenVINO IR, run by OpenVINO Runtime on ``CPU``, ``GPU`` (``xpu``), ``NPU`` or ``AUTO``."""

    export_format = FORMAT
    config_class = OpenVINOConfig
    parity_atol = 1e-4
    one_generation_graph = True  # one compiled model holds the weights once (see HfExporter)
    recurrence = "while_loop"  # the PyTorch frontend converts while_loop, not scan

    _generation: bool = False

    def export_for_generation(self, model: Any, inputs: dict[str, Any], **kwargs: Any) -> Any:
        """:meth:`HfExporter.export_for_generation`; with ``stateful=True`` the decode cache becomes OpenVINO state."""
        self._generation = True
        try:
            return super().export_for_generation(model, inputs, **kwargs)
        finally:
            self._generation = False

    def check_available(self, config: ExportConfig) -> None:
        """Also refuse ``PT2EQuantizer``: OpenVINO's frontend fails typing its ``FakeQuantize`` -> ``MatMul``
        (openvino 2026.4).

        Raises:
            BackendUnavailableError: openvino is not installed.
            ConfigError: A PT2E quantizer.
        """
        super().check_available(config)
        if isinstance(config.quantizer, PT2EQuantizer):
            raise ConfigError(
                "PT2EQuantizer works with dynamo, executorch exports, not 'openvino': OpenVINO's frontend cannot type "
                "its quantize/dequantize ops; use NNCFQuantizer for OpenVINO exports."
            )

    def export_program(self, traced: Traced, config: ExportConfig) -> Any:
        """Convert ``traced.program`` with OpenVINO's PyTorch frontend and name its ports.

        Raises:
            ExportError: OpenVINO cannot convert the graph, or its ports do not match the traced signature.
        """
        import openvino

        signature = traced.signature
        specs = [(_partial_shape(spec, signature), getattr(openvino.Type, _ov_type(spec))) for spec in signature.inputs]
        placeholders = list(traced.program.graph_signature.user_inputs)
        # the frontend drops an input nothing reads, then gives the shapes by position to the inputs left
        # ("Incompatible shape was requested for input #0"): such a program's shapes are set once its inputs are named
        given = specs if not _unread_inputs(traced.program, placeholders) else None
        held: list[Any] = []

        def convert(direct: list[bool] | None) -> Any:
            held.clear()  # only the tensors the conversion that succeeds read
            return _converted(traced.program, given, held, direct)

        try:
            model = lowered_with_fallback(convert, "OpenVINO conversion")
        except Exception as exc:  # the frontend raises OpConversionFailure, RuntimeError, ...
            symbolic = any(not dim.pinned for dim in signature.dims.values())
            raise ExportError(
                f"OpenVINO could not convert {traced.architecture}: {type(exc).__name__}: {str(exc)[:2000]}\n"
                "Check that the installed openvino supports these operators, or export to ONNX instead."
                + (" A static export (dynamic=False) may convert where this dynamic one did not." if symbolic else ""),
                cli_message=f"OpenVINO could not convert {traced.architecture} ({type(exc).__name__}; --verbose shows "
                "its message): "
                + (
                    "export with --static (the sample's sizes), or to another --format."
                    if symbolic
                    else "export to another --format."
                ),
            ) from exc
        stable_top_k(model)
        floor_mods_of_integers_as_mods(model)
        _name_inputs(model, signature, placeholders, shaped=given is None)
        _name_outputs(model, signature.outputs)
        model.validate_nodes_and_infer_types()
        quantizer = find_quantizer(config, "openvino")
        extra = self._extra(traced, config)
        pairs = self._state_pairs(traced, config)
        if _compresses_weights(quantizer) and bfloat16_graph(model):  # NNCF's chain then runs compressed
            widen_bfloat16(model, states=[name for pair in pairs for name in pair])
            extra["computes_in"] = "float32"
        if quantizer is not None:  # NNCF on the named float model, before any fp16 compression
            model = quantizer.quantize(model, calibration_for(quantizer, traced), "openvino")
        if pairs:  # after quantization: NNCF calibrates the stateless graph
            from openvino._offline_transformations import apply_make_stateful_transformation

            apply_make_stateful_transformation(model, dict(pairs))
            first = next(spec for spec in signature.inputs if spec.name == pairs[0][0])
            if _serves_the_prompt(signature):  # the state is never set from outside: the plugin may own its layout
                fuse_state_attention(model, list(first.shape).index("batch") if "batch" in first.shape else 0)
        compress = bool(getattr(config, "compress_to_fp16", False))
        if compress:
            from openvino._offline_transformations import compress_model_transformation

            compress_model_transformation(model)  # what save_model(compress_to_fp16=True) does, applied up front
        precision = _precision(config)
        if precision is not None:
            model.set_rt_info(precision, PRECISION_KEY)
        model.set_rt_info(str(compress), COMPRESS_KEY)
        stored = _float_constants(model) if compress and quantizer is None else None
        hold_constant_memory(model, held)
        return Lowered(model, extra=extra, weights=stored)

    def parity_precision(self, dtype: str, config: ExportConfig) -> str:
        """bfloat16 when the runtime may compute in it: an ``inference_precision`` of ``"bf16"``, or ``"f16"`` (a CPU
        without float16 arithmetic runs bfloat16 instead), or none with ``compress_to_fp16`` (the device's default:
        bfloat16 on CPUs with bfloat16 instructions); float16 for a float32 model whose weights are stored as fp16;
        else the model's dtype."""
        hint = getattr(config, "inference_precision", None)
        compress = bool(getattr(config, "compress_to_fp16", False))
        if hint in ("bf16", "f16") or (hint is None and compress):
            return "bfloat16"
        if compress and dtype == "float32":
            return "float16"
        return dtype

    def parity_runner(self, program: Any, metadata: ComponentEntry) -> Any:
        """A compiled model freed with the runner (:meth:`OpenVINORunner.for_parity`), not cached with the program."""
        return OpenVINORunner.for_parity(program, metadata)

    def _extra(self, traced: Traced, config: ExportConfig) -> dict[str, Any]:
        """The weight precision and the stateful flag (used by generation exports)."""
        compress = bool(getattr(config, "compress_to_fp16", False))
        extra: dict[str, Any] = {
            "compress_to_fp16": compress,
            "stateful": bool(getattr(config, "stateful", True)),
            "inference_precision": _precision(config),
        }
        pairs = self._state_pairs(traced, config)
        if pairs:  # [input, output, variable id] of each cache tensor kept as OpenVINO state
            extra["state"] = [[i, o, i + o] for i, o in pairs]
            if extra["inference_precision"] == "f32":  # the cache's precision on CPU (runner.kv_cache_precision)
                extra["kv_cache_precision"] = "f32"
        return extra

    def _state_pairs(self, traced: Traced, config: ExportConfig) -> list[tuple[str, str]]:
        """The (input, output) names of the cache tensors to keep as state: only in generation exports with
        ``stateful=True``, for the ``input.<cache>...`` inputs whose ``output.<cache>...`` twin exists."""
        if not (self._generation and getattr(config, "stateful", True)):
            return []
        caches = {name for name, node in traced.signature.input_structure if node.get("type") == "cache"}
        outputs = {spec.name for spec in traced.signature.outputs}
        pairs = []
        for spec in traced.signature.inputs:
            name = spec.name.removeprefix("input.")
            if spec.name.startswith("input.") and name.split(".", 1)[0] in caches and f"output.{name}" in outputs:
                pairs.append((spec.name, f"output.{name}"))
        return pairs


def _converted(program: Any, given: Any, held: list[Any], direct: list[bool] | None) -> Any:
    """``openvino.convert_model(program)`` under :func:`.patches.conversion_patches`, collecting in ``held`` the
    tensors its low-precision constants read; with a ``direct`` list, a program that needs no re-trace is converted
    as it stands (:func:`.patches.converted_without_retrace`)."""
    import contextlib

    import openvino

    with contextlib.ExitStack() as stack:
        stack.enter_context(conversion_patches(program))
        stack.enter_context(low_precision_constants_held(held))
        if direct is not None:
            stack.enter_context(converted_without_retrace(direct))
        return openvino.convert_model(program, input=given)


def _compresses_weights(quantizer: Any) -> bool:
    """Whether ``quantizer`` compresses the weights only (NNCF's ``compress_weights``), so a bfloat16 graph is
    computed in float32 (:mod:`._widen`)."""
    return isinstance(quantizer, NNCFQuantizer) and isinstance(quantizer.config, NNCFWeightCompressionConfig)


def _precision(config: ExportConfig) -> str | None:
    """The inference precision hint recorded in the IR: the config's, else f32 unless the weights are fp16."""
    chosen = getattr(config, "inference_precision", None)
    if chosen is not None:
        return str(chosen)
    return None if getattr(config, "compress_to_fp16", False) else "f32"


def _float_constants(model: Any) -> dict[str, dict[str, int]]:
    """``{dtype: {"count", "bytes"}}`` of the IR's floating-point constants: what its ``.bin`` stores once
    ``compress_to_fp16`` converted the float32 weights (constants fp16 cannot hold stay float32)."""
    names = {ov: torch for torch, ov in _OV_TYPES.items() if torch in ("float32", "float16", "bfloat16", "float64")}
    summary: dict[str, dict[str, int]] = {}
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Constant":
            continue
        name = names.get(op.get_output_element_type(0).get_type_name())
        if name is not None:
            entry = summary.setdefault(name, {"count": 0, "bytes": 0})
            entry["count"] += 1
            entry["bytes"] += int(op.get_byte_size())
    return summary


def _ov_type(spec: TensorSpec) -> str:
    if spec.dtype not in _OV_TYPES:
        raise ExportError(f"Input {spec.name!r} has dtype {spec.dtype}, which OpenVINO inputs do not support.")
    return _OV_TYPES[spec.dtype]


def _serves_the_prompt(signature: Signature) -> bool:
    """Whether a stateful graph's token axis is dynamic (it takes the prompt and every step from an empty state).

    Only then is its attention fused with the state (:mod:`._stateful`): the fused node keeps the cache in a layout of
    the CPU plugin's own, so a graph whose state is set from another graph's outputs (a prefill + decode export, a
    multimodal decoder fed by its prefill) keeps the plain ``Concat`` layout.
    """
    main = next((spec for spec in signature.inputs if spec.name in ("input_ids", "inputs_embeds")), None)
    return main is not None and len(main.shape) > 1 and isinstance(main.shape[1], str)


def _partial_shape(spec: TensorSpec, signature: Signature) -> Any:
    """Static ints (and pinned dims) stay static; a symbolic dim becomes ``Dimension(min, max)`` (``max=-1`` when
    unbounded)."""
    import openvino

    out = []
    for dim in signature.concrete_shape(spec):
        if isinstance(dim, int):
            out.append(openvino.Dimension(dim))
            continue
        bounds = signature.dims[dim]
        out.append(openvino.Dimension(bounds.min, -1 if bounds.max is None else bounds.max))
    return openvino.PartialShape(out)


def _unread_inputs(program: Any, placeholders: list[str]) -> list[str]:
    """The user inputs of ``program`` that no node reads."""
    return [n.name for n in program.graph.nodes if n.op == "placeholder" and n.name in placeholders and not n.users]


def _name_inputs(model: Any, signature: Signature, placeholders: list[str], shaped: bool = False) -> None:
    """Give each input port its spec name (and, with ``shaped``, its spec's shape: the input was converted without
    one); re-add inputs the frontend dropped as unused, so the IR's signature is the manifest's.

    OpenVINO's PyTorch frontend (openvino 2026.4) drops the ``Parameter`` of an input that no op reads and then
    merges the shapes given to ``convert_model`` with the ``Parameter`` s left by position, so every later input
    gets the shape of the one before it ("Incompatible shape was requested for input #0 ... Original shape:
    [?,3,?,?] update shape: [?,?]": Idefics3's vision tower, PP-FormulaNet, VisionEncoderDecoder). A program with
    such an input is converted with the frontend's own dynamic shapes and its inputs shaped here, by name."""
    import openvino
    import openvino.opset13 as ops

    specs = signature.inputs
    if len(placeholders) != len(specs):
        raise ExportError(f"The program has {len(placeholders)} user inputs but the trace recorded {len(specs)}.")
    by_placeholder: dict[str, TensorSpec] = dict(zip(placeholders, specs))
    params = model.get_parameters()
    if len(params) == len(specs) and not any(param.output(0).get_names() & set(placeholders) for param in params):
        by_placeholder = {}  # the frontend renamed every input: fall back on their order, which it keeps
        for param, spec in zip(params, specs):
            by_placeholder.update({n: spec for n in param.output(0).get_names()})
    seen: set[str] = set()
    for param in params:
        names = param.output(0).get_names()
        found = next((by_placeholder[n] for n in names if n in by_placeholder), None)
        if found is None:
            raise ExportError(f"OpenVINO created an input {sorted(names)} that matches no traced input {placeholders}.")
        param.output(0).get_tensor().set_names({found.name})
        param.set_friendly_name(found.name)
        if shaped:
            param.set_partial_shape(_partial_shape(found, signature))
        seen.add(found.name)
    missing = [spec for spec in specs if spec.name not in seen]
    if missing:
        extra = []
        for spec in missing:
            param = ops.parameter(
                _partial_shape(spec, signature), getattr(openvino.Type, _ov_type(spec)), name=spec.name
            )
            param.output(0).get_tensor().set_names({spec.name})
            extra.append(param)
        model.add_parameters(extra)


def _name_outputs(model: Any, specs: Sequence[TensorSpec]) -> None:
    """Give each output port its spec name. A result that shares its tensor with an input or another result
    (a pass-through output) first gets its own tensor through a no-op ``Convert``, so names never collide."""
    import openvino.opset13 as ops

    results = model.get_results()
    if len(results) != len(specs):
        raise ExportError(f"OpenVINO produced {len(results)} outputs but the trace recorded {len(specs)}.")
    taken = {(p.get_name(), 0) for p in model.get_parameters()}
    for index, (result, spec) in enumerate(zip(results, specs)):
        source = result.input_value(0)
        key = (source.get_node().get_name(), source.get_index())
        if key in taken:
            copy = ops.convert(source, source.get_element_type())
            result.input(0).replace_source_output(copy.output(0))
            source = copy.output(0)
            key = (copy.get_name(), 0)
        taken.add(key)
        model.output(index).get_tensor().set_names({spec.name})
        result.set_friendly_name(spec.name)
