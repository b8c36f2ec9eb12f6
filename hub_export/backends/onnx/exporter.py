"""``OnnxExporter``: the traced ExportedProgram lowered to ONNX, saved as ``model.onnx`` + ``model.onnx_data``.

Why ``torch.onnx.export(program, dynamo=True)`` rather than building the graph with ``onnx_ir`` ourselves: the
flat ExportedProgram from :func:`~hub_export.export.trace.trace` is exactly what the torch exporter takes, and
it owns the hard part (the ATen-to-ONNX translation library, decompositions, symbolic shapes, onnxscript's
optimizer). What it does not do, this module does on the resulting ``onnx_ir.Model``:

* graph inputs and outputs get the traced names as ONNX's own tools read them (``input_ids``, ``logits``, the cache
  in ``past_key_values.0.key`` and out ``present.0.key``: :mod:`.conventions`) instead of ``tensors_0`` /
  ``linear_14``;
* symbolic dims get the names of the traced signature as those tools read them (``batch_size``,
  ``sequence_length``) instead of ``s0``; output dims that are expressions read with those names
  (``past_sequence_length + sequence_length``);
* weights are saved to ``model.onnx_data`` (every initializer of 1 KiB or more), so exports past protobuf's 2 GB
  limit work, and loading keeps them there: :meth:`OnnxExporter.load_program` returns an ``onnx_ir.Model`` whose
  initializers are lazy ``ExternalTensor`` objects, remembering its file so ONNX Runtime opens the file itself.

Lowering runs under :func:`hub_export.backends.onnx.patches.onnx_export_patches` with its ``translation_table`` (two upstream
bugs, named there). ``OnnxConfig.ort_fusions`` applies the ONNX Runtime fusions of that execution provider
(:mod:`~hub_export.backends.onnx._fusions`: ``com.microsoft`` ops such as ``GroupQueryAttention``, so the graph then
runs on ONNX Runtime only). A loaded program runs from its saved file:
edits made to it in memory are neither run nor saved by ``ExportedModel`` (which copies the verified files).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

from ...configs import ExportConfig
from ...errors import ConfigError, ExportError
from ...export.exporter import HfExporter, Lowered
from ...export.trace import Traced
from ...manifest import ComponentEntry
from ...patches.direct_lowering import lowered_with_fallback
from ...patches.graph import all_true_checks_as_all
from ...quantization.base import calibration_for, find_quantizer
from ...quantization.pt2e import PT2EQuantizer
from ._fusions import contrib_ops
from ._fusions import fuse_for_ort as _fuse_for_ort
from ._moe import fused_experts_forward, moe_plan
from ._weights import fold_weight_transposes, keep_large_weights
from ._widen import bfloat16_values, widen_bfloat16
from .config import FORMAT, OnnxConfig
from .conventions import graph_dim, graph_input_name, graph_output_name
from .patches import (
    exact_no_op_rules,
    known_split_folding,
    onnx_export_patches,
    register_orphan_constants,
    single_output_rewrite_rules,
    translation_table,
)
from .runner import OnnxRunner

__all__ = ["OnnxExporter"]


class OnnxExporter(HfExporter):
    """Export to ONNX (an ``onnx_ir.Model``), run with ONNX Runtime on CPU or CUDA."""

    export_format = FORMAT
    config_class = OnnxConfig
    parity_atol = 1e-3
    one_generation_graph = True  # one session holds the weights once (see HfExporter)

    def check_available(self, config: ExportConfig) -> None:
        """Also refuse ``PT2EQuantizer``: its quantize/dequantize ops do not convert to ONNX (``torch.onnx.export``
        fails with a ``ConversionError`` on ``quantized_decomposed.choose_qparams``, torch 2.13).

        Raises:
            BackendUnavailableError: An ONNX package is not installed.
            ConfigError: A PT2E quantizer.
        """
        super().check_available(config)
        if isinstance(config.quantizer, PT2EQuantizer):
            raise ConfigError(
                "PT2EQuantizer works with dynamo, executorch exports, not 'onnx': its quantize/dequantize ops do not "
                "convert to ONNX; use OnnxRuntimeQuantizer or NNCFQuantizer for ONNX exports."
            )

    def check_model(self, module: Any, sample_inputs: dict[str, Any], config: ExportConfig) -> None:
        """Refuse a bfloat16 model before tracing: ONNX Runtime's CPU provider has no bfloat16 kernels for most
        operators (``Mul``, ``Add``, ``MatMul``: onnxruntime 1.32), so the graph could be neither checked nor run.
        With a weight-only quantizer it is accepted: the graph computes in float32 from weights quantized from the
        bfloat16 ones (:mod:`._widen`).

        Raises:
            ExportError: A parameter, buffer or sample input is bfloat16, and the config quantizes no weights.
        """
        import torch

        if _widens(config):
            return
        tensors = [*sample_inputs.values()]
        if isinstance(module, torch.nn.Module):
            tensors += [*module.parameters(), *module.buffers()]
        if any(isinstance(t, torch.Tensor) and t.dtype == torch.bfloat16 for t in tensors):
            why = "ONNX Runtime's CPU provider cannot run bfloat16 graphs (no bfloat16 Mul, Add, MatMul kernels): "
            raise ExportError(
                why + "convert the model with model.to(torch.float16) (or float32) before exporting to ONNX, or "
                "quantize its weights (OnnxRuntimeQuantizer(OnnxRuntimeWeightOnlyConfig())), or export the bfloat16 "
                "model to the dynamo, openvino or executorch format.",
                cli_message=why + "export with --dtype float16 (or float32), with --quantize int4 (or int8), or to "
                "another --format (dynamo, openvino, executorch).",
            )

    def experts_forward(self, module: Any, config: ExportConfig) -> Any:
        """Fused for cuda: the mixture-of-experts layers ``com.microsoft::MoE`` can express become one
        ``hub_export::moe`` call (:mod:`._moe`); the others, and every layer otherwise, take the default."""
        if getattr(config, "ort_fusions", None) != "cuda":
            return None
        plan = moe_plan(module)
        return None if plan is None else functools.partial(fused_experts_forward, module, plan)

    def export_program(self, traced: Traced, config: ExportConfig) -> Lowered:
        """Lower the flat ExportedProgram with ``torch.onnx.export``; name its I/O and dims after the signature.
        With ``ort_fusions``, the component's ``extra`` records the provider and the ``com.microsoft`` ops the fused
        graph holds.

        Raises:
            ExportError: The ONNX exporter failed (the message keeps its reason).
        """

        if not isinstance(config, OnnxConfig):
            raise ExportError(f"OnnxExporter lowers with an OnnxConfig, got {type(config).__name__}.")
        try:
            model = lowered_with_fallback(lambda direct: _lowered(traced, config, direct), "ONNX lowering")
        except Exception as exc:  # torch.onnx raises many types; keep its message
            raise ExportError(
                f"torch.onnx.export failed for {traced.architecture}: {type(exc).__name__}: {str(exc)[:2000]}\n"
                "Try optimize=False, another opset_version, or export with DynamoConfig to check the trace."
            ) from exc
        _name_io(model, traced)
        _name_dims(model, traced)
        model.graph.name = traced.architecture or "model"
        extra: dict[str, Any] = {}
        if _widens(config) and bfloat16_values(model):  # before the fusions: they match float32 patterns
            widen_bfloat16(model)
            extra["computes_in"] = "float32"
        if config.ort_fusions:  # after naming: the fusions match shapes by the traced dims (one past_sequence)
            _fuse_for_ort(model, config.ort_fusions)
            extra.update(ort_fusions=config.ort_fusions, contrib_ops=contrib_ops(model))
        return Lowered(_quantize(model, traced, config), extra=extra)

    def parity_runner(self, program: Any, metadata: ComponentEntry) -> Any:
        """ONNX Runtime on the weights' own memory (:meth:`OnnxRunner.for_parity`): no temporary copy of them."""
        return OnnxRunner.for_parity(program, metadata)


