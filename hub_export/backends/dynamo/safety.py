"""``.pt2`` archives: every pickle inside may reference only allow-listed globals.

``torch.export.load`` unpickles several archive entries with full pickle (``torch.load(weights_only=False)``
for pickled weights and constants, ``pickle.loads`` for opaque constants, a ``weights_only=False`` fallback for
the sample inputs), so a crafted archive runs code on load. Before that, every entry torch may unpickle is
walked with :func:`pickletools.genops` (nothing is executed) and each global it imports
(``GLOBAL``/``INST``/``STACK_GLOBAL``) must be in :data:`ALLOWED_GLOBALS`. Entries that are zip archives
(``torch.save`` output, e.g. ``data/sample_inputs/<model>.pt``) are opened and their ``.pkl`` entries scanned.

Weights and constants the archive's configs declare as raw tensor bytes (``use_pickle: false``) are not pickles
and are skipped: torch 2.13 stores plain tensors that way, so the only pickle in our exports is the sample
inputs' ``torch.save``. Tensor subclasses (e.g. torchao quantized weights) are pickled and are refused unless
``trust_pickles=True``.

A compiled component's AOTInductor package (role ``native``, ``<component>.aoti.pt2``) is a shared library: loading
it runs its code, which no scan can vet. It is refused unless the user passed ``trust_native_code=True``.
"""

from __future__ import annotations

import io
import json
import pickletools
import zipfile
from pathlib import Path
from typing import Any

from ...errors import UnsafeExportError
from ...formats import SafetyOptions
from ...manifest import ComponentEntry
from .config import LAYOUT

__all__ = ["ALLOWED_GLOBALS", "check", "check_archive", "scan_pickle"]

_STORAGES = (
    "Double",
    "Float",
    "Half",
    "BFloat16",
    "Long",
    "Int",
    "Short",
    "Char",
    "Byte",
    "Bool",
    "ComplexFloat",
    "ComplexDouble",
)
_DTYPES = (
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
    "complex64",
    "complex128",
)
#: Globals a ``.pt2`` pickle may import: what ``torch.save`` writes for plain tensors and parameters.
ALLOWED_GLOBALS = frozenset(
    {
        ("torch._utils", "_rebuild_tensor_v2"),
        ("torch._utils", "_rebuild_parameter"),
        ("collections", "OrderedDict"),
        ("torch", "Size"),
        *(("torch", f"{name}Storage") for name in _STORAGES),
        *(("torch", dtype) for dtype in _DTYPES),
    }
)

