"""Large ONNX initializers: never a second copy in Python while exporting, written once per export.

The torch exporter's initializers are ``TorchTensor`` views of the model's own parameters. Three things here keep
it that way at the size of real models:

* :func:`keep_large_weights` tells onnxscript's optimizer not to constant-fold a ``Transpose`` of a large
  initializer: folding it computes the transposed copy of every linear weight in memory, in numpy, at once.
* :func:`fold_weight_transposes` then folds those transposes lazily: the initializer becomes a
  :class:`TransposedTensor`, whose bytes are computed one tensor at a time when the file is written (so the file
  holds the layout ``MatMul`` wants and ONNX Runtime loads it as it is). A weight that something else reads too
  (a tied embedding: ``Gather`` and the output projection) keeps its runtime ``Transpose``, so it is stored once.
* :func:`write_programs` writes the external data of one or several graphs: each tensor is streamed from the
  memory it lives in to its file (hashing the file as it is written), and a tensor several components use (the
  weights of ``prefill`` and ``decode``) is written once, into a data file every one of them reads.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from ..._files import HashingWriter

__all__ = [
    "EXTERNAL_MIN_BYTES",
    "ConcatenatedTensor",
    "TransposedTensor",
    "WidenedTensor",
    "fold_weight_transposes",
    "keep_large_weights",
    "large_initializers",
    "tensor_key",
    "unique_initializer_name",
    "write_programs",
    "zero_copy_array",
]

#: Initializers of at least this many bytes go to the external data file.
EXTERNAL_MIN_BYTES = 1024
#: Elements above which a ``Transpose`` of an initializer is folded lazily rather than by the optimizer.
_FOLD_MIN_ELEMENTS = 8192
#: Tensors of more than 1 MiB start at a 64 KiB-aligned offset (ONNX Runtime can map them from the file).
_ALIGN, _ALIGN_OVER = 65536, 1 << 20


def keep_large_weights(node: Any) -> bool | None:
    """onnxscript's ``should_fold`` policy: never fold a ``Transpose`` of a large initializer (see module docstring);
    None leaves every other node to the optimizer's own rules."""
    if node.op_type == "Transpose" and node.domain in ("", "ai.onnx") and node.inputs:
        source = node.inputs[0]
        tensor = source.const_value if source is not None else None
        if tensor is not None and tensor.size > _FOLD_MIN_ELEMENTS:
            return False
    return None


def _lazy_tensor_class() -> Any:
    import onnx_ir as ir

    class _Transposed(ir.LazyTensor):
        """The transpose of ``source`` by ``perm``, computed each time its bytes are read (never cached)."""

        def __init__(self, source: Any, perm: tuple[int, ...], name: str) -> None:
            self.source = source
            self.perm = perm
            shape = ir.Shape([source.shape[p] for p in perm])
            super().__init__(self._compute, dtype=source.dtype, shape=shape, name=name)

        def _compute(self) -> Any:
            import numpy as np

            computed = torch_array(self)
            if computed is None:
                computed = np.ascontiguousarray(self.source.numpy().transpose(self.perm))
            return ir.Tensor(computed, dtype=self.source.dtype, name=self.name)

    return _Transposed


_TRANSPOSED: Any = None
_CONCATENATED: Any = None
_WIDENED: Any = None


def _widened_class() -> Any:
    import onnx_ir as ir

    class _Widened(ir.LazyTensor):
        """``source`` (bfloat16) as float32, computed each time its bytes are read (never cached)."""

        def __init__(self, source: Any, name: str) -> None:
            self.source = source
            super().__init__(self._compute, dtype=ir.DataType.FLOAT, shape=source.shape, name=name)

        def _compute(self) -> Any:
            import numpy as np

            computed = torch_array(self)
            if computed is None:
                computed = self.source.numpy().astype(np.float32)
            return ir.Tensor(computed, name=self.name)

    return _Widened


def WidenedTensor(source: Any, name: str) -> Any:  # noqa: N802 - a class factory
    """An ``onnx_ir`` lazy tensor holding the bfloat16 ``source`` as float32 (computed on every read, never kept):
    the weights of a bfloat16 graph computed in float32 (:mod:`._widen`)."""
    global _WIDENED
    if _WIDENED is None:
        _WIDENED = _widened_class()
    return _WIDENED(source, name)


