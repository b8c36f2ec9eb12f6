"""OpenVINO IR: a plain UTF-8 XML (no DTD, no entities), standard opsets only, every ``Const`` inside its ``.bin``.

The XML is streamed through :class:`xml.etree.ElementTree.XMLPullParser` in chunks, with the file's listed size as
the byte budget; each layer is checked and dropped when it ends, so memory stays bounded whatever the file's size.

* The XML may not contain ``<!DOCTYPE`` or ``<!ENTITY`` (entity expansion, external entities), and is UTF-8 (no
  other encoding declaration or byte-order mark, which OpenVINO's own parser could read differently).
* The root is ``<net>`` of IR version 10 or 11 (the versions OpenVINO 2026 reads).
* Every layer's ``version`` is ``opsetN`` for an opset this OpenVINO ships (``openvino.opsetN`` importable) or
  ``ie_internal_opset``. Any other value names an extension's opset, whose kernels come from a native library
  loaded with ``Core.add_extension``: refused.
* ``rt_info/runtime_options`` holds only the hints of :data:`RUNTIME_OPTIONS`, with plain values: OpenVINO applies
  some entries of this section as compile properties, so an allow-list keeps any other (a cache folder, a thread
  count, a plugin option a later OpenVINO might honour) out.
* Every ``Const`` layer (spelled so: another spelling of a constant, which OpenVINO would accept regardless of case,
  is refused) has a known numeric ``element_type``, a ``shape`` of integers, and ``offset``/``size``
  non-negative integers with ``size`` exactly what the shape and element type take and ``offset + size`` within the
  ``.bin``: the runtime never reads past the constant or the file.

The ``.bin`` read is the one export.json lists for the component (found by role, never beside the XML by suffix).
"""

from __future__ import annotations

import functools
import importlib.util
import math
import re
import xml.etree.ElementTree as ET  # noqa: N817
from pathlib import Path
from typing import Any

from ..._bounded import MiB, stream_chunks
from ...errors import UnsafeExportError
from ...formats import SafetyOptions
from ...manifest import ComponentEntry
from .config import LAYOUT

__all__ = ["RUNTIME_OPTIONS", "check", "known_opsets"]

_FORBIDDEN = re.compile(rb"<!\s*(DOCTYPE|ENTITY)", re.IGNORECASE)
_DECLARATION = re.compile(rb'<\?xml\s+version\s*=\s*["\']1\.[01]["\'](\s+encoding\s*=\s*["\']([A-Za-z0-9_-]+)["\'])?')
_IR_VERSIONS = ("10", "11")
_MAX_DEPTH = 64
#: Bits per element of the ``Const`` element types a constant may have.
_ELEMENT_BITS = {
    "f64": 64, "f32": 32, "f16": 16, "bf16": 16, "i64": 64, "i32": 32, "i16": 16, "i8": 8, "u64": 64, "u32": 32,
    "u16": 16, "u8": 8, "boolean": 8, "u4": 4, "i4": 4, "nf4": 4, "u2": 2, "u1": 1, "f8e4m3": 8, "f8e5m2": 8,
    "f8e8m0": 8, "f4e2m1": 4,
}  # fmt: skip
_MAX_ELEMENTS = 2**48
_CONSTANT_TYPES = frozenset({"const", "constant"})
#: ``rt_info/runtime_options`` entries an IR may carry (OpenVINO applies them as compile properties).
RUNTIME_OPTIONS = frozenset(
    {"INFERENCE_PRECISION_HINT", "KV_CACHE_PRECISION", "DYNAMIC_QUANTIZATION_GROUP_SIZE", "ACTIVATIONS_SCALE_FACTOR"}
)
_OPTION_VALUE = re.compile(r"[A-Za-z0-9_.]{1,32}")


@functools.cache
def known_opsets() -> frozenset[str]:
    """``opsetN`` names this OpenVINO ships, plus ``ie_internal_opset``."""
    found = {f"opset{n}" for n in range(1, 64) if importlib.util.find_spec(f"openvino.opset{n}") is not None}
    return frozenset(found | {"ie_internal_opset"})


def check(directory: Path, component: str, entry: ComponentEntry, options: SafetyOptions) -> None:
    """Refuse an IR with a DTD/entities, another encoding, extension opsets, or constants outside its ``.bin``.

    Raises:
        UnsafeExportError: Naming the file, the layer and what is wrong.
    """
    paths = LAYOUT.paths(component, [f.path for f in entry.files])
    sizes = {f.path: f.size for f in entry.files}
    xml_rel, bin_rel = paths["program"], paths["weights"]
    needed = _scan_xml(Path(directory) / xml_rel, sizes[xml_rel], xml_rel)
    size = sizes[bin_rel]
    if needed > size:
        raise UnsafeExportError(
            f"{bin_rel}: the IR's constants need {needed} bytes of weights but the .bin has {size}; "
            "it is truncated or does not belong to this XML."
        )


