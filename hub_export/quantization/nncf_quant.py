"""NNCF quantizers: weight compression and full int8 quantization of OpenVINO, ONNX and FX-graph (Dynamo) exports.

* :class:`NNCFWeightCompressionConfig` runs ``nncf.compress_weights`` (weight-only int8/int4; activations stay
  float). On an OpenVINO export it compresses the ``openvino.Model`` (int8/int4 constants + ``Convert``/``Multiply``
  decompression); on an ONNX export NNCF 3.4's ONNX backend writes ``DequantizeLinear`` (int8) or ONNX Runtime's
  ``MatMulNBits`` (int4) nodes; on a Dynamo export NNCF's TorchFX backend compresses the traced graph (int8/int4
  buffers and their decompression ops inside the ``.pt2``).
* :class:`NNCFQuantizationConfig` runs ``nncf.quantize`` (int8 weights and activations), calibrated on the
  calibration samples: on the ``openvino.Model`` (``FakeQuantize`` nodes, int8 weights); on the ONNX model
  (``QuantizeLinear``/``DequantizeLinear`` pairs on the activations, ``DequantizeLinear`` of int8 weight
  initializers); on the traced FX graph (``quantized_decomposed.quantize_per_tensor``/``dequantize_per_tensor`` on
  the activations, int8 weight buffers decompressed by ``sub``/``mul``), which Dynamo exports take; ExecuTorch is
  refused (XNNPACK cannot take these linears: use :class:`~hub_export.quantization.pt2e.PT2EQuantizer`).

ONNX models are quantized from a temporary directory with external data (models past protobuf's 2 GB limit work); the
FX graph is re-traced with autograd off first (NNCF cannot read grad-mode subgraphs), symbolic axes kept.

Example::

    config = OpenVINOConfig(quantizer=NNCFQuantizer(NNCFWeightCompressionConfig(mode="int4_sym", group_size=32)))
    onnx_int8 = OnnxConfig(quantizer=NNCFQuantizer(NNCFQuantizationConfig(calibration_dataset=[inputs, ...])))
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..errors import ConfigError, ExportError
from ..patches._base import hold_memory
from ..patches.nncf import (
    compressed_weights_mapped,
    fx_integer_edges_typed_integer,
    large_weights_compressed_in_row_slices,
)
from .base import Calibration, ExportQuantizer

__all__ = ["NNCFQuantizer", "NNCFWeightCompressionConfig", "NNCFQuantizationConfig"]

_MODES = ("int8_asym", "int8_sym", "int4_sym", "int4_asym")
_PRESETS = ("performance", "mixed")


@dataclass
class NNCFWeightCompressionConfig:
    """``nncf.compress_weights`` settings (data-free).

    Attributes:
        mode: ``"int8_asym"``, ``"int8_sym"``, ``"int4_sym"`` or ``"int4_asym"``.
        ratio: Share of the layers compressed to int4 (the rest int8); int4 modes only.
        group_size: Weights per int4 scale (-1: one per output channel); int4 modes only. It must divide the
            layers' input size.
        all_layers: Also compress embeddings and the last layer to int4 (NNCF keeps them int8 by default).
    """

    mode: Literal["int8_asym", "int8_sym", "int4_sym", "int4_asym"] = "int8_asym"
    ratio: float = 1.0
    group_size: int = 128
    all_layers: bool = False

    def __post_init__(self) -> None:
        if self.mode not in _MODES:
            raise ConfigError(f"NNCFWeightCompressionConfig.mode must be one of {_MODES}, got {self.mode!r}.")
        if not 0.0 < float(self.ratio) <= 1.0:
            raise ConfigError(f"NNCFWeightCompressionConfig.ratio must be in (0, 1], got {self.ratio!r}.")


@dataclass
class NNCFQuantizationConfig:
    """``nncf.quantize`` settings (int8 weights and activations, calibrated).

    Attributes:
        calibration_dataset: Input dicts to calibrate on (or pass them to the quantizer).
        preset: ``"performance"`` (symmetric) or ``"mixed"`` (asymmetric activations).
        subset_size: Samples NNCF reads at most.
        transformer: Use NNCF's transformer model type (keeps sensitive ops such as softmax in float).
    """

    calibration_dataset: list[dict[str, Any]] | None = None
    preset: Literal["performance", "mixed"] = "mixed"
    subset_size: int = 300
    transformer: bool = True

    def __post_init__(self) -> None:
        if self.preset not in _PRESETS:
            raise ConfigError(f"NNCFQuantizationConfig.preset must be one of {_PRESETS}, got {self.preset!r}.")


class NNCFQuantizer(ExportQuantizer):
    """Compress or quantize an OpenVINO, ONNX or Dynamo export with NNCF (ExecuTorch: int8 weight compression only).

    Args:
        config: An :class:`NNCFWeightCompressionConfig` (default) or :class:`NNCFQuantizationConfig`.
        calibration_dataset: Input dicts for ``nncf.quantize`` (else the config's, else the export's sample).
    """

    stages = ("openvino", "onnx", "fx")
    packages = ("nncf",)

    def __init__(
        self,
        config: NNCFWeightCompressionConfig | NNCFQuantizationConfig | None = None,
        calibration_dataset: Iterable[dict[str, Any]] | None = None,
    ) -> None:
        config = NNCFWeightCompressionConfig() if config is None else config
        if not isinstance(config, (NNCFWeightCompressionConfig, NNCFQuantizationConfig)):
            raise ConfigError(
                f"NNCFQuantizer takes an NNCFWeightCompressionConfig or NNCFQuantizationConfig, got {config!r}."
            )
        super().__init__(calibration_dataset, config=config)

    @property
    def needs_calibration(self) -> bool:  # type: ignore[override]
        return isinstance(self.config, NNCFQuantizationConfig)

    def settings(self) -> dict[str, Any]:
        """The config's fields, and which NNCF function they drive."""
        data = super().settings()
        data.pop("calibration_dataset", None)
        data["method"] = "quantize" if isinstance(self.config, NNCFQuantizationConfig) else "compress_weights"
        return data

    def to_dict(self) -> dict[str, Any]:
        """The recipe; weight compression reads no calibration samples."""
        recipe = super().to_dict()
        if isinstance(self.config, NNCFWeightCompressionConfig):
            recipe["calibration_samples"] = 0
        return recipe

    def quantize(self, model: Any, calibration: Calibration, stage: str) -> Any:
        """Run NNCF on the stage's model: the ``openvino.Model``, the ONNX model or the traced FX graph.

        Raises:
            ExportError: NNCF failed (its message is kept).
        """
        try:
            if isinstance(self.config, NNCFQuantizationConfig):
                return self._quantize(model, calibration, stage)
            return self._compress(model, stage)
        except ExportError:
            raise
        except Exception as exc:  # NNCF raises its own error types
            hint = (
                "Try preset='performance' or transformer=False, or PT2EQuantizer for the FX graph."
                if isinstance(self.config, NNCFQuantizationConfig)
                else "Check group_size divides the layers' input size, or try mode='int8_asym'."
            )
            raise ExportError(
                f"NNCF failed on the {stage} model: {type(exc).__name__}: {str(exc)[:1500]}\n{hint}"
            ) from exc

    def _compress(self, model: Any, stage: str) -> Any:
        """``nncf.compress_weights`` (data-free)."""
        import nncf

        cfg = self.config
        kwargs: dict[str, Any] = {"mode": getattr(nncf.CompressWeightsMode, cfg.mode.upper())}
        if cfg.mode.startswith("int4"):
            kwargs.update(ratio=float(cfg.ratio), group_size=int(cfg.group_size), all_layers=bool(cfg.all_layers))
        if stage == "onnx":
            return _on_onnx(
                model,
                lambda proto, params: nncf.compress_weights(proto, advanced_parameters=params, **kwargs),
                nncf.AdvancedCompressionParameters,
            )
        if stage == "fx":
            return nncf.compress_weights(_plain_module(model), **kwargs)
        held: list[Any] = []
        with large_weights_compressed_in_row_slices(), compressed_weights_mapped(held):
            compressed = nncf.compress_weights(model, **kwargs)
        hold_memory(compressed, held)  # the mapped files live as long as the model
        return compressed

    def _quantize(self, model: Any, calibration: Calibration, stage: str) -> Any:
        """``nncf.quantize`` calibrated on ``calibration``: feed dicts for ONNX/OpenVINO, argument tuples in
        signature order for the FX graph."""
        import nncf
        import torch

        cfg = self.config
        preset = nncf.QuantizationPreset.MIXED if cfg.preset == "mixed" else nncf.QuantizationPreset.PERFORMANCE
        kwargs: dict[str, Any] = {"preset": preset, "subset_size": min(int(cfg.subset_size), len(calibration.samples))}
        if cfg.transformer:
            kwargs["model_type"] = nncf.ModelType.TRANSFORMER
        if stage == "fx":
            with torch.no_grad(), fx_integer_edges_typed_integer():
                data = nncf.Dataset([tuple(sample) for sample in calibration.samples])
                return nncf.quantize(_plain_module(model), data, **kwargs)
        data = nncf.Dataset(calibration.feeds())
        if stage == "onnx":
            return _on_onnx(
                model,
                lambda proto, params: nncf.quantize(proto, data, advanced_parameters=params, **kwargs),
                nncf.AdvancedQuantizationParameters,
            )
        return nncf.quantize(model, data, **kwargs)


