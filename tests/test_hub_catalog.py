"""The rest of the surface a team uses, through huggingface_hub: list_models (search, author, tags, sort, pages),
complete model_info, repo settings, move, duplicate, super-squash, short commit shas; bad parameters are 4xx."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest
from hub_fixtures import http_status
from huggingface_hub import HfApi, hf_hub_download

from hub_export.embedded_hub._accounts import Accounts
from hub_export.embedded_hub.server import HubServer

CARD = """---
library_name: transformers
pipeline_tag: text-generation
tags:
- hub-export
- {fmt}
---
# {name}
"""


@pytest.fixture
def hub(tmp_path: Path):
    """alice: alice/llama-onnx, alice/llama-openvino (cards tagged with their format), alice/private-onnx
    (private); bob: bob/bert."""
    accounts = Accounts(tmp_path / "hub")
    for name in ("alice", "bob"):
        accounts.add_user(name)
    tokens = {n: accounts.create_token(n, scope="write")[1] for n in ("alice", "bob")}
    with HubServer(tmp_path / "hub") as server:
        alice, bob = (HfApi(endpoint=server.url, token=tokens[n]) for n in ("alice", "bob"))
        for name, fmt, private in (
            ("llama-onnx", "onnx", False),
            ("llama-openvino", "openvino", False),
            ("private-onnx", "onnx", True),
        ):
            alice.create_repo(f"alice/{name}", private=private)
            card = CARD.format(fmt=fmt, name=name).encode()
            alice.upload_file(path_or_fileobj=card, path_in_repo="README.md", repo_id=f"alice/{name}")
            alice.upload_file(path_or_fileobj=b"\0" * 2048, path_in_repo=f"{fmt}/model.bin", repo_id=f"alice/{name}")
        bob.create_repo("bob/bert")
        yield server, alice, bob


def test_list_models_filters_sorts_and_pages(hub):
    server, alice, bob = hub
    anonymous = HfApi(endpoint=server.url, token=False)
    assert [m.id for m in anonymous.list_models()] == ["alice/llama-onnx", "alice/llama-openvino", "bob/bert"]
    assert [m.id for m in alice.list_models(filter="onnx")] == ["alice/llama-onnx", "alice/private-onnx"]
    assert [m.id for m in bob.list_models(filter="onnx")] == ["alice/llama-onnx"]  # not the private one
    assert [m.id for m in anonymous.list_models(author="bob")] == ["bob/bert"]
    assert [m.id for m in anonymous.list_models(search="OPENVINO")] == ["alice/llama-openvino"]
    assert [m.id for m in anonymous.list_models(filter=["hub-export", "openvino"])] == ["alice/llama-openvino"]
    assert [m.id for m in anonymous.list_models(pipeline_tag="text-generation")] == [
        "alice/llama-onnx",
        "alice/llama-openvino",
    ]
    newest = [m.id for m in anonymous.list_models(sort="last_modified")]
    assert newest[0] == "bob/bert" and len(newest) == 3
    assert len(list(anonymous.list_models(limit=2))) == 2
    server.tree_page_size = 1  # pages of one: the client follows the Link headers
    assert [m.id for m in anonymous.list_models()] == ["alice/llama-onnx", "alice/llama-openvino", "bob/bert"]
    server.tree_page_size = 1000
    (full,) = anonymous.list_models(search="llama-onnx", full=True, cardData=True)
    assert sorted(s.rfilename for s in full.siblings) == [".gitattributes", "README.md", "onnx/model.bin"]
    assert full.card_data.library_name == "transformers" and "onnx" in full.tags


def test_model_info_is_complete(hub):
    _, alice, _ = hub
    info = alice.model_info("alice/llama-onnx", files_metadata=True)
    assert info.library_name == "transformers" and info.pipeline_tag == "text-generation"
    assert set(info.tags) >= {"hub-export", "onnx", "transformers", "text-generation"}
    assert info.card_data["tags"] == ["hub-export", "onnx"] and info.last_modified is not None
    sizes = {s.rfilename: s.size for s in info.siblings}
    assert sizes["onnx/model.bin"] == 2048 and sizes["README.md"] > 0


def test_settings_move_duplicate_squash_and_short_shas(hub, tmp_path: Path):
    server, alice, bob = hub
    repo = "alice/llama-onnx"
    alice.update_repo_settings(repo, private=True)
    assert http_status(lambda: bob.model_info(repo)) == 404 and alice.model_info(repo).private
    assert http_status(lambda: bob.update_repo_settings(repo, private=False)) == 404  # cannot even see it
    alice.update_repo_settings(repo, private=False, gated="manual")
    assert alice.model_info(repo).gated == "manual"
    assert http_status(lambda: bob.update_repo_settings(repo, gated=False)) == 403

    head = alice.list_repo_commits(repo)[0].commit_id
    short = hf_hub_download(repo, "README.md", revision=head[:7], endpoint=server.url, cache_dir=tmp_path / "c")
    assert Path(short).read_text().startswith("---")
    assert alice.model_info(repo, revision=head[:10]).sha == head

    copy = bob.duplicate_repo(repo, "bob/llama-copy")
    assert copy.repo_id == "bob/llama-copy"
    assert bob.list_repo_commits("bob/llama-copy")[0].commit_id == head  # the whole history
    assert http_status(lambda: bob.duplicate_repo(repo, "alice/theft")) == 403
    assert http_status(lambda: bob.move_repo(repo, "bob/taken")) == 403
    alice.move_repo(repo, "alice/llama-onnx-renamed")
    assert http_status(lambda: alice.model_info(repo)) == 404
    renamed = "alice/llama-onnx-renamed"
    assert alice.list_repo_commits(renamed)[0].commit_id == head
    assert bob.model_info("bob/llama-copy").sha == head  # the copy keeps its own objects

    before = len(alice.list_repo_commits(renamed))
    alice.super_squash_history(renamed, commit_message="one commit")
    commits = alice.list_repo_commits(renamed)
    assert before > 1 and len(commits) == 1 and commits[0].title == "one commit"
    assert sorted(alice.list_repo_files(renamed)) == [".gitattributes", "README.md", "onnx/model.bin"]
    assert http_status(lambda: bob.super_squash_history("bob/bert", branch="nope")) == 404


@pytest.mark.parametrize(
    "method, path, body",
    [
        ("GET", "/api/models?limit=abc", None),
        ("GET", "/api/models?cursor=-1", None),
        ("GET", "/api/models?sort=bogus", None),
        ("GET", "/api/models?direction=up", None),
        ("GET", "/api/models/alice/llama-openvino/tree/main?limit=abc", None),
        ("GET", "/api/models/alice/llama-openvino/tree/main?cursor=x", None),
        ("GET", "/api/models/alice/llama-openvino/revision/zzzz", None),
        ("GET", "/api/models/alice/llama-openvino/revision/%ff", None),
        ("GET", "/api/models/alice/llama-openvino/discussions?p=-3", None),
        ("PUT", "/api/models/alice/llama-openvino/settings", b'{"private": "yes"}'),
        ("PUT", "/api/models/alice/llama-openvino/settings", b"[1, 2]"),
        ("POST", "/api/models/alice/llama-openvino/duplicate", b'{"repository": "../x"}'),
        ("POST", "/api/repos/move", b'{"fromRepo": "alice/llama-openvino", "toRepo": "a/b/c"}'),
        ("POST", "/api/models/alice/llama-openvino/super-squash/..", b"{}"),
        ("POST", "/api/models/alice/llama-openvino/discussions", b'{"title": 5}'),
        ("POST", "/api/models/alice/llama-openvino/commit/main", b"not json\n"),
        ("POST", "/api/models/alice/llama-openvino/paths-info/main", b'{"paths": 3}'),
        ("GET", "/alice/llama-openvino/resolve/main/..%2f..%2fhub.json", None),
    ],
)
def test_bad_parameters_are_4xx(hub, method, path, body):
    server, alice, _ = hub
    request = urllib.request.Request(
        server.url + path,
        data=body,
        method=method,
        headers={"Authorization": f"Bearer {alice.token}", "Content-Type": "application/json"},
    )
    try:
        status = urllib.request.urlopen(request, timeout=10).status
    except urllib.error.HTTPError as exc:
        status = exc.code
    assert 400 <= status < 500, (method, path, status)
