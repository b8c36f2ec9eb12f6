"""One ``shared.safetensors`` for the components of one Dynamo export that read the same weights.

``torch.export.save`` deduplicates storages within one archive only, so each component of a generation export
(``prefill`` and ``decode``, encoder and decoder, multimodal parts) would hold every weight again. The components
are written together (:func:`hub_export.backends.dynamo.io.save_programs`):

* a storage that two or more components' programs hold (the same memory: they were exported from one model) is
  written once to :data:`.config.SHARED_WEIGHTS`, a plain safetensors file (data only: a JSON header and raw bytes)
  keyed by the first parameter name using it, holding the whole storage flat (a tied embedding is one storage);
* each component's ``.pt2`` is the archive ``torch.export.save`` writes, less the payload files of those storages,
  plus one entry, :data:`REFERENCES` (``{"payloads": {payload entry: {"key": ..., "nbytes": ...}}}``), naming the
  key each omitted payload is found under; it is written once, without them (:func:`._writer.write_pt2`). The
  weights configs and their tensor metadata are torch's.

Reading (:class:`SharedWeights`): the file is opened only where ``export.json`` lists it for the component, at
exactly its listed size; the header is read with a byte budget and checked (dtypes, shapes, ranges inside the file,
contiguous and covering it, as safetensors writes them) before any reference is resolved; each reference must name
a key whose dtype and size are those of the payload it replaces (:func:`.safety` / ``_pt2`` check the views as for
a payload of the archive). The weights are mapped, not copied, through one map per file per process, so two loaded
components hold one copy of every shared weight in memory (their tensors point at the same pages).

Such a ``.pt2`` is no longer a standalone ``torch.export.load`` archive: hub_export's reader rebuilds it.
"""

from __future__ import annotations

import json
import os
import re
import struct
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..._bounded import MiB, loads_bounded_json
from ...errors import UnsafeExportError
from ...manifest import ComponentEntry

__all__ = [
    "REFERENCES",
    "SharedPlan",
    "SharedWeights",
    "open_shared",
    "plan_shared",
    "read_references",
    "write_shared",
]

#: The entry of a component's ``.pt2`` naming the payloads it reads from the shared file.
REFERENCES = "data/shared/model.json"
MAX_HEADER = 16 * MiB
MAX_REFERENCES = 16 * MiB
MAX_KEY = 1024
MAX_DIMS = 64
#: safetensors dtype -> (torch's serialized ScalarType, element size)
DTYPES = {
    "U8": (1, 1), "I8": (2, 1), "I16": (3, 2), "I32": (4, 4), "I64": (5, 8), "F16": (6, 2), "F32": (7, 4),
    "F64": (8, 8), "BOOL": (12, 1), "BF16": (13, 2), "U16": (28, 2), "F8_E4M3": (29, 1), "F8_E5M2": (30, 1),
    "U32": (34, 4), "U64": (35, 8),
}  # fmt: skip
_TORCH_NAMES = {
    "uint8": "U8", "int8": "I8", "int16": "I16", "int32": "I32", "int64": "I64", "float16": "F16", "float32": "F32",
    "float64": "F64", "bool": "BOOL", "bfloat16": "BF16", "uint16": "U16", "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2", "uint32": "U32", "uint64": "U64",
}  # fmt: skip
_CONFIGS = {
    "data/weights/model_weights_config.json": "data/weights/",
    "data/constants/model_constants_config.json": "data/constants/",
}
#: Whole-file maps of shared weights files, by (path, identity): the components of one export share the pages.
_MAPS: weakref.WeakValueDictionary[tuple[Any, ...], Any] = weakref.WeakValueDictionary()


# -- writing ------------------------------------------------------------------------------------------------------
@dataclass
class SharedPlan:
    """What a save shares: ``tensors`` (key -> the whole storage, flat) and, per component, ``{FQN: key}``."""

    tensors: dict[str, Any] = field(default_factory=dict)
    users: dict[str, dict[str, str]] = field(default_factory=dict)


def _storage_tensors(program: Any) -> dict[str, Any]:
    """``{FQN: tensor}`` of a program's raw-stored weights and tensor constants (what its configs name), less the
    buffers it mutates (a component's state stays its own, as it was before sharing)."""
    import torch

    found = {**program.state_dict, **program.constants}
    mutated = _written_buffers(program)
    return {
        fqn: t
        for fqn, t in found.items()
        if type(t) in (torch.Tensor, torch.nn.Parameter)
        and fqn not in mutated
        and t.untyped_storage().nbytes()
        and t.data_ptr()
    }


