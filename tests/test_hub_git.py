"""``git clone`` and ``git lfs pull`` from the embedded hub, with the real git and git-lfs: a published export comes
back byte for byte, public and private (token as password); pushing with git is refused."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from consumers import envs
from huggingface_hub import HfApi

from hub_export.embedded_hub._accounts import Accounts
from hub_export.embedded_hub.server import HubServer


def _git(*args: str, cwd: Path | None = None, skip_smudge: bool = False) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "GIT_TERMINAL_PROMPT": "0",  # a missing credential fails instead of prompting
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(cwd or Path.cwd()),
    }
    if skip_smudge:
        env["GIT_LFS_SKIP_SMUDGE"] = "1"
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120)


def _lfs_pull(clone: Path) -> None:
    """``git lfs install --local`` (this test's git has no global configuration), then ``git lfs pull``."""
    for args in (("lfs", "install", "--local"), ("lfs", "pull")):
        run = _git(*args, cwd=clone)
        assert run.returncode == 0, run.stderr


def _digests(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(folder).parts
    }


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A hub (user alice) with a published export in alice/public (and a copy in alice/private), and its folder."""
    from cli_run import save_tiny_export

    from hub_export.hub.publish import publish

    envs.git_lfs()
    root = tmp_path_factory.mktemp("hub")
    folder = save_tiny_export(tmp_path_factory.mktemp("export") / "pt2")
    accounts = Accounts(root)
    accounts.add_user("alice")
    token = accounts.create_token("alice", scope="write")[1]
    with HubServer(root) as server:
        api = HfApi(endpoint=server.url, token=token)
        for repo, private in (("alice/public", False), ("alice/private", True)):
            api.create_repo(repo, private=private)
            publish(repo, {"pt2": folder}, endpoint=server.url, token=token)
        yield server, token, folder


def test_clone_then_lfs_pull_gives_the_published_bytes(published, tmp_path: Path):
    server, _, folder = published
    target = tmp_path / "clone"
    run = _git("clone", f"{server.url}/alice/public", str(target), cwd=tmp_path, skip_smudge=True)
    assert run.returncode == 0, run.stderr
    program = (target / "pt2" / "model.pt2").read_bytes()
    assert program.startswith(b"version https://git-lfs.github.com/spec/v1")  # a pointer, as on the Hub
    _lfs_pull(target)
    assert _digests(target / "pt2") == _digests(folder)
    log = _git("log", "--format=%H", cwd=target).stdout.split()
    assert log[0] == HfApi(endpoint=server.url, token=False).list_repo_commits("alice/public")[0].commit_id
    fetched = _git("fetch", "origin", cwd=target)  # nothing new: fetch works on the clone too
    assert fetched.returncode == 0, fetched.stderr


def test_a_private_repo_needs_the_token_as_password(published, tmp_path: Path):
    server, token, folder = published
    host = server.url.removeprefix("http://")
    denied = _git("clone", f"{server.url}/alice/private", str(tmp_path / "no"), cwd=tmp_path)
    assert denied.returncode != 0 and "could not read Username" in denied.stderr  # git asked for credentials
    target = tmp_path / "yes"
    run = _git("clone", f"http://alice:{token}@{host}/alice/private", str(target), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    _lfs_pull(target)  # with the clone's credentials (the remote URL's)
    assert _digests(target / "pt2") == _digests(folder)
    wrong = _git("clone", f"http://alice:hf_wrong@{host}/alice/private", str(tmp_path / "wrong"), cwd=tmp_path)
    assert wrong.returncode != 0


def test_pushing_with_git_is_refused(published, tmp_path: Path):
    server, token, _ = published
    host = server.url.removeprefix("http://")
    target = tmp_path / "push"
    assert _git("clone", f"http://alice:{token}@{host}/alice/public", str(target), cwd=tmp_path).returncode == 0
    (target / "new.txt").write_text("x")
    _git("add", "new.txt", cwd=target)
    _git("-c", "user.name=a", "-c", "user.email=a@b", "commit", "-m", "x", cwd=target)
    run = _git("push", "origin", "HEAD:main", cwd=target)
    assert run.returncode != 0 and "403" in run.stderr
    shutil.rmtree(target)