def _is_widened(tensor: Any) -> bool:
    return _WIDENED is not None and isinstance(tensor, _WIDENED)


def _concatenated_class() -> Any:
    import onnx_ir as ir

    class _Concatenated(ir.LazyTensor):
        """``sources`` concatenated along ``axis``, computed each time its bytes are read (never cached)."""

        def __init__(self, sources: list[Any], axis: int, name: str) -> None:
            self.sources, self.axis = list(sources), axis
            dims = [int(d) for d in sources[0].shape]
            dims[axis] = sum(int(s.shape[axis]) for s in sources)
            super().__init__(self._compute, dtype=sources[0].dtype, shape=ir.Shape(dims), name=name)

        def _compute(self) -> Any:
            import numpy as np

            computed = torch_array(self)
            if computed is None:
                computed = np.concatenate([s.numpy() for s in self.sources], self.axis)
            return ir.Tensor(computed, dtype=self.dtype, name=self.name)

    return _Concatenated


def ConcatenatedTensor(sources: list[Any], axis: int, name: str) -> Any:  # noqa: N802 - a class factory
    """An ``onnx_ir`` lazy tensor holding ``sources`` concatenated along ``axis`` (computed on every read, never
    kept): packed projection weights (:func:`._fusion_rules.pack_projections`) cost no memory until written."""
    global _CONCATENATED
    if _CONCATENATED is None:
        _CONCATENATED = _concatenated_class()
    return _CONCATENATED(sources, axis, name)


def TransposedTensor(source: Any, perm: tuple[int, ...], name: str) -> Any:  # noqa: N802 - a class factory
    """An ``onnx_ir`` lazy tensor holding ``source`` transposed by ``perm`` (computed on every read, never kept)."""
    global _TRANSPOSED
    if _TRANSPOSED is None:
        _TRANSPOSED = _lazy_tensor_class()
    return _TRANSPOSED(source, tuple(perm), name)


def is_transposed(tensor: Any) -> bool:
    """Whether ``tensor`` is a :func:`TransposedTensor`."""
    return _TRANSPOSED is not None and isinstance(tensor, _TRANSPOSED)


def fold_weight_transposes(model: Any) -> int:
    """Replace each ``Transpose`` of a large initializer read by nothing else with a lazily transposed initializer;
    returns how many were folded."""
    import onnx_ir as ir

    graph = model.graph
    folded = 0
    for node in list(graph):
        if node.op_type != "Transpose" or node.domain not in ("", "ai.onnx") or not node.inputs:
            continue
        source, output = node.inputs[0], node.outputs[0]
        tensor = source.const_value if source is not None else None
        if (
            tensor is None
            or not source.is_initializer()
            or tensor.size <= _FOLD_MIN_ELEMENTS
            or len(source.uses()) != 1
            or source.is_graph_output()
            or output.is_graph_output()
        ):
            continue
        attribute = node.attributes.get("perm")
        perm = tuple(attribute.as_ints()) if attribute is not None else tuple(reversed(range(len(tensor.shape))))
        name = unique_initializer_name(graph, f"{source.name}.T")
        transposed = TransposedTensor(tensor, perm, name)
        value = ir.Value(name=name, const_value=transposed)
        value.shape, value.type = transposed.shape, ir.TensorType(tensor.dtype)
        graph.register_initializer(value)
        ir.convenience.replace_all_uses_with(output, value)
        graph.remove(node, safe=True)
        graph.initializers.pop(source.name)
        folded += 1
    return folded


def unique_initializer_name(graph: Any, name: str) -> str:
    """``name``, or ``name`` with the first number appended that no initializer of ``graph`` uses yet."""
    candidate, n = name, 0
    while candidate in graph.initializers:
        n += 1
        candidate = f"{name}{n}"
    return candidate


def large_initializers(model: Any) -> Iterator[Any]:
    """Every initializer value (all graphs) of at least :data:`EXTERNAL_MIN_BYTES` whose bytes are addressable."""
    for graph in model.graphs():
        for value in graph.initializers.values():
            tensor = value.const_value
            if tensor is not None and tensor.nbytes >= EXTERNAL_MIN_BYTES:
                yield value


