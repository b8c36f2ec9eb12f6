"""The hostile-export corpus (issue #21): every variant is refused with a hub_export error, or loads harmlessly.

``tests/safety_corpus.py`` builds the variants from one tiny export per format (each re-sealed, so the sha256 check
passes); each format's variants are loaded one after another in a child process (``safety_corpus_child.py``) with a
time cap per variant and its address space capped at 1 GiB above what the loaded base export uses. A few variants
are also published to an embedded Hub and loaded by repo id. The parent watches, with inotify, the folder of files
outside every export (an open of one is a read outside) and the sentinel folder (a payload that runs creates its
sentinel there), and reports the totals by format, root cause and outcome. It asserts 0 executions, 0 reads or
writes outside, 0 crashes, 0 hangs, 0 checks above 1 GiB, and that every refusal is a hub_export error.
"""

from __future__ import annotations

import collections
import ctypes
import json
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from safety_corpus import CAUSES, Variant, add_side_configs, build_variant, variants
from tiny_models import embedding_head_export

TIME_CAP = 30  # seconds per variant (the machine may be loaded)
MEMORY_CAP = 1 << 30  # address space above the loaded base export, per child
MEMORY_LIMIT_KIB = (1 << 30) // 1024  # peak RSS growth allowed while checking one variant
HUB_VARIANTS = (
    "pt2-pickle-p2-sample-inputs",
    "pt2-sympify-first-expression",
    "pt2-guards-exec-call",
    "pt2-aoti-shared-library",
    "pt2-legacy-weights-model-pt",
    "onnx-external-absolute",
    "openvino-extension-opset",
    "executorch-identifier-flip",
)
_IN_ACCESS, _IN_MODIFY, _IN_OPEN, _IN_CREATE, _IN_MOVED_TO = 0x1, 0x2, 0x20, 0x100, 0x80


class Inotify:
    """The Linux inotify API through ctypes: which files of a folder were opened, read, written or created."""

    def __init__(self) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.paths: dict[int, Path] = {}

    def watch(self, path: Path, mask: int) -> None:
        wd = self.libc.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if wd < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {path}")
        self.paths[wd] = path

    def events(self) -> list[tuple[Path, str, int]]:
        found = []
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return found
            pos = 0
            while pos < len(data):
                wd, mask, _, length = struct.unpack_from("iIII", data, pos)
                name = data[pos + 16 : pos + 16 + length].rstrip(b"\0").decode(errors="replace")
                found.append((self.paths.get(wd, Path("?")), name, mask))
                pos += 16 + length

    def close(self) -> None:
        os.close(self.fd)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Any]:
    """The base exports (copies of the shared ones), every variant built and re-sealed, and the sandbox's folders."""
    started = time.monotonic()
    root = tmp_path_factory.mktemp("corpus")
    kinds = {"pt2": "pt2-dynamic", "onnx": "onnx", "openvino": "openvino", "executorch": "executorch"}
    bases = {
        fmt: Path(shutil.copytree(embedding_head_export(kind), root / "bases" / fmt)) for fmt, kind in kinds.items()
    }
    for fmt in ("pt2", "onnx"):
        add_side_configs(bases[fmt])
    outside, sentinels, built = root / "outside", root / "sentinels", root / "variants"
    for folder in (outside, sentinels, built):
        folder.mkdir()
    corpus_variants = variants()
    folders = {v.vid: build_variant(v, bases[v.fmt], built, outside, sentinels) for v in corpus_variants}
    return {
        "seconds": time.monotonic() - started,
        "root": root,
        "bases": bases,
        "variants": corpus_variants,
        "folders": folders,
        "outside": outside,
        "sentinels": sentinels,
    }


