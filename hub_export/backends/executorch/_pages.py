"""A reversible workaround: the ExecuTorch runtime maps a program's files without locking their pages in memory.

executorch 1.5.1's Python bindings open every file with ``MmapDataLoader::MlockConfig::UseMlockIgnoreErrors``
(``loader_from_file`` in ``extension/pybindings/pybindings.cpp``; no binding takes another mode), so each region the
runtime maps is also ``mlock``ed: in a process allowed to lock memory (``CAP_IPC_LOCK``, as root usually is, or a
large ``RLIMIT_MEMLOCK``), every constant the portable kernels read is made resident as soon as a method loads, the
whole embedding table of a language model (0.2-0.3x of its weights) included, although a call reads a few of its
rows. Elsewhere the lock fails past a few MB and the runtime goes on unlocked, which is how most processes run
(ExecuTorch's own runners moved to mapping without the lock for large models: pytorch/executorch#18398).

:func:`pages_not_locked` makes the lock fail in this thread while the runtime loads, the same way: the soft
``RLIMIT_MEMLOCK`` is lowered to 0 and ``CAP_IPC_LOCK`` is dropped from the thread's effective capabilities (it
stays permitted), then both are restored. The runtime ignores the failed lock, so the files are mapped as usual and
their pages are read on demand (and can be given back to the page cache). Retire it when the bindings take a load
mode: delete this module and its uses, then run ``tests/test_executorch.py``.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["pages_not_locked", "release_freed_heap"]

_CAP_IPC_LOCK = 14
_CAPABILITY_VERSION_3 = 0x20080522
_LIMIT_LOCK = threading.Lock()
_LIMIT: dict[str, Any] = {"depth": 0, "soft": None}  # nesting depth (all threads), and the soft limit to restore


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


@contextlib.contextmanager
def _without_lock_capability() -> Iterator[None]:
    """``CAP_IPC_LOCK`` out of this thread's effective set inside the block (nothing where it is not in it)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        capget, capset = libc.capget, libc.capset
    except (OSError, AttributeError):  # not glibc/musl on Linux: nothing to drop
        yield
        return
    header, data = _Header(_CAPABILITY_VERSION_3, 0), (_Data * 2)()
    bit = 1 << _CAP_IPC_LOCK
    if capget(ctypes.byref(header), data) != 0 or not data[0].effective & bit:
        yield
        return
    data[0].effective &= ~bit
    dropped = capset(ctypes.byref(header), data) == 0
    try:
        yield
    finally:
        if dropped:
            data[0].effective |= bit
            capset(ctypes.byref(header), data)


@contextlib.contextmanager
def _lock_limit_lowered() -> Iterator[None]:
    """The soft ``RLIMIT_MEMLOCK`` at 0 inside the block, restored when the outermost block (of any thread) ends."""
    import resource

    with _LIMIT_LOCK:
        if _LIMIT["depth"] == 0:
            soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
            try:
                resource.setrlimit(resource.RLIMIT_MEMLOCK, (0, hard))
                _LIMIT["soft"] = soft
            except (ValueError, OSError):
                _LIMIT["soft"] = None
        _LIMIT["depth"] += 1
    try:
        yield
    finally:
        with _LIMIT_LOCK:
            _LIMIT["depth"] -= 1
            if _LIMIT["depth"] == 0 and _LIMIT["soft"] is not None:
                resource.setrlimit(
                    resource.RLIMIT_MEMLOCK, (_LIMIT["soft"], resource.getrlimit(resource.RLIMIT_MEMLOCK)[1])
                )


@contextlib.contextmanager
def pages_not_locked() -> Iterator[None]:
    """Inside the block, ``mlock`` fails in this thread (see the module docstring); a no-op off Linux.

    The memory-lock limit is process-wide: another thread locking memory inside the block fails too.
    """
    if not sys.platform.startswith("linux"):
        yield
        return
    with _lock_limit_lowered(), _without_lock_capability():
        yield


def release_freed_heap() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``), a no-op elsewhere: lowering frees
    many small allocations that glibc otherwise keeps in the process, where they count until the process ends."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)
