"""Pull requests and discussions on the embedded hub, through huggingface_hub's own calls: open, list, show with
events and diff, comment, rename, close and reopen, merge (refused on conflicts), who may do each."""

from __future__ import annotations

from pathlib import Path

import pytest
from hub_fixtures import http_status
from huggingface_hub import CommitOperationAdd, HfApi, hf_hub_download

from hub_export.embedded_hub._accounts import Accounts
from hub_export.embedded_hub.server import HubServer

REPO = "alice/model"


@pytest.fixture
def hub(tmp_path: Path):
    """alice owns REPO (public) and alice/secret (private); bob is another user; both have write tokens."""
    accounts = Accounts(tmp_path / "hub")
    for name in ("alice", "bob"):
        accounts.add_user(name)
    alice_token = accounts.create_token("alice", scope="write")[1]
    bob_token = accounts.create_token("bob", scope="write")[1]
    with HubServer(tmp_path / "hub") as server:
        alice, bob = HfApi(endpoint=server.url, token=alice_token), HfApi(endpoint=server.url, token=bob_token)
        alice.create_repo(REPO)
        alice.upload_file(path_or_fileobj=b"one\n", path_in_repo="a.txt", repo_id=REPO)
        alice.create_repo("alice/secret", private=True)
        yield server, alice, bob


def test_a_pull_request_is_listed_shown_discussed_and_merged(hub, tmp_path: Path):
    server, alice, _ = hub
    info = alice.upload_file(
        path_or_fileobj=b"two\n",
        path_in_repo="b.txt",
        repo_id=REPO,
        create_pr=True,
        commit_message="Add b",
        commit_description="| folder | parity |\n|---|---|\n| onnx/ | 1e-7 |",
    )
    assert info.pr_url == f"{server.url}/{REPO}/discussions/1" and info.pr_revision == "refs/pr/1"
    listed = list(alice.get_repo_discussions(REPO))
    assert [(d.num, d.title, d.status, d.is_pull_request, d.author) for d in listed] == [
        (1, "Add b", "open", True, "alice")
    ]
    details = alice.get_discussion_details(REPO, 1)
    assert details.target_branch == "refs/heads/main" and details.conflicting_files == []
    assert [e.type for e in details.events] == ["comment", "commit"]
    assert details.events[0].content.startswith("| folder | parity |") and details.events[1].summary == "Add b"
    assert "diff --git a/b.txt b/b.txt" in details.diff and "+two" in details.diff
    assert "b.txt" not in alice.list_repo_files(REPO)  # not merged yet

    comment = alice.comment_discussion(REPO, 1, "looks right")
    assert comment.content == "looks right" and comment.author == "alice"
    assert alice.rename_discussion(REPO, 1, "Add b.txt").new_title == "Add b.txt"
    assert alice.change_discussion_status(REPO, 1, "closed").new_status == "closed"
    assert http_status(lambda: alice.merge_pull_request(REPO, 1)) == 409  # a closed pull request does not merge
    alice.change_discussion_status(REPO, 1, "open")
    alice.merge_pull_request(REPO, 1, comment="merging")
    merged = alice.get_discussion_details(REPO, 1)
    assert merged.status == "merged" and merged.merge_commit_oid == alice.list_repo_commits(REPO)[0].commit_id
    assert sorted(alice.list_repo_files(REPO)) == [".gitattributes", "a.txt", "b.txt"]
    path = hf_hub_download(REPO, "b.txt", endpoint=server.url, cache_dir=tmp_path / "c", token=False)
    assert Path(path).read_bytes() == b"two\n"
    assert [d.status for d in alice.get_repo_discussions(REPO, discussion_status="closed")] == ["merged"]
    assert list(alice.get_repo_discussions(REPO, discussion_status="open")) == []


def test_merging_checks_the_base(hub, tmp_path: Path):
    _, alice, _ = hub
    alice.upload_file(path_or_fileobj=b"pr\n", path_in_repo="a.txt", repo_id=REPO, create_pr=True)
    alice.upload_file(path_or_fileobj=b"x\n", path_in_repo="c.txt", repo_id=REPO, create_pr=True)
    alice.upload_file(path_or_fileobj=b"main\n", path_in_repo="a.txt", repo_id=REPO)  # main changes a.txt too
    assert alice.get_discussion_details(REPO, 1).conflicting_files == ["a.txt"]
    assert http_status(lambda: alice.merge_pull_request(REPO, 1)) == 409
    alice.merge_pull_request(REPO, 2)  # c.txt only: main's own change to a.txt is kept
    files = {f: alice.hf_hub_download(REPO, f, cache_dir=tmp_path / "c") for f in ("a.txt", "c.txt")}
    assert Path(files["a.txt"]).read_text() == "main\n" and Path(files["c.txt"]).read_text() == "x\n"


