"""Other libraries' output while hub_export works: hidden by default, shown on request.

Exporting and loading imports and runs torch, transformers, ONNX Runtime, OpenVINO, ExecuTorch and NNCF, which print
warnings, log notices and native log lines of their own (torchao's "Failed to load", torch's ``_pytree`` notices,
"torchvision is not installed", ExecuTorch's ``[cpuinfo_utils.cpp:71] ...``): a dozen lines before a user's own
output, none of them theirs to act on. The public entry points (exporting, loading, saving, publishing, generating)
run under :func:`quiet_third_party`, which drops them while the call runs; hub_export's own warnings are shown.
``HUB_EXPORT_DEBUG=1`` or :func:`show_third_party_output` shows everything. The command line also hides what
native code writes to file descriptor 2 (``native=True``), which a library cannot do to its host process.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import re
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO, TypeVar

__all__ = [
    "debug_requested",
    "quiet_third_party",
    "quietly",
    "show_third_party_output",
    "third_party_output_shown",
]

_PACKAGE_DIR = str(Path(__file__).resolve().parent) + os.sep
_SHOW: bool | None = None
_ACTIVE = threading.local()
_F = TypeVar("_F", bound=Callable[..., Any])


def show_third_party_output(show: bool = True) -> None:
    """Show (or hide again, with ``False``) what other libraries print while hub_export works: their warnings, log
    records and native log lines (the environment variable ``HUB_EXPORT_DEBUG=1`` does the same)."""
    global _SHOW
    _SHOW = bool(show)


@contextlib.contextmanager
def third_party_output_shown() -> Iterator[None]:
    """:func:`show_third_party_output` for the block only (a ``--verbose`` command run in-process)."""
    global _SHOW
    previous, _SHOW = _SHOW, True
    try:
        yield
    finally:
        _SHOW = previous


def debug_requested() -> bool:
    """Whether everything is asked for: :func:`show_third_party_output`, else ``HUB_EXPORT_DEBUG``."""
    if _SHOW is not None:
        return _SHOW
    return os.environ.get("HUB_EXPORT_DEBUG", "").strip().lower() not in ("", "0", "false", "no")


def quietly(function: _F) -> _F:
    """Run ``function`` under :func:`quiet_third_party` (a public entry point of the library)."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with quiet_third_party():
            return function(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


@contextlib.contextmanager
def quiet_third_party(show_own: Any = None, *, native: bool = False) -> Iterator[None]:
    """Filter what other libraries print while the block runs; hub_export's own warnings still show (through
    ``show_own(message)`` when given). Nested blocks change nothing; with :func:`debug_requested`, nothing is hidden.

    * warnings raised from outside the hub_export package are dropped;
    * log records below ERROR are dropped (``logging.disable``): torchao's "Failed to load", torch's ``_pytree``
      and ``torchvision is not installed`` notices;
    * transformers' own progress bars (weight loading) are off; huggingface_hub's transfer bars are not;
    * ``sys.stderr`` drops native log lines (``[cpuinfo_utils.cpp:71] ...``): ExecuTorch's Python bindings forward
      their C++ log to ``sys.stderr`` rather than to the descriptor;
    * with ``native`` (the command line), file descriptor 2 points at a scratch file, so what native code writes
      there is not shown, while ``sys.stderr`` (Python code, progress bars, status lines) still reaches the terminal
      through a copy of the original descriptor.
    """
    if getattr(_ACTIVE, "depth", 0) or debug_requested():
        yield
        return
    _ACTIVE.depth = 1
    _ACTIVE.show_own = show_own
    try:
        with contextlib.ExitStack() as stack:
            if native:  # first: the filter of native log lines then wraps the terminal's copy of descriptor 2
                stack.enter_context(_native_stderr_hidden())
            stack.enter_context(_process_quieted())
            yield
    finally:
        _ACTIVE.depth = 0
        _ACTIVE.show_own = None


# The filters are process-wide (the warnings filters, ``logging.disable``, ``sys.stderr``, transformers' bar hook)
# while blocks run per thread: the first block to start (in any thread) installs them and the last to end restores
# what was there, so that blocks ending out of order in threads (concurrent publishes) never leave them behind.
_PROCESS_LOCK = threading.Lock()
_PROCESS_BLOCKS = 0
_PROCESS_STACK: contextlib.ExitStack | None = None


@contextlib.contextmanager
def _process_quieted() -> Iterator[None]:
    global _PROCESS_BLOCKS, _PROCESS_STACK
    with _PROCESS_LOCK:
        if _PROCESS_BLOCKS == 0:
            stack = contextlib.ExitStack()
            try:
                _install_filters(stack)
            except BaseException:
                stack.close()
                raise
            _PROCESS_STACK = stack
        _PROCESS_BLOCKS += 1
    try:
        yield
    finally:
        with _PROCESS_LOCK:
            _PROCESS_BLOCKS -= 1
            if _PROCESS_BLOCKS == 0 and _PROCESS_STACK is not None:
                stack, _PROCESS_STACK = _PROCESS_STACK, None
                stack.close()


def _install_filters(stack: contextlib.ExitStack) -> None:
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("default")  # each distinct warning once, then ours are shown and theirs dropped
    original = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001 - stdlib hook
        if not str(filename).startswith(_PACKAGE_DIR):
            return
        show_own = getattr(_ACTIVE, "show_own", None)  # the thread's own block decides where ours go
        if show_own is None:
            original(message, category, filename, lineno, file, line)
        else:
            show_own((str(message).strip().splitlines() or [category.__name__])[0])

    warnings.showwarning = showwarning
    previous_disable = logging.root.manager.disable
    logging.disable(logging.WARNING)
    stack.callback(logging.disable, previous_disable)
    stack.enter_context(_transformers_bars_off())
    stack.enter_context(_native_log_lines_dropped())


@contextlib.contextmanager
def _transformers_bars_off() -> Iterator[None]:
    """transformers' bars off through its public hook, leaving huggingface_hub's (``disable_progress_bar()`` would
    turn both off)."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - transformers is a dependency
        yield
        return

    def silent(factory: Any, args: tuple, kwargs: dict) -> Any:
        return factory(*args, **{**kwargs, "disable": True})

    previous = getattr(hf_logging, "_tqdm_hook", None)
    hf_logging.set_tqdm_hook(silent)
    try:
        yield
    finally:
        hf_logging.set_tqdm_hook(previous)


@contextlib.contextmanager
def _native_stderr_hidden() -> Iterator[None]:
    """Point file descriptor 2 at a scratch file; keep ``sys.stderr`` on the original terminal (see above)."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no descriptor 2 (embedded interpreter): nothing to hide
        yield
        return
    stream = sys.stderr
    try:
        uses_fd2 = stream.fileno() == 2
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        uses_fd2 = False  # pytest's capture or another replacement: Python writes never reach descriptor 2
    replacement = None
    if uses_fd2:
        replacement = os.fdopen(
            os.dup(saved),
            "w",
            buffering=1,
            encoding=getattr(stream, "encoding", None) or "utf-8",
            errors=getattr(stream, "errors", None) or "backslashreplace",
        )
        sys.stderr = replacement
    with tempfile.TemporaryFile(prefix="hub-export-native-") as scratch:
        os.dup2(scratch.fileno(), 2)
        try:
            yield
        finally:
            if replacement is not None:
                replacement.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if replacement is not None:
                sys.stderr = stream
                replacement.close()


#: A line of a native library's log as forwarded to Python: ``[cpuinfo_utils.cpp:71] Reading file ...``.
_NATIVE_LOG_LINE = re.compile(r"\[[\w./-]+\.(?:c|cc|cpp|cxx|h|hpp|mm?):\d+\] ")


class _NativeLogFilter(io.TextIOBase):
    """A text stream passing everything to ``stream`` except whole lines that look like a native log line."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self._stream = stream
        self._pending = ""  # the start of a line that began with "[", held until its newline

    def write(self, text: str) -> int:
        data, self._pending = self._pending + text, ""
        out = []
        while data:
            newline = data.find("\n")
            if data.startswith("[") and newline < 0:
                self._pending = data  # decide once the line is complete
                break
            line, data = (data, "") if newline < 0 else (data[: newline + 1], data[newline + 1 :])
            if not (line.startswith("[") and _NATIVE_LOG_LINE.match(line)):
                out.append(line)
        if out:
            self._stream.write("".join(out))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def close_pending(self) -> None:
        """Write a held partial line that turned out not to be a log line."""
        if self._pending and not _NATIVE_LOG_LINE.match(self._pending):
            self._stream.write(self._pending)
        self._pending = ""

    def isatty(self) -> bool:
        return bool(getattr(self._stream, "isatty", lambda: False)())

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._stream, "encoding", None) or "utf-8"


@contextlib.contextmanager
def _native_log_lines_dropped() -> Iterator[None]:
    stream = sys.stderr
    filtered = _NativeLogFilter(stream)
    sys.stderr = filtered
    try:
        yield
    finally:
        filtered.close_pending()
        if sys.stderr is filtered:
            sys.stderr = stream
