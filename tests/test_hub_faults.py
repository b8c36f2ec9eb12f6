"""Fault-tolerant transfers against the embedded Hub over real HTTP: injected 5xx, cut and truncated responses,
a corrupt object on the server, an upload failing mid-publish, and concurrent downloaders and publishers.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import try_to_load_from_cache

from hub_export import DynamoConfig, DynamoExporter, ExportedModel, OnnxConfig, OnnxExporter
from hub_export.embedded_hub.server import HubServer
from hub_export.errors import HubError, IntegrityError
from hub_export.hub import download
from hub_export.hub.publish import publish

REPO = "me/faulty"
PT2 = r"/resolve/[0-9a-f]{40}/pt2/model\.pt2$"
SAMPLE = {"input_ids": torch.tensor([[1, 5, 9, 3]])}


class Tiny(torch.nn.Module):
    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = torch.nn.Embedding(64, 32)
        self.head = torch.nn.Linear(32, 64)

    def forward(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"logits": self.head(torch.tanh(self.embed(input_ids)))}


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, Path]:
    """Saved exports of :class:`Tiny`: a Dynamo one, an ONNX one, and two more Dynamo variants (other weights)."""
    root = tmp_path_factory.mktemp("exports")
    out = {
        "pt2": DynamoExporter().export(Tiny().eval(), SAMPLE, config=DynamoConfig()).save_pretrained(root / "pt2"),
        "onnx": OnnxExporter().export(Tiny().eval(), SAMPLE, config=OnnxConfig()).save_pretrained(root / "onnx"),
    }
    for seed in (1, 2):
        model = Tiny(seed).eval()
        out[f"v{seed}"] = (
            DynamoExporter().export(model, SAMPLE, config=DynamoConfig()).save_pretrained(root / f"v{seed}")
        )
    return {k: Path(v) for k, v in out.items()}


@pytest.fixture
def fast_retries(monkeypatch) -> None:
    monkeypatch.setattr(download, "RETRY_DELAYS", (0.01, 0.02, 0.04))


@pytest.fixture
def published(hub_env: HubServer, exports, fast_retries) -> tuple[HubServer, str]:
    result = publish(REPO, {"pt2": exports["pt2"]})
    hub_env.clear_log()
    return hub_env, result.commit_sha


def _gets(server: HubServer, pattern: str = "/pt2/model.pt2") -> list[int]:
    return [r.status for r in server.log if r.method == "GET" and r.path.endswith(pattern)]


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(**SAMPLE)["logits"]


def _cached(commit: str) -> object:
    return try_to_load_from_cache(REPO, "pt2/model.pt2", revision=commit)


def test_503_twice_then_success(published) -> None:
    server, commit = published
    server.add_fault("GET", PT2, "status:503", count=2)
    loaded = ExportedModel.from_pretrained(REPO, subfolder="pt2")
    assert torch.allclose(_logits(loaded), Tiny().eval()(**SAMPLE)["logits"], atol=1e-5)
    assert _gets(server) == [503, 503, 200]
    assert isinstance(_cached(commit), str)


def test_connection_cut_mid_file_is_resumed(published) -> None:
    server, commit = published
    server.add_fault("GET", PT2, "cut", count=1)
    loaded = ExportedModel.from_pretrained(REPO, subfolder="pt2")
    assert torch.allclose(_logits(loaded), Tiny().eval()(**SAMPLE)["logits"], atol=1e-5)
    statuses = _gets(server)
    assert len(statuses) == 2 and statuses[-1] in (200, 206)


def test_truncated_body_is_retried(published) -> None:
    server, commit = published
    server.add_fault("GET", PT2, "truncate", count=1)
    ExportedModel.from_pretrained(REPO, subfolder="pt2")
    assert len(_gets(server)) == 2
    assert isinstance(_cached(commit), str)


def test_always_truncated_gives_up_and_caches_nothing(published) -> None:
    server, commit = published
    server.add_fault("GET", PT2, "truncate", count=100)
    with pytest.raises(HubError, match=r"model\.pt2 failed 4 times"):
        ExportedModel.from_pretrained(REPO, subfolder="pt2")
    assert len(_gets(server)) == 4
    assert _cached(commit) is None  # no partial file is ever taken for the complete one


def test_corrupt_object_on_server_is_an_integrity_error_and_evicted(published, exports) -> None:
    server, commit = published
    data = (exports["pt2"] / "model.pt2").read_bytes()
    stored = server.store.get("model", REPO).lfs_path(hashlib.sha256(data).hexdigest())
    stored.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])  # same size, other sha256
    with pytest.raises(IntegrityError, match=r"model\.pt2: sha256 .* \(downloaded twice\)"):
        ExportedModel.from_pretrained(REPO, subfolder="pt2")
    assert len(_gets(server)) == 2
    assert _cached(commit) is None
    stored.write_bytes(data)  # repaired on the server: the next load downloads it again and succeeds
    ExportedModel.from_pretrained(REPO, subfolder="pt2")


def test_failed_upload_leaves_repo_unchanged_and_retry_sends_only_missing(published, exports, hub_api) -> None:
    server, head = published
    before = sorted(hub_api.list_repo_files(REPO))
    files = [exports["onnx"] / "model.onnx", exports["onnx"] / "model.onnx_data", exports["v1"] / "model.pt2"]
    oids = {hashlib.sha256(p.read_bytes()).hexdigest() for p in files}  # all binary, so all LFS
    failing = hashlib.sha256(files[1].read_bytes()).hexdigest()
    server.add_fault("PUT", rf"/info/lfs/objects/{failing}", "status:507", count=1)  # 507: not retried by the client
    with pytest.raises(HubError, match="507"):
        publish(REPO, {"onnx": exports["onnx"], "pt2": exports["v1"]})
    assert hub_api.model_info(REPO).sha == head  # the commit is atomic: nothing changed
    assert sorted(hub_api.list_repo_files(REPO)) == before
    repo = server.store.get("model", REPO)
    missing = {oid for oid in oids if repo.lfs_size(oid) is None}
    assert failing in missing
    server.clear_log()
    result = publish(REPO, {"onnx": exports["onnx"], "pt2": exports["v1"]})
    assert result.changed and hub_api.model_info(REPO).sha == result.commit_sha
    sent = [r.path.split("?")[0].rsplit("/", 1)[-1] for r in server.log if r.method == "PUT"]
    assert sorted(sent) == sorted(missing)  # only what the server did not have yet, each once
    loaded = ExportedModel.from_pretrained(REPO, subfolder="onnx")
    assert torch.allclose(_logits(loaded), Tiny().eval()(**SAMPLE)["logits"], atol=1e-4)


def _hub_load():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "hub_load.py"
    spec = importlib.util.spec_from_file_location("hub_load", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["hub_load"] = module
    spec.loader.exec_module(module)
    return module


def test_concurrent_downloads_and_publishes_are_consistent(hub_env: HubServer, exports, tmp_path: Path) -> None:
    hub_load = _hub_load()
    stats = hub_load.run_load(
        hub_env,
        REPO,
        [exports["pt2"], exports["v1"], exports["v2"]],
        tmp_path / "clients",
        downloaders=8,
        publishers=4,
        seconds=3.0,
    )
    assert stats["downloads"] > 0 and stats["commits"] > 0
    assert stats["errors"] == [], stats["errors"]
    assert stats["server_errors"] == 0  # every request answered, none with a 5xx
    assert stats["verified_downloads"] == stats["downloads"]
    assert stats["whole_commits"] == stats["commits_checked"] >= stats["commits"]
    assert stats["commits_missing_from_history"] == 0  # every commit a publisher got back is in the history
