"""hub/publish.py, hub/card.py and hub/source.py against the embedded Hub, through the real huggingface_hub client."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import torch
from huggingface_hub import CommitOperationAdd, HfApi
from tiny_models import build

from hub_export import DynamoConfig, DynamoExporter, ExportedModel, HubError
from hub_export.embedded_hub.server import HubServer
from hub_export.hub.card import BEGIN, END
from hub_export.hub.publish import PublishResult, publish
from hub_export.hub.source import load_source

REPO = "me/tiny"


def _file(manifest: dict, path: str) -> dict:
    """The entry of ``path`` in an ``export.json``'s file list."""
    return next(entry for entry in manifest["files"] if entry["path"] == path)


@pytest.fixture(scope="module")
def llama():
    """The tiny llama, a dynamic and a static Dynamo export of it (exported once for the module)."""
    case = build("llama")
    dynamic = DynamoExporter().export(case.model, case.sample, config=DynamoConfig(dynamic=True))
    static = DynamoExporter().export(case.model, case.sample, config=DynamoConfig(dynamic=False))
    return case, dynamic, static


def _logits(model, inputs) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs).logits


def _commits(api: HfApi, repo: str = REPO, revision: str = "main") -> list[str]:
    return [c.commit_id for c in api.list_repo_commits(repo, revision=revision)]


def _readme(api: HfApi, repo: str = REPO, revision: str = "main") -> str:
    return Path(api.hf_hub_download(repo, "README.md", revision=revision)).read_text()


def test_round_trip_by_branch_tag_sha_and_pull_request(llama, hub_api: HfApi, hub_env: HubServer):
    case, dynamic, static = llama
    result = static.push_to_hub(REPO, tag="v1", endpoint=hub_env.url)
    assert isinstance(result, PublishResult) and result.changed and result.tag == "v1"
    assert len(result.commit_sha) == 40 and result.commit_sha == hub_api.model_info(REPO).sha
    local = _logits(static, case.sample)
    assert torch.allclose(local, _logits(case.model, case.sample), atol=1e-5)
    for revision in ("main", "v1", result.commit_sha):
        loaded = ExportedModel.from_pretrained(REPO, subfolder="pt2", revision=revision)
        assert torch.equal(_logits(loaded, case.sample), local), revision
    # a pull request: the dynamic export proposed for pt2/, main keeps the static one
    pr = dynamic.push_to_hub(REPO, create_pr=True, endpoint=hub_env.url)
    assert pr.changed and pr.pr_ref == "refs/pr/1" and pr.pr_url.endswith("/discussions/1")
    assert pr.tag is None and hub_api.model_info(REPO).sha == result.commit_sha
    proposed = ExportedModel.from_pretrained(REPO, subfolder="pt2", revision=pr.pr_ref)
    assert proposed.export_config.dynamic is True
    assert torch.equal(_logits(proposed, case.other), _logits(dynamic, case.other))
    assert ExportedModel.from_pretrained(REPO, subfolder="pt2", lazy=True).export_config.dynamic is False
    # a branch that does not exist yet is created from main
    branch = dynamic.push_to_hub(REPO, subfolder="pt2", revision="dynamic", endpoint=hub_env.url)
    assert branch.changed and hub_api.model_info(REPO, revision="dynamic").sha == branch.commit_sha
    assert _commits(hub_api, revision="dynamic")[1] == result.commit_sha
    assert (
        ExportedModel.from_pretrained(REPO, subfolder="pt2", revision="dynamic", lazy=True).export_config.dynamic
        is True
    )