def tensor_key(tensor: Any) -> tuple[Any, ...]:
    """What identifies a tensor's bytes without reading them, where possible: the torch storage it views, the
    tensor it transposes, the file range it maps; else a digest of its bytes."""
    import onnx_ir as ir

    raw = getattr(tensor, "raw", None)
    if _is_torch(raw):
        return (
            "torch",
            raw.untyped_storage().data_ptr(),
            raw.storage_offset(),
            str(raw.dtype),
            tuple(raw.shape),
            tuple(raw.stride()),
        )
    if is_transposed(tensor):
        return ("transpose", tensor_key(tensor.source), tensor.perm)
    if _CONCATENATED is not None and isinstance(tensor, _CONCATENATED):
        return ("concatenate", tuple(tensor_key(s) for s in tensor.sources), tensor.axis)
    if _is_widened(tensor):
        return ("widen", tensor_key(tensor.source))
    if isinstance(tensor, ir.ExternalTensor):
        return ("file", os.path.realpath(tensor.path), tensor.offset, tensor.length, str(tensor.dtype))
    return ("bytes", str(tensor.dtype), tuple(tensor.shape), hashlib.sha256(tensor.tobytes()).hexdigest())


def _is_torch(value: Any) -> TypeGuard[Any]:
    return type(value).__module__.startswith("torch") and hasattr(value, "untyped_storage")


def _torch_view(tensor: Any) -> tuple[Any, Any] | None:
    """A torch view of the parameter ``tensor`` reads (transposes applied as views) and the dtype its bytes are in
    (widening only changes that), or None when it is not made of one parameter."""
    import torch

    raw = getattr(tensor, "raw", None)
    if _is_torch(raw):
        return raw.detach(), raw.dtype
    if is_transposed(tensor):
        made = _torch_view(tensor.source)
        return None if made is None else (made[0].permute(tensor.perm), made[1])
    if _is_widened(tensor):
        made = _torch_view(tensor.source)
        return None if made is None else (made[0], torch.float32)
    return None


def torch_array(tensor: Any) -> Any | None:
    """A lazy tensor's bytes computed in torch from the parameters it is made of, as a numpy array (bfloat16 as
    ``ml_dtypes``'), or None when it is not made of them. One copy in the target layout and dtype (torch transposes
    and widens bfloat16 in one pass, many times faster than numpy with ``ml_dtypes``' bfloat16)."""
    import torch

    if _CONCATENATED is not None and isinstance(tensor, _CONCATENATED):
        parts = [_torch_view(s) for s in tensor.sources]
        if any(p is None for p in parts):
            return None
        out = torch.empty([int(d) for d in tensor.shape], dtype=parts[0][1])  # type: ignore[index]
        offset = 0
        for view, _ in parts:  # type: ignore[misc]
            out.narrow(tensor.axis, offset, view.shape[tensor.axis]).copy_(view)
            offset += view.shape[tensor.axis]
    else:
        made = _torch_view(tensor)
        if made is None:
            return None
        out = torch.empty(made[0].shape, dtype=made[1])
        out.copy_(made[0])
    if out.dtype == torch.bfloat16:
        import ml_dtypes

        return out.view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
    return out.numpy()


def zero_copy_array(tensor: Any) -> Any | None:
    """A contiguous uint8 numpy view of the tensor's memory (a file's tensor: its mapped pages), or None when it has
    no such memory (it is computed, or its type packs several values a byte)."""
    import numpy as np
    import onnx_ir as ir

    if tensor.dtype.bitwidth < 8 or is_transposed(tensor):
        return None
    if isinstance(tensor, ir.ExternalTensor):
        array = tensor.numpy()
        return array.reshape(-1).view(np.uint8) if array.flags.c_contiguous else None
    raw = getattr(tensor, "raw", None)
    if _is_torch(raw):
        import torch

        if raw.device.type != "cpu" or not raw.is_contiguous():
            return None
        return raw.detach().reshape(-1).view(torch.uint8).numpy()
    if isinstance(raw, np.ndarray) and raw.flags.c_contiguous:
        return raw.reshape(-1).view(np.uint8)
    return None