_STRING_OPS = frozenset(
    {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING", "SHORT_BINSTRING"}
)
_GET_OPS = frozenset({"GET", "BINGET", "LONG_BINGET"})
_PUT_OPS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_REFUSED_OPS = frozenset({"EXT1", "EXT2", "EXT4"})  # copyreg extension registry: globals by number
_PICKLE_NAMES = (".pkl", ".pt", ".pth", ".bin")
_RAW_PREFIXES = {"data/weights/": ("",), "data/constants/": ("tensor_",)}


def check(directory: Path, component: str, entry: ComponentEntry, options: SafetyOptions) -> None:
    """Refuse native code unless trusted, and a ``.pt2`` whose pickles import anything outside
    :data:`ALLOWED_GLOBALS`.

    Raises:
        UnsafeExportError: Naming the native package and how to opt in, or the file, the archive entry and the
            global (or the malformed pickle).
    """
    paths = LAYOUT.paths(component, [f.path for f in entry.files])
    if "native" in paths and not options.trust_native_code:
        raise UnsafeExportError(
            f"{paths['native']}: component {component!r} is compiled by AOTInductor into native code (a shared "
            "library), which runs when loaded and cannot be checked. Pass trust_native_code=True to "
            "ExportedModel.from_pretrained only if you trust whoever published this export; or use an export made "
            "without DynamoConfig(compile=...)."
        )
    if options.trust_pickles:
        return
    check_archive(directory / paths["program"], paths["program"])


def check_archive(path: Path, label: str) -> None:
    """Refuse a ``.pt2`` whose pickles import anything outside :data:`ALLOWED_GLOBALS` (``label`` names it)."""
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise UnsafeExportError(f"{label}: not a zip archive ({exc}); refusing to load it.") from None
    with archive:
        names = archive.namelist()
        if len(set(names)) != len(names):  # zipfile and torch's reader could then disagree on which one is used
            raise UnsafeExportError(f"{label}: the archive has duplicate entry names; refusing to load it.")
        raw, pickled = _payload_entries(archive, names, label)
        for info in archive.infolist():
            name = info.filename
            if name.endswith("/") or _relative(name) in raw:
                continue
            data = archive.read(info)
            where = f"{label}:{name}"
            if data[:4] == b"PK\x03\x04":
                _check_nested(data, where)
            elif name.endswith(_PICKLE_NAMES) or _looks_pickled(data) or _relative(name) in pickled:
                scan_pickle(data, where)


def _relative(name: str) -> str:
    """An entry's name inside the archive, without the archive's top folder (as torch reads it)."""
    return name.split("/", 1)[1] if "/" in name else name


def _payload_entries(archive: zipfile.ZipFile, names: list[str], label: str) -> tuple[set[str], set[str]]:
    """(raw, pickled): entries the weights/constants configs declare as raw tensor bytes or as pickles."""
    raw: set[str] = set()
    pickled: set[str] = set()
    for name in names:
        relative = _relative(name)
        folder = next((d for d in _RAW_PREFIXES if relative.startswith(d)), None)
        if folder is None or not relative.endswith("_config.json"):
            continue
        try:
            config = json.loads(archive.read(name))["config"]
            items = [(str(v["path_name"]), bool(v.get("use_pickle", False))) for v in config.values()]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UnsafeExportError(
                f"{label}:{name}: unreadable payload config ({exc}); refusing to load it."
            ) from None
        for path_name, use_pickle in items:
            target = folder + path_name
            if use_pickle or not path_name.startswith(_RAW_PREFIXES[folder]):
                pickled.add(target)
            else:
                raw.add(target)
    return raw - pickled, pickled


def _looks_pickled(data: bytes) -> bool:
    return len(data) >= 2 and data[0] == 0x80 and 2 <= data[1] <= 5


def _check_nested(data: bytes, where: str) -> None:
    """A ``torch.save`` zip inside the archive: scan its pickles (storages in it are raw bytes)."""
    try:
        nested = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise UnsafeExportError(f"{where}: corrupt nested zip ({exc}); refusing to load it.") from None
    with nested:
        for name in nested.namelist():
            if name.endswith(".pkl"):
                scan_pickle(nested.read(name), f"{where}:{name}")


def scan_pickle(data: bytes, where: str) -> None:
    """Walk a pickle's opcodes without running it; refuse globals outside :data:`ALLOWED_GLOBALS`.

    Args:
        data: The pickle bytes (one pickle, nothing after its STOP).
        where: Its location for messages (``file:entry``).

    Raises:
        UnsafeExportError: A disallowed or unresolvable global, an extension-registry opcode, a malformed
            pickle or bytes after its end.
    """
    recent: list[Any] = []  # values pushed by recent opcodes (str for strings, None otherwise)
    memo: dict[int, Any] = {}
    end = None
    try:
        for opcode, arg, pos in pickletools.genops(data):
            name = opcode.name
            if name in ("GLOBAL", "INST"):
                module, _, attr = str(arg).partition(" ")
                _allow(module, attr, where)
                recent.append(None)
            elif name == "STACK_GLOBAL":
                if len(recent) < 2 or not isinstance(recent[-2], str) or not isinstance(recent[-1], str):
                    raise UnsafeExportError(f"{where}: STACK_GLOBAL at byte {pos} with a computed name; refusing it.")
                _allow(recent[-2], recent[-1], where)
                recent[-2:] = [None]
            elif name in _REFUSED_OPS:
                raise UnsafeExportError(f"{where}: opcode {name} (copyreg extension registry) is not allowed.")
            elif name in _STRING_OPS:
                recent.append(arg.decode("latin-1") if isinstance(arg, bytes) else str(arg))
            elif name in _GET_OPS:
                recent.append(memo.get(arg))
            elif name in _PUT_OPS:
                memo[arg] = recent[-1] if recent else None
            elif name == "MEMOIZE":
                memo[len(memo)] = recent[-1] if recent else None
            elif name == "STOP":
                end = pos + 1
            elif name not in ("PROTO", "FRAME", "MARK"):
                recent.append(None)
            del recent[:-4]
    except UnsafeExportError:
        raise
    except Exception as exc:  # noqa: BLE001 - genops raises ValueError and others on garbage
        raise UnsafeExportError(f"{where}: not a valid pickle ({exc}); refusing to load it.") from None
    if end is None or end != len(data):
        raise UnsafeExportError(f"{where}: {len(data) - (end or 0)} unexpected bytes after the pickle; refusing it.")


def _allow(module: str, attr: str, where: str) -> None:
    if (module, attr) not in ALLOWED_GLOBALS:
        raise UnsafeExportError(
            f"{where}: the pickle references {module}.{attr}, which is not an allow-listed tensor global; loading "
            "it could run arbitrary code. Pass trust_pickles=True only if you produced this file yourself."
        )
