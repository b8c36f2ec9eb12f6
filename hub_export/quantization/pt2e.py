"""``PT2EQuantizer``: PyTorch 2 Export quantization (torchao's ``prepare_pt2e``/``convert_pt2e``) of the traced graph.

It runs at the ``"fx"`` stage, between tracing and the backend (see ``HfExporter.export_component``), so every
format takes the result: observers are inserted by ``prepare_pt2e`` with the given torchao/ExecuTorch quantizer,
the calibration samples (flattened to the graph inputs) run through them, ``convert_pt2e`` puts
``quantize``/``dequantize`` ops in their place, and the module is re-exported with the traced dims.

Example::

    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer, get_symmetric_quantization_config)

    xnnpack = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True))
    config = ExecutorchConfig(quantizer=PT2EQuantizer(xnnpack))
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import ExportError
from ..patches.tracing import tracing_patches
from .base import Calibration, ExportQuantizer, calibration_for, find_quantizer

__all__ = ["PT2EQuantizer", "quantize_traced"]


class PT2EQuantizer(ExportQuantizer):
    """Quantize the traced FX graph with a PT2E quantizer (e.g. ExecuTorch's ``XNNPACKQuantizer``).

    Args:
        quantizer: A ``torchao.quantization.pt2e.quantizer.Quantizer`` that annotates the graph.
        calibration_dataset: Input dicts the observers run on (else the export's sample input).
    """

    stages = ("fx",)
    packages = ("torchao",)
    needs_calibration = True

    def __init__(self, quantizer: Any, calibration_dataset: Iterable[dict[str, Any]] | None = None) -> None:
        super().__init__(calibration_dataset)
        self.quantizer = quantizer

    def settings(self) -> dict[str, Any]:
        """The PT2E quantizer's class (its annotation config is code, not data)."""
        return {"pt2e_quantizer": f"{type(self.quantizer).__module__}.{type(self.quantizer).__qualname__}"}

    def quantize(self, model: Any, calibration: Calibration, stage: str) -> Any:
        """``prepare_pt2e`` the module of the traced program, calibrate it, return the ``convert_pt2e`` module."""
        import torch
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        module = model.module()
        _integer_scalar_ops(module)
        prepared = prepare_pt2e(module, self.quantizer)
        with torch.no_grad():
            for sample in calibration.samples:
                prepared(*sample)
        return convert_pt2e(prepared)


def quantize_traced(traced: Any, config: Any) -> Any:
    """The traced component with its program replaced by the config's ``"fx"`` quantizer's result (re-exported
    with the traced dims); ``traced`` itself when there is no such quantizer.

    Raises:
        ExportError: The quantized module cannot be re-exported.
    """
    import torch

    quantizer = find_quantizer(config, "fx")
    if quantizer is None:
        return traced
    module = quantizer.quantize(traced.program, calibration_for(quantizer, traced), "fx")
    signature = traced.signature
    shapes = []
    for spec in signature.inputs:
        axes = {}
        for axis, name in enumerate(spec.shape):
            dim = signature.dims.get(name) if isinstance(name, str) else None
            if dim is not None and not dim.pinned:
                axes[axis] = torch.export.Dim.AUTO if dim.max is None else dim.to_auto()
        shapes.append(axes or None)
    dynamic = any(s is not None for s in shapes)
    try:
        with tracing_patches(dynamic):
            program = torch.export.export(
                module, tuple(traced.sample), dynamic_shapes=tuple(shapes) if dynamic else None
            )
    except Exception as exc:  # torch raises many types
        raise ExportError(
            f"Re-exporting the PT2E-quantized graph failed: {type(exc).__name__}: {str(exc)[:1500]}"
        ) from exc
    return traced.replace(program=program)


def _integer_scalar_ops(module: Any) -> None:
    """Turn ``aten.add/mul.Tensor(int tensor, python scalar)`` into their ``.Scalar`` overloads.

    Works around ExecuTorch's ``XNNPACKQuantizer.transform_for_annotation`` (``_convert_scalars_to_attrs``), which
    turns every scalar operand of ``add.Tensor``/``mul.Tensor`` into a float32 constant, also for integer tensors:
    a Llama's ``arange(n) + 0`` position indices then become float and ``aten.index`` fails ("tensors used as
    indices must be long, int, byte or bool tensors").
    """
    import torch

    aten = torch.ops.aten
    swap = {aten.add.Tensor: aten.add.Scalar, aten.mul.Tensor: aten.mul.Scalar}
    for node in module.graph.nodes:
        if node.op != "call_function" or node.target not in swap or len(node.args) != 2:
            continue
        first, second = node.args
        value = first.meta.get("val") if isinstance(first, torch.fx.Node) else None
        if not isinstance(second, torch.fx.Node) and value is not None and not value.dtype.is_floating_point:
            node.target = swap[node.target]
    module.recompile()
