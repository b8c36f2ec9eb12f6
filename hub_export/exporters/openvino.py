"""``OpenVINOExporter``: the traced ExportedProgram as an ``openvino.Model`` (``openvino_model.xml`` + ``.bin``).

The flat program goes through ``openvino.convert_model`` with one input spec per graph input: static dims stay
static, symbolic ones become ``Dimension(min, max)`` ranges from the trace. Every input and output port then
gets its manifest name (``input_ids``, ``logits``, ``past_key_values.0.key``) as its tensor name, so the IR
reads like the model's own signature. Weights stay float32 unless ``compress_to_fp16=True`` (OpenVINO's
``save_model`` compresses by default; this exporter never does unless asked).

Under ``export_for_generation`` with ``stateful=True`` (the default), every component that takes a KV cache
(``decode``) keeps it as internal OpenVINO state: each ``input.past_key_values.N.key`` Parameter and its
``output.past_key_values.N.key`` Result become a ``ReadValue``/``Assign`` pair on one variable (OpenVINO's
MakeStateful transformation; the variable id is the two names joined). The runner then feeds only the other
inputs and keeps the cache inside its infer request between calls (see :class:`~hub_export.runners.openvino.OpenVINORunner`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..configs import ExportConfig, OpenVINOConfig
from ..errors import ExportError
from ..formats import ExportFormat, layout_for
from ..manifest import ComponentEntry
from ..signature import TensorSpec
from ._trace import Traced
from .base import HfExporter

__all__ = ["OpenVINOExporter"]

#: rt_info key holding whether the saved weights are fp16 (read back by ``save_program``).
_COMPRESS_KEY = ["hub_export", "compress_to_fp16"]
#: rt_info key OpenVINO tools read compile options from; the runner reads it too.
_PRECISION_KEY = ["runtime_options", "INFERENCE_PRECISION_HINT"]

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

    export_format = ExportFormat.OPENVINO
    config_class = OpenVINOConfig
    packages = ("openvino",)
    distributions = ("torch", "transformers", "openvino")
    extra = "openvino"
    parity_atol = 1e-4

    _generation: bool = False

    def export_for_generation(self, model: Any, inputs: dict[str, Any], **kwargs: Any) -> Any:
        """:meth:`HfExporter.export_for_generation`; with ``stateful=True`` the decode cache becomes OpenVINO state."""
        self._generation = True
        try:
            return super().export_for_generation(model, inputs, **kwargs)
        finally:
            self._generation = False

    def export_program(self, traced: Traced, config: ExportConfig) -> Any:
        """Convert ``traced.program`` with OpenVINO's PyTorch frontend and name its ports.

        Raises:
            ExportError: OpenVINO cannot convert the graph, or its ports do not match the traced signature.
        """
        import openvino

        from ..patches.openvino import conversion_patches

        specs = [(_partial_shape(spec, traced.dims), getattr(openvino.Type, _ov_type(spec))) for spec in traced.inputs]
        try:
            with conversion_patches(traced.program):
                model = openvino.convert_model(traced.program, input=specs)
        except Exception as exc:  # the frontend raises OpConversionFailure, RuntimeError, ...
            raise ExportError(
                f"OpenVINO could not convert {traced.architecture}: {type(exc).__name__}: {str(exc)[:2000]}\n"
                "Check that the installed openvino supports these operators, or export to ONNX instead."
            ) from exc
        placeholders = list(traced.program.graph_signature.user_inputs)
        _name_inputs(model, traced.inputs, placeholders, traced.dims)
        _name_outputs(model, traced.outputs)
        model.validate_nodes_and_infer_types()
        from ..quantization.base import calibration_for, find_quantizer

        quantizer = find_quantizer(config, "openvino")
        if quantizer is not None:  # NNCF on the named float model, before any fp16 compression
            model = quantizer.quantize(model, calibration_for(quantizer, traced), "openvino")
        pairs = self._state_pairs(traced, config)
        if pairs:  # after quantization: NNCF calibrates the stateless graph
            from openvino._offline_transformations import apply_make_stateful_transformation

            apply_make_stateful_transformation(model, dict(pairs))
        compress = bool(getattr(config, "compress_to_fp16", False))
        if compress:
            from openvino._offline_transformations import compress_model_transformation

            compress_model_transformation(model)  # what save_model(compress_to_fp16=True) does, applied up front
        else:
            model.set_rt_info("f32", _PRECISION_KEY)
        model.set_rt_info(str(compress), _COMPRESS_KEY)
        return model

    def component_extra(self, traced: Traced, config: ExportConfig) -> dict[str, Any]:
        """Record the weight precision and the stateful flag (used by generation exports)."""
        compress = bool(getattr(config, "compress_to_fp16", False))
        extra: dict[str, Any] = {
            "compress_to_fp16": compress,
            "stateful": bool(getattr(config, "stateful", True)),
            "inference_precision": None if compress else "f32",
        }
        pairs = self._state_pairs(traced, config)
        if pairs:  # [input, output, variable id] of each cache tensor kept as OpenVINO state
            extra["state"] = [[i, o, i + o] for i, o in pairs]
        return extra

    def _state_pairs(self, traced: Traced, config: ExportConfig) -> list[tuple[str, str]]:
        """The (input, output) names of the cache tensors to keep as state: only in generation exports with
        ``stateful=True``, for the ``input.<cache>...`` inputs whose ``output.<cache>...`` twin exists."""
        if not (self._generation and getattr(config, "stateful", True)):
            return []
        caches = {name for name, node in traced.input_structure if node.get("type") == "cache"}
        outputs = {spec.name for spec in traced.outputs}
        pairs = []
        for spec in traced.inputs:
            name = spec.name.removeprefix("input.")
            if spec.name.startswith("input.") and name.split(".", 1)[0] in caches and f"output.{name}" in outputs:
                pairs.append((spec.name, f"output.{name}"))
        return pairs

    @classmethod
    def save_program(cls, program: Any, directory: Path, component: str) -> list[str]:
        """``openvino.save_model`` to ``openvino_<component>.xml`` + ``.bin``, keeping the weights' precision."""
        import openvino

        xml, binary = layout_for(cls.export_format).files(component)
        openvino.save_model(program, str(Path(directory) / xml), compress_to_fp16=_compressed(program))
        return [xml, binary]

    @classmethod
    def load_program(cls, directory: Path, component: str, entry: ComponentEntry) -> Any:
        """``Core().read_model(xml, bin)``."""
        from ..runners.openvino import core

        paths = [Path(directory) / f.path for f in entry.files]
        xml = next((p for p in paths if p.suffix == ".xml"), paths[0])
        binary = next((p for p in paths if p.suffix == ".bin"), xml.with_suffix(".bin"))
        return core().read_model(str(xml), str(binary))

    @classmethod
    def runner_class(cls) -> type:
        """:class:`~hub_export.runners.openvino.OpenVINORunner`."""
        from ..runners.openvino import OpenVINORunner

        return OpenVINORunner