def _lowered(traced: Traced, config: OnnxConfig, direct: list[bool] | None) -> Any:
    """``torch.onnx.export`` of ``traced.program``, optimized when ``config`` asks; with a ``direct`` list, a program
    that needs no re-trace is lowered as it stands (:func:`.patches.lowered_without_retrace`)."""
    import torch

    with onnx_export_patches(direct), all_true_checks_as_all(traced.program):
        onnx_program = torch.onnx.export(
            traced.program,
            args=tuple(traced.sample),
            dynamo=True,
            opset_version=config.opset_version,
            optimize=False,  # optimized below, without folding copies of the weights
            custom_translation_table=translation_table(),
            verbose=False,
            report=False,
        )
        if onnx_program is None:  # torch returns None only when asked not to build a program
            raise ExportError("torch.onnx.export returned no program.")
        model = onnx_program.model
        del onnx_program
        if config.optimize:
            _optimize(model)
    return model


def _optimize(model: Any) -> None:
    """What ``torch.onnx.export(optimize=True)`` runs (onnxscript's optimizer, then its ONNX fusions), except that a
    ``Transpose`` of a large weight is folded lazily (:func:`._weights.fold_weight_transposes`) instead of into a
    numpy copy of every linear weight held in memory until saving, and that the rewrite rules matching several
    output nodes are left out (:func:`.patches.single_output_rewrite_rules`: quadratic in the graph's size), and that
    the no-op rules match only an exact 0 or 1 (:func:`.patches.exact_no_op_rules`: ``x + 1e-8`` is not ``x``), and
    that a ``SplitToSequence`` of a split it cannot count is left unfolded (:func:`.patches.known_split_folding`)."""
    from onnxscript import optimizer
    from onnxscript.rewriter import onnx_fusions

    with single_output_rewrite_rules(), exact_no_op_rules(), known_split_folding():
        optimizer.optimize_ir(model, should_fold=keep_large_weights)
    register_orphan_constants(model)  # onnxscript's rewriter may drop a rewrite's constants (patches.py)
    onnx_fusions.fuse(model)
    fold_weight_transposes(model)


