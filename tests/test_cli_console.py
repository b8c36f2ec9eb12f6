"""hub_export/cli/_console.py: stage lines, the live line on a terminal, HF_HUB_DISABLE_PROGRESS_BARS, --quiet and
--json, and the filter that keeps other libraries' warnings, logs and native lines off the screen."""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import warnings

import pytest

from hub_export._progress import listen, stage
from hub_export._quiet import _NativeLogFilter, quiet_third_party
from hub_export.cli._console import Console


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _stages(console: Console) -> None:
    with listen(console):
        with stage("tracing"):
            pass
        with pytest.raises(ValueError), stage("lowering to onnx"):
            raise ValueError("boom")


def test_a_stage_is_one_line_with_its_duration_and_a_failed_one_leaves_the_error_to_say_why():
    err = io.StringIO()
    _stages(Console(stderr=err, stdout=io.StringIO()))
    assert err.getvalue() == "tracing ... 0.0 s\n"


def test_on_a_terminal_the_stage_shows_while_it_runs_unless_progress_bars_are_disabled(monkeypatch):
    import importlib

    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    tqdm_module = importlib.import_module("huggingface_hub.utils.tqdm")
    monkeypatch.setattr(tqdm_module, "HF_HUB_DISABLE_PROGRESS_BARS", None)  # the test session sets it
    enable_progress_bars()
    err = _Terminal()
    _stages(Console(stderr=err, stdout=io.StringIO()))
    assert err.getvalue() == "tracing ...\r\x1b[Ktracing ... 0.0 s\n" + "lowering to onnx ...\r\x1b[K"
    disable_progress_bars()  # what HF_HUB_DISABLE_PROGRESS_BARS=1 does
    try:
        err = _Terminal()
        _stages(Console(stderr=err, stdout=io.StringIO()))
        assert err.getvalue() == "tracing ... 0.0 s\n"
    finally:
        enable_progress_bars()


def test_quiet_prints_only_the_essential_lines_and_json_one_object():
    out, err = io.StringIO(), io.StringIO()
    console = Console(quiet=True, stdout=out, stderr=err)
    _stages(console)
    console.line("committed abc: http://hub/commit/abc")
    console.result({"commit_url": "http://hub/commit/abc"}, essential=["http://hub/commit/abc"])
    assert (out.getvalue(), err.getvalue()) == ("http://hub/commit/abc\n", "")
    out = io.StringIO()
    console = Console(as_json=True, stdout=out, stderr=io.StringIO())
    console.line("a human line")
    console.result({"path": "/x", "files": 2}, essential=["/x"])
    assert json.loads(out.getvalue()) == {"path": "/x", "files": 2}


def test_other_libraries_are_silenced_and_our_warnings_shown(capfd, caplog):
    own = []
    logger = logging.getLogger("some.library")
    with quiet_third_party(own.append, native=True):
        warnings.warn("LeafSpec is deprecated", FutureWarning, stacklevel=1)  # from this test file: not ours
        logger.warning("Failed to load something")
        os.write(2, b"[cpuinfo_utils.cpp:71] Reading file /sys/devices/soc0/image_version\n")  # native, on fd 2
        sys.stderr.write("[cpuinfo_utils.cpp:87] Failed to open midr file\n")  # native, forwarded to sys.stderr
        sys.stderr.write("uploading ... 1.0 s\n")
        from hub_export._versions import warn_version_drift  # noqa: F401 - a module inside the package

        exec(  # a warning raised from a hub_export file is ours
            compile("import warnings\nwarnings.warn('exports may differ', UserWarning)", _package_file(), "exec")
        )
    captured = capfd.readouterr()
    assert captured.err == "uploading ... 1.0 s\n" and captured.out == ""
    assert own == ["exports may differ"]
    assert caplog.records == []
    logger.warning("after the block")  # everything is back
    assert [r.getMessage() for r in caplog.records] == ["after the block"]


def _package_file() -> str:
    import hub_export

    return os.path.join(os.path.dirname(hub_export.__file__), "_versions.py")


def test_the_native_log_filter_keeps_partial_lines_and_progress_bars():
    out = io.StringIO()
    stream = _NativeLogFilter(out)
    for piece in (
        "[cpuinfo_utils.cpp:71] x\n[cpu",
        "info_utils.cpp:87] y\nhello\n[not a log]\n",
        "\rbar 10%",
        "\rbar 20%\n",
    ):
        stream.write(piece)
    stream.write("[partial")
    stream.close_pending()
    assert out.getvalue() == "hello\n[not a log]\n\rbar 10%\rbar 20%\n[partial"


def test_the_library_is_quiet_by_default_and_shows_everything_on_request(capsys, monkeypatch):
    """Library calls run under the same filter (without touching file descriptor 2, which is the host's), nested
    calls change nothing, and show_third_party_output (or HUB_EXPORT_DEBUG=1) turns it off."""
    from hub_export import _quiet as hub_export_quiet
    from hub_export import show_third_party_output
    from hub_export._quiet import quietly

    monkeypatch.delenv("HUB_EXPORT_DEBUG", raising=False)

    @quietly
    def noisy() -> None:
        warnings.warn("LeafSpec is deprecated", FutureWarning, stacklevel=1)
        logging.getLogger("torch.utils._pytree").warning("Enum subclass registered")
        sys.stderr.write("[cpuinfo_utils.cpp:71] Reading file\n")
        with quiet_third_party():  # nested: still quiet after it
            pass
        sys.stderr.write("done\n")

    noisy()
    assert capsys.readouterr().err == "done\n"
    show_third_party_output(True)
    try:
        with pytest.warns(FutureWarning):
            noisy()
        assert "[cpuinfo_utils.cpp:71]" in capsys.readouterr().err
    finally:
        hub_export_quiet._SHOW = None  # back to the environment's choice


def test_blocks_in_threads_ending_out_of_order_restore_everything(monkeypatch):
    """Concurrent publishes each run quietly: the filters are the process's, so the last block to end restores them,
    whichever started first (before, the first to end restored a state the other then put back for good)."""
    import threading

    monkeypatch.delenv("HUB_EXPORT_DEBUG", raising=False)
    before = (logging.root.manager.disable, warnings.showwarning, sys.stderr, list(warnings.filters))
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[int] = []

    def first() -> None:
        with quiet_third_party():
            first_in.set()
            second_in.wait(10)
        first_out.set()

    def second() -> None:
        first_in.wait(10)
        with quiet_third_party():
            second_in.set()
            first_out.wait(10)
            seen.append(logging.root.manager.disable)  # still quiet while a block runs

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert first_out.is_set() and seen == [logging.WARNING]
    assert (logging.root.manager.disable, warnings.showwarning, sys.stderr, list(warnings.filters)) == before