def _compressed(model: Any) -> bool:
    return model.has_rt_info(_COMPRESS_KEY) and model.get_rt_info(_COMPRESS_KEY).astype(str) == "True"


def _ov_type(spec: TensorSpec) -> str:
    if spec.dtype not in _OV_TYPES:
        raise ExportError(f"Input {spec.name!r} has dtype {spec.dtype}, which OpenVINO inputs do not support.")
    return _OV_TYPES[spec.dtype]


def _partial_shape(spec: TensorSpec, dims: dict[str, dict[str, int | None]]) -> Any:
    """Static ints stay static; a symbolic dim becomes ``Dimension(min, max)`` (``max=-1`` when unbounded)."""
    import openvino

    out = []
    for dim in spec.shape:
        if isinstance(dim, int):
            out.append(openvino.Dimension(dim))
            continue
        bounds = dims.get(dim, {})
        low, high = int(bounds.get("min") or 0), bounds.get("max")
        out.append(openvino.Dimension(low, -1 if high is None else int(high)))
    return openvino.PartialShape(out)


def _name_inputs(model: Any, specs: list[TensorSpec], placeholders: list[str], dims: dict[str, Any]) -> None:
    """Give each input port its spec name; re-add inputs the frontend dropped as unused, so the IR's
    signature is the manifest's."""
    import openvino
    import openvino.opset13 as ops

    if len(placeholders) != len(specs):
        raise ExportError(f"The program has {len(placeholders)} user inputs but the trace recorded {len(specs)}.")
    by_placeholder = dict(zip(placeholders, specs))
    params = model.get_parameters()
    if len(params) == len(specs) and not any(param.output(0).get_names() & set(placeholders) for param in params):
        by_placeholder = {}  # the frontend renamed every input: fall back on their order, which it keeps
        for param, spec in zip(params, specs):
            by_placeholder.update({n: spec for n in param.output(0).get_names()})
    seen: set[str] = set()
    for param in params:
        names = param.output(0).get_names()
        spec = next((by_placeholder[n] for n in names if n in by_placeholder), None)
        if spec is None:
            raise ExportError(f"OpenVINO created an input {sorted(names)} that matches no traced input {placeholders}.")
        param.output(0).get_tensor().set_names({spec.name})
        param.set_friendly_name(spec.name)
        seen.add(spec.name)
    missing = [spec for spec in specs if spec.name not in seen]
    if missing:
        extra = []
        for spec in missing:
            param = ops.parameter(_partial_shape(spec, dims), getattr(openvino.Type, _ov_type(spec)), name=spec.name)
            param.output(0).get_tensor().set_names({spec.name})
            extra.append(param)
        model.add_parameters(extra)


def _name_outputs(model: Any, specs: list[TensorSpec]) -> None:
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