def _chunks(tensor: Any) -> Iterator[Any]:
    """The tensor's bytes as buffers: a view of its memory when it has one, else its computed bytes."""
    array = zero_copy_array(tensor)
    if array is not None:
        yield array
        return
    if tensor.dtype.bitwidth < 8:
        yield tensor.tobytes()
        return
    import numpy as np

    yield np.ascontiguousarray(tensor.numpy()).reshape(-1).view(np.uint8)


@dataclass
class _DataFile:
    """One external data file, opened when its first tensor (or :meth:`close` of an empty one) comes."""

    path: Path
    written: dict[tuple[Any, ...], tuple[int, int]] = field(default_factory=dict)
    writer: HashingWriter | None = None

    @property
    def name(self) -> str:
        return self.path.name

    def add(self, key: tuple[Any, ...], tensor: Any) -> tuple[int, int]:
        if key in self.written:
            return self.written[key]
        if self.writer is None:
            self.writer = HashingWriter(self.path)
        offset = self.writer.tell()
        if tensor.nbytes > _ALIGN_OVER and offset % _ALIGN:
            self.writer.write(b"\0" * (_ALIGN - offset % _ALIGN))
            offset = self.writer.tell()
        for chunk in _chunks(tensor):
            self.writer.write(chunk)
        self.written[key] = (offset, self.writer.tell() - offset)
        return self.written[key]

    def close(self, *, create: bool = False) -> None:
        """Close the file; ``create`` writes an empty one if no tensor came."""
        if self.writer is None and create:
            self.writer = HashingWriter(self.path)
        if self.writer is not None:
            self.writer.close()


@contextmanager
def _swapped(values: list[Any], tensors: list[Any]) -> Iterator[None]:
    """Give ``values`` these ``const_value`` tensors for the duration of the block, then their own back."""
    originals = [v.const_value for v in values]
    try:
        for value, tensor in zip(values, tensors):
            value.const_value = tensor
        yield
    finally:
        for value, tensor in zip(values, originals):
            value.const_value = tensor


def write_programs(
    programs: dict[str, Any], directory: Path, files: dict[str, tuple[str, str]], shared: str
) -> dict[str, list[str]]:
    """Write several graphs of one export, each large tensor once.

    Args:
        programs: Component name -> ``onnx_ir.Model``.
        directory: The export folder.
        files: Component name -> (its ``.onnx``, its own data file).
        shared: The data file holding the tensors several components read.

    Returns:
        Component name -> the files it reads, its ``.onnx`` first.
    """
    directory = Path(directory)
    keys: dict[str, list[tuple[Any, Any]]] = {}
    users: dict[tuple[Any, ...], set[str]] = {}
    for name, model in programs.items():
        keys[name] = [(value, tensor_key(value.const_value)) for value in large_initializers(model)]
        for _, key in keys[name]:
            users.setdefault(key, set()).add(name)
    shared_file = _DataFile(directory / shared)
    written: dict[str, list[str]] = {}
    try:
        for name, model in programs.items():
            main, own_name = files[name]
            own = _DataFile(directory / own_name)
            try:
                targets = [shared_file if len(users[key]) > 1 else own for _, key in keys[name]]
                placed = [
                    _external(value, target, target.add(key, value.const_value), directory)
                    for (value, key), target in zip(keys[name], targets)
                ]
                reads_shared = shared_file in targets
            finally:
                own.close()
            if own.writer is None and not reads_shared:  # a graph with no external data lists an empty data file
                own.close(create=True)
            with _swapped([value for value, _ in keys[name]], placed):
                _save_graph(model, directory / main)
            written[name] = [main, *([own_name] if own.writer is not None else []), *([shared] if reads_shared else [])]
    finally:
        shared_file.close()
    return written


def _external(value: Any, target: _DataFile, placement: tuple[int, int], directory: Path) -> Any:
    import onnx_ir as ir

    tensor = value.const_value
    offset, length = placement
    return ir.ExternalTensor(
        target.name, offset, length, tensor.dtype, shape=tensor.shape, name=value.name, base_dir=str(directory)
    )


def _save_graph(model: Any, path: Path) -> None:
    """The graph (its large tensors already external) as ``path``, hashed as it is written."""
    import onnx_ir as ir

    proto = ir.serde.serialize_model(model)
    with HashingWriter(path) as out:
        out.write(proto.SerializeToString())
