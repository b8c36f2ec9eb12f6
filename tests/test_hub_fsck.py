"""Crash safety and operations of the embedded hub: a ``kill -9`` during an LFS upload leaves nothing after a
restart, ``hub-export hub fsck`` finds and repairs corrupt storage, one access-log line per request (never a token)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from huggingface_hub import HfApi

from hub_export.cli.main import main
from hub_export.embedded_hub._accounts import Accounts
from hub_export.embedded_hub.server import HubServer

REPO = "user/crash"


def _serve(root: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    """``hub-export hub serve`` in a process of its own; returns it and its URL (from the banner)."""
    cmd = [sys.executable, "-m", "hub_export.cli.main", "hub", "serve", "--root", str(root), "--port", "0", *extra]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    assert " at http://" in line, line + proc.stderr.read() if proc.poll() is not None else line
    return proc, line.split(" at ")[1].split()[0]


def _leftovers(root: Path) -> list[str]:
    repo = root / "repos" / "models" / "user" / "crash.git"
    found = [*repo.glob("lfs/tmp/*"), *repo.glob("lfs/incoming/*"), *repo.glob("objects/*/.tmp-*")]
    return sorted(p.relative_to(root).as_posix() for p in found)


def test_kill_during_an_lfs_upload_leaves_nothing_after_restart(tmp_path: Path, capsys):
    root = tmp_path / "hub"
    proc, url = _serve(root)
    try:
        api = HfApi(endpoint=url, token="x")
        api.create_repo(REPO)
        api.upload_file(path_or_fileobj=b"\1" * 4096, path_in_repo="kept.bin", repo_id=REPO)
        head = api.list_repo_commits(REPO)[0].commit_id
        size = 8 << 20
        data = os.urandom(1 << 20)
        oid = hashlib.sha256(data * 8).hexdigest()
        batch = {"operation": "upload", "transfers": ["basic"], "objects": [{"oid": oid, "size": size}]}
        import urllib.request

        request = urllib.request.Request(
            f"{url}/{REPO}.git/info/lfs/objects/batch",
            data=json.dumps(batch).encode(),
            headers={"Content-Type": "application/vnd.git-lfs+json", "Authorization": "Bearer x"},
        )
        href = json.load(urllib.request.urlopen(request, timeout=10))["objects"][0]["actions"]["upload"]["href"]
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:  # half of the body, then the crash
            path = href.split(url, 1)[1]
            sock.sendall(f"PUT {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: {size}\r\n\r\n".encode())
            for _ in range(4):
                sock.sendall(data)
            deadline = time.monotonic() + 10
            while not _leftovers(root) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _leftovers(root), "the partial upload is on disk while it streams"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _leftovers(root)  # what the crash left
    with HubServer(root) as server:  # a restart cleans before serving
        assert _leftovers(root) == [] and any("/lfs/tmp/" in p for p in server.cleaned), server.cleaned
        api = HfApi(endpoint=server.url, token="x")
        assert api.list_repo_commits(REPO)[0].commit_id == head
        assert sorted(api.list_repo_files(REPO)) == [".gitattributes", "kept.bin"]
    assert main(["hub", "fsck", "--root", str(root), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["problems"] == [] and report["checked"]["lfs"] == 1


def test_fsck_finds_and_repairs_a_corrupt_lfs_object(tmp_path: Path, capsys):
    root = tmp_path / "hub"
    content = b"\2" * 5000
    with HubServer(root) as server:
        api = HfApi(endpoint=server.url, token="x")
        api.create_repo(REPO)
        api.upload_file(path_or_fileobj=content, path_in_repo="w.bin", repo_id=REPO)
    oid = hashlib.sha256(content).hexdigest()
    stored = next((root / "repos").rglob(oid))
    stored.write_bytes(b"\3" * 5000)  # same size, other bytes: only --deep sees it
    assert main(["hub", "fsck", "--root", str(root)]) == 0
    capsys.readouterr()
    assert main(["hub", "fsck", "--root", str(root), "--deep", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert len(report["problems"]) == 1 and f"w.bin: LFS object {oid} is missing or corrupt" in report["problems"][0]
    assert main(["hub", "fsck", "--root", str(root), "--deep", "--repair", "--json"]) == 1  # removed, still missing
    report = json.loads(capsys.readouterr().out)
    assert any("removed corrupt LFS object" in line for line in report["repaired"]) and not stored.exists()
    with HubServer(root) as server:  # the same file uploaded again restores it
        HfApi(endpoint=server.url, token="x").upload_file(
            path_or_fileobj=content, path_in_repo="again.bin", repo_id=REPO
        )
    assert main(["hub", "fsck", "--root", str(root), "--deep"]) == 0
    assert main(["hub", "fsck", "--root", str(tmp_path / "nothing")]) == 1
    assert "no hub in" in capsys.readouterr().err


def test_one_access_log_line_per_request_without_tokens(tmp_path: Path):
    root = tmp_path / "hub"
    accounts = Accounts(root)
    accounts.add_user("alice")
    token = accounts.create_token("alice", scope="write")[1]
    proc, url = _serve(root)
    try:
        api = HfApi(endpoint=url, token=token)
        api.create_repo("alice/logged")
        list(HfApi(endpoint=url, token=False).list_models())
    finally:
        proc.send_signal(signal.SIGTERM)  # as a service manager stops it
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    lines = [line for line in err.splitlines() if " /api/" in line]
    assert any(line.endswith("ms alice") and "POST /api/repos/create 200" in line for line in lines), err
    assert any("GET /api/models 200" in line and line.endswith(" -") for line in lines), err
    assert token not in err
