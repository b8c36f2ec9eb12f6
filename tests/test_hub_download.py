"""hub/download.py and the push/pull CLI against the embedded Hub: partial, cached, verified downloads."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import torch
from huggingface_hub import CommitOperationAdd, HfApi, constants, try_to_load_from_cache
from tiny_models import build

from hub_export import (
    DynamoConfig,
    DynamoExporter,
    ExportedComponent,
    ExportedModel,
    HubError,
    IntegrityError,
    ManifestError,
    OnnxConfig,
    OnnxExporter,
)
from hub_export.cli.main import main
from hub_export.embedded_hub.server import HubServer
from hub_export.formats import ExportFormat
from hub_export.hub.publish import publish

REPO = "me/tiny"
SIDE = ("export.json", "config.json", "generation_config.json")


def _file(manifest: dict, path: str) -> dict:
    """The entry of ``path`` in an ``export.json``'s file list."""
    return next(entry for entry in manifest["files"] if entry["path"] == path)


@pytest.fixture(scope="module")
def exports():
    """The tiny llama with two static Dynamo exports (two input shapes) and a dynamic ONNX export."""
    case = build("llama")
    first = DynamoExporter().export(case.model, case.sample, config=DynamoConfig(dynamic=False))
    second = DynamoExporter().export(case.model, case.other, config=DynamoConfig(dynamic=False))
    onnx = OnnxExporter().export(case.model, case.sample, config=OnnxConfig(dynamic=True))
    return case, first, second, onnx


def _logits(model, inputs) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs).logits


def _fetched(server: HubServer) -> dict[str, list[tuple[str, int]]]:
    """Repo file path -> [(method, body bytes sent)] for every file request in the log."""
    out: dict[str, list[tuple[str, int]]] = {}
    for record in server.log:
        assert "/resolve/" in record.path or not record.path.startswith("/me/"), record
        if "/resolve/" in record.path:
            path = record.path.split("/resolve/", 1)[1].split("/", 1)[1]
            out.setdefault(path, []).append((record.method, record.bytes_sent))
    return out


def _sizes(api: HfApi, folder: str) -> dict[str, int]:
    return {f.path: f.size for f in api.list_repo_tree(REPO, folder, recursive=True)}


@pytest.fixture
def repo(exports, hub_api: HfApi, hub_env: HubServer) -> str:
    """A repo with model weights at the root, a static Dynamo export in pt2/ and an ONNX export in onnx/."""
    case, first, _, onnx = exports
    hub_api.create_repo(REPO)
    hub_api.create_commit(
        REPO,
        [
            CommitOperationAdd(path_in_repo="config.json", path_or_fileobj=b'{"model_type": "llama"}\n'),
            CommitOperationAdd(path_in_repo="model.safetensors", path_or_fileobj=os.urandom(100_000)),
        ],
        commit_message="weights",
    )
    return publish(REPO, {"pt2": first, "onnx": onnx}).commit_sha


def test_loading_one_export_fetches_only_its_files(exports, repo: str, hub_api: HfApi, hub_env: HubServer, tmp_path):
    case, first, _, onnx = exports
    sizes = {**_sizes(hub_api, "pt2"), **_sizes(hub_api, "onnx")}
    hub_env.clear_log()
    loaded = ExportedModel.from_pretrained(REPO, subfolder="pt2", cache_dir=tmp_path / "a")
    fetched = _fetched(hub_env)
    assert set(fetched) == {f"pt2/{n}" for n in (*SIDE, "model.pt2")}  # no weights, nothing of onnx/
    for path, calls in fetched.items():
        assert sorted(m for m, _ in calls) == ["GET", "HEAD"], path
        assert sum(n for _, n in calls) == sizes[path], path
    assert len(hub_env.log) == 8
    assert torch.equal(_logits(loaded, case.sample), _logits(first, case.sample))

    # ONNX round trip by commit sha, from a cold cache: the five files of onnx/, each once
    hub_env.clear_log()
    remote = ExportedModel.from_pretrained(REPO, subfolder="onnx", revision=repo, cache_dir=tmp_path / "b")
    fetched = _fetched(hub_env)
    assert set(fetched) == {f"onnx/{n}" for n in (*SIDE, "decoder_model.onnx", "decoder_model.onnx_data")}
    assert all(sum(n for _, n in calls) == sizes[path] for path, calls in fetched.items())
    assert remote.export_format is ExportFormat.ONNX
    expected = _logits(case.model, case.other)
    assert torch.allclose(_logits(remote, case.other), _logits(onnx, case.other), atol=1e-6)
    assert float((_logits(remote, case.other) - expected).abs().max()) < 1e-4


