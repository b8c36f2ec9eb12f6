"""Read a ``.pt2`` archive as data: check every entry, then rebuild the program from the checked bytes only.

``torch.export.load`` is never called on an untrusted archive: it takes paths this check cannot vouch for (when its
archive reader raises it falls back to the pre-2.8 layout and unpickles other entries; it prefers a legacy
``data/weights/model.pt`` over the configs; it joins a config's ``path_name`` to a folder, so an absolute one names
another record; it ``dlopen``s AOTInductor libraries it extracts without normalising ``..``; it retries sample inputs
with ``weights_only=False``). Instead :func:`read_pt2`:

1. reads the zip's central directory strictly (:mod:`._archive`) and requires the entry list to be exactly what
   ``torch.export.save`` writes for one program: fixed markers, ``models/model.json``, the sample inputs, the weights
   and constants configs and the payload files they name (every payload named by a config, no other file), or, for
   payloads the export's components share, ``data/shared/model.json`` naming them in its checked
   ``shared.safetensors`` (:mod:`._shared`);
2. validates ``models/model.json`` and both configs against torch's schema and the grammars
   (:mod:`._program_schema`), each read with a byte budget and parsed with a bounded container count;
3. walks every pickle (the sample inputs' ``torch.save``, pickled payloads) with the allow-list
   (:func:`hub_export._pickle.walk_pickle`);
4. when building, creates each raw weight from its entry's bytes itself (``torch.frombuffer`` over a copy-on-write
   map of the file, or of the shared weights file, + ``as_strided``, the view checked to fit its storage: nothing is
   copied), loads the pickles with ``torch.load(weights_only=True)`` and hands the checked program to torch's
   deserializer, which has no archive to fall back on.

``trust_pickles`` lets pickles reference any global and loads them with ``weights_only=False``;
``trust_native_code`` accepts AOTInductor entries in the archive (they are never loaded from here).
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..._bounded import MiB, loads_bounded_json
from ..._pickle import walk_pickle
from ...errors import DeviceUnavailableError, UnsafeExportError
from ...formats import SafetyOptions
from ._archive import StoredArchive
from ._program_schema import validate_document
from ._shared import MAX_REFERENCES, REFERENCES, SharedWeights, read_references

__all__ = ["ALLOWED_GLOBALS", "Pt2Contents", "read_pt2"]

#: The one program name ``torch.export.save`` writes.
MODEL = "model"
MAX_ENTRIES = 200_000
MAX_PROGRAM_JSON = 64 * MiB
MAX_PROGRAM_CONTAINERS = 2_000_000
MAX_CONFIG_JSON = 16 * MiB
MAX_SAMPLE_INPUTS = 256 * MiB
MAX_PICKLE = 1 * MiB
MAX_DIMS = 64
_MARKERS = {
    "archive_format": re.compile(rb"pt2"),
    "archive_version": re.compile(rb"0"),
    "byteorder": re.compile(rb"little"),
    ".data/version": re.compile(rb"[0-9]{1,3}\n?"),
    ".data/serialization_id": re.compile(rb"[0-9]{1,64}"),
}
_SAVE_MARKERS = {
    "byteorder": re.compile(rb"little"),
    "version": re.compile(rb"[0-9]{1,3}\n?"),
    ".format_version": re.compile(rb"[0-9]{1,3}"),
    ".storage_alignment": re.compile(rb"[0-9]{1,5}"),
    ".data/serialization_id": re.compile(rb"[0-9]{1,64}"),
}
_PROGRAM = f"models/{MODEL}.json"
_SAMPLE_INPUTS = f"data/sample_inputs/{MODEL}.pt"
_CONFIGS = {
    "weights": (f"data/weights/{MODEL}_weights_config.json", "data/weights/", ("weight_",)),
    "constants": (
        f"data/constants/{MODEL}_constants_config.json",
        "data/constants/",
        ("tensor_", "custom_obj_", "opaque_obj_"),
    ),
}
_PAYLOAD = re.compile(r"data/(weights|constants)/(weight|tensor|custom_obj|opaque_obj)_(0|[1-9][0-9]{0,8})")
_STORAGE = re.compile(r"data/(0|[1-9][0-9]{0,8})")
_ELEMENT_SIZE = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 2, 7: 4, 8: 8, 9: 4, 10: 8, 11: 16, 12: 1, 13: 2, 28: 2}
_ELEMENT_SIZE |= {29: 1, 30: 1, 31: 1, 32: 1, 33: 1, 34: 4, 35: 8}
_FLOATING = frozenset({6, 7, 8, 9, 10, 11, 13, 29, 30, 31, 32, 33})
_STRIDED = 7

_STORAGES = (
    "Double", "Float", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte", "Bool", "ComplexFloat",
    "ComplexDouble",
)  # fmt: skip
_DTYPES = (
    "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool", "complex64",
    "complex128",
)  # fmt: skip
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
_TRUST_HINT = "Pass trust_pickles=True only if you produced this file yourself."


@dataclass
class _Payload:
    """One payload file named by a config: its entry, and the configs' entries (FQN -> meta) that use it."""

    entry: str
    pickled: bool
    users: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    shared: str | None = None  # its key in the export's shared weights file, when the archive omits it