def _run_children(jobs: list[dict[str, Any]], root: Path, env: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Run the jobs, two children at a time; ``{variant id: outcome line}``."""
    from concurrent.futures import ThreadPoolExecutor

    results: dict[str, dict[str, Any]] = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for found in pool.map(lambda n_job: _run_job(n_job[0], n_job[1], root, env), enumerate(jobs)):
            results.update(found)
    return results


def _run_job(n: int, job: dict[str, Any], root: Path, env: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Run one job in a child, restarting after a variant that kills it."""
    child = Path(__file__).with_name("safety_corpus_child.py")
    results: dict[str, dict[str, Any]] = {}
    pending = list(job["variants"])
    attempt = 0
    while pending:
        attempt += 1
        job_path, out_path = root / f"job-{n}-{attempt}.json", root / f"out-{n}-{attempt}.jsonl"
        job_path.write_text(json.dumps({**job, "variants": pending}))
        budget = 120 + TIME_CAP * (len(pending) + 2)
        try:
            process = subprocess.run(
                [sys.executable, str(child), str(job_path), str(out_path)],
                env=env,
                timeout=budget,
                capture_output=True,
                check=False,
            )
            returncode: int | str = process.returncode
            tail = process.stderr[-2000:].decode(errors="replace")  # runtime logs may hold any bytes
        except subprocess.TimeoutExpired as exc:
            returncode, tail = "killed after the time cap", (exc.stderr or b"")[-2000:].decode(errors="replace")
        lines = [json.loads(line) for line in out_path.read_text().splitlines()] if out_path.exists() else []
        baseline = next((line["rss_kib"] for line in lines if line["event"] == "baseline"), None)
        if baseline is None:
            raise AssertionError(f"the corpus child for {job['warmup']} did not start: {returncode}\n{tail}")
        started = [line["id"] for line in lines if line["event"] == "start"]
        for line in lines:
            if line["event"] == "done":
                results[line["id"]] = {**line, "baseline_kib": baseline}
        unfinished = [vid for vid in started if vid not in results]
        for vid in unfinished:  # the variant the child was on when it died
            outcome = "hang" if isinstance(returncode, str) else "crash"
            results[vid] = {"id": vid, "outcome": outcome, "message": f"{returncode}: {tail[-600:]}"}
        pending = [v for v in pending if v["id"] not in results]
        if pending and not unfinished:
            raise AssertionError(f"the corpus child stopped before {pending[0]['id']}: {returncode}\n{tail}")
    return results


def _publish(corpus: dict[str, Any], server: Any) -> dict[str, dict[str, Any]]:
    from hub_export.hub.publish import publish

    sources = {}
    for vid in HUB_VARIANTS:
        variant = next(v for v in corpus["variants"] if v.vid == vid)
        repo = f"corpus/{vid}"
        publish(repo, {variant.fmt: corpus["folders"][vid]}, endpoint=server.url, token=False)
        sources[vid] = {"path": repo, "subfolder": variant.fmt}
    return sources


def _classify(
    variant: Variant, result: dict[str, Any], events: list[tuple[Path, str, int]], sentinels: Path
) -> list[str]:
    """The failures of one variant (empty when it was refused properly or loaded harmlessly)."""
    problems = []
    outcome = result.get("outcome")
    if outcome in ("crash", "hang", "timeout"):
        problems.append(outcome)
    if outcome == "error":
        problems.append(f"not a hub_export error: {result.get('error')}")
    if outcome == "loaded" and not variant.may_load:
        problems.append("loaded")
    if (sentinels / variant.vid).exists() or any(
        name == variant.vid for folder, name, _ in events if folder == sentinels
    ):
        problems.append("executed")
    prefix = variant.vid + "."
    if any(name.startswith(prefix) and mask & (_IN_OPEN | _IN_ACCESS) for _, name, mask in events):
        problems.append("read outside")
    if any(name.startswith(prefix) and mask & (_IN_MODIFY | _IN_CREATE | _IN_MOVED_TO) for _, name, mask in events):
        problems.append("wrote outside")
    if "rss_kib" in result and result["rss_kib"] - result["baseline_kib"] > MEMORY_LIMIT_KIB:
        problems.append(f"memory: {(result['rss_kib'] - result['baseline_kib']) // 1024} MiB")
    return problems


def test_hostile_corpus_is_refused_without_effects(corpus: dict[str, Any]) -> None:
    from hub_export.embedded_hub.server import HubServer

    root, sentinels, outside = corpus["root"], corpus["sentinels"], corpus["outside"]
    all_variants: list[Variant] = corpus["variants"]
    assert len(all_variants) >= 120
    env = {
        **os.environ,
        "MALLOC_ARENA_MAX": "2",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")]),
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_CACHE": str(root / "hf-cache"),
        "HF_HUB_OFFLINE": "0",
    }
    notify = Inotify()
    try:
        with HubServer(root / "hub") as server:
            env["HF_ENDPOINT"] = server.url
            hub_sources = _publish(corpus, server)
            notify.watch(outside, _IN_OPEN | _IN_ACCESS | _IN_MODIFY | _IN_CREATE | _IN_MOVED_TO)
            notify.watch(sentinels, _IN_OPEN | _IN_CREATE | _IN_MOVED_TO)
            notify.watch(root, _IN_CREATE | _IN_MOVED_TO)
            jobs = []
            for fmt, base in corpus["bases"].items():
                chosen = [v for v in all_variants if v.fmt == fmt]
                jobs.append(
                    {
                        "warmup": str(base),
                        "time_cap": TIME_CAP,
                        "memory_cap": MEMORY_CAP,
                        "variants": [
                            {"id": v.vid, "source": {"path": str(corpus["folders"][v.vid]), "load": v.load}}
                            for v in chosen
                        ],
                    }
                )
            # the Hub's variants (every format) follow the pt2 ones in that child: one interpreter start fewer
            pt2_job = next(job for job in jobs if job["warmup"] == str(corpus["bases"]["pt2"]))
            pt2_job["variants"] += [{"id": f"hub:{vid}", "source": source} for vid, source in hub_sources.items()]
            (root / "runs").mkdir()
            started = time.monotonic()
            results = _run_children(jobs, root / "runs", env)
            print(f"\ncorpus: built in {corpus['seconds']:.0f} s, loaded in {time.monotonic() - started:.0f} s")
        events = notify.events()
    finally:
        notify.close()
    by_id = {v.vid: v for v in all_variants}
    failures: dict[str, list[str]] = {}
    totals: collections.Counter[tuple[str, str, str]] = collections.Counter()
    for vid, result in sorted(results.items()):
        variant = by_id[vid.removeprefix("hub:")]
        problems = _classify(variant, result, events, sentinels)
        outcome = result.get("outcome", "?")
        fmt = ("hub:" if vid.startswith("hub:") else "") + variant.fmt
        totals[(fmt, variant.cause, "failed" if problems else outcome)] += 1
        if problems:
            failures[vid] = [*problems, str(result.get("message", ""))[:300]]
    stray = [
        (str(folder), name)
        for folder, name, mask in events
        if folder == root and name not in ("runs", "hf-cache", "hub")
    ]
    _report(totals, results, events)
    for vid, problems in sorted(failures.items()):
        print(f"  FAILED {vid}: {problems}")
    missing = sorted((set(by_id) | {f"hub:{v}" for v in HUB_VARIANTS}) - set(results))
    assert not missing, f"no outcome for {missing}"
    assert not stray, f"files created next to the sandbox's folders: {stray}"
    assert failures == {}


def _report(totals: collections.Counter, results: dict[str, dict[str, Any]], events: list[Any]) -> None:
    """Print the totals by format, root cause and outcome (``pytest -s`` shows them)."""
    print("\nhostile corpus: format / cause / outcome -> variants")
    for key in sorted(totals):
        print(f"  {key[0]:>14} {key[1]:>7} {key[2]:>8}: {totals[key]}")
    by_outcome = collections.Counter(r.get("outcome") for r in results.values())
    slowest = max(results.values(), key=lambda r: r.get("seconds", 0))
    growth = max((r["rss_kib"] - r["baseline_kib"]) for r in results.values() if "rss_kib" in r)
    print(
        f"  total {len(results)}: {dict(by_outcome)}; slowest {slowest['id']} {slowest.get('seconds')} s; "
        f"peak RSS growth {growth // 1024} MiB; inotify events outside {len(events)}"
    )
    print(f"  causes: {', '.join(CAUSES)}")