def _on_onnx(model: Any, run: Callable[[Any, Any], Any], parameters: type) -> Any:
    """``run(proto, advanced_parameters)`` on the ONNX model saved to a temporary directory with external data (NNCF
    reads the weights from there, so models past protobuf's 2 GB limit work); the result is read back into memory."""
    import onnx
    import onnx_ir as ir
    from nncf.onnx.quantization.backend_parameters import BackendParameters

    with tempfile.TemporaryDirectory(prefix="hub_export_nncf_") as tmp:
        path = Path(tmp) / "model.onnx"
        ir.save(model, str(path), external_data="model.onnx.data", size_threshold_bytes=1023)
        proto = onnx.load(str(path), load_external_data=False)
        params = parameters()
        params.backend_params[BackendParameters.EXTERNAL_DATA_DIR] = tmp
        result = run(proto, params)
        if any(init.data_location == onnx.TensorProto.EXTERNAL for init in result.graph.initializer):
            onnx.load_external_data_for_model(result, tmp)  # read the weights before the directory goes away
        return ir.from_proto(result)


def _plain_module(program: Any) -> Any:
    """The traced program re-exported with autograd off, as a ``GraphModule`` for NNCF's TorchFX backend (which
    ``quantize_traced`` re-exports after NNCF).

    NNCF's graph builder cannot read the ``wrap_with_set_grad_enabled`` subgraphs that ``@torch.no_grad`` code
    (rotary embeddings) leaves in an export ("'GraphModule' object has no attribute 'shape'"). Symbolic input axes
    stay symbolic.
    """
    import torch

    from ..patches.tracing import tracing_patches

    args = tuple(program.example_inputs[0])
    placeholders = [
        n for n in program.graph.nodes if n.op == "placeholder" and n.name in program.graph_signature.user_inputs
    ]
    shapes = tuple(
        {
            axis: torch.export.Dim.AUTO
            for axis, size in enumerate(node.meta["val"].shape)
            if isinstance(size, torch.SymInt)
        }
        or None
        for node in placeholders
    )
    dynamic = any(shape is not None for shape in shapes)
    with torch.no_grad(), tracing_patches(dynamic):
        plain = torch.export.export(program.module(), args, dynamic_shapes=shapes if dynamic else None)
    return plain.module()
