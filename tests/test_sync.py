"""hub/sync.py and the `sync` / `publish` commands against the embedded Hub, through the real huggingface_hub client."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest
import torch
from huggingface_hub import HfApi

from hub_export import ExportedModel
from hub_export.cli.main import main
from hub_export.embedded_hub.server import HubServer
from hub_export.errors import ConfigError
from hub_export.hub.sync import load_sync_config, plan_sync, sync

REPO = "me/tiny-llama"


def _tiny_llama(seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config).eval()


def upload_source(api: HfApi, folder: Path, seed: int = 0, repo: str = REPO) -> str:
    """Save a tiny Llama with save_pretrained and upload it; returns the new head sha."""
    _tiny_llama(seed).save_pretrained(folder)
    api.create_repo(repo, exist_ok=True)
    return api.upload_folder(repo_id=repo, folder_path=str(folder), commit_message=f"weights seed {seed}").oid


@pytest.fixture
def source(hub_api: HfApi, tmp_path: Path) -> str:
    """The source repo's head sha (a tiny Llama uploaded to the embedded Hub)."""
    return upload_source(hub_api, tmp_path / "model-0")


def _commits(api: HfApi, repo: str = REPO) -> list[str]:
    return [c.commit_id for c in api.list_repo_commits(repo)]


def _outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def _weights_requests(server: HubServer) -> list[str]:
    return [r.path for r in server.log if r.path.endswith(".safetensors")]