def test_one_commit_replaces_the_subfolder_and_leaves_the_rest(llama, hub_api: HfApi, hub_env: HubServer):
    case, dynamic, static = llama
    hub_api.create_repo(REPO)
    hub_api.create_commit(
        REPO,
        [
            CommitOperationAdd(path_in_repo="config.json", path_or_fileobj=b'{"model_type": "llama"}\n'),
            CommitOperationAdd(path_in_repo="model.safetensors", path_or_fileobj=b"\0weights" * 64),
            CommitOperationAdd(path_in_repo="pt2/stale.bin", path_or_fileobj=b"\0old export file"),
            CommitOperationAdd(path_in_repo="pt2/nested/export.json", path_or_fileobj=b"{}"),
            CommitOperationAdd(path_in_repo="other/keep.txt", path_or_fileobj=b"keep me"),
        ],
        commit_message="model",
    )
    before = _commits(hub_api)
    result = dynamic.push_to_hub(REPO, commit_message="pt2 please")
    after = _commits(hub_api)
    assert after[0] == result.commit_sha and after[1:] == before  # exactly one commit on top
    assert hub_api.list_repo_commits(REPO)[0].title == "pt2 please"
    files = set(hub_api.list_repo_files(REPO))
    assert {"pt2/export.json", "pt2/config.json", "pt2/generation_config.json", "pt2/model.pt2", "README.md"} <= files
    assert "pt2/stale.bin" not in files  # left over from an older export: deleted in the same commit
    assert {"config.json", "model.safetensors", "other/keep.txt", "pt2/nested/export.json"} <= files
    remote = json.loads(Path(hub_api.hf_hub_download(REPO, "pt2/export.json")).read_text())
    entry = _file(remote, "model.pt2")
    tree = {f.path: f for f in hub_api.list_repo_tree(REPO, "pt2", recursive=True)}
    assert tree["pt2/model.pt2"].lfs.sha256 == entry["sha256"] and tree["pt2/model.pt2"].size == entry["size"]
    card = _readme(hub_api)
    assert "library_name: transformers" in card  # the repo holds a transformers model

    # several exports in ONE commit
    both = publish(REPO, {"pt2-static": static, "pt2-copy": dynamic})
    assert _commits(hub_api)[1] == result.commit_sha and both.commit_sha == _commits(hub_api)[0]
    for sub, dynamic_axes in (("pt2-static", False), ("pt2-copy", True)):
        assert ExportedModel.from_pretrained(REPO, subfolder=sub, lazy=True).export_config.dynamic is dynamic_axes
    assert all(f"`{sub}/`" in _readme(hub_api) for sub in ("pt2", "pt2-static", "pt2-copy", "pt2/nested"))


def test_identical_republish_makes_no_commit_and_uploads_nothing(llama, hub_api: HfApi, hub_env: HubServer, tmp_path):
    case, dynamic, _ = llama
    first = dynamic.push_to_hub(REPO)
    saved = dynamic.save_pretrained(tmp_path / "saved")
    assert first.uploaded_bytes > sum(p.stat().st_size for p in saved.iterdir())  # the export + README
    hub_env.clear_log()
    for again in (dynamic.push_to_hub(REPO), dynamic.push_to_hub(REPO, subfolder="pt2"), publish(REPO, {"pt2": saved})):
        assert again.changed is False and again.uploaded_bytes == 0 and again.commit_sha == first.commit_sha
    log = [r for r in hub_env.log if "/me/tiny" in r.path]
    assert sum(r.bytes_received for r in log) == 0
    assert not [r for r in log if r.method in ("POST", "PUT") and "paths-info" not in r.path]
    assert _commits(hub_api)[0] == first.commit_sha
    # pushing the export did not change the in-memory export (its files still save from the program)
    assert dynamic.components["model"]._files_dir in (None, saved.resolve())

    # only export.json changes: the .pt2 is not uploaded again
    manifest = json.loads((saved / "export.json").read_text())
    manifest["components"]["model"]["parity"]["atol"] = 0.5
    (saved / "export.json").write_text(json.dumps(manifest))
    hub_env.clear_log()
    changed = publish(REPO, {"pt2": saved})
    assert changed.changed and changed.uploaded_bytes == (saved / "export.json").stat().st_size + len(
        _readme(hub_api).encode()
    )
    assert not [r for r in hub_env.log if r.method == "PUT" or "/info/lfs/" in r.path]
    assert "atol 0.5" in _readme(hub_api)


def test_stale_parent_commit_fails_cleanly(llama, hub_api: HfApi, hub_env: HubServer):
    case, dynamic, static = llama
    old = dynamic.push_to_hub(REPO).commit_sha
    moved = static.push_to_hub(REPO, subfolder="static").commit_sha
    files = sorted(hub_api.list_repo_files(REPO))
    with pytest.raises(HubError, match="parent_commit"):
        static.push_to_hub(REPO, subfolder="pt2", parent_commit=old)
    assert hub_api.model_info(REPO).sha == moved and sorted(hub_api.list_repo_files(REPO)) == files
    ok = static.push_to_hub(REPO, subfolder="pt2", parent_commit=moved)
    assert ok.changed and _commits(hub_api)[1] == moved