@dataclass
class Pt2Contents:
    """What :func:`read_pt2` checked (and, when building, the program)."""

    program_json: dict[str, Any]
    payloads: dict[str, dict[str, _Payload]]
    program: Any = None


def read_pt2(
    path: str | Path,
    label: str,
    *,
    options: SafetyOptions,
    expected_size: int | None = None,
    build: bool = False,
    shared: SharedWeights | None = None,
) -> Pt2Contents:
    """Check a ``.pt2`` archive (see the module docstring) and, with ``build=True``, rebuild its program.

    Args:
        path: The archive.
        label: How messages name it (its path in the export).
        options: What the user trusts.
        expected_size: The size export.json lists: the archive's byte budget.
        build: Also rebuild the ``ExportedProgram`` (``Pt2Contents.program``).
        shared: The export's shared weights file, checked, where export.json lists one for the component: payloads
            the archive names in its ``data/shared/model.json`` are read from it (see :mod:`._shared`).

    Raises:
        UnsafeExportError: Naming the file, the entry and the rule it breaks.
    """
    with StoredArchive.open(path, label, max_entries=MAX_ENTRIES, expected_size=expected_size) as archive:
        identity = archive.identity()
        key = (str(Path(path).resolve()), identity, options, shared and (shared.label, shared.identity))
        checked = _CHECKED.pop(key, None) if build and identity is not None else None
        if checked is not None:  # checked by the safety walk just before this load: the same bytes
            contents = Pt2Contents(checked.program_json, checked.payloads)
            sample = archive.read(_SAMPLE_INPUTS, MAX_SAMPLE_INPUTS)
        else:
            contents, sample = _check(archive, options, shared)
        if build:
            contents.program = _build(archive, contents, sample, options, shared)
        elif identity is not None:
            while len(_CHECKED) >= _MAX_CHECKED:
                _CHECKED.pop(next(iter(_CHECKED)))
            _CHECKED[key] = contents
        return contents


#: Archives checked without building, by (path, file identity, options), until a build takes them: the load that
#: follows a check (``check_files`` then ``load_program``) parses and validates the JSON once, not twice.
_CHECKED: dict[tuple[Any, ...], Pt2Contents] = {}
_MAX_CHECKED = 4


def _check(archive: StoredArchive, options: SafetyOptions, shared: SharedWeights | None) -> tuple[Pt2Contents, bytes]:
    """Steps 1-3 of the module docstring; returns what was checked and the sample inputs' bytes."""
    label = archive.label
    payload_names = _check_entry_names(archive, options)
    refs: dict[str, tuple[str, int]] = {}
    if REFERENCES in archive.entries:
        where = f"{label}:{REFERENCES}"
        refs = read_references(archive.read(REFERENCES, MAX_REFERENCES), where, shared, _PAYLOAD)
        if payload_names & set(refs):
            raise _refuse(archive, sorted(payload_names & set(refs))[0], "is both in the archive and shared")
    program_json = _read_json(archive, _PROGRAM, MAX_PROGRAM_JSON, "ExportedProgram")
    payloads = {kind: _payloads(archive, kind, payload_names, options, refs, shared) for kind in _CONFIGS}
    unused = sorted((payload_names | set(refs)) - {p.entry for group in payloads.values() for p in group.values()})
    if unused:
        raise _refuse(archive, unused[0], "is a payload file no config names")
    sample = archive.read(_SAMPLE_INPUTS, MAX_SAMPLE_INPUTS)
    if not options.trust_pickles:
        _check_torch_save(sample, f"{label}:{_SAMPLE_INPUTS}")
        for group in payloads.values():
            for payload in group.values():
                if payload.pickled:
                    _check_pickled_payload(archive, payload, label)
    return Pt2Contents(program_json, payloads), sample


