"""``ExportQuantizer``: the protocol every export quantizer follows, and the calibration set it reads.

A quantizer works at one *stage* of the export: ``"fx"`` (the traced ``torch.export`` program, before any
backend), ``"onnx"`` (the ``onnx_ir.Model`` the ONNX exporter produced, after ORT fusions) or ``"openvino"``
(the ``openvino.Model`` the OpenVINO exporter converted). The exporter of that stage calls
:meth:`ExportQuantizer.quantize` with the model and a :class:`Calibration` (the calibration samples flattened to
the graph's inputs, in signature order). :meth:`ExportQuantizer.to_dict` is the recipe recorded in the manifest
(component ``quantization``) and in the saved config; a loaded export does not re-run it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from ..errors import BackendUnavailableError, ConfigError
from ..formats import backend_for

__all__ = ["ExportQuantizer", "Calibration", "calibration_for", "find_quantizer", "stage_for"]

#: The pip extra that installs every quantization package.
QUANT_EXTRA = "quant"


@dataclass
class Calibration:
    """Calibration samples flattened to graph inputs.

    Attributes:
        names: The graph input names, in signature order.
        samples: One list of flat tensors (``names`` order) per calibration sample.
        from_dataset: False when the quantizer had no dataset and calibrates on the export's own sample input.
    """

    names: list[str]
    samples: list[list[Any]]
    from_dataset: bool = True

    def feeds(self) -> list[dict[str, Any]]:
        """The samples as ``{input name: numpy array}`` dicts (what ONNX Runtime and OpenVINO take)."""
        return [{n: t.detach().cpu().numpy() for n, t in zip(self.names, sample)} for sample in self.samples]


class ExportQuantizer:
    """Base class of the export quantizers.

    Class attributes:
        stages: The program types it can quantize (``"fx"``: the traced graph; ``"onnx"``, ``"openvino"``: the
            program a backend lowered to, its ``quantization_stage``); the export format picks one. A backend refuses
            quantizers its runtime cannot take in its exporter's ``check_available``.
        packages: Import names it needs; a missing one raises ``BackendUnavailableError`` naming the ``quant`` extra.
        needs_calibration: Whether it reads calibration samples (weight-only and dynamic quantizers do not).

    Args:
        calibration_dataset: Input dicts (the model's forward kwargs) to calibrate on; they must match the traced
            signature (same shapes, unless the export is dynamic). None takes the ``config``'s
            ``calibration_dataset`` (when it has one), else calibrates on the export's sample input.
        config: The quantizer's settings dataclass, stored as ``self.config`` (None: the quantizer has none).
    """

    stages: ClassVar[tuple[str, ...]] = ()
    packages: ClassVar[tuple[str, ...]] = ()
    needs_calibration: ClassVar[bool] = False

    def __init__(self, calibration_dataset: Iterable[dict[str, Any]] | None = None, *, config: Any = None) -> None:
        if calibration_dataset is None:
            calibration_dataset = getattr(config, "calibration_dataset", None)
        self.calibration_dataset = None if calibration_dataset is None else list(calibration_dataset)
        if config is not None:
            self.config = config

    # -- protocol --------------------------------------------------------------------------------------
    def check_available(self, stage: str) -> None:
        """Raise before tracing if this quantizer cannot run at ``stage`` or a package it needs is missing.

        Raises:
            ConfigError: The export format's stage is not one this quantizer supports.
            BackendUnavailableError: A package it needs is not installed.
        """
        if stage not in self.stages:
            raise ConfigError(
                f"{type(self).__name__} quantizes {' or '.join(self.stages)} graphs, not {stage!r} exports; "
                "pick a quantizer for this format or export to a format it supports."
            )
        for package in self.packages:
            if importlib.util.find_spec(package) is None:
                raise BackendUnavailableError(
                    f'{type(self).__name__} needs {package!r}; install it with `pip install "hub-export[{QUANT_EXTRA}]"`.'
                )

    def quantize(self, model: Any, calibration: Calibration, stage: str) -> Any:
        """Return the quantized ``model`` (the stage's model type), calibrated on ``calibration``."""
        raise NotImplementedError

    def settings(self) -> dict[str, Any]:
        """The quantizer's settings as plain data (its config's fields)."""
        config = getattr(self, "config", None)
        return {} if config is None else asdict(config)

    def to_dict(self) -> dict[str, Any]:
        """The recipe: ``{"quantizer": name, "settings": {...}, "calibration_samples": n}`` (plain data)."""
        samples = len(self.calibration_dataset) if self.calibration_dataset else 0
        return {"quantizer": type(self).__name__, "settings": self.settings(), "calibration_samples": samples}


def calibration_for(quantizer: ExportQuantizer, traced: Any) -> Calibration:
    """Flatten the quantizer's calibration dicts to the graph inputs of ``traced`` (its signature's order).

    Raises:
        InputError: A calibration sample does not match the traced signature.
    """
    from ..sample_inputs import default_inputs

    signature = traced.signature
    names = [spec.name for spec in signature.inputs]
    if not quantizer.calibration_dataset:
        return Calibration(names, [list(traced.sample)], from_dataset=False)
    samples = [signature.flatten_inputs(default_inputs(signature, dict(s))) for s in quantizer.calibration_dataset]
    return Calibration(names, samples)


def find_quantizer(config: Any, stage: str) -> ExportQuantizer | None:
    """The config's quantizer when it runs at ``stage``, else None.

    Raises:
        ConfigError: The config's quantizer is not an :class:`ExportQuantizer`.
    """
    quantizer = getattr(config, "quantizer", None)
    if quantizer is None:
        return None
    if not isinstance(quantizer, ExportQuantizer):
        raise ConfigError(
            f"quantizer must be an ExportQuantizer (e.g. OnnxRuntimeQuantizer), got {type(quantizer).__name__}."
        )
    return quantizer if stage in quantizer.stages and stage == stage_for(config, quantizer) else None


def stage_for(config: Any, quantizer: ExportQuantizer) -> str:
    """The stage a quantizer runs at in an export of ``config``'s format: the program type the format lowers to
    (its backend's ``quantization_stage``) when the quantizer supports it, else the traced ``"fx"`` graph."""
    stage = backend_for(config.export_format).quantization_stage
    return stage if stage is not None and stage in quantizer.stages else "fx"
