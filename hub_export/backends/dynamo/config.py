"""``DynamoConfig``: export with ``torch.export`` to a ``.pt2`` ExportedProgram, optionally compiled by AOTInductor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from ...configs import ExportConfig
from ...errors import ConfigError
from ...formats import ExportFormat, FileLayout

__all__ = ["FORMAT", "LAYOUT", "SHARED_WEIGHTS", "DynamoConfig"]

FORMAT = ExportFormat.declare("dynamo")
#: The weights the components of one export share, stored once (a safetensors file; see ``_shared.py``).
SHARED_WEIGHTS = "shared.safetensors"
#: One ``<component>.pt2`` archive per component, in ``pt2/`` on the Hub; a compiled export (``compile="aoti"``) adds
#: ``<component>.aoti.pt2``, the AOTInductor package (native code, without weights: it reads the program's at load);
#: the weights two or more components read are in ``shared.safetensors``, which their archives name instead of
#: holding them.
LAYOUT = FileLayout(
    subfolder="pt2",
    files=((".pt2", "program"),),
    shared=((SHARED_WEIGHTS, "weights"),),
    optional=((".aoti.pt2", "native"),),
    stems=("model",),
)


@dataclass
class DynamoConfig(ExportConfig):
    """Export with ``torch.export`` to a ``.pt2`` ExportedProgram.

    Attributes:
        compile: ``"aoti"``: also compile each component ahead of time with AOTInductor (dynamic shapes kept) for
            the device it is exported on; the package is native code, loaded only with ``trust_native_code=True``
            and only on a machine like the one that compiled it (see :mod:`hub_export.backends.dynamo.compiled`).
            None: the program runs as ``ExportedProgram.module()``, anywhere torch runs.
        compiled_weights: Where a compiled package's weights are (with ``compile="aoti"``). ``"packed"`` (the
            default): in the package, on CPU frozen and prepacked into oneDNN's layout for its fastest kernels; the
            package runs by itself (torch's own AOTInductor loader, C++ included), and each package holds its own
            copy beside the program's. ``"shared"``: the package holds none and reads the export's own weights at
            load (the components of one export hold each weight once, on disk and in memory); on CPU its linear
            layers then run at about eager speed (``docs/benchmarks.md`` measures both).
    """

    export_format: ClassVar[ExportFormat] = FORMAT
    compile: Literal["aoti"] | None = None
    compiled_weights: Literal["packed", "shared"] = "packed"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.compile not in (None, "aoti"):
            raise ConfigError(f"DynamoConfig.compile must be None or 'aoti' (AOTInductor), got {self.compile!r}.")
        if self.compiled_weights not in ("packed", "shared"):
            raise ConfigError(
                f"DynamoConfig.compiled_weights must be 'packed' or 'shared', got {self.compiled_weights!r}."
            )