def test_sync_exports_once_then_is_up_to_date_then_follows_a_new_commit(
    source: str, hub_api: HfApi, hub_env: HubServer, tmp_path: Path, monkeypatch, capsys
):
    out, summary = tmp_path / "github_output", tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    # 1. first run: export + one commit on top of the source commit, tagged source-<12 hex>
    before = _commits(hub_api)
    assert main(["sync", REPO, "--format", "dynamo"]) == 0
    commits = _commits(hub_api)
    assert before[0] == source and commits[1:] == before
    outputs = _outputs(out)
    assert outputs == {"updated": "true", "source-sha": source, "commit-sha": commits[0], "pr-url": ""}
    tags = {t.name: t.target_commit for t in hub_api.list_repo_refs(REPO).tags}
    assert tags == {f"source-{source[:12]}": commits[0]}
    manifest = json.loads(Path(hub_api.hf_hub_download(REPO, "pt2/export.json")).read_text())
    assert manifest["source"]["revision"] == source and manifest["config"]["dynamic"] is True
    assert "| dynamo | `pt2/` | exported |" in summary.read_text() and commits[0] in summary.read_text()
    loaded = ExportedModel.from_pretrained(REPO, subfolder="pt2")
    inputs = {"input_ids": torch.randint(3, 64, (3, 5)), "attention_mask": torch.ones(3, 5, dtype=torch.int64)}
    with torch.no_grad():
        assert torch.allclose(loaded(**inputs).logits, _tiny_llama(0)(**inputs).logits, atol=1e-5)

    # 2. second run: the head is now our own export commit, but its model files are those of `source`
    hub_env.clear_log()
    out.unlink()
    capsys.readouterr()
    assert main(["sync", REPO, "--format", "dynamo"]) == 0
    assert "up to date" in capsys.readouterr().out
    assert _weights_requests(hub_env) == [] and _commits(hub_api) == commits
    assert _outputs(out) == {"updated": "false", "source-sha": commits[0], "commit-sha": commits[0], "pr-url": ""}
    assert not [r for r in hub_env.log if r.method in ("POST", "PUT") and "paths-info" not in r.path]

    # 3. a config change is stale; --dry-run says why and changes nothing
    config = tmp_path / "sync.yaml"
    config.write_text("dynamo:\n  dynamic: false\n")
    hub_env.clear_log()
    assert main(["sync", REPO, "--format", "dynamo", "--config", str(config), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "config changed" in printed and "dynamic: True -> False" in printed
    assert _weights_requests(hub_env) == [] and _commits(hub_api) == commits

    # 4. new weights: dry run reports the older source sha, the real run re-exports and records the new sha
    new = upload_source(hub_api, tmp_path / "model-1", seed=1)
    assert main(["sync", REPO, "--format", "dynamo", "--dry-run"]) == 0
    assert f"older source sha - exported from {source[:12]}, source is at {new[:12]}" in capsys.readouterr().out
    assert _commits(hub_api)[0] == new
    result = sync(REPO, ["dynamo"])
    assert result.updated and result.plan.source_sha == new and result.tag == f"source-{new[:12]}"
    assert _commits(hub_api)[:2] == [result.commit_sha, new]
    manifest = json.loads(Path(hub_api.hf_hub_download(REPO, "pt2/export.json")).read_text())
    assert manifest["source"]["revision"] == new
    assert plan_sync(REPO, ["dynamo"]).up_to_date


def test_a_failing_format_publishes_nothing(source: str, hub_api: HfApi, hub_env: HubServer, monkeypatch, capsys):
    import dataclasses

    from hub_export import formats

    class Broken:
        def export(self, *args, **kwargs):
            raise RuntimeError("simulated lowering failure")

    broken = dataclasses.replace(formats.backend_for("onnx"), exporter_class=Broken)
    monkeypatch.setitem(formats._BACKENDS, "onnx", broken)
    assert main(["sync", REPO, "--format", "dynamo", "--format", "onnx"]) == 1
    err = capsys.readouterr().err
    assert "Exporting onnx failed: simulated lowering failure" in err and "Nothing was published" in err
    assert _commits(hub_api)[0] == source and hub_api.list_repo_refs(REPO).tags == []


def test_two_concurrent_syncs_make_one_commit(source: str, hub_api: HfApi, hub_env: HubServer, monkeypatch):
    from hub_export.hub import sync as sync_module

    before = _commits(hub_api)

    real = sync_module._export_all
    planned = threading.Barrier(2, timeout=120)
    exporting = threading.Lock()

    def export_after_both_planned(*args, **kwargs):
        planned.wait()  # both syncs planned against the same target head
        with exporting:  # one torch.export at a time in this process
            return real(*args, **kwargs)

    monkeypatch.setattr(sync_module, "_export_all", export_after_both_planned)
    results, errors = [], []

    def worker():
        try:
            results.append(sync(REPO, ["dynamo"]))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(r.updated for r in results) == [False, True]
    commits = _commits(hub_api)
    assert commits[1:] == before and before[0] == source
    loser = next(r for r in results if not r.updated)
    assert any("another sync already published" in n for n in loser.notes) and loser.commit_sha == commits[0]


def test_publish_split_mode_commits_folders_together(
    source: str, hub_api: HfApi, hub_env: HubServer, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    assert main(["export", REPO, "--format", "dynamo", "--output", str(tmp_path / "a")]) == 0
    copy = tmp_path / "b"
    shutil.copytree(tmp_path / "a", copy)
    # mismatched sources are refused before anything is committed
    data = json.loads((copy / "export.json").read_text())
    data["source"]["revision"] = "0" * 40
    (copy / "export.json").write_text(json.dumps(data))
    assert main(["publish", "me/exports", str(tmp_path / "a"), str(copy), "--subfolder-of", f"{copy}=pt2-copy"]) == 1
    assert "different models" in capsys.readouterr().err and not hub_api.repo_exists("me/exports")
    # an export recorded from a later commit whose model files are the same (the repo received an export since) is
    # from the same model, as sync counts it
    later = hub_api.upload_file(path_or_fileobj=b"# notes", path_in_repo="NOTES.md", repo_id=REPO).oid
    data["source"]["revision"] = later
    (copy / "export.json").write_text(json.dumps(data))
    assert main(["publish", "me/later", str(tmp_path / "a"), str(copy), "--subfolder-of", f"{copy}=pt2-copy"]) == 0
    capsys.readouterr()
    # two folders of one format without --subfolder-of collide
    data["source"]["revision"] = source
    (copy / "export.json").write_text(json.dumps(data))
    assert main(["publish", "me/exports", str(tmp_path / "a"), str(copy)]) == 1
    assert "both go to pt2/" in capsys.readouterr().err
    assert main(["publish", "me/exports", str(tmp_path / "a"), str(copy), "--subfolder-of", f"{copy}=pt2-copy"]) == 0
    commits = _commits(hub_api, "me/exports")
    assert len(commits) == 2  # the repo's creation + ONE commit with both folders
    files = set(hub_api.list_repo_files("me/exports"))
    assert {"pt2/model.pt2", "pt2-copy/model.pt2", "pt2/export.json", "pt2-copy/export.json"} <= files
    assert {t.name for t in hub_api.list_repo_refs("me/exports").tags} == {f"source-{source[:12]}"}
    assert _outputs(out) == {"updated": "true", "source-sha": source, "commit-sha": commits[0], "pr-url": ""}


def test_config_file_is_validated_and_tasks_are_checked(tmp_path: Path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"onnx": {"opset_version": 18, "fast": True}}))
    with pytest.raises(ConfigError, match=r"\$\.onnx: Additional properties are not allowed \('fast'"):
        load_sync_config(bad)
    unknown = tmp_path / "unknown.yml"
    unknown.write_text("tflite: {}\n")
    with pytest.raises(ConfigError, match="tflite"):
        load_sync_config(unknown)
    good = tmp_path / "good.yaml"
    good.write_text("onnx:\n  opset_version: 18\n  optimize: false\n")
    assert load_sync_config(good) == {"onnx": {"opset_version": 18, "optimize": False}}
    with pytest.raises(ConfigError, match="Unknown task 'summarize-everything'; known tasks: text-generation"):
        sync(REPO, ["dynamo"], task="summarize-everything")
    with pytest.raises(ConfigError, match="Task 'fill-mask' is not generative"):
        sync(REPO, ["dynamo"], task="fill-mask", generation=True)


def test_several_formats_go_to_another_repo_in_one_commit(source: str, hub_api: HfApi, hub_env: HubServer):
    result = sync(REPO, ["dynamo", "onnx"], target="me/exports")
    assert result.updated and result.tag == f"source-{source[:12]}"
    assert {sub: info["format"] for sub, info in result.exports.items()} == {"pt2": "dynamo", "onnx": "onnx"}
    # no --task: graph exports, which cannot generate, so they claim no task (no pipeline_tag on the card)
    assert {info["task"] for info in result.exports.values()} == {None}
    assert not any(info["generation"] for info in result.exports.values())  # no --task: graph exports, as before
    assert all(info["parity"] <= info["atol"] and info["bytes"] > 0 for info in result.exports.values())
    commits = hub_api.list_repo_commits("me/exports")
    assert len(commits) == 2 and commits[0].commit_id == result.commit_sha  # repo creation + ONE commit
    files = set(hub_api.list_repo_files("me/exports"))
    # a causal LM's forward is decoder_model.onnx (docs/interop.md); the root gets the source's config, which the
    # formats' own tools read there (with transformers.js's flag for the ONNX weights file)
    assert {"pt2/model.pt2", "onnx/decoder_model.onnx", "onnx/export.json", "pt2/export.json", "config.json"} <= files
    root_config = json.loads(Path(hub_api.hf_hub_download("me/exports", "config.json")).read_text())
    assert root_config["transformers.js_config"] == {"use_external_data_format": True}
    assert _commits(hub_api)[0] == source  # the source repo is untouched
    hub_env.clear_log()
    assert plan_sync(REPO, ["onnx", "dynamo"], target="me/exports").up_to_date and _weights_requests(hub_env) == []


def test_create_pr_proposes_the_export_and_leaves_main(
    source: str, hub_api: HfApi, hub_env: HubServer, tmp_path, monkeypatch
):
    out = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    assert main(["sync", REPO, "--format", "dynamo", "--create-pr"]) == 0
    outputs = _outputs(out)
    assert outputs["updated"] == "true" and outputs["pr-url"].endswith("/discussions/1")
    assert _commits(hub_api)[0] == source and hub_api.list_repo_refs(REPO).tags == []
    proposed = ExportedModel.from_pretrained(REPO, subfolder="pt2", revision="refs/pr/1")
    assert proposed.manifest().source.revision == source


def test_a_field_left_to_the_backends_default_is_not_a_change() -> None:
    """ExecuTorch's generation export records ``external_data: True`` for a config that left it unset: sync found it
    "config changed" at every run and exported again (tests/test_consumers.py checks a real sync end to end)."""
    from hub_export.hub.sync import _config_changes

    recorded = {"export_format": "executorch", "dynamic": True, "external_data": True}
    assert _config_changes({"export_format": "executorch", "dynamic": True, "external_data": None}, recorded) == []
    assert _config_changes({"export_format": "executorch", "dynamic": True}, recorded) == []
    assert _config_changes({"export_format": "executorch", "dynamic": False}, recorded) == ["dynamic"]
    assert _config_changes({"export_format": "executorch", "external_data": False}, recorded) == ["external_data"]