def _refuse(archive: StoredArchive, entry: str, rule: str) -> UnsafeExportError:
    return UnsafeExportError(f"{archive.label}:{entry} {rule}; refusing to load it.")


# -- 1. the entry list ------------------------------------------------------------------------------------------
def _check_entry_names(archive: StoredArchive, options: SafetyOptions) -> set[str]:
    """Refuse any entry ``torch.export.save`` does not write for one program; returns the payload entries."""
    required = {*_MARKERS, _PROGRAM, _SAMPLE_INPUTS, *(config for config, _, _ in _CONFIGS.values())}
    payloads: set[str] = set()
    for name in archive.entries:
        if name in required or name == REFERENCES:
            continue
        if _PAYLOAD.fullmatch(name):
            payloads.add(name)
        elif name.startswith("data/aotinductor/"):
            if not options.trust_native_code:
                raise _refuse(
                    archive,
                    name,
                    "is AOTInductor-compiled native code, which runs when loaded; pass trust_native_code=True only "
                    "for files you produced yourself",
                )
        elif name == f"data/weights/{MODEL}.pt" or name == f"data/constants/{MODEL}.pt":
            raise _refuse(
                archive, name, "is a legacy pickled weights file, which torch would read instead of the configs"
            )
        else:
            raise _refuse(archive, name, "is not an entry torch.export.save writes for one program")
    missing = sorted(required - set(archive.entries))
    if missing:
        raise _refuse(archive, missing[0], "is missing (not a .pt2 written by torch.export.save)")
    for name, pattern in _MARKERS.items():
        if not pattern.fullmatch(archive.read(name, 64)):
            raise _refuse(archive, name, "does not hold the value torch writes")
    return payloads


# -- 2. the JSON documents -----------------------------------------------------------------------------------------
def _read_json(archive: StoredArchive, name: str, limit: int, kind: str) -> Any:
    where = f"{archive.label}:{name}"
    data = archive.read(name, limit)
    value = loads_bounded_json(data, where, max_containers=MAX_PROGRAM_CONTAINERS)
    try:
        validate_document(value, kind)
    except ValueError as exc:
        raise UnsafeExportError(f"{where}: {exc}; refusing to load it.") from None
    return value


def _payloads(
    archive: StoredArchive,
    kind: str,
    present: set[str],
    options: SafetyOptions,
    refs: dict[str, tuple[str, int]],
    shared: SharedWeights | None,
) -> dict[str, _Payload]:
    """``{path_name: payload}`` of a config, each payload's entry present (or shared: ``refs``) and each meta
    consistent with it."""
    config_name, folder, prefixes = _CONFIGS[kind]
    config = _read_json(archive, config_name, MAX_CONFIG_JSON, "PayloadConfig")
    found: dict[str, _Payload] = {}
    for fqn, meta in config["config"].items():
        path_name, pickled = meta["path_name"], meta["use_pickle"]
        entry = folder + path_name
        where = f"{config_name}: {fqn!r}"
        if not path_name.startswith(prefixes) or (entry not in present and entry not in refs):
            raise _refuse(archive, where, f"names payload {path_name!r}, which is not a {kind} file of this archive")
        is_object = path_name.startswith(("custom_obj_", "opaque_obj_"))
        if is_object and not options.trust_pickles:
            raise _refuse(
                archive,
                where,
                f"is a pickled Python or TorchBind object ({path_name}); loading it runs code. {_TRUST_HINT}",
            )
        key = refs[entry][0] if entry in refs else None
        payload = found.setdefault(path_name, _Payload(entry, pickled, shared=key))
        if payload.pickled != pickled or (is_object and not pickled) or (key is not None and pickled):
            raise _refuse(archive, where, f"disagrees with another config entry about how {path_name} is stored")
        if key is not None and shared is not None:
            _check_raw_meta(archive, where, meta.get("tensor_meta"), refs[entry][1])
            if shared.entries[key][0] != meta["tensor_meta"]["dtype"]:
                raise _refuse(archive, where, f"reads {shared.label}'s {key!r} with another dtype than it holds")
        elif not pickled:
            _check_raw_meta(archive, where, meta.get("tensor_meta"), archive.entries[entry].size)
            if payload.users and payload.users[0][1]["tensor_meta"]["dtype"] != meta["tensor_meta"]["dtype"]:
                raise _refuse(archive, where, f"reads {path_name} with another dtype than the other users of it")
        payload.users.append((fqn, meta))
    return found


