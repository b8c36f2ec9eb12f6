"""Throughput of one large file through the embedded Hub, with the real client and with curl, and the server's memory.

Not a test (``tests/test_hub_server.py`` checks the mechanisms on small files). Run::

    python benchmarks/hub_transfer.py                    # 1 GiB file
    python benchmarks/hub_transfer.py --size-mb 5120     # 5 GiB: the issue's measurement
    python benchmarks/hub_transfer.py --multipart-threshold 0 --chunk-size-mb 64   # force multipart

The server runs in its own process (``python -m hub_export.embedded_hub``) so its RSS can be sampled (every
20 ms, psutil) while the file passes. Steps, each timed:

1. write a file of ``--size-mb`` MiB (incompressible: random 1 MiB blocks made distinct by a counter);
2. client sha256: what ``huggingface_hub`` computes before an LFS upload (timed apart from the transfer);
3. client upload: ``HfApi.create_commit`` of the file (LFS batch, ``PUT``s, verify, commit);
4. client download: ``hf_hub_download(force_download=True)`` into a fresh cache (HEAD + GET, written to disk);
5. curl download: ``curl -o FILE`` of the same ``resolve`` URL (to disk, like the client);
6. curl upload: ``curl -T FILE`` to a signed single-``PUT`` LFS URL of a second repo (the server hashes and
   stores it, as for the client).

MiB/s is the file size over the step's wall time. Prints a table and one JSON line, with the server's peak
RSS, the load average before and after, and the versions; exits 1 when a transferred file does not match.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import psutil  # noqa: E402
from huggingface_hub import CommitOperationAdd, HfApi, hf_hub_download  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20


class ServerProcess:
    """``python -m hub_export.embedded_hub`` on a free loopback port, with its RSS sampled in a thread."""

    def __init__(self, root: Path, extra: list[str]):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
        cmd = [sys.executable, "-m", "hub_export.embedded_hub", "--root", str(root), "--port", "0", *extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if " at " not in line:
            self.proc.kill()
            raise RuntimeError(f"the server did not start: {line!r}")
        self.url = line.split(" at ")[1].split()[0]
        self.ps = psutil.Process(self.proc.pid)
        self.baseline = self.peak = self.ps.memory_info().rss
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._done.is_set():
            try:
                self.peak = max(self.peak, self.ps.memory_info().rss)
            except psutil.Error:
                return
            self._done.wait(0.02)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
        self.proc.terminate()
        self.proc.wait(10)


def _timed(fn, *args, **kwargs) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - start, out


def _write_file(path: Path, size: int) -> None:
    block = bytearray(os.urandom(MIB))
    with open(path, "wb") as fh:
        for i in range(size // MIB):
            block[-8:] = i.to_bytes(8, "little")
            fh.write(block)
        fh.write(os.urandom(size % MIB))


def _sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        while piece := fh.read(4 * MIB):
            sha.update(piece)
    return sha.hexdigest()


def _curl(*args: str) -> None:
    subprocess.run(["curl", "-sS", "--fail", "--noproxy", "*", *args], check=True, stdout=subprocess.DEVNULL)


def _signed_put_url(url: str, repo_id: str, oid: str, size: int) -> str:
    """A single-PUT upload URL from the LFS batch endpoint (``basic`` transfer only)."""
    body = json.dumps({"operation": "upload", "transfers": ["basic"], "objects": [{"oid": oid, "size": size}]})
    request = urllib.request.Request(
        f"{url}/{repo_id}.git/info/lfs/objects/batch",
        body.encode(),
        {"Content-Type": "application/vnd.git-lfs+json", "Authorization": "Bearer bench"},
    )
    with urllib.request.urlopen(request, timeout=60) as resp:  # noqa: S310 - loopback URL of our own server
        return json.load(resp)["objects"][0]["actions"]["upload"]["href"]


def _versions() -> dict:
    import httpx2  # huggingface_hub's HTTP client
    import huggingface_hub

    curl = subprocess.run(["curl", "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    return {
        "python": platform.python_version(),
        "huggingface_hub": huggingface_hub.__version__,
        "httpx2": getattr(httpx2, "__version__", "?"),
        "curl": " ".join(curl.split()[:2]),
        "os": f"{platform.system()} {platform.release()}",
        "cpus": os.cpu_count(),
    }


def run(size: int, workdir: Path, server_args: list[str]) -> dict:
    """Run the six steps in ``workdir``; return the figures."""
    source = workdir / "big.bin"
    out: dict = {"size_mib": size / MIB, "load_before": os.getloadavg(), "versions": _versions()}
    out["write_s"], _ = _timed(_write_file, source, size)
    server = ServerProcess(workdir / "hub", server_args)
    try:
        api = HfApi(endpoint=server.url, token="bench")
        api.create_repo("bench/big")
        api.create_repo("bench/curl")
        server.baseline = server.peak = server.ps.memory_info().rss  # after the first requests
        op = CommitOperationAdd("big.bin", str(source))
        out["client_sha256_s"], digest = _timed(lambda: op.upload_info.sha256.hex())
        out["client_upload_s"], _ = _timed(api.create_commit, "bench/big", [op], commit_message="big")
        cache = workdir / "cache"
        out["client_download_s"], path = _timed(
            hf_hub_download, "bench/big", "big.bin", endpoint=server.url, cache_dir=cache, force_download=True
        )
        out["client_download_ok"] = _sha256(Path(path)) == digest
        shutil.rmtree(cache)
        target = workdir / "curl.bin"
        out["curl_download_s"], _ = _timed(_curl, "-o", str(target), f"{server.url}/bench/big/resolve/main/big.bin")
        out["curl_download_ok"] = _sha256(target) == digest
        target.unlink()
        put = _signed_put_url(server.url, "bench/curl", digest, size)
        out["curl_upload_s"], _ = _timed(_curl, "-T", str(source), put)
        stored = workdir / "hub" / "repos" / "models" / "bench" / "curl.git" / "lfs" / "objects"
        out["curl_upload_ok"] = (stored / digest[:2] / digest[2:4] / digest).stat().st_size == size
    finally:
        server.stop()
    out["server_rss_baseline_mib"] = server.baseline / MIB
    out["server_rss_peak_mib"] = server.peak / MIB
    out["load_after"] = os.getloadavg()
    for step in ("client_upload", "client_download", "curl_download", "curl_upload"):
        out[f"{step}_mib_s"] = size / MIB / out[f"{step}_s"]
    return out


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print the table and the JSON line; exit 1 when a file did not match."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="file size in MiB (default 1024)")
    parser.add_argument("--multipart-threshold", type=int, default=None, help="bytes (server default: 5 GiB)")
    parser.add_argument("--chunk-size-mb", type=int, default=None, help="multipart part size in MiB (default 64)")
    parser.add_argument("--workdir", type=Path, default=None, help="where the files go (default: a temp dir)")
    args = parser.parse_args(argv)
    server_args = []
    if args.multipart_threshold is not None:
        server_args += ["--multipart-threshold", str(args.multipart_threshold)]
    if args.chunk_size_mb is not None:
        server_args += ["--chunk-size", str(args.chunk_size_mb * MIB)]
    parent = args.workdir or Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hub-transfer-", dir=parent) as tmp:
        out = run(args.size_mb * MIB, Path(tmp), server_args)
    print(f"{out['size_mib']:.0f} MiB through the embedded hub ({' '.join(server_args) or 'server defaults'})")
    print(
        f"  client sha256       {out['client_sha256_s']:7.2f} s  {out['size_mib'] / out['client_sha256_s']:8.0f} MiB/s"
    )
    for step in ("client_upload", "client_download", "curl_upload", "curl_download"):
        ok = out.get(f"{step}_ok", True)
        label = step.replace("_", " ")
        print(f"  {label:<19} {out[f'{step}_s']:7.2f} s  {out[f'{step}_mib_s']:8.0f} MiB/s{'' if ok else '  MISMATCH'}")
    print(
        f"  server RSS: {out['server_rss_baseline_mib']:.0f} MiB at rest, peak {out['server_rss_peak_mib']:.0f} MiB"
        f"; load average {out['load_before'][0]:.2f} before, {out['load_after'][0]:.2f} after"
    )
    print(json.dumps(out))
    return 0 if all(v for k, v in out.items() if k.endswith("_ok")) else 1


if __name__ == "__main__":
    raise SystemExit(main())
