"""ExportedModel.from_pretrained(model_repo, export="onnx"): a model repo exported on the fly, cached next to the HF
cache, reused on the next call, offline with no request at all; a repo's own export is loaded as is."""

from __future__ import annotations

import pytest
import torch
from huggingface_hub import HfApi, constants
from tiny_models import build
from tiny_tokenizers import bert_tokenizer, llama_tokenizer

from hub_export import ConfigError, ExportedModel, HubError, OnnxConfig, OnnxExporter
from hub_export._cache import cache_root
from hub_export.embedded_hub import HubServer
from hub_export.hub.publish import publish
from hub_export.model import ExportedModelForCausalLM

REPO = "me/tiny-llama"


def _publish_model(api: HfApi, repo: str, model, tmp_path) -> str:
    folder = tmp_path / repo.replace("/", "--")
    model.save_pretrained(folder)
    api.create_repo(repo, exist_ok=True)
    return api.upload_folder(repo_id=repo, folder_path=folder, commit_message="weights").oid


@pytest.fixture(autouse=True)
def cache_beside_the_hf_cache(monkeypatch):
    """These tests check where the export cache goes by default: not the session-wide one conftest.py sets."""
    monkeypatch.delenv("HUB_EXPORT_CACHE", raising=False)


@pytest.fixture(scope="module")
def llama():
    return build("llama", layers=1).model  # one layer: these tests are about where exports come from


def _requests(server: HubServer) -> int:
    return len(server.log)


def test_export_on_the_fly_then_cached_then_offline_with_no_request(
    llama, hub_api: HfApi, hub_env: HubServer, tmp_path, monkeypatch
):
    sha = _publish_model(hub_api, REPO, llama, tmp_path)
    tokenizer = llama_tokenizer()
    inputs = tokenizer(["the cat sat on the mat", "birds sang"], return_tensors="pt", padding=True)
    expected = llama.generate(**inputs, max_new_tokens=6)

    first = ExportedModel.from_pretrained(REPO, export="onnx")
    assert isinstance(first, ExportedModelForCausalLM) and first.source.revision == sha
    assert torch.equal(first.generate(**inputs, max_new_tokens=6), expected)
    cached = list((cache_root() / "models--me--tiny-llama" / sha).iterdir())
    assert [p.name.split("-")[:2] for p in cached] == [["onnx", "auto"]]
    assert cache_root() == tmp_path / "hub_export"  # beside the HF hub cache (tmp_path / "hf-cache")

    before = _requests(hub_env)
    again = ExportedModel.from_pretrained(REPO, export="onnx")  # online: the revision is resolved, nothing exported
    assert [r.path for r in hub_env.log[before:]] == [f"/api/models/{REPO}/revision/main"]
    assert torch.equal(again.generate(**inputs, max_new_tokens=6), expected)

    before = _requests(hub_env)
    offline = ExportedModel.from_pretrained(REPO, export="onnx", local_files_only=True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    also_offline = ExportedModel.from_pretrained(REPO, export="onnx")
    assert _requests(hub_env) == before  # no request at all
    for model in (offline, also_offline):
        assert torch.equal(model.generate(**inputs, max_new_tokens=6), expected)
    with pytest.raises(HubError, match="never resolved here"):
        ExportedModel.from_pretrained(REPO, export="onnx", revision="other-branch")


def test_a_new_commit_is_exported_again(llama, hub_api: HfApi, hub_env: HubServer, tmp_path):
    first_sha = _publish_model(hub_api, REPO, llama, tmp_path)
    first = ExportedModel.from_pretrained(REPO, export=OnnxConfig(dynamic=True))
    changed = build("llama", layers=1).model
    with torch.no_grad():
        changed.lm_head.weight.mul_(-1.0)
    second_sha = _publish_model(hub_api, REPO, changed, tmp_path / "new")
    second = ExportedModel.from_pretrained(REPO, export=True, export_config=OnnxConfig(dynamic=True))
    assert (first.source.revision, second.source.revision) == (first_sha, second_sha)
    inputs = llama_tokenizer()(["the cat"], return_tensors="pt")
    assert torch.equal(second.generate(**inputs, max_new_tokens=4), changed.generate(**inputs, max_new_tokens=4))
    pinned = ExportedModel.from_pretrained(REPO, export="onnx", revision=first_sha)  # an older commit, by sha
    assert pinned.source.revision == first_sha


def test_a_classifier_repo_is_exported_for_its_task(hub_api: HfApi, hub_env: HubServer, tmp_path):
    case = build("bert", layers=1)
    _publish_model(hub_api, "me/tiny-bert", case.model, tmp_path)
    exported = ExportedModel.from_pretrained("me/tiny-bert", export="openvino")
    assert type(exported) is ExportedModel and exported.config.architectures == ["BertForSequenceClassification"]
    pair = bert_tokenizer()(["the cat sat", "a dog"], ["on the mat", "ran"], padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = case.model(**pair).logits
    assert float((exported(**pair).logits - expected).abs().max()) < 1e-5  # token_type_ids traced from the config


def test_a_repo_with_its_own_export_loads_it(llama, hub_api: HfApi, hub_env: HubServer, tmp_path):
    _publish_model(hub_api, REPO, llama, tmp_path)
    inputs = llama_tokenizer()(["the cat sat"], return_tensors="pt")
    published = OnnxExporter().export(llama, dict(inputs), config=OnnxConfig(dynamic=True))
    publish(REPO, {"onnx": published})
    loaded = ExportedModel.from_pretrained(REPO, export="onnx")
    assert set(loaded.components) == {"model"}  # the repo's single-graph export, not a generation export made here
    assert not list(cache_root().rglob("export.json"))  # nothing exported here
    with pytest.raises(Exception, match="holds a onnx export, not openvino"):
        ExportedModel.from_pretrained(REPO, export="openvino", subfolder="onnx")


def test_export_argument_errors(hub_env: HubServer):
    with pytest.raises(ConfigError, match="export_config="):
        ExportedModel.from_pretrained(REPO, export=True)
    with pytest.raises(ConfigError, match="Unknown task"):
        ExportedModel.from_pretrained(REPO, export="onnx", task="translate-everything")
    with pytest.raises(TypeError, match="pass export= too"):
        ExportedModel.from_pretrained(REPO, task="text-generation")
