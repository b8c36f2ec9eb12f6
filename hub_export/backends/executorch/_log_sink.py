"""A reversible workaround: ExecuTorch runtime logs bypass Python while hub_export drives the runtime.

executorch 1.5's Python bindings register a log sink (``emit_log_message`` in ``extension/pybindings/
pybindings.cpp``) that writes each runtime log line to ``std::cerr``, which every binding call redirects to
``sys.stderr`` with ``py::scoped_estream_redirect``. pybind11's ``pythonbuf`` decodes what it forwards as strict
UTF-8 (pybind/pybind11#2982 only made it wait for a multi-byte sequence split across flushes), so a log line
holding other bytes raises ``UnicodeDecodeError`` inside a ``noexcept`` function and the process is terminated.
Runtime logs quote names read from the program (operator names, XNNPACK delegate fields), so a damaged or
crafted ``.pte`` that passes flatbuffer verification aborts Python instead of raising.

:func:`runtime_logs_bypass_python` points the runtime's log slot (``PalImpl::emit_log_message`` of the table
``executorch::runtime::get_pal_impl()`` returns) at the runtime's own default sink, ``et_pal_emit_log_message``,
which ``fprintf``s the bytes to the process's stderr, and restores the bindings' sink afterwards. Retire it when
the bindings decode their log lines with ``errors="replace"``: delete this module and its uses, then run
``tests/test_executorch.py`` and the ExecuTorch variants of ``tests/test_safety_corpus.py``.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.util
import threading
from collections.abc import Iterator
from pathlib import Path

from ...errors import PatchTargetMissing

__all__ = ["runtime_logs_bypass_python"]

_REASON = (
    "executorch pybindings aborting on a log line that is not UTF-8 (scoped_estream_redirect, pybind/pybind11#2982)"
)
_GET_PAL = "_ZN10executorch7runtime12get_pal_implEv"
_DEFAULT_SINK = "et_pal_emit_log_message"
_SLOT = 4  # PalImpl: init, abort, current_ticks, ticks_to_ns_multiplier, emit_log_message, allocate, free, name
_LOCK = threading.RLock()
_STATE: dict[str, int] = {"depth": 0, "original": 0}  # nesting depth, and the bindings' sink while swapped out


@functools.cache
def _log_slot() -> tuple[ctypes.c_void_p, int]:
    """The runtime's log-sink slot and the address of its default sink.

    Raises:
        PatchTargetMissing: The runtime library or its symbols are not where executorch 1.5 has them.
    """
    import executorch.runtime  # noqa: F401 - loads the bindings, which register their sink

    spec = importlib.util.find_spec("executorch")
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    library = next((Path(root) / "lib" / "libexecutorch.so" for root in roots if (Path(root) / "lib").is_dir()), None)
    if library is None or not library.is_file():
        raise PatchTargetMissing(
            f"libexecutorch.so is not in executorch/lib; the workaround for {_REASON} needs review."
        )
    try:
        lib = ctypes.CDLL(str(library))
        get_pal = getattr(lib, _GET_PAL)
        default = ctypes.cast(getattr(lib, _DEFAULT_SINK), ctypes.c_void_p).value
    except (OSError, AttributeError) as exc:
        raise PatchTargetMissing(f"{exc}; the workaround for {_REASON} needs review.") from None
    get_pal.restype = ctypes.c_void_p
    table = get_pal()
    if not table or not default:
        raise PatchTargetMissing(f"executorch's PAL table is not readable; the workaround for {_REASON} needs review.")
    slot = ctypes.c_void_p.from_address(table + _SLOT * ctypes.sizeof(ctypes.c_void_p))
    if not slot.value:
        raise PatchTargetMissing(f"executorch's log sink slot is empty; the workaround for {_REASON} needs review.")
    return slot, default


@contextlib.contextmanager
def runtime_logs_bypass_python() -> Iterator[None]:
    """Inside the block, ExecuTorch runtime logs go to the process's stderr as bytes, never through Python.

    Raises:
        PatchTargetMissing: executorch's runtime library changed shape (see the module docstring).
    """
    slot, default = _log_slot()
    with _LOCK:
        if _STATE["depth"] == 0:
            _STATE["original"] = slot.value or 0
            slot.value = default
        _STATE["depth"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _STATE["depth"] -= 1
            if _STATE["depth"] == 0:
                slot.value = _STATE["original"]
