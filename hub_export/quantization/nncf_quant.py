"""NNCF quantizers: weight compression and full int8 quantization of OpenVINO (and ONNX, FX) exports.

* :class:`NNCFWeightCompressionConfig` runs ``nncf.compress_weights`` (weight-only int8/int4; activations stay
  float). On an OpenVINO export it compresses the ``openvino.Model`` (int8/int4 constants + ``Convert``/``Multiply``
  decompression); on an ONNX export NNCF 3.4's ONNX backend writes ``DequantizeLinear`` (int8) or ONNX Runtime's
  ``MatMulNBits`` (int4) nodes; on a Dynamo export NNCF's TorchFX backend compresses the traced graph (int8/int4
  buffers and their decompression ops inside the ``.pt2``).
* :class:`NNCFQuantizationConfig` runs ``nncf.quantize`` on the OpenVINO model, calibrated on samples
  (``FakeQuantize`` nodes, int8 weights).

Example::

    config = OpenVINOConfig(quantizer=NNCFQuantizer(NNCFWeightCompressionConfig(mode="int4_sym", group_size=32)))
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Literal

from ..errors import ConfigError, ExportError
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
    """Compress or quantize an OpenVINO export (weight compression also on ONNX) with NNCF.

    Args:
        config: An :class:`NNCFWeightCompressionConfig` (default) or :class:`NNCFQuantizationConfig`.
        calibration_dataset: Input dicts for ``nncf.quantize`` (else the config's, else the export's sample).
    """

    packages = ("nncf",)

    def __init__(
        self,
        config: NNCFWeightCompressionConfig | NNCFQuantizationConfig | None = None,
        calibration_dataset: Iterable[dict[str, Any]] | None = None,
    ) -> None:
        config = NNCFWeightCompressionConfig() if config is None else config
        if not isinstance(config, (NNCFWeightCompressionConfig, NNCFQuantizationConfig)):
            raise ConfigError(f"NNCFQuantizer takes an NNCFWeightCompressionConfig or NNCFQuantizationConfig, got {config!r}.")
        if calibration_dataset is None and isinstance(config, NNCFQuantizationConfig):
            calibration_dataset = config.calibration_dataset
        super().__init__(calibration_dataset)
        self.config = config
        self.stages = ("openvino", "onnx", "fx") if isinstance(config, NNCFWeightCompressionConfig) else ("openvino",)

    def check_available(self, stage: str, export_format: str | None = None) -> None:
        """Also refuse int4 weight compression for ExecuTorch, whose edge dialect rejects NNCF's int4 unpacking
        (``SpecViolationError`` in ``to_edge``).

        Raises:
            ConfigError: An unsupported stage/format, or int4 for ExecuTorch.
            BackendUnavailableError: NNCF is not installed.
        """
        super().check_available(stage, export_format)
        int4 = isinstance(self.config, NNCFWeightCompressionConfig) and self.config.mode.startswith("int4")
        if export_format == "executorch" and int4:
            raise ConfigError(
                f"NNCF {self.config.mode} weight compression does not lower to ExecuTorch (its int4 unpacking is not "
                "valid edge dialect); use mode='int8_asym'/'int8_sym', or PT2EQuantizer for ExecuTorch."
            )

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
        """Run NNCF on the OpenVINO model, or weight compression on the ONNX model.

        Raises:
            ExportError: NNCF failed (its message is kept).
        """
        try:
            if stage == "onnx":
                return _compress_onnx(model, self._compress_kwargs())
            if stage == "fx":
                return _compress_fx(model, self._compress_kwargs())
            return self._run_openvino(model, calibration)
        except ExportError:
            raise
        except Exception as exc:  # NNCF raises its own error types
            raise ExportError(
                f"NNCF failed on the {stage} model: {type(exc).__name__}: {str(exc)[:1500]}\n"
                "Check group_size divides the layers' input size, or try mode='int8_asym'."
            ) from exc

    def _compress_kwargs(self) -> dict[str, Any]:
        import nncf

        cfg = self.config
        kwargs: dict[str, Any] = {"mode": getattr(nncf.CompressWeightsMode, cfg.mode.upper())}
        if cfg.mode.startswith("int4"):
            kwargs.update(ratio=float(cfg.ratio), group_size=int(cfg.group_size), all_layers=bool(cfg.all_layers))
        return kwargs

    def _run_openvino(self, model: Any, calibration: Calibration) -> Any:
        import nncf

        if isinstance(self.config, NNCFWeightCompressionConfig):
            return nncf.compress_weights(model, **self._compress_kwargs())
        cfg = self.config
        preset = nncf.QuantizationPreset.MIXED if cfg.preset == "mixed" else nncf.QuantizationPreset.PERFORMANCE
        feeds = calibration.feeds()
        kwargs: dict[str, Any] = {"preset": preset, "subset_size": min(int(cfg.subset_size), len(feeds))}
        if cfg.transformer:
            kwargs["model_type"] = nncf.ModelType.TRANSFORMER
        return nncf.quantize(model, nncf.Dataset(feeds), **kwargs)


def _compress_onnx(model: Any, kwargs: dict[str, Any]) -> Any:
    """``nncf.compress_weights`` on the ONNX proto, saved to and read back from a temporary directory."""
    import nncf
    import onnx
    import onnx_ir as ir
    from nncf.onnx.quantization.backend_parameters import BackendParameters

    with tempfile.TemporaryDirectory(prefix="hub_export_nncf_") as tmp:
        path = Path(tmp) / "model.onnx"
        ir.save(model, str(path), external_data="model.onnx.data", size_threshold_bytes=1023)
        proto = onnx.load(str(path), load_external_data=False)
        params = nncf.AdvancedCompressionParameters()
        params.backend_params[BackendParameters.EXTERNAL_DATA_DIR] = tmp
        compressed = nncf.compress_weights(proto, advanced_parameters=params, **kwargs)
        if _has_external(compressed):  # read the weights before the directory goes away
            onnx.load_external_data_for_model(compressed, tmp)
        return ir.from_proto(compressed)


def _compress_fx(program: Any, kwargs: dict[str, Any]) -> Any:
    """``nncf.compress_weights`` on the traced program's FX graph (NNCF's TorchFX backend); returns the module
    with int8/int4 weights and their decompression, which ``quantize_traced`` re-exports.

    The program is first re-traced with autograd off: NNCF's graph builder cannot read the
    ``wrap_with_set_grad_enabled`` subgraphs that ``@torch.no_grad`` code (rotary embeddings) leaves in an export
    ("'GraphModule' object has no attribute 'shape'"). Symbolic input axes stay symbolic.
    """
    import nncf
    import torch

    from ..patches.dynamo import tracing_patches

    args = tuple(program.example_inputs[0])
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder" and n.name in program.graph_signature.user_inputs]
    shapes = tuple(
        {axis: torch.export.Dim.AUTO for axis, size in enumerate(node.meta["val"].shape) if isinstance(size, torch.SymInt)} or None
        for node in placeholders
    )
    dynamic = any(shape is not None for shape in shapes)
    with torch.no_grad(), tracing_patches(dynamic):
        plain = torch.export.export(program.module(), args, dynamic_shapes=shapes if dynamic else None)
    return nncf.compress_weights(plain.module(), **kwargs)


def _has_external(proto: Any) -> bool:
    import onnx

    return any(init.data_location == onnx.TensorProto.EXTERNAL for init in proto.graph.initializer)
