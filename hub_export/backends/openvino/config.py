"""``OpenVINOConfig``: export to OpenVINO IR (``openvino_model.xml`` + ``.bin``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ...configs import ExportConfig
from ...errors import ConfigError
from ...formats import ExportFormat, FileLayout
from .conventions import TOKENIZER_FILES

__all__ = ["FORMAT", "LAYOUT", "SHARED_WEIGHTS", "OpenVINOConfig"]

FORMAT = ExportFormat.declare("openvino")
#: The weights file the components of one export that read the same constants share (see ``_shared.py``).
SHARED_WEIGHTS = "openvino_shared.bin"
#: ``openvino_<component>.xml`` (graph) + ``openvino_<component>.bin`` (weights), in ``openvino/`` on the Hub; or
#: the ``.xml`` + :data:`SHARED_WEIGHTS`.
LAYOUT = FileLayout(
    subfolder="openvino",
    files=((".xml", "program"), (".bin", "weights")),
    prefix="openvino_",
    shared=((SHARED_WEIGHTS, "weights"),),
    stems=("model",),
    extras=tuple((name, "runtime") for name in TOKENIZER_FILES),
)


@dataclass
class OpenVINOConfig(ExportConfig):
    """Export to OpenVINO IR (``openvino_model.xml`` + ``.bin``).

    Attributes:
        compress_to_fp16: Store weights as fp16.
        stateful: Keep a generation model's KV cache as internal state.
        inference_precision: The precision OpenVINO computes in, recorded in the IR for every runtime that reads it
            (``INFERENCE_PRECISION_HINT``): ``"f32"``, ``"bf16"`` or ``"f16"``. None: ``"f32"``, or the device's own
            default when ``compress_to_fp16``. A bfloat16 model runs in bfloat16 with ``"bf16"`` (on CPUs with
            bfloat16 instructions), else its weights are widened to float32 when compiled.
    """

    export_format: ClassVar[ExportFormat] = FORMAT
    compress_to_fp16: bool = False
    stateful: bool = True
    inference_precision: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.inference_precision not in (None, "f32", "bf16", "f16"):
            raise ConfigError(
                f"OpenVINOConfig.inference_precision must be None, 'f32', 'bf16' or 'f16', got {self.inference_precision!r}."
            )


def weight_quantizer(bits: int) -> Any:
    """``--quantize int4|int8``: NNCF weight compression as optimum-intel applies it (int4: ``int4_sym`` in groups of
    128, the embedding and last layer kept int8; int8: ``int8_asym``)."""
    from ...quantization.nncf_quant import NNCFQuantizer, NNCFWeightCompressionConfig

    if bits == 4:
        return NNCFQuantizer(NNCFWeightCompressionConfig("int4_sym", group_size=128))
    return NNCFQuantizer(NNCFWeightCompressionConfig("int8_asym"))