def test_eight_concurrent_publishers(llama, hub_api: HfApi, hub_env: HubServer, tmp_path):
    case, dynamic, _ = llama
    folder = dynamic.save_pretrained(tmp_path / "export")
    hub_api.create_repo(REPO)
    results: dict[int, PublishResult] = {}
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            results[i] = publish(REPO, {f"pt2-{i}": folder})
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len({r.commit_sha for r in results.values()}) == 8 and all(r.changed for r in results.values())
    files = set(hub_api.list_repo_files(REPO))
    assert all(f"pt2-{i}/export.json" in files and f"pt2-{i}/model.pt2" in files for i in range(8))
    card = _readme(hub_api)
    assert all(f"`pt2-{i}/`" in card for i in range(8))  # the last commit's card lists every export
    assert len(_commits(hub_api)) == 9  # initial commit + one per publisher
    assert ExportedModel.from_pretrained(REPO, subfolder="pt2-5", revision=results[5].commit_sha, lazy=True).components


def test_card_keeps_text_outside_its_section(llama, hub_api: HfApi, hub_env: HubServer):
    case, dynamic, static = llama
    hub_api.create_repo(REPO)
    head = "---\nlicense: mit\nlibrary_name: my-lib\ntags:\n- custom\n---\n# My model\n\nHand-written intro.\n"
    hub_api.create_commit(
        REPO, [CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=head.encode())], commit_message="card"
    )
    dynamic.push_to_hub(REPO)
    card = _readme(hub_api)
    assert card.split("---\n", 2)[2].startswith("# My model\n\nHand-written intro.\n")
    front = card.split("---\n", 2)[1]
    assert "license: mit" in front and "library_name: my-lib" in front
    for tag in ("custom", "pt2", "torch-export", "hub-export"):
        assert f"- {tag}\n" in front
    assert card.count(BEGIN) == 1 and card.count(END) == 1

    # hand edits: inside the section are replaced, outside (before and after) are kept byte for byte
    before, rest = card.split(BEGIN)
    after = "\n\n## Citation\n\nKeep this.\n"
    edited = before + BEGIN + "\nstale text\n" + END + after
    hub_api.create_commit(
        REPO, [CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=edited.encode())], commit_message="edit"
    )
    static.push_to_hub(REPO, subfolder="static")
    card = _readme(hub_api)
    assert card.startswith(before + BEGIN) and card.endswith(END + after)
    assert "stale text" not in card and "`pt2/`" in card and "`static/`" in card
    assert 'ExportedModel.from_pretrained("me/tiny", subfolder="static")' in card


def test_load_source_records_the_commit_and_tags_it(llama, hub_api: HfApi, hub_env: HubServer, tmp_path):
    case, _, _ = llama
    case.model.save_pretrained(tmp_path / "source")
    hub_api.create_repo("me/source")
    upload = hub_api.upload_folder(repo_id="me/source", folder_path=tmp_path / "source")
    hub_api.create_commit(
        "me/source",
        [CommitOperationAdd(path_in_repo="pytorch_model.bin", path_or_fileobj=b"\0x")],
        commit_message="pickle that must not be fetched",
    )
    model = load_source("me/source", revision=upload.oid, endpoint=hub_env.url)
    assert type(model).__name__ == "LlamaForCausalLM"
    source = model._hub_export_source
    assert source.repo_id == "me/source" and source.revision == upload.oid and source.requested_revision == upload.oid
    assert source.endpoint == hub_env.url
    by_branch = load_source("me/source")
    assert by_branch._hub_export_source.revision == hub_api.model_info("me/source").sha != upload.oid
    assert by_branch._hub_export_source.requested_revision == "main"
    assert not [r for r in hub_env.log if r.path.endswith("pytorch_model.bin")]

    exported = DynamoExporter().export(model, case.sample, config=DynamoConfig(dynamic=False))
    assert exported.manifest().source == source
    result = exported.push_to_hub("me/tiny")
    tag = f"source-{upload.oid[:12]}"
    assert result.tag == tag
    assert {t.name: t.target_commit for t in hub_api.list_repo_refs("me/tiny").tags}[tag] == result.commit_sha
    remote = ExportedModel.from_pretrained("me/tiny", subfolder="pt2", revision=tag, lazy=True)
    assert remote.source == source
    card = _readme(hub_api)
    assert "base_model: me/source" in card and f"`me/source@{upload.oid[:12]}`" in card
    # the tag exists on another commit: left in place, and the result says so
    again = exported.push_to_hub("me/tiny", subfolder="pt2-again")
    assert again.changed and again.tag is None and any(tag in note for note in again.notes)