def _scan_xml(path: Path, budget: int, label: str) -> int:
    """Stream the XML; returns the end of the furthest constant in the ``.bin``."""
    parser: Any = ET.XMLPullParser(events=("start", "end"))
    state = _State(label)
    tail = b""
    first = True
    try:
        with open(path, "rb") as handle:
            for chunk in stream_chunks(handle, budget, label, chunk=MiB):
                if first:
                    _check_prolog(chunk, label)
                    first = False
                if _FORBIDDEN.search(tail + chunk):
                    raise UnsafeExportError(f"{label}: contains a DTD or entity declaration; refusing to parse it.")
                tail = chunk[-16:]
                parser.feed(chunk)
                state.consume(parser.read_events())
            parser.close()
            state.consume(parser.read_events())
    except ET.ParseError as exc:
        raise UnsafeExportError(f"{label}: not well-formed XML ({exc}).") from None
    except OSError as exc:
        raise UnsafeExportError(f"{label}: cannot be read ({exc.strerror or exc}).") from None
    if not state.seen_root:
        raise UnsafeExportError(f"{label}: not an OpenVINO IR (empty).")
    return state.needed


def _check_prolog(chunk: bytes, label: str) -> None:
    head = chunk.lstrip(b" \t\r\n")
    if chunk.startswith((b"\xfe\xff", b"\xff\xfe", b"\x00", b"\xef\xbb\xbf")):
        raise UnsafeExportError(f"{label}: starts with a byte-order mark; OpenVINO IR is plain UTF-8.")
    if head.startswith(b"<?xml"):
        match = _DECLARATION.match(head)
        if match is None or (match.group(2) and match.group(2).lower() not in (b"utf-8", b"utf8", b"us-ascii")):
            raise UnsafeExportError(f"{label}: the XML declaration names another encoding than UTF-8.")


class _State:
    """What the streamed parse has seen: the element stack, and the end of the furthest constant."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.stack: list[Any] = []
        self.seen_root = False
        self.needed = 0
        self.opsets = known_opsets()

    def consume(self, events: Any) -> None:
        for event, element in events:
            if event == "start":
                if not self.stack:
                    self._root(element)
                if len(self.stack) >= _MAX_DEPTH:
                    raise UnsafeExportError(f"{self.label}: XML nested deeper than {_MAX_DEPTH} levels.")
                self.stack.append(element)
                continue
            self.stack.pop()
            if element.tag == "layer":
                self._layer(element)
            elif element.tag == "runtime_options" and self.stack and self.stack[-1].tag == "rt_info":
                self._runtime_options(element)
            if len(self.stack) == 2:  # a child of <layers> (or <edges>): done with it, drop it
                self.stack[-1].remove(element)

    def _root(self, element: Any) -> None:
        if self.seen_root or element.tag != "net" or element.get("version") not in _IR_VERSIONS:
            raise UnsafeExportError(f"{self.label}: not an OpenVINO IR v10/v11 (<net version=...>).")
        self.seen_root = True

    def _runtime_options(self, options: Any) -> None:
        """OpenVINO applies some of these as compile properties: only the allow-listed hints, with plain values."""
        for option in options:
            value = option.get("value", "")
            if option.tag not in RUNTIME_OPTIONS or not _OPTION_VALUE.fullmatch(value):
                raise UnsafeExportError(
                    f"{self.label}: rt_info runtime option {option.tag[:64]!r}={value[:64]!r} is not allowed (OpenVINO "
                    f"applies some of these as compile properties; allowed: {', '.join(sorted(RUNTIME_OPTIONS))})."
                )

    def _layer(self, layer: Any) -> None:
        name = layer.get("name", layer.get("id", "?"))
        version = layer.get("version")
        if version not in self.opsets:
            raise UnsafeExportError(
                f"{self.label}: layer {name!r} (type {layer.get('type')!r}) is from opset {version!r}, which this "
                "OpenVINO does not ship: it needs an extension library. Load such IR with openvino directly if you "
                "trust it."
            )
        kind = layer.get("type") or ""
        if kind == "Const":
            self.needed = max(self.needed, _const_end(layer, self.label, name))
        elif kind.lower() in _CONSTANT_TYPES:  # OpenVINO finds operation types regardless of case
            raise UnsafeExportError(
                f"{self.label}: layer {name!r} has type {kind[:32]!r}, a constant spelled other than 'Const' (OpenVINO "
                "matches type names regardless of case, this check does not); an IR written by OpenVINO says 'Const'."
            )


def _const_end(layer: Any, xml_rel: str, name: str) -> int:
    data = layer.find("data")
    where = f"{xml_rel}: Const {name!r}"
    if data is None:
        raise UnsafeExportError(f"{where} has no <data>.")
    element_type = data.get("element_type")
    bits = _ELEMENT_BITS.get(element_type or "")
    if bits is None:
        raise UnsafeExportError(f"{where} has element type {element_type!r}, not a numeric type of a constant.")
    try:
        offset, size = int(data.get("offset", "")), int(data.get("size", ""))
        shape_text = data.get("shape", "").strip()
        shape = [int(d) for d in shape_text.split(",")] if shape_text else []
    except ValueError:
        raise UnsafeExportError(f"{where} has a non-integer offset, size or shape.") from None
    if offset < 0 or size < 0 or any(d < 0 for d in shape) or len(shape) > _MAX_DEPTH:
        raise UnsafeExportError(f"{where} has a negative offset, size or dimension.")
    elements = math.prod(shape)
    expected = (elements * bits + 7) // 8
    # an empty constant (a dimension 0) is written with size="1" by OpenVINO's serializer (2026.4): 0 or 1 byte
    if elements > _MAX_ELEMENTS or size != expected and not (elements == 0 and size == 1):
        raise UnsafeExportError(f"{where}: {size} bytes for shape {shape} of {element_type} ({expected} expected).")
    return offset + size