def test_components_subset_and_lazy(exports, hub_api: HfApi, hub_env: HubServer, tmp_path):
    case, first, second, _ = exports
    parts = {
        name: ExportedComponent(
            name,
            ExportFormat.DYNAMO,
            export.program,
            dataclasses.replace(export.components["model"].metadata, files=()),
        )
        for name, export in (("first", first), ("second", second))
    }
    duo = ExportedModel(ExportFormat.DYNAMO, first.export_config, parts, config=case.model.config)
    duo.push_to_hub(REPO, subfolder="duo")
    sizes = _sizes(hub_api, "duo")
    assert {"duo/first.pt2", "duo/second.pt2", "duo/shared.safetensors"} <= set(sizes)  # one model: shared weights

    hub_env.clear_log()
    only = ExportedModel.from_pretrained(REPO, subfolder="duo", components=["second"], cache_dir=tmp_path / "a")
    assert list(only.components) == ["second"]
    fetched = _fetched(hub_env)  # only listed files: the component's own and the shared weights
    assert set(fetched) == {"duo/export.json", "duo/config.json", "duo/second.pt2", "duo/shared.safetensors"}
    assert sum(n for _, n in fetched["duo/shared.safetensors"]) == sizes["duo/shared.safetensors"]  # once
    assert torch.equal(_logits(only.components["second"].runner(), case.other), _logits(second, case.other))

    hub_env.clear_log()
    lazy = ExportedModel.from_pretrained(REPO, subfolder="duo", lazy=True, cache_dir=tmp_path / "b")
    assert set(_fetched(hub_env)) == {"duo/export.json", "duo/config.json"}
    assert lazy.config.model_type == "llama" and lazy.generation_config is None
    hub_env.clear_log()
    assert torch.equal(_logits(lazy.components["first"].runner(), case.sample), _logits(first, case.sample))
    assert set(_fetched(hub_env)) == {"duo/first.pt2", "duo/shared.safetensors"}
    assert lazy.components["first"].loaded and not lazy.components["second"].loaded
    assert "not loaded" in repr(lazy.components["second"]) and not lazy.components["second"].loaded
    with pytest.raises(ManifestError, match="third"):
        ExportedModel.from_pretrained(REPO, subfolder="duo", components=["third"])


def test_warm_cache_by_sha_makes_no_request_and_offline_loads(
    exports, repo: str, hub_env: HubServer, monkeypatch: pytest.MonkeyPatch
):
    case, first, _, _ = exports
    # without generation_config.json: its absence must be answered from the cache too
    bare = ExportedModel(first.export_format, first.export_config, first.components, config=first.config)
    commit = bare.push_to_hub(REPO, subfolder="bare").commit_sha
    ExportedModel.from_pretrained(REPO, subfolder="bare")  # by branch: fills the cache
    hub_env.clear_log()
    warm = ExportedModel.from_pretrained(REPO, subfolder="bare", revision=commit)
    assert hub_env.log == []
    assert warm.generation_config is None
    assert torch.equal(_logits(warm, case.sample), _logits(first, case.sample))

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    for revision in ("main", commit):
        offline = ExportedModel.from_pretrained(REPO, subfolder="bare", revision=revision)
        assert torch.equal(_logits(offline, case.sample), _logits(first, case.sample))
    with pytest.raises(HubError, match="HF_HUB_OFFLINE"):
        ExportedModel.from_pretrained(REPO, subfolder="pt2", revision=repo)
    assert hub_env.log == []


def test_tampered_files_raise_integrity_error_and_are_evicted(
    exports, repo: str, hub_api: HfApi, hub_env: HubServer, tmp_path
):
    case, first, _, _ = exports
    remote = json.loads(Path(hub_api.hf_hub_download(REPO, "pt2/export.json")).read_text())
    sha256 = _file(remote, "model.pt2")["sha256"]
    # 1) bytes changed in the server's storage (same size): the client downloads them, we refuse them
    blob = hub_env.store.get("model", REPO).lfs_path(sha256)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    for _ in range(2):  # the bad copy is evicted, so a retry downloads (and refuses) it again
        hub_env.clear_log()
        with pytest.raises(IntegrityError, match="pt2/model.pt2"):
            ExportedModel.from_pretrained(REPO, subfolder="pt2", revision=repo)
        assert ("GET", len(data)) in _fetched(hub_env)["pt2/model.pt2"]
        assert try_to_load_from_cache(REPO, "pt2/model.pt2", revision=repo) is None
        assert not (Path(constants.HF_HUB_CACHE) / "models--me--tiny" / "blobs" / sha256).exists()

    # 2) a manifest whose sha256 does not match the file, committed with the raw client
    folder = first.save_pretrained(tmp_path / "bad")
    manifest = json.loads((folder / "export.json").read_text())
    _file(manifest, "model.pt2")["sha256"] = "0" * 64
    (folder / "export.json").write_text(json.dumps(manifest))
    hub_api.upload_folder(repo_id=REPO, folder_path=folder, path_in_repo="bad")
    with pytest.raises(IntegrityError, match="bad/model.pt2.*sha256"):
        ExportedModel.from_pretrained(REPO, subfolder="bad")


