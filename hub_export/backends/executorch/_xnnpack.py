"""XNNPACK delegate payloads of an ExecuTorch program, checked field by field before the runtime parses them.

The bytes ExecuTorch hands the XNNPACK backend (an ``XH00`` header, an ``XNNGraph`` flatbuffer, then constant data)
are trusted by the backend: a tensor's dims say how many bytes of its constant data XNNPACK reads, a node's
permutation length how many entries, an external id which of the delegate call's arguments it reads and writes. A
byte flip there crashes the process. So, reading only the header and the graph's flatbuffer (bounded; the constant
data is never read), every XNNPACK delegate of the program must have:

* a header whose flatbuffer and constant-data ranges lie inside the payload, the flatbuffer first, and the payload
  inside the file (a segment) or the program (inline data);
* a graph flatbuffer (identifier ``XN01``) whose every table, vtable, vector and string lies inside it
  (:mod:`._flatbuf`), with at most 4096 external values, no deprecated inline buffers;
* values of the kinds our exporter writes (tensors, quantized tensors with the four quantization schemes), of known
  data types, at most 6 dims that match their count, distinct ids, flags only "external input/output";
* external values with distinct external ids below the graph's count and the delegate call's argument count, whose
  element size is the size of the program tensor they are bound to;
* constants (a constant-data entry) whose bytes (dims x element size) fit in their entry, and entries inside the
  constant data or naming a key of the program's (or the ``.ptd``'s) named data, no larger than it; quantization
  scales that cover every channel (or group);
* nodes of the types our exporter lowers (the allow-list below), each id naming a value defined as a constant, an
  external input or the output of an earlier node, at most one producer per value; node fields the runtime indexes
  with in range: permutations are permutations, shape/slice/padding vectors as long as the dims they describe (at
  most 6), concatenation axes below 6, kernel/stride/dilation/group sizes at least 1, sizes bounded.

The schema is ``executorch/backends/xnnpack/serialization/schema.fbs`` (field order = vtable slot; a union takes two
slots: type, value).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import BinaryIO

from ...errors import UnsafeExportError
from ._flatbuf import Flat, FlatError, Table

__all__ = ["check_xnnpack_delegates", "ptd_named_sizes"]

_BACKEND = b"XnnpackBackend"
_HEADER_SIZE = 30  # zeros(4) "XH00" length:u16 flatbuffer offset:u32 size:u32 constant offset:u32 size:u64
_MAX_GRAPH = 1 << 28  # bytes of graph flatbuffer read (the constants follow it, never read)
_MAX_INDEX = 1 << 26  # bytes of a .ptd's index read
_MAX_ITEMS = 1 << 22  # values, nodes, constants per graph
_MAX_DIMS = 6  # XNN_MAX_TENSOR_DIMS
_MAX_DIM = (1 << 31) - 1
_MAX_SIZE = 1 << 16  # paddings, kernel sizes, strides, dilations, groups
_INVALID = 0xFFFFFFFF  # XNN_INVALID_VALUE_ID
_EXTERNAL_INPUT, _EXTERNAL_OUTPUT = 1, 2
_NODE_FLAGS = 0x1 | 0x2 | 0x4 | 0x8 | 0x40  # transpose weights/A, TF padding, align corners, keep dims

# XNNDatatype -> bits per element (what a value of the type occupies); qpint8 and pfp32 are not written by the exporter
_DATATYPE_BITS = {1: 32, 2: 16, 3: 8, 4: 8, 5: 32, 6: 8, 7: 32, 8: 4, 9: 8, 10: 4, 12: 32, 14: 16}
_QBINT4 = 10
# ExecuTorch ScalarType -> bytes per element
_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 11: 1, 12: 1, 13: 1, 14: 4, 15: 2}

# Node field kinds, in vtable order
_IN, _OPT, _OUT, _FLAGS, _SIZE, _POSITIVE, _AXIS, _FLOAT, _NDIMS, _DIMS, _PERM = range(11)
_1X1 = (_IN, _OUT, _FLAGS)
_2X1 = (_IN, _IN, _OUT, _FLAGS)
_CONV = (_SIZE,) * 4 + (_POSITIVE,) * 9 + (_SIZE, _SIZE, _IN, _IN, _OPT, _OUT, _FLAGS)
_POOL = (_SIZE,) * 4 + (_POSITIVE,) * 6 + (_IN, _OUT, _FLAGS)
_AVG_POOL = (_SIZE,) * 4 + (_POSITIVE,) * 4 + (_SIZE,) * 2 + (_IN, _OUT, _FLAGS)  # dilations unused: written as 0


def _cat(inputs: int) -> tuple[int, ...]:
    ids = [_IN if i < inputs else _OPT for i in range(5)]
    return (_AXIS, *ids[:4], _OUT, _FLAGS, ids[4])


# XNodeUnion tag -> (name, fields): the node types the XNNPACK partitioner lowers
_NODES: dict[int, tuple[str, tuple[int, ...]]] = {
    1: ("Add", _2X1), 2: ("FullyConnected", (_IN, _IN, _OPT, _OUT, _FLAGS)), 3: ("Softmax", _1X1),
    4: ("Sigmoid", _1X1), 5: ("StaticTranspose", (_NDIMS, _PERM, _IN, _OUT, _FLAGS)), 6: ("Clamp", _1X1),
    7: ("Conv2d", _CONV), 8: ("Div", _2X1), 9: ("StaticResizeBilinear2D", (_POSITIVE, _POSITIVE, _IN, _OUT, _FLAGS)),
    10: ("StaticConstantPad", (_DIMS, _DIMS, _FLOAT, _IN, _OUT, _FLAGS)), 11: ("AvgPooling2d", _AVG_POOL),
    12: ("Minimum", _2X1), 13: ("DepthwiseConv2d", _CONV), 14: ("MaxPooling2d", _POOL), 15: ("Multiply", _2X1),
    16: ("Subtract", _2X1), 17: ("Floor", _1X1), 18: ("Convert", _1X1), 19: ("GlobalAvgPooling2d", _1X1),
    20: ("StaticReshape", (_NDIMS, _DIMS, _IN, _OUT, _FLAGS)),
    21: ("ArgMaxPooling2d", (_SIZE,) * 4 + (_POSITIVE,) * 2 + (_IN, _OUT, _OUT, _FLAGS)),
    22: ("SquareRoot", _1X1), 23: ("Ceiling", _1X1), 24: ("Hardswish", _1X1),
    25: ("LeakyReLU", (_FLOAT, _IN, _OUT, _FLAGS)), 26: ("Maximum", _2X1), 27: ("Negate", _1X1),
    28: ("Square", _1X1), 29: ("ELU", (_FLOAT, _IN, _OUT, _FLAGS)), 30: ("Abs", _1X1), 31: ("PReLU", _2X1),
    32: ("Concatenate2", _cat(2)), 33: ("Concatenate3", _cat(3)), 34: ("Concatenate4", _cat(4)),
    35: ("StaticSlice", (_NDIMS, _DIMS, _DIMS, _IN, _OUT, _FLAGS)),
    36: ("ScaledDotProductAttention", (_IN,) * 5 + (_OUT, _FLAGS)), 37: ("BatchMatrixMultiply", _2X1),
    38: ("Concatenate5", _cat(5)), 39: ("ConvTranspose2d", _CONV), 40: ("ReciprocalSquareRoot", _1X1),
    41: ("Log", _1X1), 42: ("Gelu", _1X1), 43: ("Tanh", _1X1), 44: ("Exp", _1X1), 45: ("Sin", _1X1),
    46: ("Copy", _1X1), 47: ("Cos", _1X1),
}  # fmt: skip
# Node field kind -> the values it may take
_RANGES: dict[int, Callable[[int], bool]] = {
    _FLAGS: lambda v: not v & ~_NODE_FLAGS,
    _SIZE: lambda v: v <= _MAX_SIZE,
    _POSITIVE: lambda v: 0 < v <= _MAX_SIZE,
    _AXIS: lambda v: v < _MAX_DIMS,
    _NDIMS: lambda v: v <= _MAX_DIMS,
}
# Program.fbs tags
_INLINE, _SEGMENT = 0, 1
_TENSOR_VALUE, _DELEGATE_CALL = 5, 2


class _Bad(Exception):
    pass


def check_xnnpack_delegates(
    program: bytes, handle: BinaryIO, file_size: int, label: str, named_sizes: dict[bytes, int]
) -> None:
    """Refuse a program holding an XNNPACK delegate payload the backend could not take safely (module docstring).

    Args:
        program: The program's flatbuffer (the ``.pte`` up to its segments), its plans' indices already checked.
        handle: The open ``.pte``: payloads in segments are read from it (their header and graph only).
        file_size: The ``.pte``'s size.
        label: How messages name the file.
        named_sizes: Sizes of the named data of the program's ``.ptd`` (empty without one).

    Raises:
        UnsafeExportError: Naming the delegate and the rule it breaks.
    """
    buf = Flat(program)
    try:
        root = buf.root()
        base = _segment_base(program)
        segments = [(buf.scalar(s, 0, "<Q"), buf.scalar(s, 1, "<Q")) for s in buf.tables(root, 4, _MAX_ITEMS)]
        named = dict(named_sizes)
        for key, size in _named_sizes(buf, root, 7, segments, base, file_size).items():
            named[key] = min(named.get(key, size), size)
        for n, plan in enumerate(buf.tables(root, 1, _MAX_ITEMS)):
            delegates = buf.tables(plan, 7, _MAX_ITEMS)
            calls = _delegate_calls(buf, plan, len(delegates))
            for d, delegate in enumerate(delegates):
                if buf.string(delegate, 0) != _BACKEND:
                    continue  # the other delegates' payloads are not read here
                where = f"plan {n} delegate {d} (XNNPACK)"
                payload = _payload(buf, root, delegate, segments, base, file_size, where)
                graph, constant_size = _read_graph(handle, program, payload, where)
                try:
                    _check_graph(Flat(graph), constant_size, named, calls[d], where)
                except FlatError as exc:
                    raise _Bad(f"{where}'s graph: {exc}") from None
    except (_Bad, FlatError) as exc:
        raise UnsafeExportError(f"{label}: {exc}; refusing to load it (the program is damaged or crafted).") from None


def ptd_named_sizes(handle: BinaryIO, file_size: int, label: str) -> dict[bytes, int]:
    """The named data of a ``.ptd`` (its header already checked): key -> bytes available inside the file.

    Raises:
        UnsafeExportError: The data file's index points outside itself.
    """
    handle.seek(0)
    head = handle.read(48)
    flat_offset, flat_size, base = struct.unpack_from("<QQQ", head, 16)
    if flat_offset + flat_size > min(file_size, _MAX_INDEX):
        raise UnsafeExportError(f"{label}: its index ({flat_size} bytes at {flat_offset}) is too large or truncated.")
    handle.seek(0)
    buf = Flat(handle.read(flat_offset + flat_size))
    try:
        root = buf.root()
        segments = [(buf.scalar(s, 0, "<Q"), buf.scalar(s, 1, "<Q")) for s in buf.tables(root, 1, _MAX_ITEMS)]
        return _named_sizes(buf, root, 2, segments, base, file_size)
    except (_Bad, FlatError) as exc:
        raise UnsafeExportError(f"{label}: {exc}; refusing to load it (the data file is damaged or crafted).") from None


def _named_sizes(
    buf: Flat, root: Table, slot: int, segments: list[tuple[int, int]], base: int, file_size: int
) -> dict[bytes, int]:
    """Key -> bytes of its segment that lie inside the file, of the named data at vector ``slot`` of ``root``."""
    named: dict[bytes, int] = {}
    for item in buf.tables(root, slot, _MAX_ITEMS):
        key, index = buf.string(item, 0) or b"", buf.scalar(item, 1, "<I")
        if index >= len(segments):
            raise _Bad(f"named data {key[:64]!r} names segment {index} of {len(segments)}")
        offset, size = segments[index]
        size = max(0, min(size, file_size - base - offset))
        named[key] = min(named.get(key, size), size)
    return named


def _segment_base(program: bytes) -> int:
    """Where the segments start in the file (the extended header's segment base offset), 0 without one."""
    if len(program) >= 32 and program[8:10] == b"eh":
        return int(struct.unpack_from("<Q", program, 24)[0])
    return 0


def _delegate_calls(buf: Flat, plan: Table, delegates: int) -> list[list[list[int]]]:
    """Per delegate, the tensor sizes (bytes per element, or 0 for a non-tensor) of each call's arguments."""
    values = buf.tables(plan, 2, _MAX_ITEMS)
    calls: list[list[list[int]]] = [[] for _ in range(delegates)]
    for chain in buf.tables(plan, 5, _MAX_ITEMS):
        for instruction in buf.tables(chain, 2, _MAX_ITEMS):
            if buf.scalar(instruction, 0, "<B") != _DELEGATE_CALL:
                continue
            body = buf.child(instruction, 1)
            if body is None:
                continue
            index = buf.scalar(body, 0, "<i")
            if not 0 <= index < delegates:
                raise _Bad(f"a delegate call names delegate {index} of {delegates}")
            widths = []
            for arg in buf.ints(body, 1, "<i"):
                if not 0 <= arg < len(values):
                    raise _Bad(f"a delegate call's argument names value {arg} of {len(values)}")
                value = values[arg]
                tensor = buf.child(value, 1) if buf.scalar(value, 0, "<B") == _TENSOR_VALUE else None
                widths.append(_SCALAR_BYTES.get(buf.scalar(tensor, 0, "<b"), -1) if tensor is not None else 0)
            calls[index].append(widths)
    return calls


def _payload(
    buf: Flat, root: Table, delegate: Table, segments: list[tuple[int, int]], base: int, file_size: int, where: str
) -> tuple[str, int, int]:
    """``("file" or "program", start, size)`` of a delegate's payload, checked to lie inside it."""
    processed = buf.child(delegate, 1)
    if processed is None:
        raise _Bad(f"{where} has no payload")
    location, index = buf.scalar(processed, 0, "<B"), buf.scalar(processed, 1, "<I")
    if location == _SEGMENT:
        if index >= len(segments):
            raise _Bad(f"{where}'s payload names segment {index} of {len(segments)}")
        offset, size = segments[index]
        if base == 0 or base + offset + size > file_size:
            raise _Bad(f"{where}'s payload ({size} bytes at {base}+{offset}) passes the end of the file")
        return "file", base + offset, size
    if location == _INLINE:
        inline = buf.tables(root, 3, _MAX_ITEMS)
        if index >= len(inline):
            raise _Bad(f"{where}'s payload names inline data {index} of {len(inline)}")
        start, size = buf.vector(inline[index], 0, 1)
        return "program", start, size
    raise _Bad(f"{where}'s payload has unknown location {location}")


def _read_graph(handle: BinaryIO, program: bytes, payload: tuple[str, int, int], where: str) -> tuple[bytes, int]:
    """The graph flatbuffer of a payload (read bounded) and the size of its constant data (checked, not read)."""
    kind, start, size = payload

    def read(offset: int, length: int) -> bytes:
        if kind == "program":
            return program[start + offset : start + offset + length]
        handle.seek(start + offset)
        return handle.read(length)

    header = read(0, _HEADER_SIZE) if size >= _HEADER_SIZE else b""
    if header[4:8] != b"XH00":
        raise _Bad(f"{where}'s payload has no XNNPACK header")
    length, graph_offset, graph_size, constant_offset = struct.unpack_from("<HIII", header, 8)
    constant_size = struct.unpack_from("<Q", header, 22)[0]
    if (
        length < _HEADER_SIZE
        or graph_offset < length
        or graph_size < 8
        or graph_size > _MAX_GRAPH
        or graph_offset + graph_size > constant_offset
        or constant_offset + constant_size > size
    ):
        raise _Bad(
            f"{where}'s payload header is inconsistent (header {length} bytes, graph {graph_size} bytes at "
            f"{graph_offset}, constants {constant_size} bytes at {constant_offset}, payload {size} bytes)"
        )
    graph = read(graph_offset, graph_size)
    if len(graph) != graph_size:
        raise _Bad(f"{where}'s graph passes the end of the file")
    if graph[4:8] != b"XN01":
        raise _Bad(f"{where}'s graph has identifier {graph[4:8]!r}, not XN01")
    return graph, constant_size


class _Graph:
    """What the node checks need of a graph's values."""

    def __init__(self) -> None:
        self.dims: dict[int, int] = {}  # value id -> its number of dims
        self.ready: set[int] = set()  # constants, external inputs, outputs of nodes so far
        self.produced: set[int] = set()  # outputs of nodes so far


def _check_graph(buf: Flat, constant_size: int, named: dict[bytes, int], calls: list[list[int]], where: str) -> None:
    root = buf.root()
    num_externs = buf.scalar(root, 3, "<I")
    if num_externs > 4096:
        raise _Bad(f"{where} declares {num_externs} external values (at most 4096)")
    if buf.count(root, 6, 4) or buf.count(root, 7, 4):
        raise _Bad(f"{where} holds deprecated inline buffers")
    entries = buf.tables(root, 8, _MAX_ITEMS)  # entry 0 is reserved ("no constant"): never read
    constants = [0] + [_constant_entry(buf, entry, constant_size, named, f"{where} constant {i + 1}")
                       for i, entry in enumerate(entries[1:])]  # fmt: skip
    graph = _Graph()
    externals: set[int] = set()
    for i, value in enumerate(buf.tables(root, 2, _MAX_ITEMS)):
        _check_value(buf, value, graph, externals, (num_externs, constants, calls), f"{where} value {i}")
    for slot in (4, 5):  # the graph's input and output ids
        ids = buf.ints(root, slot)
        if len(set(ids)) != len(ids) or any(i not in graph.dims for i in ids):
            raise _Bad(f"{where}'s graph inputs/outputs {ids[:16]} repeat or name undefined values")
    for i, node in enumerate(buf.tables(root, 1, _MAX_ITEMS)):
        _check_node(buf, node, graph, f"{where} node {i}")


def _constant_entry(buf: Flat, entry: Table, constant_size: int, named: dict[bytes, int], where: str) -> int:
    """The bytes a constant-data entry provides (checked to lie inside its data)."""
    offset, size = buf.scalar(entry, 0, "<Q"), buf.scalar(entry, 1, "<Q")
    if buf.present(entry, 2):
        key = buf.string(entry, 2) or b""
        if key not in named:
            raise _Bad(f"{where} names data {key[:64]!r} the program does not hold")
        if size > named[key]:
            raise _Bad(f"{where} takes {size} bytes of data {key[:64]!r}, which holds {named[key]}")
        return size
    if offset > constant_size or size > constant_size - offset:
        raise _Bad(f"{where} ({size} bytes at {offset}) passes the end of the constant data ({constant_size} bytes)")
    return size


def _check_value(
    buf: Flat,
    value: Table,
    graph: _Graph,
    externals: set[int],
    context: tuple[int, list[int], list[list[int]]],
    where: str,
) -> None:
    num_externs, constants, calls = context
    kind, body = buf.scalar(value, 0, "<B"), buf.child(value, 1)
    if body is None or kind not in (1, 2):
        raise _Bad(f"{where} has unknown type {kind}")
    tensor = body if kind == 1 else buf.child(body, 0)
    if tensor is None:
        raise _Bad(f"{where} has no tensor")
    datatype, num_dims = buf.scalar(tensor, 0, "<h"), buf.scalar(tensor, 1, "<I")
    if datatype not in _DATATYPE_BITS or buf.scalar(tensor, 7, "<h") != 0:
        raise _Bad(f"{where} has unsupported data type {datatype}")
    if buf.count(tensor, 2, 4) > _MAX_DIMS:
        raise _Bad(f"{where} has more than {_MAX_DIMS} dims")
    dims = buf.ints(tensor, 2)
    if num_dims != len(dims) or any(d > _MAX_DIM for d in dims):
        raise _Bad(f"{where} has bad dims {dims} (declared {num_dims})")
    buffer, external, flags, vid = (buf.scalar(tensor, slot, "<I") for slot in (3, 4, 5, 6))
    if vid == _INVALID or vid in graph.dims:
        raise _Bad(f"{where} has id {vid}, invalid or already defined")
    if flags & ~(_EXTERNAL_INPUT | _EXTERNAL_OUTPUT):
        raise _Bad(f"{where} has unknown flags {flags:#x}")
    graph.dims[vid] = num_dims
    numel = math.prod(dims)
    if buffer:
        if buffer >= len(constants):
            raise _Bad(f"{where} names constant {buffer} of {len(constants)}")
        if flags:
            raise _Bad(f"{where} is both a constant and external")
        needed = (numel * _DATATYPE_BITS[datatype] + 7) // 8
        if needed > constants[buffer]:
            raise _Bad(f"{where} ({dims}) needs {needed} bytes, but its constant holds {constants[buffer]}")
        graph.ready.add(vid)
    if flags:
        _check_external(external, datatype, (num_externs, externals, calls), where)
        if flags & _EXTERNAL_INPUT:
            graph.ready.add(vid)
    elif external != _INVALID:
        raise _Bad(f"{where} has external id {external} but is not external")
    if kind == 2:
        _check_quantization(buf, body, datatype, dims, (buffer, constants), where)


def _check_external(external: int, datatype: int, context: tuple[int, set[int], list[list[int]]], where: str) -> None:
    """An external value reads or writes argument ``external`` of each call of its delegate."""
    num_externs, externals, calls = context
    if external >= num_externs or external in externals:
        raise _Bad(f"{where} has external id {external}, past {num_externs} or repeated")
    externals.add(external)
    width = _DATATYPE_BITS[datatype] // 8
    for args in calls:
        if external >= len(args):
            raise _Bad(f"{where} is external argument {external}, but the delegate call passes {len(args)}")
        if args[external] != width:
            raise _Bad(f"{where} is {width}-byte elements, but the call's argument {external} is not")


def _check_quantization(
    buf: Flat, body: Table, datatype: int, dims: list[int], data: tuple[int, list[int]], where: str
) -> None:
    """A quantized tensor's parameters cover its channels (or groups) and its scales lie in their data."""
    buffer, constants = data
    kind, params = buf.scalar(body, 1, "<B"), buf.child(body, 2)
    if params is None or kind not in (1, 2, 3, 4):
        raise _Bad(f"{where} has unknown quantization {kind}")
    if kind == 3:  # per-token dynamic: activations only
        nonbatch = buf.scalar(params, 0, "<i")
        if buffer or not 0 < nonbatch <= len(dims):
            raise _Bad(f"{where}: dynamic quantization over {nonbatch} of {len(dims)} dims")
        return
    if kind == 2:
        return  # per tensor: a scale and a zero point, checked by XNNPACK
    channel_dim = buf.scalar(params, 1, "<i")
    if not 0 <= channel_dim < len(dims):
        raise _Bad(f"{where}: channel dim {channel_dim} of {len(dims)} dims")
    if kind == 1:
        scales, scale_buffer, scale_bytes = dims[channel_dim], buf.scalar(params, 2, "<I"), 4
    else:
        group = buf.scalar(params, 2, "<i")
        if datatype != _QBINT4 or len(dims) != 2 or group <= 0 or dims[1] % group:
            raise _Bad(f"{where}: blockwise quantization of {dims} in groups of {group}")
        scales, scale_buffer, scale_bytes = dims[0] * (dims[1] // group), buf.scalar(params, 4, "<I"), 2
        if scale_buffer and buf.scalar(params, 5, "<I") != scales:
            raise _Bad(f"{where}: {buf.scalar(params, 5, '<I')} scales for {scales} groups")
    if scale_buffer:
        if scale_buffer >= len(constants) or constants[scale_buffer] < scales * scale_bytes:
            raise _Bad(f"{where}: its scales (constant {scale_buffer}) do not cover {scales} channels")
    elif buf.count(params, 0, 4) != scales:
        raise _Bad(f"{where}: {buf.count(params, 0, 4)} scales for {scales} channels")


def _check_node(buf: Flat, node: Table, graph: _Graph, where: str) -> None:
    kind, body = buf.scalar(node, 0, "<B"), buf.child(node, 1)
    if body is None or kind not in _NODES:
        raise _Bad(f"{where} has a node type ({kind}) hub_export does not load")
    name, fields = _NODES[kind]
    where = f"{where} ({name})"
    ndims, vectors, inputs = -1, [], []
    outputs: list[int] = []
    for slot, field in enumerate(fields):
        if field == _FLOAT:
            continue
        if field in (_DIMS, _PERM):
            if buf.count(body, slot, 4) > _MAX_DIMS:
                raise _Bad(f"{where}: a shape vector longer than {_MAX_DIMS}")
            vector = buf.ints(body, slot)
            if any(v > _MAX_DIM for v in vector):
                raise _Bad(f"{where}: a shape vector {vector} out of range")
            if field == _PERM and sorted(vector) != list(range(len(vector))):
                raise _Bad(f"{where}: {vector} is not a permutation")
            vectors.append(vector)
            continue
        number = buf.scalar(body, slot, "<I")
        if field in _RANGES and not _RANGES[field](number):
            raise _Bad(f"{where}: field {slot} is {number}, out of range")
        if field == _NDIMS:
            ndims = number
        elif field == _IN or (field == _OPT and number != _INVALID):
            inputs.append(number)
        elif field == _OUT:
            outputs.append(number)
    if ndims >= 0 and any(len(v) != ndims for v in vectors):
        raise _Bad(f"{where}: vectors of {[len(v) for v in vectors]} entries for {ndims} dims")
    for vid in inputs:
        if vid not in graph.ready:
            raise _Bad(f"{where} reads value {vid}, which is not defined before it")
    if kind == 10 and any(len(v) != graph.dims[inputs[0]] for v in vectors):  # paddings cover the input's dims
        raise _Bad(f"{where}: paddings of {[len(v) for v in vectors]} entries for {graph.dims[inputs[0]]} dims")
    for vid in outputs:
        if vid not in graph.dims or vid in graph.produced or vid in graph.ready:
            raise _Bad(f"{where} writes value {vid}, undefined, an input, a constant or written before")
        graph.produced.add(vid)
        graph.ready.add(vid)
