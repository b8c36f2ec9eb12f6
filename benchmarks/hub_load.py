"""Load test of the embedded Hub: concurrent downloading clients and publishing threads against one server.

Not a test (``tests/test_hub_faults.py`` runs a short correctness-only version). Run::

    python benchmarks/hub_load.py --downloaders 32 --publishers 8 --seconds 10

It exports a tiny module with Dynamo in three variants (different weights), publishes the first, then for
``--seconds``: every downloader repeatedly downloads the ``pt2/`` export (``force_download``: every file goes
over HTTP) and verifies each file's sha256 against the manifest; every publisher repeatedly publishes one of the
variants to ``pt2/`` (commits race: the loser re-plans or gives up, which is a refusal, not an error). Then each
commit of the repo is downloaded and verified: a commit is whole when its ``export.json`` is one of the variants'
and every file it lists matches. Reports requests/s, server-side p50/p99 latency, and client-side p50/p99 of a
whole download and of a publish.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def run_load(
    server: Any,
    repo_id: str,
    variants: Sequence[Path],
    workdir: Path,
    *,
    downloaders: int,
    publishers: int,
    seconds: float,
) -> dict[str, Any]:
    """Drive ``server`` (a started ``HubServer``) with downloaders and publishers; return the statistics.

    Args:
        server: The embedded Hub.
        repo_id: Repo to use (created by the first publish).
        variants: Saved export folders of the same format (published to ``pt2/``).
        workdir: Scratch folder (one HF cache per client).
        downloaders: Downloading threads.
        publishers: Publishing threads.
        seconds: How long to run.

    Returns:
        ``downloads``, ``verified_downloads``, ``commits``, ``refused_publishes``, ``errors`` (unexpected
        exceptions, as strings), ``server_errors`` (5xx answers), ``commits_checked``, ``whole_commits``,
        ``requests``, ``requests_per_s``, ``server_p50_ms``/``server_p99_ms``, ``download_p50_ms``/``_p99_ms``,
        ``publish_p50_ms``/``_p99_ms``.
    """
    from hub_export.errors import HubError
    from hub_export.hub.download import download_export
    from hub_export.hub.publish import publish

    manifests = {(Path(v) / "export.json").read_bytes() for v in variants}
    publish(repo_id, {"pt2": variants[0]}, endpoint=server.url)
    server.clear_log()
    lock = threading.Lock()
    stats: dict[str, Any] = {"downloads": 0, "verified_downloads": 0, "refused_publishes": 0, "errors": []}
    commits: set[str] = set()
    download_ms: list[float] = []
    publish_ms: list[float] = []
    deadline = time.monotonic() + seconds

    def downloader(i: int) -> None:
        cache = workdir / f"downloader-{i}"
        while time.monotonic() < deadline:
            start = time.perf_counter()
            try:
                export = download_export(
                    repo_id, subfolder="pt2", cache_dir=cache, force_download=True, endpoint=server.url
                )  # fetch() verifies every file's size and sha256
                whole = (export.directory / "export.json").read_bytes() in manifests
            except Exception as exc:  # noqa: BLE001 - everything unexpected is reported
                with lock:
                    stats["errors"].append(f"download: {type(exc).__name__}: {exc}")
                continue
            with lock:
                stats["downloads"] += 1
                stats["verified_downloads"] += int(whole)
                download_ms.append((time.perf_counter() - start) * 1000)

    def publisher(j: int) -> None:
        k = j
        while time.monotonic() < deadline:
            k += 1
            start = time.perf_counter()
            try:
                result = publish(repo_id, {"pt2": variants[k % len(variants)]}, endpoint=server.url)
            except HubError as exc:
                with lock:
                    if "Gave up" in str(exc):
                        stats["refused_publishes"] += 1
                    else:
                        stats["errors"].append(f"publish: {exc}")
                continue
            except Exception as exc:  # noqa: BLE001
                with lock:
                    stats["errors"].append(f"publish: {type(exc).__name__}: {exc}")
                continue
            with lock:
                if result.changed:
                    commits.add(result.commit_sha)
                publish_ms.append((time.perf_counter() - start) * 1000)

    threads = [threading.Thread(target=downloader, args=(i,)) for i in range(downloaders)]
    threads += [threading.Thread(target=publisher, args=(j,)) for j in range(publishers)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    stats["commits"] = len(commits)  # distinct (huggingface_hub may skip a commit whose files are already there)
    log = list(server.log)
    stats["requests"] = len(log)
    stats["requests_per_s"] = round(len(log) / elapsed, 1)
    stats["server_errors"] = sum(r.status >= 500 for r in log)
    stats.update(_percentiles("server", [r.duration_s * 1000 for r in log]))
    stats.update(_percentiles("download", download_ms))
    stats.update(_percentiles("publish", publish_ms))
    history, stats["commits_checked"], stats["whole_commits"] = _check_commits(
        server, repo_id, manifests, workdir / "check"
    )
    stats["commits_missing_from_history"] = len(commits - history)
    return stats


def _check_commits(server: Any, repo_id: str, manifests: set[bytes], cache: Path) -> tuple[set[str], int, int]:
    """(commit ids, commits with a pt2/export.json, those whose export is one variant's, complete and verified)."""
    from huggingface_hub import HfApi

    from hub_export.hub.download import download_export

    checked = whole = 0
    history = list(HfApi(endpoint=server.url).list_repo_commits(repo_id))
    for commit in history:
        try:
            export = download_export(
                repo_id, subfolder="pt2", revision=commit.commit_id, cache_dir=cache, endpoint=server.url
            )
        except Exception:  # noqa: BLE001 - counted as not whole below when it has an export.json
            files = HfApi(endpoint=server.url).list_repo_files(repo_id, revision=commit.commit_id)
            checked += int("pt2/export.json" in files)
            continue
        checked += 1
        whole += int((export.directory / "export.json").read_bytes() in manifests)
    return {c.commit_id for c in history}, checked, whole


def _percentiles(name: str, values: list[float]) -> dict[str, float | None]:
    if len(values) < 2:
        only = round(values[0], 2) if values else None
        return {f"{name}_p50_ms": only, f"{name}_p99_ms": only}
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {f"{name}_p50_ms": round(cuts[49], 2), f"{name}_p99_ms": round(cuts[98], 2)}


def _variants(root: Path) -> list[Path]:
    import torch

    from hub_export import DynamoConfig, DynamoExporter

    class Tiny(torch.nn.Module):
        def __init__(self, seed: int) -> None:
            super().__init__()
            torch.manual_seed(seed)
            self.embed = torch.nn.Embedding(64, 32)
            self.head = torch.nn.Linear(32, 64)

        def forward(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"logits": self.head(torch.tanh(self.embed(input_ids)))}

    sample = {"input_ids": torch.tensor([[1, 5, 9, 3]])}
    return [
        Path(
            DynamoExporter().export(Tiny(seed).eval(), sample, config=DynamoConfig()).save_pretrained(root / f"v{seed}")
        )
        for seed in range(3)
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the load test and print its statistics as JSON; exit 1 when a check failed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--downloaders", type=int, default=32)
    parser.add_argument("--publishers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    from hub_export.embedded_hub.server import HubServer

    with tempfile.TemporaryDirectory(prefix="hub-load-") as tmp:
        root = Path(tmp)
        variants = _variants(root / "exports")
        with HubServer(root / "hub") as server:
            stats = run_load(
                server,
                "bench/tiny",
                variants,
                root / "clients",
                downloaders=args.downloaders,
                publishers=args.publishers,
                seconds=args.seconds,
            )
    stats["errors"] = stats["errors"][:20]
    print(json.dumps(stats, indent=2))
    ok = not stats["errors"] and not stats["server_errors"] and stats["whole_commits"] == stats["commits_checked"]
    ok = ok and not stats["commits_missing_from_history"]
    return 0 if ok and stats["verified_downloads"] == stats["downloads"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
