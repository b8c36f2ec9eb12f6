"""ONNX: external data must stay inside the export folder and fit its file; only standard operator domains.

The graph (at most :data:`MAX_GRAPH_BYTES`, read with its listed size as the budget) is parsed without its external
data: no weight is read. For every tensor stored externally (initializers, sparse initializers' values and indices,
tensor and sparse-tensor attributes such as ``Constant``'s, in subgraphs and functions too) the ``location`` must be
a relative path without ``..`` naming a file the manifest lists for this component (so its bytes were
sha256-verified, whether it is a plain file or a huggingface_hub cache symlink; a local folder's symlinks out are
refused by the manifest), and ``offset + length`` must not pass that file's end. Otherwise ONNX Runtime would read
any file the process can open as weights, or, for its in-memory location tag, any address. Training graphs
(``training_info``) are refused: an export has none. Operator domains other than :data:`STANDARD_ONNX_DOMAINS` need
custom kernels and are refused unless passed in ``allow_custom_domains``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from ..._bounded import read_bounded
from ...errors import UnsafeExportError
from ...formats import SafetyOptions
from ...manifest import ComponentEntry
from .config import LAYOUT

__all__ = ["STANDARD_ONNX_DOMAINS", "check"]

#: The largest ``.onnx`` graph parsed (weights of 1 KiB or more live in the external data file, never in it).
MAX_GRAPH_BYTES = 256 * 1024 * 1024
#: ONNX operator domains loaded without ``allow_custom_domains``.
STANDARD_ONNX_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft"})


def check(directory: Path, component: str, entry: ComponentEntry, options: SafetyOptions) -> None:
    """Refuse an ONNX component with escaping/oversized external data or custom operator domains.

    Raises:
        UnsafeExportError: Naming the file, the tensor and what is wrong.
    """
    import onnx

    listed = {f.path for f in entry.files}
    sizes = {f.path: f.size for f in entry.files}
    allowed = STANDARD_ONNX_DOMAINS | options.allow_custom_domains
    for file in [LAYOUT.paths(component, listed)["program"]]:
        data = read_bounded(directory / file, min(sizes[file], MAX_GRAPH_BYTES), file)
        try:
            model = onnx.load_model_from_string(data)
        except Exception as exc:  # noqa: BLE001 - protobuf decode errors have no common base
            raise UnsafeExportError(f"{file}: not a valid ONNX model ({str(exc)[:200]}).") from None
        del data
        if not model.HasField("graph") or model.ir_version <= 0:
            raise UnsafeExportError(f"{file}: not an ONNX model (no graph or IR version).")
        if len(model.training_info):
            raise UnsafeExportError(
                f"{file}: holds training graphs (training_info), which an exported model for inference never has."
            )
        base = PurePosixPath(file).parent
        for tensor in _external_tensors(model):
            _check_location(sizes, base, file, tensor, listed)
        used = {o.domain for o in model.opset_import} | {n.domain for n in _nodes(model)}
        custom = sorted(d for d in used if d not in allowed)
        if custom:
            raise UnsafeExportError(
                f"{file}: uses custom operator domain(s) {custom}, whose kernels come from native libraries. "
                f"Pass allow_custom_domains={custom} if you trust them and register their libraries yourself."
            )


def _check_location(sizes: dict[str, int], base: PurePosixPath, label: str, tensor: Any, listed: set[str]) -> None:
    info = {e.key: e.value for e in tensor.external_data}
    location = info.get("location", "")
    where = f"{label}: tensor {tensor.name!r}"
    pure = PurePosixPath(location.replace("\\", "/"))
    if not location or pure.is_absolute() or ".." in pure.parts or os.path.isabs(location) or ":" in location:
        raise UnsafeExportError(f"{where} reads external data from {location!r}, outside the export folder.")
    relative = os.path.normpath((base / pure).as_posix()).replace(os.sep, "/")
    if relative.startswith("../") or relative not in listed:
        raise UnsafeExportError(
            f"{where} reads external data from {location!r}, which export.json does not list (so it is unverified)."
        )
    try:
        offset = int(info.get("offset", "0") or 0)
        length = int(info["length"]) if "length" in info else None
    except ValueError:
        raise UnsafeExportError(f"{where} has a non-integer offset/length {info}.") from None
    if length is None:  # the runtime then reads the tensor's own byte size from offset
        length = _nbytes(tensor)
    size = sizes[relative]  # the size export.json lists, which the file was checked against
    if offset < 0 or (length is not None and length < 0) or offset + (length or 0) > size:
        raise UnsafeExportError(
            f"{where}: external data offset {offset} + length {length} passes the end of {relative} ({size} bytes)."
        )


def _nbytes(tensor: Any) -> int | None:
    import math

    from onnx.helper import tensor_dtype_to_np_dtype

    try:
        return math.prod(tensor.dims) * tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except Exception:  # noqa: BLE001 - unknown/sub-byte types: ONNX Runtime checks those itself
        return None


def _graphs(model: Any) -> Iterator[Any]:
    import onnx

    stack = [model.graph, *(f for f in model.functions)]
    while stack:
        graph = stack.pop()
        yield graph
        for node in graph.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    stack.append(attr.g)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    stack.extend(attr.graphs)


def _nodes(model: Any) -> Iterator[Any]:
    for graph in _graphs(model):
        yield from graph.node


def _tensors(model: Any) -> Iterator[Any]:
    """Every tensor of the model: initializers, the values and indices of sparse initializers, and tensor, sparse
    tensor and tensor-list attributes of every node, in the main graph, subgraphs and functions."""
    for graph in _graphs(model):
        yield from getattr(graph, "initializer", ())
        for sparse in getattr(graph, "sparse_initializer", ()):
            yield sparse.values
            yield sparse.indices
        for node in graph.node:
            for attr in node.attribute:
                if attr.HasField("t"):
                    yield attr.t
                yield from attr.tensors
                if attr.HasField("sparse_tensor"):
                    yield attr.sparse_tensor.values
                    yield attr.sparse_tensor.indices
                for sparse in attr.sparse_tensors:
                    yield sparse.values
                    yield sparse.indices


def _external_tensors(model: Any) -> Iterator[Any]:
    for tensor in _tensors(model):
        if tensor.HasField("data_location") and tensor.data_location == tensor.EXTERNAL:
            yield tensor