def _written_buffers(program: Any) -> set[str]:
    """FQNs of the buffers a program writes: returned as mutated, or passed (directly or through views) to an
    operator argument its schema marks as written (torch.export keeps in-place ops on buffers). A buffer passed to
    a higher-order operator (``scan``, ``while_loop``, ``cond``: its body is a subgraph this walk does not enter)
    counts as written: kept in the component's own archive, never shared."""
    import torch
    from torch.export.graph_signature import InputKind

    written = set(program.graph_signature.buffers_to_mutate.values())
    buffers = {s.arg.name: s.target for s in program.graph_signature.input_specs if s.kind == InputKind.BUFFER}
    origin = {name: target for name, target in buffers.items()}  # node name -> the buffer it is (a view of)
    for node in program.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.HigherOrderOperator):
            operands: list[Any] = []
            torch.fx.node.map_arg((node.args, node.kwargs), operands.append)
            written.update(origin[a.name] for a in operands if a.name in origin)
            continue
        schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
        if schema is None:
            continue
        for arg, spec in zip(node.args, schema.arguments):
            target = origin.get(getattr(arg, "name", ""))
            if target is None:
                continue
            if spec.alias_info is not None and spec.alias_info.is_write:
                written.add(target)
            elif spec.alias_info is not None or schema.returns and schema.returns[0].alias_info is not None:
                origin[node.name] = target  # a view of the buffer
    return written