def test_who_may_do_what(hub, tmp_path: Path):
    server, alice, bob = hub
    # anyone with a write token opens a pull request on a public repo, and commits to it
    opened = bob.create_commit(
        REPO, [CommitOperationAdd("bob.txt", b"from bob\n")], commit_message="From bob", create_pr=True
    )
    number = int(opened.pr_revision.rsplit("/", 1)[1])
    bob.upload_file(path_or_fileobj=b"more\n", path_in_repo="bob2.txt", repo_id=REPO, revision=opened.pr_revision)
    assert http_status(lambda: bob.merge_pull_request(REPO, number)) == 403  # only the owner merges
    assert http_status(lambda: alice.comment_discussion(REPO, number, "thanks")) == 200
    draft = alice.create_pull_request(REPO, "Draft from alice")
    assert draft.status == "draft"
    assert (
        http_status(
            lambda: bob.upload_file(
                path_or_fileobj=b"x", path_in_repo="x", repo_id=REPO, revision=f"refs/pr/{draft.num}"
            )
        )
        == 403
    )  # someone else's pull request
    assert http_status(lambda: bob.change_discussion_status(REPO, draft.num, "closed")) == 403
    alice.upload_file(path_or_fileobj=b"y", path_in_repo="y.txt", repo_id=REPO, revision=f"refs/pr/{draft.num}")
    assert alice.get_discussion_details(REPO, draft.num).status == "open"  # a commit opens a draft
    alice.merge_pull_request(REPO, number)
    assert {"bob.txt", "bob2.txt"} <= set(alice.list_repo_files(REPO))
    # without a token: read the discussions of a public repo, nothing else; a private repo's do not exist
    anonymous = HfApi(endpoint=server.url, token=False)
    assert [d.num for d in anonymous.get_repo_discussions(REPO)] == [draft.num, number]
    assert http_status(lambda: anonymous.create_discussion(REPO, "hi")) == 401
    assert http_status(lambda: list(bob.get_repo_discussions("alice/secret"))) == 404
    assert http_status(lambda: bob.create_discussion("alice/secret", "hi")) == 404
    # a discussion (not a pull request) has no ref and does not merge
    talk = bob.create_discussion(REPO, "A question", description="why?")
    assert not talk.is_pull_request and talk.events[0].content == "why?"
    assert http_status(lambda: alice.merge_pull_request(REPO, talk.num)) == 400
    assert f"refs/pr/{talk.num}" not in [
        r.ref for r in alice.list_repo_refs(REPO, include_pull_requests=True).pull_requests
    ]
    # bad input is a 4xx
    for path in ("discussions/abc", "discussions/99", "discussions?p=x", "discussions?type=nope"):
        assert 400 <= _get(server, f"/api/models/{REPO}/{path}") < 500, path


def _get(server: HubServer, path: str) -> int:
    import urllib.error
    import urllib.request

    try:
        return urllib.request.urlopen(server.url + path, timeout=10).status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_publish_create_pr_opens_a_reviewable_pull_request(hub, tmp_path: Path, capsys, monkeypatch):
    """The Action's review mode: ``hub-export publish --create-pr`` opens a pull request whose description is the
    exports table; the owner merges it with huggingface_hub, and the export then loads from main."""
    from cli_run import save_tiny_export

    from hub_export import ExportedModel
    from hub_export.cli.main import main

    server, alice, _ = hub
    folder = save_tiny_export(tmp_path / "pt2")
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    token = alice.token
    assert main(["publish", REPO, str(folder), "--create-pr", "--endpoint", server.url, "--token", token]) == 0
    capsys.readouterr()
    (opened,) = alice.get_repo_discussions(REPO, discussion_type="pull_request")
    description = alice.get_discussion_details(REPO, opened.num).events[0].content
    header, rule, row = description.splitlines()[:3]
    assert header.startswith("| folder | format | task | max abs diff vs eager (atol) | size |")
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:2] == ["pt2/", "dynamo"] and cells[3].endswith("(0.0001)") and cells[4].endswith("KB")
    alice.merge_pull_request(REPO, opened.num)
    loaded = ExportedModel.from_pretrained(
        REPO, subfolder="pt2", endpoint=server.url, token=token, cache_dir=tmp_path / "cache"
    )
    assert loaded.export_format.value == "dynamo"