def _widens(config: ExportConfig) -> bool:
    """Whether the config quantizes the weights only, so a bfloat16 model's graph computes in float32."""
    from .quantization import OnnxRuntimeQuantizer, OnnxRuntimeWeightOnlyConfig

    quantizer = config.quantizer
    return isinstance(quantizer, OnnxRuntimeQuantizer) and isinstance(quantizer.config, OnnxRuntimeWeightOnlyConfig)


def _quantize(model: Any, traced: Traced, config: ExportConfig) -> Any:
    """Run the config's ONNX-stage quantizer (after fusions, as ONNX Runtime recommends), its calibration samples fed
    by the graph's input names."""
    quantizer = find_quantizer(config, "onnx")
    if quantizer is None:
        return model
    calibration = calibration_for(quantizer, traced)
    calibration = dataclasses.replace(calibration, names=[graph_input_name(n) for n in calibration.names])
    quantized = quantizer.quantize(model, calibration, "onnx")
    quantized.graph.name = model.graph.name
    return quantized


def _name_io(model: Any, traced: Traced) -> None:
    """Give the graph's inputs and outputs the traced names (an output that is already named gets an Identity)."""
    import onnx_ir as ir

    graph = model.graph
    names = [graph_input_name(s.name) for s in traced.signature.inputs]
    by_placeholder = dict(zip(traced.program.graph_signature.user_inputs, names))
    output_names = [graph_output_name(s.name) for s in traced.signature.outputs]
    wanted = set(names) | set(output_names)
    for node in graph:  # free the names we are about to give
        for value in node.outputs:
            if value.name in wanted:
                value.name = f"{value.name}__inner"
    for index, value in enumerate(graph.inputs):
        # onnx_ir's OutputFixPass renames an input returned as is to "<name>_orig"
        name = by_placeholder.get(value.name) or by_placeholder.get(value.name.removesuffix("_orig"))
        if name is None and len(graph.inputs) == len(names):
            name = names[index]
        if name is None:
            raise ExportError(f"The ONNX graph has an input {value.name!r} that the traced program does not have.")
        value.name = name
    if len(graph.outputs) != len(traced.signature.outputs):
        raise ExportError(
            f"The ONNX graph has {len(graph.outputs)} outputs, the traced program {len(traced.signature.outputs)}."
        )
    named: set[int] = set()
    for index, name in enumerate(output_names):
        value = graph.outputs[index]
        if value.is_graph_input() or value.is_initializer() or id(value) in named or value.producer() is None:
            identity = ir.node("Identity", [value])
            out = identity.outputs[0]
            out.shape, out.type = value.shape, value.type
            graph.append(identity)
            graph.outputs[index] = value = out
        named.add(id(value))
        value.name = name