def test_missing_things_are_named(repo: str, hub_env: HubServer):
    with pytest.raises(ManifestError, match=r"no export.json.*onnx/, pt2/"):
        ExportedModel.from_pretrained(REPO)
    with pytest.raises(HubError, match="not found"):
        ExportedModel.from_pretrained("me/nothing-here", subfolder="pt2")
    with pytest.raises(HubError, match="no revision 'nope'"):
        ExportedModel.from_pretrained(REPO, subfolder="pt2", revision="nope")


def test_a_copy_cached_from_another_endpoint_never_passes_for_this_one(
    repo: str, hub_env: HubServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
):
    import socket

    with socket.socket() as probe:  # a loopback port nothing listens on: an unreachable hub
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    assert main(["pull", REPO, "--subfolder", "pt2", "--endpoint", hub_env.url]) == 0  # cached from the embedded hub
    capsys.readouterr()
    assert main(["pull", REPO, "--subfolder", "pt2", "--endpoint", dead]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"Cannot confirm {REPO}@" in err and f"with {dead}" in err, err
    assert f"was downloaded from {hub_env.url}" in err and "no copy from another hub is used in its place" in err
    assert main(["validate", REPO, "--subfolder", "pt2", "--endpoint", dead]) == 1  # as pull, not "verified"
    capsys.readouterr()

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert main(["pull", REPO, "--subfolder", "pt2", "--endpoint", dead]) == 1
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        f"was downloaded from {hub_env.url}, not from {dead}: pass --endpoint {hub_env.url} to load it."
    )
    assert main(["pull", REPO, "--subfolder", "pt2", "--endpoint", hub_env.url]) == 0  # its own copy loads offline
    with pytest.raises(HubError, match="set HF_ENDPOINT to that hub"):
        ExportedModel.from_pretrained(REPO, subfolder="pt2", endpoint=dead)


def test_cli_push_and_pull(exports, hub_api: HfApi, hub_env: HubServer, tmp_path, capsys: pytest.CaptureFixture):
    case, first, _, _ = exports
    folder = first.save_pretrained(tmp_path / "export")
    url = hub_env.url
    assert main(["push", REPO, str(folder), "--tag", "v1", "--commit-message", "from the cli", "--endpoint", url]) == 0
    out = capsys.readouterr().out
    assert "committed" in out and "tag: v1" in out
    assert hub_api.list_repo_commits(REPO)[0].title == "from the cli"
    assert main(["push", REPO, str(folder), "--endpoint", url]) == 0
    assert "unchanged" in capsys.readouterr().out

    target = tmp_path / "pulled"
    assert (
        main(["pull", REPO, "--subfolder", "pt2", "--revision", "v1", "--local-dir", str(target), "--endpoint", url])
        == 0
    )
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(target)
    assert sorted(p.name for p in target.iterdir()) == sorted([*SIDE, "model.pt2"])
    assert not any(p.is_symlink() for p in target.iterdir())
    pulled = ExportedModel.from_pretrained(target)
    assert torch.equal(_logits(pulled, case.sample), _logits(first, case.sample))

    assert main(["pull", REPO, "--subfolder", "pt2", "--endpoint", url]) == 0
    cached = Path(capsys.readouterr().out.strip().splitlines()[-1])
    assert (cached / "model.pt2").is_file() and cached.parts[-3] == "snapshots"

    assert main(["pull", "me/missing", "--subfolder", "pt2", "--endpoint", url]) == 1
    err = capsys.readouterr().err
    assert err.startswith("hub-export pull: error:") and "me/missing" in err and len(err.strip().splitlines()) == 1
    assert main(["pull", REPO, "--subfolder", "pt2", "--component", "decoder", "--endpoint", url]) == 1
    assert "decoder" in capsys.readouterr().err
    assert main(["push", REPO, str(tmp_path / "nowhere"), "--endpoint", url]) == 1
