"""External weights streamed to disk while ExecuTorch lowers, so the lowering never holds them as Python bytes.

ExecuTorch 1.5.1 copies every weight it serializes into a ``bytes`` object and keeps it until the program is
written: the XNNPACK delegate's constants go to the ``NamedDataStore`` (``bytes(array)`` in
``backends/xnnpack/operators/node_visitor.py``), the constants left to the portable kernels to the emitter's
``external_constant_buffer`` (``_tensor_spec_to_evalue`` in ``exir/emit/_emitter.py``). With every weight tagged for
the ``.ptd`` file, that is a second full copy of the model's weights in memory until the ``.pte`` and ``.ptd`` are
written. Both stores also take ``FileBackedData`` (a blob kept in a file, pytorch/executorch#21626, which only the
CUDA delegate uses so far), so inside
:func:`external_weights_spilled` each externally tagged blob is written to a file as soon as it is made and the
stores keep the file: the lowering holds one weight's copy at a time, and writing the ``.ptd`` streams the files.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator
from typing import Any

from ...patches import patch_attribute

__all__ = ["external_weights_spilled"]

_REASON = "XNNPACK and the emitter keeping external weights as bytes, not FileBackedData (pytorch/executorch#21626)"


class _Spill:
    """Writes blobs to temporary files; each file lives as long as its ``FileBackedData``."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, data: bytes, sha256: bytes | None = None) -> Any:
        from executorch.exir._serialize._cord import FileBackedData

        fd, path = tempfile.mkstemp(prefix="hub_export_executorch_", suffix=".weights")
        digest = hashlib.sha256() if sha256 is None else None
        with os.fdopen(fd, "wb") as handle:
            view = memoryview(data)
            for start in range(0, len(view), 64 << 20):  # bounded writes: no second copy of a large blob
                chunk = view[start : start + (64 << 20)]
                handle.write(chunk)
                if digest is not None:
                    digest.update(chunk)
        self.count += 1
        return FileBackedData(path, cleanup=True, sha256=sha256 if digest is None else digest.digest())


@contextlib.contextmanager
def external_weights_spilled(minimum: int = 1 << 16) -> Iterator[_Spill]:
    """Inside the block, externally tagged blobs of at least ``minimum`` bytes that ExecuTorch's ``NamedDataStore``
    and emitter receive are kept in temporary files instead of memory.

    Each file is deleted when the store holding it is freed (``FileBackedData(cleanup=True)``), at the latest when
    the process exits.

    Yields:
        The spill (``count``: blobs written to files so far).
    """
    from executorch.exir._serialize._named_data_store import NamedDataStore
    from executorch.exir.emit._emitter import _Emitter

    spill = _Spill()
    add_named_data = NamedDataStore.add_named_data
    save_new_const_tensor = _Emitter._save_new_const_tensor

    def spilled_add_named_data(
        self: Any, key: str, data: Any, alignment: Any = 1, external_tag: Any = None, tensor_layout: Any = None
    ) -> None:
        if external_tag is not None and isinstance(data, bytes) and len(data) >= minimum:
            data = spill(data)
        add_named_data(self, key, data, alignment, external_tag, tensor_layout)

    def spilled_save_new_const_tensor(
        self: Any,
        spec: Any,
        buffer_data: bytes,
        hashed: str,
        allocation_info: Any = None,
        constant_tag: Any = None,
    ) -> int:
        if constant_tag is not None and isinstance(buffer_data, bytes) and len(buffer_data) >= minimum:
            external = getattr(spec.extra_tensor_info, "location", None)
            if external is not None and getattr(external, "name", "") == "EXTERNAL":
                buffer_data = spill(buffer_data, bytes.fromhex(hashed))
        return save_new_const_tensor(self, spec, buffer_data, hashed, allocation_info, constant_tag)

    with (
        patch_attribute(NamedDataStore, "add_named_data", spilled_add_named_data, reason=_REASON),
        patch_attribute(_Emitter, "_save_new_const_tensor", spilled_save_new_const_tensor, reason=_REASON),
    ):
        yield spill
