"""``OnnxRuntimeQuantizer``: post-training quantization of the exported ONNX graph with ``onnxruntime.quantization``.

It runs in :class:`~hub_export.backends.onnx.exporter.OnnxExporter` after the export and after ORT fusions (the order
ONNX Runtime recommends). ``quantize_dynamic`` and ``quantize_static`` run on the graph saved to a temporary
directory with external data (so models past protobuf's 2 GB limit work): ``quantize_dynamic`` with an
:class:`OnnxRuntimeDynamicConfig` (int8 weights,
activations quantized at run time: ``DynamicQuantizeLinear`` + ``MatMulInteger``), ``quantize_static`` with an
:class:`OnnxRuntimeStaticConfig` (scales calibrated on samples: ``QuantizeLinear``/``DequantizeLinear`` pairs), and
ONNX Runtime's weight-only quantizer (``MatMulNBitsQuantizer``'s) with an :class:`OnnxRuntimeWeightOnlyConfig` (int4
or int8 weights in blocks, activations float: each ``MatMul`` by a constant becomes one ``com.microsoft``
``MatMulNBits`` node, the layout onnxruntime-genai's int4 models use; a tied input embedding then reads the output
projection's quantized weights, :mod:`._tied`) runs on the graph in memory, one weight at a time
(:mod:`._weight_only`), so an 8B model quantizes within a 24 GB machine; a bfloat16 model is accepted with it
(:mod:`._widen`).

Example::

    config = OnnxConfig(quantizer=OnnxRuntimeQuantizer(OnnxRuntimeDynamicConfig(per_channel=True)))
    exported = OnnxExporter().export(model, inputs, config=config)
    int4 = OnnxConfig(dynamic=True, ort_fusions="cpu", quantizer=OnnxRuntimeQuantizer(OnnxRuntimeWeightOnlyConfig()))
    generator = OnnxExporter().export_for_generation(model, inputs, config=int4)
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ...errors import ConfigError, ExportError
from ...quantization.base import Calibration, ExportQuantizer
from ._weight_only import quantize_weight_only

__all__ = [
    "OnnxRuntimeQuantizer",
    "OnnxRuntimeDynamicConfig",
    "OnnxRuntimeStaticConfig",
    "OnnxRuntimeWeightOnlyConfig",
    "weight_quantizer",
]

_TYPES = {"int8": "QInt8", "uint8": "QUInt8", "int16": "QInt16", "uint16": "QUInt16"}


@dataclass
class OnnxRuntimeDynamicConfig:
    """``quantize_dynamic`` settings.

    Attributes:
        weight_type: ``"int8"`` or ``"uint8"`` weights.
        per_channel: One scale per output channel instead of per tensor.
        op_types: Operator types to quantize (None: ONNX Runtime's default, ``MatMul``/``Gemm``/``Attention``...).
        reduce_range: 7-bit weights (for CPUs without VNNI).
    """

    weight_type: Literal["int8", "uint8"] = "int8"
    per_channel: bool = False
    op_types: list[str] | None = None
    reduce_range: bool = False

    def __post_init__(self) -> None:
        _check_type("weight_type", self.weight_type, ("int8", "uint8"))


@dataclass
class OnnxRuntimeStaticConfig:
    """``quantize_static`` settings.

    Attributes:
        calibration_dataset: Input dicts to calibrate on (or pass them to the quantizer).
        activation_type: ``"int8"``/``"uint8"`` (or 16-bit) activations.
        weight_type: ``"int8"``/``"uint8"`` (or 16-bit) weights.
        quant_format: ``"QDQ"`` (QuantizeLinear/DequantizeLinear pairs) or ``"QOperator"`` (QLinear* ops).
        per_channel: One weight scale per output channel.
        op_types: Operator types to quantize (None: ONNX Runtime's default).
        calibrate_method: ``"MinMax"``, ``"Entropy"``, ``"Percentile"`` or ``"Distribution"``.
    """

    calibration_dataset: list[dict[str, Any]] | None = None
    activation_type: str = "uint8"
    weight_type: str = "int8"
    quant_format: Literal["QDQ", "QOperator"] = "QDQ"
    per_channel: bool = False
    op_types: list[str] | None = None
    calibrate_method: str = "MinMax"

    def __post_init__(self) -> None:
        _check_type("activation_type", self.activation_type, tuple(_TYPES))
        _check_type("weight_type", self.weight_type, tuple(_TYPES))
        _check_type("quant_format", self.quant_format, ("QDQ", "QOperator"))
        _check_type("calibrate_method", self.calibrate_method, ("MinMax", "Entropy", "Percentile", "Distribution"))


@dataclass
class OnnxRuntimeWeightOnlyConfig:
    """``MatMulNBitsQuantizer`` settings: weight-only quantization in blocks (data-free, round to nearest).

    Attributes:
        bits: 4 (int4) or 8 (int8) weights.
        block_size: Weights per scale along the input axis (a power of two, at least 16).
        symmetric: Symmetric blocks (no zero points); False stores a zero point per block.
        accuracy_level: What the kernel computes in: 4 (int8 activations, the fastest on CPU), 3 (bf16), 2 (fp16),
            1 or 0 (fp32: the most exact, slower).
        op_types: Operator types to quantize (None: ``["MatMul"]``; ``"Gather"`` also quantizes embeddings).
        nodes_to_exclude: Node names kept in float.
        quantize_tied_embedding: When the input embedding is also the output projection (a ``Gather`` of a table
            whose transpose is a quantized ``MatMul``'s weight, as with ``tie_word_embeddings``), look rows up in the
            projection's quantized weights (``com.microsoft`` ``GatherBlockQuantized``) so the table is stored
            once, quantized; False keeps a float copy of the table for the lookup (a larger file, exact embeddings).
    """

    bits: int = 4
    block_size: int = 32
    symmetric: bool = True
    accuracy_level: int = 4
    op_types: list[str] | None = None
    nodes_to_exclude: list[str] | None = None
    quantize_tied_embedding: bool = True

    def __post_init__(self) -> None:
        _check_type("bits", self.bits, (4, 8))
        if not isinstance(self.block_size, int) or self.block_size < 16 or self.block_size & (self.block_size - 1):
            raise ConfigError(
                f"block_size must be a power of two >= 16 (32 and 128 are usual), got {self.block_size!r}."
            )
        _check_type("accuracy_level", self.accuracy_level, (0, 1, 2, 3, 4))
        unknown = sorted(set(self.op_types or ()) - {"MatMul", "Gather"})
        if unknown:
            raise ConfigError(f"op_types may hold 'MatMul' and 'Gather', got {unknown}.")


class OnnxRuntimeQuantizer(ExportQuantizer):
    """Quantize the ONNX graph with ONNX Runtime's quantization tools.

    Args:
        config: An :class:`OnnxRuntimeDynamicConfig` (default), :class:`OnnxRuntimeStaticConfig` or
            :class:`OnnxRuntimeWeightOnlyConfig`.
        calibration_dataset: Input dicts for static quantization (else the config's, else the export's sample).
    """

    stages = ("onnx",)
    packages = ("onnx", "onnx_ir", "onnxruntime")

    def __init__(
        self,
        config: OnnxRuntimeDynamicConfig | OnnxRuntimeStaticConfig | OnnxRuntimeWeightOnlyConfig | None = None,
        calibration_dataset: Iterable[dict[str, Any]] | None = None,
    ) -> None:
        config = OnnxRuntimeDynamicConfig() if config is None else config
        if not isinstance(config, (OnnxRuntimeDynamicConfig, OnnxRuntimeStaticConfig, OnnxRuntimeWeightOnlyConfig)):
            raise ConfigError(
                "OnnxRuntimeQuantizer takes an OnnxRuntimeDynamicConfig, OnnxRuntimeStaticConfig or "
                f"OnnxRuntimeWeightOnlyConfig, got {config!r}."
            )
        super().__init__(calibration_dataset, config=config)

    @property
    def needs_calibration(self) -> bool:  # type: ignore[override]
        return isinstance(self.config, OnnxRuntimeStaticConfig)

    def settings(self) -> dict[str, Any]:
        """The config's fields (the calibration data itself is counted, not stored)."""
        data = super().settings()
        data.pop("calibration_dataset", None)
        if isinstance(self.config, OnnxRuntimeWeightOnlyConfig):
            data["mode"] = "weight_only"
            data["op_types"] = list(self.config.op_types or _WEIGHT_ONLY_OPS)
        else:
            data["mode"] = "static" if self.needs_calibration else "dynamic"
        return data

    def to_dict(self) -> dict[str, Any]:
        """The recipe; a dynamic quantizer reads no calibration samples."""
        recipe = super().to_dict()
        if not self.needs_calibration:
            recipe["calibration_samples"] = 0
        return recipe

    def quantize(self, model: Any, calibration: Calibration, stage: str) -> Any:
        """Weight-only: quantize ``model`` in place, one weight at a time (:mod:`._weight_only`). Dynamic and static:
        save ``model`` to a temporary directory, quantize it there, load the result into memory.

        Raises:
            ExportError: ONNX Runtime's quantizer failed (its message is kept).
        """
        import onnx
        import onnx_ir as ir
        from onnxruntime import quantization as q

        cfg = self.config
        if isinstance(cfg, OnnxRuntimeWeightOnlyConfig):  # one weight at a time, in memory (._weight_only)
            try:
                return quantize_weight_only(model, cfg, tuple(cfg.op_types or _WEIGHT_ONLY_OPS))
            except Exception as exc:  # ORT's quantizer raises many types
                raise ExportError(
                    f"ONNX Runtime weight-only quantization failed: {type(exc).__name__}: {str(exc)[:1500]}\n"
                    "Try another block_size or op_types, or export without a quantizer to check the graph."
                ) from exc
        with tempfile.TemporaryDirectory(prefix="hub_export_ortq_") as tmp:
            src, dst = Path(tmp) / "model.onnx", Path(tmp) / "quantized.onnx"
            ir.save(model, str(src), external_data="model.onnx.data", size_threshold_bytes=1023)
            _drop_initializer_value_info(onnx, src)
            try:
                if isinstance(cfg, OnnxRuntimeStaticConfig):
                    q.quantize_static(
                        str(src),
                        str(dst),
                        _Reader(calibration.feeds()),
                        quant_format=getattr(q.QuantFormat, cfg.quant_format),
                        op_types_to_quantize=cfg.op_types,
                        per_channel=cfg.per_channel,
                        activation_type=getattr(q.QuantType, _TYPES[cfg.activation_type]),
                        weight_type=getattr(q.QuantType, _TYPES[cfg.weight_type]),
                        calibrate_method=getattr(q.CalibrationMethod, cfg.calibrate_method),
                        use_external_data_format=True,
                    )
                else:
                    q.quantize_dynamic(
                        str(src),
                        str(dst),
                        op_types_to_quantize=cfg.op_types,
                        per_channel=cfg.per_channel,
                        reduce_range=cfg.reduce_range,
                        weight_type=getattr(q.QuantType, _TYPES[cfg.weight_type]),
                        use_external_data_format=True,
                    )
            except Exception as exc:  # ORT's quantizer raises many types
                raise ExportError(
                    f"ONNX Runtime quantization failed: {type(exc).__name__}: {str(exc)[:1500]}\n"
                    "Try another op_types selection, per_channel=False, or export without a quantizer to check the graph."
                ) from exc
            return _load_in_memory(dst)


_WEIGHT_ONLY_OPS = ("MatMul",)


def weight_quantizer(bits: int) -> OnnxRuntimeQuantizer:
    """``--quantize int4|int8``: ``MatMulNBits`` in symmetric blocks of 32, the layout onnxruntime-genai builds."""
    return OnnxRuntimeQuantizer(OnnxRuntimeWeightOnlyConfig(bits=bits, block_size=32))


class _Reader:
    """The ``CalibrationDataReader`` interface ``quantize_static`` pulls feeds through."""

    def __init__(self, feeds: list[dict[str, Any]]) -> None:
        self._feeds = iter(feeds)

    def get_next(self) -> dict[str, Any] | None:
        return next(self._feeds, None)


def _check_type(field: str, value: Any, allowed: tuple[Any, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{field} must be one of {', '.join(map(repr, allowed))}, got {value!r}.")


def _drop_initializer_value_info(onnx: Any, path: Path) -> None:
    """Drop ``value_info`` entries of initializers: ``quantize_dynamic`` transposes ``Gemm`` weights in place and
    its shape inference then trips over their stale shapes."""
    proto = onnx.load(str(path), load_external_data=False)
    names = {init.name for init in proto.graph.initializer}
    kept = [info for info in proto.graph.value_info if info.name not in names]
    if len(kept) != len(proto.graph.value_info):
        del proto.graph.value_info[:]
        proto.graph.value_info.extend(kept)
        onnx.save(proto, str(path))


def _load_in_memory(path: Path) -> Any:
    """Load a quantized model with every tensor (initializers and ``Constant`` attributes) read into memory,
    so it outlives the temporary directory."""
    import onnx_ir as ir

    model = ir.load(str(path))
    ir.external_data.load_to_model(model)
    for graph in model.graphs():
        for node in graph:
            for name, attr in list(node.attributes.items()):
                if attr.type == ir.AttributeType.TENSOR and isinstance(attr.value, ir.ExternalTensor):
                    node.attributes[name] = ir.AttrTensor(name, ir.tensor(attr.value.numpy(), name=attr.value.name))
    return model
