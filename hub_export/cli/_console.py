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
import json
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from .._quiet import debug_requested, quiet_third_party, third_party_output_shown

__all__ = ["Console", "debug_requested", "quiet_third_party"]


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

    def error(self, prog: str, message: str, exit_code: int = 1) -> None:
        """The one error line: ``hub-export CMD: error: message`` (in GitHub Actions, an ``::error::`` annotation,
        which the run's page shows even when the line is inside a collapsed log group); with ``--json`` also
        ``{"error": message, "exit_code": n}`` on stdout, so that a script reading stdout sees the failure."""
        self._close_line()
        if self.as_json:
            self.out.write(json.dumps({"error": message, "exit_code": exit_code}, sort_keys=True) + "\n")
            self.out.flush()
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
            if self.verbose:  # the library's entry points show everything too, while the command runs
                stack.enter_context(third_party_output_shown())
            else:
                stack.enter_context(quiet_third_party(self.warn, native=True))
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
