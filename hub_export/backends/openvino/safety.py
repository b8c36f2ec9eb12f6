"""OpenVINO IR: a plain XML (no DTD, no entities), standard opsets only, and a ``.bin`` covering every ``Const``.

* The XML may not contain ``<!DOCTYPE`` or ``<!ENTITY`` (entity expansion and external entities); it is then
  parsed with :mod:`xml.etree.ElementTree`.
* The ``<net>`` version must be 10 or 11 (the IR versions OpenVINO 2026 reads).
* Every layer's ``version`` must be ``opsetN`` for an opset this OpenVINO ships (``openvino.opsetN`` importable)
  or ``ie_internal_opset``. Any other value names an extension's opset, whose kernels come from a native library
  loaded with ``Core.add_extension``: refused.
* Every ``Const`` layer's ``<data offset= size=>`` must be non-negative integers with ``offset + size`` within
  the ``.bin``: a truncated ``.bin`` is refused instead of being read past its end.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import xml.etree.ElementTree as ET  # noqa: N817
from pathlib import Path
from typing import Any

from ...errors import UnsafeExportError
from ...formats import SafetyOptions
from ...manifest import ComponentEntry
from .config import LAYOUT

__all__ = ["check", "known_opsets"]

_FORBIDDEN = re.compile(rb"<!\s*(DOCTYPE|ENTITY)", re.IGNORECASE)
_IR_VERSIONS = ("10", "11")


@functools.cache
def known_opsets() -> frozenset[str]:
    """``opsetN`` names this OpenVINO ships, plus ``ie_internal_opset``."""
    found = {f"opset{n}" for n in range(1, 64) if importlib.util.find_spec(f"openvino.opset{n}") is not None}
    return frozenset(found | {"ie_internal_opset"})


def check(directory: Path, component: str, entry: ComponentEntry, options: SafetyOptions) -> None:
    """Refuse an IR with a DTD/entities, extension opsets, or a ``.bin`` smaller than its constants need.

    Raises:
        UnsafeExportError: Naming the file, the layer and what is wrong.
    """
    paths = LAYOUT.paths(component, [f.path for f in entry.files])
    xml_rel, bin_rel = paths["program"], paths["weights"]
    data = (directory / xml_rel).read_bytes()
    if _FORBIDDEN.search(data):
        raise UnsafeExportError(f"{xml_rel}: contains a DTD or entity declaration; refusing to parse it.")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise UnsafeExportError(f"{xml_rel}: not well-formed XML ({exc}).") from None
    if root.tag != "net" or root.get("version") not in _IR_VERSIONS:
        raise UnsafeExportError(f"{xml_rel}: not an OpenVINO IR v10/v11 (<net version=...>).")
    needed = 0
    opsets = known_opsets()
    for layer in root.iter("layer"):
        name = layer.get("name", layer.get("id", "?"))
        version = layer.get("version")
        if version not in opsets:
            raise UnsafeExportError(
                f"{xml_rel}: layer {name!r} (type {layer.get('type')!r}) is from opset {version!r}, which this OpenVINO "
                "does not ship: it needs an extension library. Load such IR with openvino directly if you trust it."
            )
        if layer.get("type") == "Const":
            needed = max(needed, _const_end(layer, xml_rel, name))
    size = (directory / bin_rel).stat().st_size if bin_rel else 0
    if needed > size:
        raise UnsafeExportError(
            f"{bin_rel or xml_rel}: the IR's constants need {needed} bytes of weights but the .bin has {size}; "
            "it is truncated or does not belong to this XML."
        )


def _const_end(layer: Any, xml_rel: str, name: str) -> int:
    data = layer.find("data")
    if data is None or data.get("offset") is None:
        return 0
    try:
        offset, size = int(data.get("offset")), int(data.get("size", "0"))
    except ValueError:
        raise UnsafeExportError(f"{xml_rel}: Const {name!r} has a non-integer offset/size.") from None
    if offset < 0 or size < 0:
        raise UnsafeExportError(f"{xml_rel}: Const {name!r} has a negative offset/size.")
    return offset + size