def _int_values(values: list[Any], what: str) -> list[int]:
    out = []
    for value in values:
        if "as_int" not in value or value["as_int"] < 0:
            raise ValueError(f"{what} must be non-negative integers")
        out.append(value["as_int"])
    return out


def _check_raw_meta(archive: StoredArchive, where: str, meta: Any, nbytes: int) -> None:
    """A raw payload's view (sizes, strides, offset) must fit the bytes of its entry."""
    if meta is None:
        raise _refuse(archive, where, "has no tensor_meta for a raw payload")
    try:
        itemsize = _ELEMENT_SIZE.get(meta["dtype"])
        if itemsize is None:
            raise ValueError(f"dtype {meta['dtype']} is not a tensor dtype torch stores raw")
        if meta["layout"] != _STRIDED:
            raise ValueError("only strided (dense) tensors are stored raw")
        if meta["requires_grad"] and meta["dtype"] not in _FLOATING:
            raise ValueError("an integer tensor cannot require grad")
        sizes = _int_values(meta["sizes"], "sizes")
        strides = _int_values(meta["strides"], "strides")
        (offset,) = _int_values([meta["storage_offset"]], "storage_offset")
        if len(sizes) != len(strides) or len(sizes) > MAX_DIMS:
            raise ValueError(f"sizes and strides disagree or exceed {MAX_DIMS} dimensions")
        if nbytes % itemsize:
            raise ValueError(f"{nbytes} bytes is not a whole number of {itemsize}-byte elements")
        numel = nbytes // itemsize
        if 0 not in sizes:
            last = offset + sum((size - 1) * stride for size, stride in zip(sizes, strides))
            if last >= numel:
                raise ValueError(f"the view reaches element {last} of a {numel}-element payload")
    except ValueError as exc:
        raise _refuse(archive, where, str(exc)) from None


# -- 3. pickles ---------------------------------------------------------------------------------------------------
def _check_torch_save(data: bytes, where: str) -> StoredArchive:
    """A ``torch.save`` zip: its entries exactly ``torch.save``'s, its ``data.pkl`` allow-listed."""
    nested = StoredArchive.from_bytes(data, where, max_entries=MAX_ENTRIES)
    for name in nested.entries:
        if name != "data.pkl" and name not in _SAVE_MARKERS and not _STORAGE.fullmatch(name):
            raise _refuse(nested, name, "is not an entry torch.save writes")
    for name, pattern in _SAVE_MARKERS.items():
        if name not in nested.entries or not pattern.fullmatch(nested.read(name, 64)):
            raise _refuse(nested, name, "is missing or does not hold the value torch.save writes")
    if "data.pkl" not in nested.entries:
        raise _refuse(nested, "data.pkl", "is missing")
    walk_pickle(
        nested.read("data.pkl", MAX_PICKLE),
        f"{where}:data.pkl",
        ALLOWED_GLOBALS,
        max_bytes=MAX_PICKLE,
        persistent_ids=True,
        hint=_TRUST_HINT,
    )
    return nested


def _check_pickled_payload(archive: StoredArchive, payload: _Payload, label: str) -> None:
    size = archive.entries[payload.entry].size
    _check_torch_save(archive.read(payload.entry, size), f"{label}:{payload.entry}")


# -- 4. building --------------------------------------------------------------------------------------------------
def _build(
    archive: StoredArchive, contents: Pt2Contents, sample: bytes, options: SafetyOptions, shared: SharedWeights | None
) -> Any:
    import torch
    from torch._export.serde import schema
    from torch._export.serde.serialize import ExportedProgramDeserializer, _dict_to_dataclass

    tensors = {kind: _materialize(archive, group, options, shared) for kind, group in contents.payloads.items()}
    example_inputs = _load_torch_save(sample, f"{archive.label}:{_SAMPLE_INPUTS}", options)
    _check_example_inputs(example_inputs, f"{archive.label}:{_SAMPLE_INPUTS}")
    try:
        serialized = _dict_to_dataclass(schema.ExportedProgram, contents.program_json)
        with torch.no_grad():
            return ExportedProgramDeserializer().deserialize(
                serialized, tensors["weights"], tensors["constants"], example_inputs
            )
    except (DeviceUnavailableError, UnsafeExportError):
        raise
    except Exception as exc:  # noqa: BLE001 - torch's deserializer raises many kinds on inconsistent programs
        raise UnsafeExportError(
            f"{archive.label}:{_PROGRAM}: torch could not rebuild the program ({type(exc).__name__}: "
            f"{str(exc)[:300]}); refusing to load it."
        ) from None