def plan_shared(programs: dict[str, Any]) -> SharedPlan:
    """The storages two or more of ``programs`` (``ExportedProgram`` s) hold, by storage identity (their memory)."""
    seen: dict[tuple[Any, ...], tuple[set[str], str, Any]] = {}
    per_component: dict[str, dict[str, tuple[Any, ...]]] = {}
    for name, program in programs.items():
        own = per_component.setdefault(name, {})
        for fqn, tensor in _storage_tensors(program).items():
            if str(tensor.dtype).removeprefix("torch.") not in _TORCH_NAMES:
                continue
            storage = tensor.untyped_storage()
            identity = (str(tensor.device), storage.data_ptr(), storage.nbytes())
            own[fqn] = identity
            components, _, _ = seen.setdefault(identity, (set(), fqn, tensor))
            components.add(name)
    plan = SharedPlan()
    keys: dict[tuple[Any, ...], str] = {}
    for identity, (components, fqn, tensor) in seen.items():
        if len(components) < 2:
            continue
        key = fqn if fqn not in plan.tensors else f"{fqn}.{len(plan.tensors)}"
        flat = tensor.new_empty(0).set_(tensor.untyped_storage(), 0, (identity[2] // tensor.element_size(),))
        plan.tensors[key] = flat.detach()
        keys[identity] = key
    for name, own in per_component.items():
        plan.users[name] = {fqn: keys[identity] for fqn, identity in own.items() if identity in keys}
    return plan


def write_shared(plan: SharedPlan, path: Path) -> None:
    """Write ``plan.tensors`` as a safetensors file, each tensor's bytes straight from its memory (no copy in Python
    of a CPU tensor), the larger elements first so every tensor starts at a multiple of its element size; hashed as
    it is written (the manifest's sha256 costs no second read)."""
    import torch

    from ..._files import HashingWriter

    order = sorted(plan.tensors, key=lambda key: (-plan.tensors[key].element_size(), key))
    header: dict[str, Any] = {"__metadata__": {"format": "pt", "hub_export": "dynamo shared weights"}}
    offset = 0
    for key in order:
        tensor = plan.tensors[key]
        nbytes = tensor.numel() * tensor.element_size()
        dtype = _TORCH_NAMES[str(tensor.dtype).removeprefix("torch.")]
        header[key] = {"dtype": dtype, "shape": [tensor.numel()], "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with HashingWriter(path) as handle:
        handle.write(struct.pack("<Q", len(text)) + text)
        for key in order:
            tensor = plan.tensors[key].detach().cpu().contiguous()
            handle.write(memoryview(tensor.view(-1).view(torch.uint8).numpy()))


# -- reading ------------------------------------------------------------------------------------------------------
class SharedWeights:
    """A checked shared weights file (see the module docstring); a context manager closing it.

    Attributes:
        label: How messages name it (its path in the export).
        entries: ``{key: (ScalarType, offset in the file, size in bytes)}``.
    """

    def __init__(self, path: str | Path, label: str, expected_size: int | None) -> None:
        self.label = label
        self._path = str(Path(path).resolve())
        try:
            self._fd: int | None = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise UnsafeExportError(f"{label}: cannot be opened ({exc.strerror or exc}).") from None
        try:
            info = os.fstat(self._fd)
            self.identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
            self.size = info.st_size
            if expected_size is not None and self.size != expected_size:
                raise self._refuse(f"{self.size} bytes, but export.json lists {expected_size}")
            self.entries = self._read_header()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> SharedWeights:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file (maps made from it stay valid)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _refuse(self, rule: str) -> UnsafeExportError:
        return UnsafeExportError(f"{self.label}: {rule}; refusing to load it.")

    def _pread(self, size: int, offset: int) -> bytes:
        assert self._fd is not None
        data = os.pread(self._fd, size, offset)
        if len(data) != size:
            raise self._refuse("the file is cut short")
        return data

    def _read_header(self) -> dict[str, tuple[int, int, int]]:
        if self.size < 8:
            raise self._refuse("not a safetensors file (too short)")
        (length,) = struct.unpack("<Q", self._pread(8, 0))
        if length > min(MAX_HEADER, self.size - 8):
            raise self._refuse(f"a {length}-byte header, over the file or the {MAX_HEADER}-byte limit")
        header = loads_bounded_json(
            self._pread(length, 8), f"{self.label}:header", max_containers=4 * (length // 8 + 1)
        )
        if not isinstance(header, dict):
            raise self._refuse("the header is not a JSON object")
        metadata = header.pop("__metadata__", {})
        if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
            raise self._refuse("__metadata__ is not a map of strings")
        base, spans, entries = 8 + length, [], {}
        for key, info in header.items():
            where = f"tensor {key[:80]!r}"
            if len(key) > MAX_KEY or not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
                raise self._refuse(f"{where} is not a safetensors entry (dtype, shape, data_offsets)")
            dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
            if dtype not in DTYPES:
                raise self._refuse(f"{where} has dtype {str(dtype)[:20]!r}, not one hub_export reads")
            if not (isinstance(shape, list) and len(shape) <= MAX_DIMS and all(_count(s) for s in shape)):
                raise self._refuse(f"{where} has a bad shape")
            if not (isinstance(offsets, list) and len(offsets) == 2 and all(_count(o) for o in offsets)):
                raise self._refuse(f"{where} has bad data_offsets")
            code, itemsize = DTYPES[dtype]
            numel = 1
            for size in shape:
                numel *= size
            begin, end = offsets
            if end < begin or end - begin != numel * itemsize:
                raise self._refuse(f"{where}: data_offsets {offsets} do not hold {shape} of {dtype}")
            spans.append((begin, end, key))
            entries[key] = (code, base + begin, end - begin)
        position = 0
        for begin, end, key in sorted(spans):
            if begin != position:
                raise self._refuse(f"tensor {key[:80]!r} does not start where the previous one ends (gap or overlap)")
            position = end
        if base + position != self.size:
            raise self._refuse(f"the tensors end at byte {base + position} of a {self.size}-byte file")
        return entries

    def map(self, key: str) -> Any:
        """The bytes of tensor ``key`` as a uint8 tensor over the process's one private (copy-on-write) map of this
        file: components reading the same key share memory. A tensor not at a multiple of its element size in the
        file is copied instead."""
        import mmap

        import torch

        code, offset, nbytes = self.entries[key]
        if not nbytes:
            return torch.empty(0, dtype=torch.uint8)
        mapped = _MAPS.get((self._path, self.identity))
        if mapped is None:
            if self._fd is None:
                raise self._refuse("the file was closed before its weights were mapped")
            mapped = mmap.mmap(self._fd, self.size, access=mmap.ACCESS_COPY)
            _MAPS[(self._path, self.identity)] = mapped  # alive while a tensor over it is (frombuffer holds it)
        view = torch.frombuffer(mapped, dtype=torch.uint8, count=nbytes, offset=offset)
        itemsize = next(size for c, size in DTYPES.values() if c == code)
        return view if offset % itemsize == 0 else view.clone()


def open_shared(directory: Path, paths: dict[str, str], entry: ComponentEntry) -> SharedWeights | None:
    """The component's shared weights file (role ``weights`` in ``paths``), checked, if export.json lists one for
    it: found by its exact name, at its listed size."""
    name = paths.get("weights")
    if name is None:
        return None
    size = next(f.size for f in entry.files if f.path == name)
    return SharedWeights(Path(directory) / name, name, size)


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


def read_references(
    data: bytes, where: str, shared: SharedWeights | None, payload: re.Pattern[str]
) -> dict[str, tuple[str, int]]:
    """``{payload entry: (key, nbytes)}`` of a ``.pt2``'s :data:`REFERENCES`, each key in ``shared`` with that size.

    Raises:
        UnsafeExportError: Not the JSON :func:`._writer.write_pt2` writes, no shared file listed, or a key it lacks or
            holds with another size.
    """
    document = loads_bounded_json(data, where, max_containers=len(data) // 8 + 2)
    payloads = document.get("payloads") if isinstance(document, dict) and set(document) == {"payloads"} else None
    if not isinstance(payloads, dict):
        raise UnsafeExportError(f"{where}: not a map of shared payloads; refusing to load it.")
    if shared is None:
        raise UnsafeExportError(
            f"{where}: the archive reads weights from a shared weights file that export.json does not list for this "
            "component; refusing to load it. Re-download or re-save the export."
        )
    out = {}
    for entry, ref in payloads.items():
        if not payload.fullmatch(entry) or not isinstance(ref, dict) or set(ref) != {"key", "nbytes"}:
            raise UnsafeExportError(f"{where}: {entry[:80]!r} is not a payload reference; refusing to load it.")
        key, nbytes = ref["key"], ref["nbytes"]
        found = shared.entries.get(key) if isinstance(key, str) else None
        if found is None:
            raise UnsafeExportError(
                f"{where}: {entry} names {str(key)[:80]!r}, which {shared.label} lacks; refusing to load it."
            )
        if not _count(nbytes) or found[2] != nbytes:
            raise UnsafeExportError(
                f"{where}: {entry} is {nbytes} bytes, but {shared.label} holds {found[2]} for {key!r}; refusing to load it."
            )
        out[entry] = (key, nbytes)
    return out
