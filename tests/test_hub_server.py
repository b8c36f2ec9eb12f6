"""The embedded Hub, exercised through the real huggingface_hub client (and raw HTTP for the hostile cases)."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hub_fixtures import HUB_TOKEN  # tests/ is on sys.path (conftest), which also registers the hub fixtures
from huggingface_hub import (
    CommitOperationAdd,
    CommitOperationDelete,
    HfApi,
    hf_hub_download,
    snapshot_download,
)
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from hub_export.embedded_hub.server import HubServer

REPO = "me/tiny"
HEX40 = set("0123456789abcdef")


def _raw(server: HubServer, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def _head(api: HfApi, repo: str = REPO, rev: str = "main") -> str:
    return api.model_info(repo, revision=rev).sha


def _git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@pytest.fixture
def repo(hub_api: HfApi) -> str:
    hub_api.create_repo(REPO)
    return REPO


def test_create_repo_conflict_exist_ok_and_default_namespace(hub_api: HfApi, hub_env: HubServer):
    url = hub_api.create_repo(REPO)
    assert url.repo_id == REPO and url.endswith("/me/tiny")
    with pytest.raises(HfHubHTTPError) as info:
        hub_api.create_repo(REPO)
    assert info.value.response.status_code == 409
    assert hub_api.create_repo(REPO, exist_ok=True).repo_id == REPO
    assert hub_api.create_repo("solo").repo_id == "user/solo"  # like the Hub: your namespace
    assert hub_api.repo_exists("user/solo") and hub_api.repo_exists("solo")
    assert hub_api.list_repo_files(REPO) == [".gitattributes"]  # the Hub's initial commit
    assert hub_api.list_repo_commits(REPO)[-1].title == "initial commit"
    hub_api.delete_repo(REPO)
    assert not hub_api.repo_exists(REPO)
    hub_api.delete_repo(REPO, missing_ok=True)


def test_regular_and_lfs_uploads_are_git_objects(hub_api: HfApi, hub_env: HubServer, repo: str, tmp_path: Path):
    folder = tmp_path / "up"
    (folder / "onnx").mkdir(parents=True)
    files = {
        "config.json": b'{"hidden_size": 32}\n',
        "onnx/model.onnx": b"onnx-proto-bytes",  # .gitattributes pattern => LFS
        "onnx/weights.dat": b"\x00\x01binary",  # NUL in the sample => LFS
        "big.txt": b"a" * (10 * 1024 * 1024),  # >= 10 MiB => LFS
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
    info = hub_api.upload_folder(folder_path=folder, repo_id=repo, commit_message="add files")
    assert len(info.oid) == 40 and set(info.oid) <= HEX40
    assert _head(hub_api) == info.oid

    tree = {e.path: e for e in hub_api.list_repo_tree(repo, recursive=True)}
    assert set(hub_api.list_repo_files(repo)) == {".gitattributes", *files}
    assert tree["config.json"].lfs is None
    assert tree["config.json"].blob_id == _git_blob_oid(files["config.json"])
    for name in ("onnx/model.onnx", "onnx/weights.dat", "big.txt"):
        assert tree[name].lfs.sha256 == hashlib.sha256(files[name]).hexdigest()
        assert tree[name].size == len(files[name])
    assert hub_api.model_info(repo, files_metadata=True).siblings[0].blob_id is not None

    for name, data in files.items():
        assert Path(hf_hub_download(repo, name, endpoint=hub_env.url)).read_bytes() == data
    snap = snapshot_download(repo, endpoint=hub_env.url, allow_patterns=["onnx/*"])
    assert sorted(p.name for p in Path(snap, "onnx").iterdir()) == ["model.onnx", "weights.dat"]

    if shutil.which("git"):  # the repo on disk is a genuine git repository with the same ids
        git_dir = next((hub_env.store.root / "repos" / "models" / "me").glob("tiny.git"))

        def run(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True, text=True)

        assert run("fsck", "--strict").returncode == 0
        assert run("rev-parse", "main").stdout.strip() == info.oid
        assert run("cat-file", "-p", "main:big.txt").stdout.startswith("version https://git-lfs.github.com/spec/v1")
        blob = subprocess.run(["git", "hash-object", "--stdin"], input=files["config.json"], capture_output=True)
        assert blob.stdout.decode().strip() == tree["config.json"].blob_id


def test_revisions_branches_tags_and_pull_requests(hub_api: HfApi, hub_env: HubServer, repo: str):
    first = hub_api.upload_file(path_or_fileobj=b"v1", path_in_repo="f.txt", repo_id=repo).oid
    hub_api.create_branch(repo, branch="dev")
    hub_api.create_branch(repo, branch="dev", exist_ok=True)
    with pytest.raises(HfHubHTTPError) as info:
        hub_api.create_branch(repo, branch="dev")
    assert info.value.response.status_code == 409
    hub_api.create_tag(repo, tag="v1", revision=first)
    second = hub_api.upload_file(path_or_fileobj=b"v2", path_in_repo="f.txt", repo_id=repo).oid
    pr = hub_api.create_commit(repo, [CommitOperationAdd("f.txt", b"pr")], commit_message="proposal", create_pr=True)
    assert pr.pr_revision == "refs/pr/1" and pr.pr_num == 1 and pr.pr_url.endswith("/discussions/1")
    assert _head(hub_api) == second  # a PR does not move main

    def read(rev: str) -> bytes:
        return Path(hf_hub_download(repo, "f.txt", revision=rev, endpoint=hub_env.url)).read_bytes()

    assert read("main") == b"v2" and read("dev") == b"v1" and read("v1") == b"v1"
    assert read(first) == b"v1" and read("refs/pr/1") == b"pr"
    status, headers, body = _raw(hub_env, "GET", f"/{repo}/resolve/refs/pr/1/f.txt")  # unencoded refs/pr/N
    assert status == 200 and body == b"pr" and headers["X-Repo-Commit"] == pr.oid

    refs = hub_api.list_repo_refs(repo, include_pull_requests=True)
    assert {b.name: b.target_commit for b in refs.branches} == {"main": second, "dev": first}
    assert [(t.name, t.target_commit) for t in refs.tags] == [("v1", first)]
    assert [(p.ref, p.target_commit) for p in refs.pull_requests] == [("refs/pr/1", pr.oid)]
    hub_api.create_commit(repo, [CommitOperationAdd("g.txt", b"g")], commit_message="more", revision="refs/pr/1")
    assert hub_api.list_repo_files(repo, revision="refs/pr/1") == [".gitattributes", "f.txt", "g.txt"]

    hub_api.delete_tag(repo, tag="v1")
    hub_api.delete_branch(repo, branch="dev")
    assert hub_api.list_repo_refs(repo).tags == []
    with pytest.raises(RevisionNotFoundError):
        hub_api.delete_tag(repo, tag="v1")
    with pytest.raises(RevisionNotFoundError):
        hub_api.model_info(repo, revision="dev")


def test_stale_parent_commit_is_refused_with_412(hub_api: HfApi, repo: str):
    base = hub_api.upload_file(path_or_fileobj=b"1", path_in_repo="a.txt", repo_id=repo).oid
    head = hub_api.upload_file(path_or_fileobj=b"2", path_in_repo="a.txt", repo_id=repo, parent_commit=base).oid
    with pytest.raises(HfHubHTTPError) as info:
        hub_api.upload_file(path_or_fileobj=b"3", path_in_repo="b.txt", repo_id=repo, parent_commit=base)
    assert info.value.response.status_code == 412
    assert _head(hub_api) == head and "b.txt" not in hub_api.list_repo_files(repo)


def test_identical_reupload_sends_nothing_and_lfs_dedups(hub_api: HfApi, hub_env: HubServer, repo: str, tmp_path):
    folder = tmp_path / "exp"
    folder.mkdir()
    (folder / "export.json").write_text('{"schema_version": 1}')
    (folder / "model.onnx").write_bytes(b"\x08\x07" * 5000)
    hub_api.upload_folder(folder_path=folder, repo_id=repo, path_in_repo="onnx")
    head = _head(hub_api)
    hub_env.clear_log()
    hub_api.upload_folder(folder_path=folder, repo_id=repo, path_in_repo="onnx")
    assert _head(hub_api) == head  # no commit
    # the client still asks (preupload, LFS batch), but uploads no content and makes no commit
    assert not [r for r in hub_env.log if r.method == "PUT" or "/commit/" in r.path]
    assert sum(r.bytes_received for r in hub_env.log if not r.path.endswith(("/preupload/main", "/batch"))) == 0

    hub_env.clear_log()  # same LFS content under another path: the batch answer has no upload action
    hub_api.upload_file(path_or_fileobj=folder / "model.onnx", path_in_repo="copy/model.onnx", repo_id=repo)
    assert not [r for r in hub_env.log if r.method == "PUT"]
    assert "copy/model.onnx" in hub_api.list_repo_files(repo)


def test_deletions(hub_api: HfApi, repo: str):
    ops = [CommitOperationAdd(p, b"x") for p in ("a/1.txt", "a/2.txt", "b/1.txt", "c.txt")]
    hub_api.create_commit(repo, ops, commit_message="add")
    hub_api.delete_file("c.txt", repo_id=repo)
    hub_api.delete_folder("a", repo_id=repo)
    assert hub_api.list_repo_files(repo) == [".gitattributes", "b/1.txt"]
    with pytest.raises(EntryNotFoundError):
        hub_api.delete_file("missing.txt", repo_id=repo)
    hub_api.create_commit(
        repo,
        [CommitOperationDelete("b/"), CommitOperationAdd("b", b"now a file")],
        commit_message="folder becomes file",
    )
    assert hub_api.list_repo_files(repo) == [".gitattributes", "b"]


def test_range_requests(hub_api: HfApi, hub_env: HubServer, repo: str):
    data = bytes(range(256)) * 4
    hub_api.upload_file(path_or_fileobj=data, path_in_repo="w.bin", repo_id=repo)  # LFS
    hub_api.upload_file(path_or_fileobj=b"0123456789", path_in_repo="t.txt", repo_id=repo)  # regular
    status, headers, body = _raw(hub_env, "GET", f"/{repo}/resolve/main/w.bin", headers={"Range": "bytes=10-19"})
    assert status == 206 and body == data[10:20] and headers["Content-Range"] == f"bytes 10-19/{len(data)}"
    assert headers["X-Linked-Size"] == str(len(data)) and hashlib.sha256(data).hexdigest() in headers["X-Linked-Etag"]
    assert _raw(hub_env, "GET", f"/{repo}/resolve/main/t.txt", headers={"Range": "bytes=-3"})[2] == b"789"
    assert _raw(hub_env, "GET", f"/{repo}/resolve/main/t.txt", headers={"Range": "bytes=50-"})[0] == 416
    status, headers, body = _raw(hub_env, "HEAD", f"/{repo}/resolve/main/t.txt")
    assert status == 200 and body == b"" and headers["Content-Length"] == "10"
    assert headers["ETag"] == f'"{_git_blob_oid(b"0123456789")}"'


def test_errors_map_to_client_exceptions(hub_api: HfApi, hub_env: HubServer, repo: str):
    with pytest.raises(RepositoryNotFoundError):
        hub_api.model_info("nobody/nothing")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(repo, ".gitattributes", revision="nope", endpoint=hub_env.url)
    with pytest.raises(EntryNotFoundError):
        hf_hub_download(repo, "missing.txt", endpoint=hub_env.url)
    with pytest.raises(EntryNotFoundError):
        hub_api.list_repo_tree(repo, path_in_repo="no-such-dir").__next__()
    assert not hub_api.file_exists(repo, "missing.txt") and hub_api.file_exists(repo, ".gitattributes")


def test_restart_keeps_everything(tmp_path: Path, hub_env: HubServer):
    root = tmp_path / "persist"
    with HubServer(root) as first:
        api = HfApi(endpoint=first.url, token=HUB_TOKEN)
        api.create_repo(REPO)
        sha = api.upload_file(path_or_fileobj=b"\x00lfs", path_in_repo="m.bin", repo_id=REPO).oid
        api.create_tag(REPO, tag="t1")
    with HubServer(root) as second:
        api = HfApi(endpoint=second.url, token=HUB_TOKEN)
        assert _head(api) == sha and [t.name for t in api.list_repo_refs(REPO).tags] == ["t1"]
        path = hf_hub_download(REPO, "m.bin", revision="t1", endpoint=second.url, cache_dir=tmp_path / "c")
        assert Path(path).read_bytes() == b"\x00lfs"


def test_tokens_401_and_403(tmp_path: Path, hub_env: HubServer):
    with HubServer(tmp_path / "secure", token="rw", read_tokens=("ro",)) as server:
        writer, reader = HfApi(endpoint=server.url, token="rw"), HfApi(endpoint=server.url, token="ro")
        writer.create_repo(REPO)
        writer.upload_file(path_or_fileobj=b"\x00" * 100, path_in_repo="w.bin", repo_id=REPO)  # signed LFS PUT
        assert reader.list_repo_files(REPO) == [".gitattributes", "w.bin"]
        assert reader.whoami()["auth"]["accessToken"]["role"] == "read"
        with pytest.raises(HfHubHTTPError) as info:
            reader.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=REPO)
        assert info.value.response.status_code == 403
        # without a token a public repo reads, as on the Hub; writes and an invalid token are 401
        assert HfApi(endpoint=server.url, token=False).model_info(REPO).id == REPO
        with pytest.raises(HfHubHTTPError) as info:
            HfApi(endpoint=server.url, token="wrong").model_info(REPO)
        assert info.value.response.status_code == 401
        with pytest.raises(HfHubHTTPError) as info:
            HfApi(endpoint=server.url, token=False).create_repo("user/other")
        assert info.value.response.status_code == 401
        assert _raw(server, "GET", f"/{REPO}/resolve/main/w.bin")[0] == 200
        lfs_put = f"/{REPO}.git/info/lfs/objects/{'0' * 64}?size=1&exp=99999999999&sig=forged"
        assert _raw(server, "PUT", lfs_put, body=b"x")[0] == 403


def test_concurrent_committers_never_lose_updates(hub_api: HfApi, repo: str):
    errors: list[BaseException] = []

    def _commit(i: int) -> None:
        try:
            hub_api.upload_file(path_or_fileobj=f"{i}".encode(), path_in_repo=f"part{i}/f.txt", repo_id=repo)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=_commit, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert set(hub_api.list_repo_files(repo)) == {".gitattributes", *(f"part{i}/f.txt" for i in range(8))}
    assert len(hub_api.list_repo_commits(repo)) == 9


def _commit_body(*ops: dict, parent: str | None = None) -> bytes:
    value = {"summary": "raw", "description": "", **({"parentCommit": parent} if parent else {})}
    header = {"key": "header", "value": value}
    return b"".join(json.dumps(item).encode() + b"\n" for item in (header, *ops))


def _file_op(path: str, data: bytes = b"x") -> dict:
    return {"key": "file", "value": {"path": path, "content": base64.b64encode(data).decode(), "encoding": "base64"}}


@pytest.mark.parametrize(
    "path",
    [
        "/me/tiny/resolve/main/../../x",
        "/me/tiny/resolve/main/%2e%2e/%2e%2e/etc/passwd",
        "/me/tiny/resolve/main/a%2F..%2F..%2F..%2Fetc%2Fpasswd",
        "/me/tiny/resolve/..%2F..%2F..%2Fetc/passwd",
        "/../../etc/passwd",
        "/api/models/me/..%2F..%2Fetc/tree/main",
        "/api/models/../../etc",
        "/me/..%2F..%2Ftiny/resolve/main/.gitattributes",
        "/api/models/me/tiny/tree/main/..%2F..",
        "/me/tiny/resolve/main/%00",
    ],
)
def test_traversal_urls_are_refused(hub_env: HubServer, repo: str, path: str):
    status, _, body = _raw(hub_env, "GET", path)
    assert status in (400, 404), (path, status, body)
    assert b"root:" not in body


@pytest.mark.parametrize("bad", ["/etc/passwd", "../x", "a/../../x", "a//b", ".git/config", "a\\b", ""])
def test_traversal_in_commit_operations_is_refused(hub_api: HfApi, hub_env: HubServer, repo: str, bad: str):
    head = _head(hub_api)
    status, _, body = _raw(hub_env, "POST", f"/api/models/{repo}/commit/main", _commit_body(_file_op(bad)))
    assert status == 400, body
    assert _head(hub_api) == head
    create = json.dumps({"name": "..", "organization": "me"}).encode()
    assert _raw(hub_env, "POST", "/api/repos/create", create)[0] == 400


@pytest.mark.parametrize(
    "body",
    [
        b"not json at all",
        b'{"key": "file", "value": {"path": "a.txt", "content": "eA=="}}\n',  # no header
        _commit_body(_file_op("ok.txt"))[:-20],  # cut mid-line
        _commit_body(_file_op("ok"), {"key": "file", "value": {"path": "b", "content": "!!", "encoding": "base64"}}),
        _commit_body(_file_op("ok.txt"), {"key": "mystery", "value": {}}),
        _commit_body(_file_op("ok.txt"), {"key": "lfsFile", "value": {"path": "m", "algo": "sha256", "oid": "a" * 64}}),
        _commit_body(_file_op("ok.txt"), {"key": "deletedFile", "value": {"path": "absent.txt"}}),
        b'{"key": "header", "value": {"summary": ""}}\n',
    ],
)
def test_malformed_commits_change_nothing(hub_api: HfApi, hub_env: HubServer, repo: str, body: bytes):
    head = _head(hub_api)
    status, headers, data = _raw(hub_env, "POST", f"/api/models/{repo}/commit/main", body)
    assert status in (400, 404) and json.loads(data)["error"], (status, data)
    assert _head(hub_api) == head and hub_api.list_repo_files(repo) == [".gitattributes"]


def test_header_only_commit_succeeds_like_the_hub(hub_api: HfApi, hub_env: HubServer, repo: str):
    head = _head(hub_api)
    status, _, data = _raw(hub_env, "POST", f"/api/models/{repo}/commit/main", _commit_body(parent=head))
    assert status == 200
    new = json.loads(data)["commitOid"]
    assert new != head and _head(hub_api) == new and hub_api.list_repo_files(repo) == [".gitattributes"]


def test_body_limit_413(tmp_path: Path, hub_env: HubServer):
    with HubServer(tmp_path / "small", max_body=1000) as server:
        HfApi(endpoint=server.url, token=HUB_TOKEN).create_repo(REPO)
        status, _, _ = _raw(server, "POST", f"/api/models/{REPO}/commit/main", _commit_body(_file_op("a", b"x" * 5000)))
        assert status == 413


def test_preupload_modes_and_gitignore(hub_api: HfApi, hub_env: HubServer, repo: str):
    files = [
        {"path": "README.md", "size": 10, "sample": base64.b64encode(b"# hello").decode()},
        {"path": "model.safetensors", "size": 10, "sample": base64.b64encode(b"{}").decode()},
        {"path": "logs/x.bin", "size": 10, "sample": ""},
    ]
    body = json.dumps({"files": files, "gitIgnore": "logs/\n"}).encode()
    status, _, data = _raw(hub_env, "POST", f"/api/models/{repo}/preupload/main", body)
    modes = {f["path"]: (f["uploadMode"], f["shouldIgnore"]) for f in json.loads(data)["files"]}
    assert status == 200
    assert modes == {"README.md": ("regular", False), "model.safetensors": ("lfs", False), "logs/x.bin": ("lfs", True)}


def test_readme_yaml_is_validated(hub_api: HfApi, repo: str):
    hub_api.upload_file(path_or_fileobj=b"---\nlicense: mit\n---\n# card\n", path_in_repo="README.md", repo_id=repo)
    with pytest.raises(ValueError, match="Invalid metadata"):
        hub_api.upload_file(path_or_fileobj=b"---\n- a list\n---\n", path_in_repo="README.md", repo_id=repo)


def test_tree_pagination_and_paths_info(hub_api: HfApi, hub_env: HubServer, repo: str):
    hub_api.create_commit(repo, [CommitOperationAdd(f"d/{i}.txt", b"%d" % i) for i in range(5)], commit_message="m")
    hub_env.tree_page_size = 2
    hub_env.clear_log()
    entries = [e.path for e in hub_api.list_repo_tree(repo, recursive=True)]
    assert entries == [".gitattributes", "d", *(f"d/{i}.txt" for i in range(5))]
    assert len([r for r in hub_env.log if "/tree/" in r.path]) == 4
    infos = hub_api.get_paths_info(repo, ["d", "d/3.txt", "nope.txt"])
    assert [(type(i).__name__, i.path) for i in infos] == [("RepoFolder", "d"), ("RepoFile", "d/3.txt")]


def test_request_log_summary_and_faults(hub_api: HfApi, hub_env: HubServer, repo: str):
    hub_api.upload_file(path_or_fileobj=b"0123456789" * 10, path_in_repo="f.txt", repo_id=repo)
    path = f"/{repo}/resolve/main/f.txt"
    hub_env.clear_log()
    hub_env.add_fault("GET", r"/resolve/.*f\.txt$", "status:503")
    assert _raw(hub_env, "GET", path)[0] == 503
    hub_env.add_fault("GET", r"f\.txt$", "truncate", after_bytes=7)
    assert _raw(hub_env, "GET", path)[2] == b"0123456"
    hub_env.add_fault("GET", r"f\.txt$", "cut", after_bytes=5)
    with pytest.raises(http.client.IncompleteRead):
        _raw(hub_env, "GET", path)
    assert _raw(hub_env, "GET", path)[2] == b"0123456789" * 10 and hub_env.faults == []
    assert [r.status for r in hub_env.log] == [503, 200, 200, 200]
    assert [r.bytes_sent for r in hub_env.log[1:]] == [7, 5, 100]
    summary = hub_env.summary()[path]
    assert summary["requests"] == 4 and summary["bytes_sent"] == 112 + hub_env.log[0].bytes_sent


def test_download_survives_a_cut_connection(hub_api: HfApi, hub_env: HubServer, repo: str):
    data = bytes(range(256)) * 1000
    hub_api.upload_file(path_or_fileobj=data, path_in_repo="w.bin", repo_id=repo)
    hub_env.clear_log()
    hub_env.add_fault("GET", r"/resolve/main/w\.bin$", "cut", after_bytes=50_000)
    assert Path(hf_hub_download(repo, "w.bin", endpoint=hub_env.url)).read_bytes() == data  # the client retries
    gets = [r for r in hub_env.log if r.method == "GET"]
    assert [r.bytes_sent for r in gets] == [50_000, len(data)]


def test_dataset_repos_use_their_url_prefix(hub_api: HfApi, hub_env: HubServer):
    hub_api.create_repo("me/data", repo_type="dataset")
    hub_api.upload_file(path_or_fileobj=b"a,b\n", path_in_repo="d.csv", repo_id="me/data", repo_type="dataset")
    assert hub_api.list_repo_files("me/data", repo_type="dataset") == [".gitattributes", "d.csv"]
    path = hf_hub_download("me/data", "d.csv", repo_type="dataset", endpoint=hub_env.url)
    assert Path(path).read_bytes() == b"a,b\n"
    with pytest.raises(RepositoryNotFoundError):
        hub_api.model_info("me/data")


# -- GB-scale transfers: multipart uploads, resumed downloads, bounded memory ----------------------------------


def test_multipart_upload_through_the_client(hub_api: HfApi, hub_env: HubServer, repo: str, monkeypatch):
    from hub_export.embedded_hub import _multipart

    hub_env.multipart_threshold, hub_env.chunk_size = 50_000, 16_384
    big, small = bytes(range(256)) * 400 + b"tail", b"\x00" * 1000  # 7 parts (the last short); one basic PUT
    monkeypatch.setattr(_multipart, "_hash_file", None)  # parts arrive in order: hashed while they stream in
    hub_env.clear_log()
    ops = [CommitOperationAdd("w.bin", big), CommitOperationAdd("s.bin", small)]
    hub_api.create_commit(repo, ops, commit_message="multipart")
    puts = [r for r in hub_env.log if r.method == "PUT"]
    parts = [r for r in puts if "/multipart/" in r.path]
    assert [r.bytes_received for r in parts] == [16_384] * 6 + [len(big) - 6 * 16_384]
    assert [r.path.rsplit("/", 1)[1] for r in parts] == [str(n) for n in range(1, 8)]
    assert [r.bytes_received for r in puts if r not in parts] == [len(small)]  # below the threshold: one PUT
    done = [r for r in hub_env.log if r.method == "POST" and r.path.endswith(parts[0].path.rsplit("/", 2)[1])]
    assert [r.status for r in done] == [200]  # the completion URL
    assert Path(hf_hub_download(repo, "w.bin", endpoint=hub_env.url)).read_bytes() == big
    tree = {e.path: e for e in hub_api.list_repo_tree(repo)}
    assert tree["w.bin"].lfs.sha256 == hashlib.sha256(big).hexdigest() and tree["w.bin"].size == len(big)
    repo_dir = hub_env.store.root / "repos" / "models" / "me" / "tiny.git"
    assert list((repo_dir / "lfs" / "incoming").iterdir()) == []  # nothing left of the upload


def _batch(server: HubServer, data: bytes, transfers: list[str]) -> dict:
    body = {"operation": "upload", "transfers": transfers, "objects": [{"oid": _sha(data), "size": len(data)}]}
    status, _, raw = _raw(server, "POST", f"/{REPO}.git/info/lfs/objects/batch", json.dumps(body).encode())
    assert status == 200
    return json.loads(raw)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _path(url: str) -> str:
    return "/" + url.split("/", 3)[3]


def test_multipart_parts_in_any_order_retried_and_checked(hub_api: HfApi, hub_env: HubServer, repo: str):
    hub_env.multipart_threshold, hub_env.chunk_size = 1, 1000
    data = bytes(range(250)) * 10  # 2500 bytes: parts of 1000, 1000, 500
    assert _batch(hub_env, data, ["basic"])["objects"][0]["actions"]["upload"].get("header") is None
    answer = _batch(hub_env, data, ["basic", "multipart"])
    upload = answer["objects"][0]["actions"]["upload"]
    assert answer["transfer"] == "multipart" and upload["header"]["chunk_size"] == "1000"
    urls = {k: _path(v) for k, v in upload["header"].items() if k.isdigit()}
    assert sorted(urls) == ["00001", "00002", "00003"]
    done = _path(upload["href"])
    assert _raw(hub_env, "PUT", urls["00003"], data[2000:] + b"!")[0] == 400  # longer than the part
    assert _raw(hub_env, "PUT", urls["00003"].replace("sig=", "sig=0"), data[2000:])[0] == 403  # forged
    etags = {}
    for key, start in (("00003", 2000), ("00001", 0), ("00002", 1000), ("00001", 0)):  # any order, one retry
        status, headers, _ = _raw(hub_env, "PUT", urls[key], data[start : start + 1000])
        assert status == 200
        etags[int(key)] = headers["ETag"]
    parts = [{"partNumber": n, "etag": etags[n]} for n in (1, 2, 3)]
    wrong = json.dumps({"oid": _sha(data), "parts": [*parts[:2], {"partNumber": 3, "etag": '"nope"'}]})
    assert _raw(hub_env, "POST", done, wrong.encode())[0] == 400
    assert _raw(hub_env, "POST", done, json.dumps({"oid": _sha(data), "parts": parts[:2]}).encode())[0] == 400
    complete = json.dumps({"oid": _sha(data), "parts": parts}).encode()
    assert _raw(hub_env, "POST", done, complete)[0] == 200
    assert _raw(hub_env, "POST", done, complete)[0] == 200  # a retried completion is a no-op
    assert _raw(hub_env, "GET", f"/{repo}.git/info/lfs/objects/{_sha(data)}")[2] == data

    bad = bytes(2500)  # parts that do not hash to the announced oid are refused at completion
    upload = _batch(hub_env, data[::-1], ["multipart"])["objects"][0]["actions"]["upload"]
    urls = [_path(v) for k, v in sorted(upload["header"].items()) if k.isdigit()]
    parts = [
        {"partNumber": n + 1, "etag": _raw(hub_env, "PUT", u, bad[n * 1000 : n * 1000 + 1000])[1]["ETag"]}
        for n, u in enumerate(urls)
    ]
    body = json.dumps({"oid": _sha(data[::-1]), "parts": parts}).encode()
    assert _raw(hub_env, "POST", _path(upload["href"]), body)[0] == 400
    assert _raw(hub_env, "GET", f"/{repo}.git/info/lfs/objects/{_sha(data[::-1])}")[0] == 404


def test_interrupted_download_resumes_with_a_range_request(hub_api: HfApi, hub_env: HubServer, repo: str, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 64 * 1024)  # what the client keeps of a cut body
    lfs, text = bytes(range(256)) * 8192, b"0123456789abcdef" * 131072  # 2 MiB each: LFS, regular git blob
    hub_api.upload_file(path_or_fileobj=lfs, path_in_repo="w.bin", repo_id=repo)
    hub_api.upload_file(path_or_fileobj=text, path_in_repo="t.txt", repo_id=repo)
    for name, data in (("w.bin", lfs), ("t.txt", text)):
        hub_env.clear_log()
        hub_env.add_fault("GET", rf"/resolve/main/{re.escape(name)}$", "cut", after_bytes=1 << 20)
        assert Path(hf_hub_download(repo, name, endpoint=hub_env.url)).read_bytes() == data
        gets = [(r.status, r.range, r.bytes_sent) for r in hub_env.log if r.method == "GET"]
        assert gets == [(200, None, 1 << 20), (206, f"bytes={1 << 20}-", len(data) - (1 << 20))], name

    whole = _raw(hub_env, "GET", f"/{repo}/resolve/main/w.bin")[1]
    status, part, body = _raw(hub_env, "GET", f"/{repo}/resolve/main/w.bin", headers={"Range": "bytes=1000-"})
    assert status == 206 and body == lfs[1000:] and part["Content-Range"] == f"bytes 1000-{len(lfs) - 1}/{len(lfs)}"
    for key in ("ETag", "X-Repo-Commit", "X-Linked-Etag", "X-Linked-Size"):
        assert part[key] == whole[key], key  # they describe the whole file, so a resume can be checked
    status, _, body = _raw(hub_env, "GET", f"/{repo}/resolve/main/t.txt", headers={"Range": "bytes=1048570-1048585"})
    assert status == 206 and body == text[1048570:1048586]


def test_commits_stream_line_by_line(hub_api: HfApi, tmp_path: Path, hub_env: HubServer):
    with HubServer(tmp_path / "lines") as server:
        server.max_buffered_body = 4096  # one NDJSON line, not the whole payload
        HfApi(endpoint=server.url, token=HUB_TOKEN).create_repo(REPO)
        many = _commit_body(*(_file_op(f"f{i}.txt", b"%04d" % i * 200) for i in range(20)))  # 20 KB in all
        assert len(many) > 4 * 4096 and _raw(server, "POST", f"/api/models/{REPO}/commit/main", many)[0] == 200
        api = HfApi(endpoint=server.url, token=HUB_TOKEN)
        assert len(api.list_repo_files(REPO)) == 21
        one = _commit_body(_file_op("big.txt", b"x" * 4000))
        assert _raw(server, "POST", f"/api/models/{REPO}/commit/main", one)[0] == 413


def test_server_memory_stays_flat_while_a_large_file_streams(tmp_path: Path, hub_env: HubServer):
    psutil = pytest.importorskip("psutil")
    size, chunk = 256 << 20, 64 << 20
    cmd = [sys.executable, "-m", "hub_export.embedded_hub", "--root", str(tmp_path / "rss"), "--port", "0"]
    cmd += ["--multipart-threshold", str(size // 2), "--chunk-size", str(chunk)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    )
    try:
        url = proc.stdout.readline().split(" at ")[1].split()[0]
        server = psutil.Process(proc.pid)
        api = HfApi(endpoint=url, token=HUB_TOKEN)
        api.create_repo(REPO)  # the server has served a request: its baseline includes what that loads
        baseline, peak, done = server.memory_info().rss, [0], threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], server.memory_info().rss)
                done.wait(0.01)

        source = tmp_path / "big.bin"
        block = os.urandom(1 << 20)
        with open(source, "wb") as fh:
            for i in range(size >> 20):
                fh.write(block[:-8] + i.to_bytes(8, "little"))
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        api.upload_file(path_or_fileobj=str(source), path_in_repo="big.bin", repo_id=REPO)  # multipart
        api.upload_file(path_or_fileobj=str(source), path_in_repo="copy.bin", repo_id=REPO)  # stored: no transfer
        path = hf_hub_download(REPO, "big.bin", endpoint=url, cache_dir=tmp_path / "cache")
        done.set()
        sampler.join()
        assert os.path.getsize(path) == size and _file_sha(path) == _file_sha(source)
        growth = peak[0] - baseline
        assert growth < 32 << 20, f"server RSS grew by {growth >> 20} MiB while {size >> 20} MiB passed both ways"
    finally:
        proc.terminate()
        proc.wait(10)


def _file_sha(path: str | Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        while piece := fh.read(1 << 20):
            sha.update(piece)
    return sha.hexdigest()
