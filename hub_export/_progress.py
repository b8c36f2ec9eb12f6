"""Stages of long operations, announced by the library and shown by whoever listens.

The library never prints. It wraps each long stage (loading, tracing, lowering, saving, uploading,
downloading) in ``with stage("tracing"):``; with no listener that costs nothing. A front end (the
``hub-export`` command line, the demo) installs a :class:`StageListener` with :func:`listen` and is told when
each stage starts and how long it took.

Example::

    class Printer:
        def started(self, name):
            pass

        def finished(self, name, seconds, failed):
            print(f"{name} {seconds:.1f} s")

    with listen(Printer()):
        exporter.export(model, inputs)  # prints "tracing 2.1 s", "lowering to onnx 3.0 s", ...
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol

__all__ = ["StageListener", "listen", "stage"]


class StageListener(Protocol):
    """Receives the stages of long operations (see the module docstring)."""

    def started(self, name: str) -> None:
        """A stage named ``name`` (``"tracing"``, ``"uploading to me/tiny"``) starts."""

    def finished(self, name: str, seconds: float, failed: bool) -> None:
        """The stage ended after ``seconds``; ``failed`` when it raised."""


_listener: ContextVar[StageListener | None] = ContextVar("hub_export_stage_listener", default=None)


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Announce a long stage to the installed listener, if any (stages do not nest: one ends before the next)."""
    listener = _listener.get()
    if listener is None:
        yield
        return
    listener.started(name)
    start = time.perf_counter()
    failed = True
    try:
        yield
        failed = False
    finally:
        listener.finished(name, time.perf_counter() - start, failed)


@contextmanager
def listen(listener: StageListener | None) -> Iterator[None]:
    """Install ``listener`` for the stages announced inside the block (None: none)."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)
