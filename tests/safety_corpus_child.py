"""Load hostile exports one after another in this process and report each outcome as a JSON line.

Run by ``tests/test_safety_corpus.py``: ``python safety_corpus_child.py JOB.json RESULTS.jsonl``. The job lists the
variants (a folder, or a Hub repo id with its subfolder), the per-variant time cap and the memory cap. Before the
first variant the child loads the format's base export once (so imports and runtime start-up are not charged to a
variant), then caps its address space at what it uses plus the memory cap. For each variant it writes a ``start``
line, loads it with ``ExportedModel.from_pretrained`` (and runs it once if it loads) under an alarm, and writes the
outcome: the error class and whether it is a hub_export error, the time taken and the peak RSS so far. A variant
that kills the process leaves a ``start`` line without an outcome, which the parent reports as a crash.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
import warnings
from pathlib import Path


class _Timeout(BaseException):
    """Raised by the alarm: a variant took longer than its time cap."""


def _alarm(signum: int, frame: object) -> None:
    raise _Timeout()


def _rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _vm_bytes() -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _load(source: dict, call: bool) -> str:
    import torch

    from hub_export import ExportedModel

    model = ExportedModel.from_pretrained(
        source["path"], subfolder=source.get("subfolder", ""), **source.get("load", {})
    )
    if call:
        with torch.no_grad():
            model(input_ids=torch.tensor([[1, 5, 9, 3]]))
    return "loaded"


def main(job_path: str, results_path: str) -> None:
    warnings.simplefilter("ignore")
    job = json.loads(Path(job_path).read_text())
    os.environ.update(job.get("env", {}))
    from hub_export.errors import HubExportError

    _load({"path": job["warmup"]}, call=True)
    baseline_rss = _rss_kib()
    cap = job["memory_cap"]
    resource.setrlimit(resource.RLIMIT_AS, (_vm_bytes() + cap, resource.RLIM_INFINITY))
    signal.signal(signal.SIGALRM, _alarm)
    with open(results_path, "a", buffering=1) as out:
        out.write(json.dumps({"event": "baseline", "rss_kib": baseline_rss}) + "\n")
        for variant in job["variants"]:
            out.write(json.dumps({"event": "start", "id": variant["id"]}) + "\n")
            out.flush()
            os.fsync(out.fileno())
            result = {"event": "done", "id": variant["id"]}
            started = time.monotonic()
            signal.alarm(job["time_cap"])
            try:
                result["outcome"] = _load(variant["source"], call=True)
            except _Timeout:
                result.update(outcome="timeout")
            except HubExportError as exc:
                result.update(outcome="refused", error=type(exc).__name__, message=str(exc)[:400])
            except BaseException as exc:  # noqa: BLE001 - the corpus reports every other error as a failure
                result.update(
                    outcome="error", error=f"{type(exc).__module__}.{type(exc).__name__}", message=str(exc)[:400]
                )
            finally:
                signal.alarm(0)
            result.update(seconds=round(time.monotonic() - started, 3), rss_kib=_rss_kib())
            out.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