def _materialize(
    archive: StoredArchive, group: dict[str, _Payload], options: SafetyOptions, shared: SharedWeights | None
) -> dict[str, Any]:
    import pickle

    import torch
    from torch._export.serde.serialize import deserialize_scalar_type

    out: dict[str, Any] = {}
    for path_name, payload in group.items():
        where = f"{archive.label}:{payload.entry}"
        if path_name.startswith("custom_obj_"):  # trust_pickles only (refused while reading the config otherwise)
            value = torch._C._pickle_load_obj(archive.read(payload.entry, archive.entries[payload.entry].size))
            out.update((fqn, value) for fqn, _ in payload.users)
            continue
        if path_name.startswith("opaque_obj_"):
            value = pickle.loads(archive.read(payload.entry, archive.entries[payload.entry].size))  # noqa: S301
            out.update((fqn, value) for fqn, _ in payload.users)
            continue
        if payload.pickled:
            value = _load_torch_save(archive.read(payload.entry, archive.entries[payload.entry].size), where, options)
            out.update((fqn, value) for fqn, _ in payload.users)
            continue
        first = payload.users[0][1]["tensor_meta"]
        dtype = deserialize_scalar_type(first["dtype"])
        if payload.shared is not None and shared is not None:
            storage = shared.map(payload.shared)
        else:
            storage = archive.map_entry(payload.entry)
        if storage.numel() % dtype.itemsize:
            raise UnsafeExportError(f"{where}: {storage.numel()} bytes is not a whole number of {dtype}; refusing it.")
        flat = storage.view(dtype)
        for fqn, meta in payload.users:
            tm = meta["tensor_meta"]
            sizes = [s["as_int"] for s in tm["sizes"]]
            if not storage.numel():
                tensor = torch.empty(sizes, dtype=dtype) if 0 in sizes else None
                if tensor is None:
                    raise UnsafeExportError(f"{where}: an empty payload viewed as a non-empty tensor; refusing it.")
            else:
                strides = [s["as_int"] for s in tm["strides"]]
                tensor = torch.as_strided(flat, sizes, strides, tm["storage_offset"]["as_int"])
            tensor = _to_device(tensor, tm["device"], where)
            if meta["is_param"]:
                tensor = torch.nn.Parameter(tensor, requires_grad=tm["requires_grad"])
            elif tm["requires_grad"]:
                tensor.requires_grad_(True)
            out[fqn] = tensor
    return out


def _to_device(tensor: Any, device: dict[str, Any], where: str) -> Any:
    import torch

    if device["type"] == "cpu":
        return tensor
    try:
        index = device.get("index")
        target = torch.device(device["type"]) if index is None else torch.device(device["type"], int(index))
        return tensor.to(target)
    except (RuntimeError, AssertionError, ValueError) as exc:
        raise DeviceUnavailableError(
            f"{where}: the weights were saved on {device['type']}, which is unavailable here ({exc})."
        ) from None


def _load_torch_save(data: bytes, where: str, options: SafetyOptions) -> Any:
    """``torch.load`` a checked ``torch.save`` zip: ``weights_only=True`` (never retried without it)."""
    import torch

    try:
        return torch.load(io.BytesIO(data), weights_only=not options.trust_pickles, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - UnpicklingError, RuntimeError...: all refusals of this file
        raise UnsafeExportError(
            f"{where}: torch.load(weights_only=True) refused it ({type(exc).__name__}: {str(exc)[:200]})."
        ) from None


def _check_example_inputs(value: Any, where: str) -> None:
    """``(args, kwargs)`` of tensors and plain scalars, with identifier keys (they become generated code)."""
    import torch

    from ._grammar import is_identifier

    if not (
        isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], tuple) and isinstance(value[1], dict)
    ):
        raise UnsafeExportError(f"{where}: sample inputs are not (args, kwargs); refusing them.")
    stack = [(value, 0)]
    count = 0
    while stack:
        item, depth = stack.pop()
        count += 1
        if depth > 16 or count > 100_000:
            raise UnsafeExportError(f"{where}: sample inputs nest too deep or hold too many values; refusing them.")
        if isinstance(item, (tuple, list)):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, dict):
            if not all(is_identifier(k) for k in item):
                raise UnsafeExportError(f"{where}: a sample input key is not an identifier; refusing them.")
            stack.extend((v, depth + 1) for v in item.values())
        elif not (item is None or type(item) in (bool, int, float) or type(item) in (torch.Tensor, torch.nn.Parameter)):
            raise UnsafeExportError(f"{where}: a sample input of type {type(item).__name__}; refusing them.")
