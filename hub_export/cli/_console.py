"""What the command line shows: results on stdout, one status line per long stage on stderr, nothing else.

* **Results** go to stdout: a few human lines, only the essential ones with ``--quiet`` (the path, the commit URL),
  or one JSON object with ``--json``.
* **Stages** the library announces (:mod:`hub_export._progress`: tracing, lowering, saving, uploading,
  downloading) print one line each on stderr with their duration. On a terminal, with progress bars enabled, the
  stage's name shows while it runs; huggingface_hub's own upload and download bars show as usual.
  ``HF_HUB_DISABLE_PROGRESS_BARS=1`` keeps the lines and drops the live part; ``--quiet`` drops both.
* **Third-party noise** is filtered while hub_export works (:func:`quiet_third_party`): warnings not raised by
  hub_export, log records below ERROR, transformers' weight-loading bars, what native code writes to file
  descriptor 2, and native log lines forwarded to ``sys.stderr`` (ExecuTorch's ``[cpuinfo_utils.cpp:71] ...``).
  ``--verbose`` or ``HUB_EXPORT_DEBUG=1`` shows all of it, and the traceback of an error.
* **Errors** are one line (:meth:`Console.error`); in GitHub Actions an ``::error::`` annotation.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

__all__ = ["Console", "debug_requested", "quiet_third_party"]

_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent) + os.sep


def debug_requested() -> bool:
    """Whether ``HUB_EXPORT_DEBUG`` asks for everything (tracebacks, third-party output)."""
    return os.environ.get("HUB_EXPORT_DEBUG", "").strip().lower() not in ("", "0", "false", "no")


def _progress_bars_enabled() -> bool:
    from huggingface_hub.utils import are_progress_bars_disabled

    return not are_progress_bars_disabled()


class Console:
    """The output of one command (see the module docstring).

    Args:
        quiet: Print only the essential result lines; no stage lines, no progress bars.
        verbose: Show third-party output and tracebacks.
        as_json: Print the result as one JSON object on stdout instead of lines.
        stdout: Where results go (default ``sys.stdout`` at the time of writing).
        stderr: Where stage lines and errors go (default ``sys.stderr`` at the time of writing).
    """

    def __init__(
        self,
        *,
        quiet: bool = False,
        verbose: bool = False,
        as_json: bool = False,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
    ) -> None:
        self.quiet, self.verbose, self.as_json = quiet, verbose, as_json
        self._stdout, self._stderr = stdout, stderr
        self._open_line = False  # a live stage name is on the terminal, without its newline yet

    @property
    def out(self) -> TextIO:
        return self._stdout or sys.stdout

    @property
    def err(self) -> TextIO:
        return self._stderr or sys.stderr

    # -- results ----------------------------------------------------------------------------------------------
    def line(self, text: str) -> None:
        """A human result line (not shown with ``--quiet`` or ``--json``)."""
        if not (self.quiet or self.as_json):
            self._close_line()
            print(text, file=self.out, flush=True)

    def result(self, data: dict[str, Any], essential: Sequence[str] = ()) -> None:
        """The command's result: ``data`` as one JSON object with ``--json``; the ``essential`` lines with
        ``--quiet`` (the human lines were printed by :meth:`line` already)."""
        if self.as_json:
            self.out.write(json.dumps(data, default=str, sort_keys=True) + "\n")
            self.out.flush()
        elif self.quiet:
            for text in essential:
                print(text, file=self.out, flush=True)

    def warn(self, text: str) -> None:
        """A warning line on stderr (shown unless ``--quiet``)."""
        if not self.quiet:
            self._close_line()
            print(f"warning: {text}", file=self.err, flush=True)

    def error(self, prog: str, message: str) -> None:
        """The one error line: ``hub-export CMD: error: message`` (in GitHub Actions, an ``::error::`` annotation,
        which the run's page shows even when the line is inside a collapsed log group)."""
        self._close_line()
        if os.environ.get("GITHUB_ACTIONS") == "true":
            print(f"::error title={prog}::{message.replace('%', '%25')}", file=self.err, flush=True)
        else:
            print(f"{prog}: error: {message}", file=self.err, flush=True)

    # -- stages (a hub_export._progress.StageListener) -----------------------------------------------------------
    def started(self, name: str) -> None:
        """Show the stage's name while it runs (terminal with progress bars only)."""
        if self.quiet or not self._live():
            return
        self._close_line()
        self.err.write(f"{name} ...")
        self.err.flush()
        self._open_line = True

    def finished(self, name: str, seconds: float, failed: bool) -> None:
        """One line: the stage and its duration (none when it failed: the error line follows)."""
        if self.quiet:
            return
        if self._open_line:
            self.err.write("\r\x1b[K")  # replace the live line (or whatever a progress bar left there)
            self._open_line = False
        if not failed:
            self.err.write(f"{name} ... {_duration(seconds)}\n")
        self.err.flush()

    def _live(self) -> bool:
        isatty = getattr(self.err, "isatty", None)
        return bool(isatty and isatty()) and _progress_bars_enabled()

    def _close_line(self) -> None:
        if self._open_line:
            self.err.write("\n")
            self._open_line = False

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """Run a command: stages reported here, third-party noise filtered (unless verbose), no bars if quiet."""
        from .._progress import listen

        with contextlib.ExitStack() as stack:
            if self.quiet:
                stack.enter_context(_progress_bars_disabled())
            if not self.verbose:
                stack.enter_context(quiet_third_party(self.warn))
            stack.enter_context(listen(self))
            yield


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest:02d} s"


@contextlib.contextmanager
def _progress_bars_disabled() -> Iterator[None]:
    """huggingface_hub's bars off for the block (it warns, and keeps them, when HF_HUB_DISABLE_PROGRESS_BARS=0)."""
    from huggingface_hub.utils import disable_progress_bars

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bars_off = disable_progress_bars()
    with bars_off:
        yield


# -- third-party noise -----------------------------------------------------------------------------------------
@contextlib.contextmanager
def quiet_third_party(show_own: Any = None) -> Iterator[None]:
    """Filter what other libraries print while the block runs; hub_export's own warnings still reach ``show_own``.

    * warnings raised from outside the hub_export package are dropped (``show_own(message)`` gets ours, default:
      dropped too);
    * log records below ERROR are dropped (``logging.disable``): torchao's "Failed to load", torch's ``_pytree``
      and ``torchvision is not installed`` notices;
    * transformers' own progress bars (weight loading) are off; huggingface_hub's transfer bars are not;
    * file descriptor 2 points at a scratch file, so what native code writes there is not shown, while
      ``sys.stderr`` (Python code, progress bars, our status lines) still reaches the terminal through a copy of
      the original descriptor;
    * ``sys.stderr`` drops native log lines (``[cpuinfo_utils.cpp:71] ...``): ExecuTorch's Python bindings forward
      their C++ log to ``sys.stderr`` rather than to the descriptor.
    """
    previous_disable = logging.root.manager.disable
    with contextlib.ExitStack() as stack:
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("default")  # each distinct warning once, then ours are shown and theirs dropped

        def showwarning(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001 - stdlib hook
            if show_own is not None and str(filename).startswith(_PACKAGE_DIR):
                show_own((str(message).strip().splitlines() or [category.__name__])[0])

        warnings.showwarning = showwarning
        logging.disable(logging.WARNING)
        stack.callback(logging.disable, previous_disable)
        stack.enter_context(_transformers_bars_off())
        stack.enter_context(_native_stderr_hidden())
        stack.enter_context(_native_log_lines_dropped())
        yield


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