def _name_dims(model: Any, traced: Traced) -> None:
    """Rename the exporter's symbols (``s0``) after the traced signature's dim names everywhere in the graph, as
    ONNX's tools name them (:func:`.conventions.graph_dim`: ``batch_size``).

    Graph inputs and outputs take the traced shapes (names, expressions such as ``past_sequence + sequence``, and
    the sizes the tracer pinned, which the exporter may still write as a symbol ``"2"``); other values get their
    symbols substituted.
    """
    import onnx_ir as ir

    graph = model.graph
    inputs = {graph_input_name(s.name): s for s in traced.signature.inputs}
    io_specs = {id(value): inputs.get(value.name) for value in graph.inputs}
    io_specs.update(zip(map(id, graph.outputs), traced.signature.outputs))
    symbols: dict[str, str] = {}
    for value in graph.inputs:
        spec = io_specs.get(id(value))
        if value.shape is None or spec is None:
            continue
        for dim, named in zip(value.shape, spec.shape):
            if isinstance(dim, ir.SymbolicDim) and dim.value and isinstance(named, str):
                symbols.setdefault(dim.value, graph_dim(named))
    keys = sorted(symbols, key=len, reverse=True)
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, keys)) + r")\b") if keys else None

    def rename(text: str) -> int | str:
        if text.isdigit():
            return int(text)
        if text in symbols or pattern is None:
            return symbols.get(text, text)
        return pattern.sub(lambda m: symbols[m.group(1)], text)

    for value in _all_values(model):
        if value.shape is None:
            continue
        spec = io_specs.get(id(value))
        shape = traced.signature.concrete_shape(spec) if spec is not None else None
        traced_shape = shape if shape is not None and len(shape) == len(value.shape) else None
        dims = []
        for axis, dim in enumerate(value.shape):
            if isinstance(dim, ir.SymbolicDim) and dim.value:
                dim = traced_shape[axis] if traced_shape is not None else rename(dim.value)
                dim = graph_dim(dim) if isinstance(dim, str) else dim
            dims.append(dim)
        value.shape = ir.Shape(dims)


def _all_values(model: Any) -> list[Any]:
    """Every value of the main graph and its subgraphs: inputs, node outputs (graph outputs are node outputs)."""
    import onnx_ir as ir

    seen: dict[int, Any] = {}
    for graph in model.graphs():
        for value in graph.inputs:
            seen[id(value)] = value
        for node in ir.traversal.RecursiveGraphIterator(graph):
            for value in node.outputs:
                seen[id(value)] = value
        for value in graph.outputs:
            seen[id(value)] = value
    return list(seen.values())
