"""Exports made before the runtimes' conventions (``decode.onnx``, ``model.onnx.data``, ``input.``/``output.`` cache
names) still load and generate, ``sync`` says they are in an earlier layout, and ``sync --relayout`` exports them
again in today's (docs/interop.md)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from test_sync import REPO, upload_source
from tiny_models import build, text_inputs

from hub_export import ExportedModel, OnnxConfig, OnnxExporter
from hub_export.formats import backend_for
from hub_export.hub.publish import publish
from hub_export.hub.sync import OLD_LAYOUT, UP_TO_DATE, plan_sync, sync
from hub_export.manifest import Manifest


def _reseal(folder: Path, renamed: dict[str, str]) -> None:
    """export.json after files were renamed or rewritten: paths, sizes and sha256, as an earlier version wrote them."""
    path = folder / "export.json"
    data = json.loads(path.read_text())

    def entry(item: dict) -> dict:
        name = renamed.get(item["path"], item["path"])
        blob = (folder / name).read_bytes()
        return {**item, "path": name, "size": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}

    data["files"] = [entry(f) for f in data["files"]]
    for component in data["components"].values():
        component["files"] = [renamed.get(p, p) for p in component["files"]]
    path.write_text(json.dumps(data, indent=2))


def _as_before(folder: Path) -> Path:
    """An ONNX generation export rewritten as hub_export wrote it before the runtimes' conventions: decode.onnx + decode.onnx.data, the cache
    named input.past_key_values.N.* / output.past_key_values.N.*, hub_export's own dim names, no genai_config.json."""
    import onnx

    model = onnx.load(str(folder / "model.onnx"), load_external_data=True)
    renames = {}
    for value in [*model.graph.input, *model.graph.output]:
        if value.name.startswith("past_key_values."):
            renames[value.name] = "input." + value.name
        elif value.name.startswith("present."):
            renames[value.name] = "output.past_key_values." + value.name.removeprefix("present.")
    for node in model.graph.node:
        node.input[:] = [renames.get(n, n) for n in node.input]
        node.output[:] = [renames.get(n, n) for n in node.output]
    for value in [*model.graph.input, *model.graph.output]:
        value.name = renames.get(value.name, value.name)
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param:
                dim.dim_param = dim.dim_param.replace("_length", "").replace("batch_size", "batch")
    (folder / "model.onnx").unlink()
    (folder / "model.onnx_data").unlink()
    (folder / "genai_config.json").unlink()
    onnx.save(model, str(folder / "decode.onnx"), save_as_external_data=True, location="decode.onnx.data")
    data = json.loads((folder / "export.json").read_text())
    data["files"] = [f for f in data["files"] if f["path"] != "genai_config.json"]
    (folder / "export.json").write_text(json.dumps(data))
    _reseal(folder, {"model.onnx": "decode.onnx", "model.onnx_data": "decode.onnx.data"})
    return folder


@pytest.fixture(scope="module")
def llama():
    return build("llama", layers=1).model


@pytest.fixture(scope="module")
def before(llama, tmp_path_factory) -> Path:
    exported = OnnxExporter().export_for_generation(llama, text_inputs(1, 7), config=OnnxConfig(dynamic=True))
    return _as_before(Path(exported.save_pretrained(tmp_path_factory.mktemp("onnx") / "onnx")))


def test_an_export_made_before_loads_and_generates(before, llama) -> None:
    assert sorted(p.name for p in before.glob("*.onnx*")) == ["decode.onnx", "decode.onnx.data"]
    loaded = ExportedModel.from_pretrained(before)
    for inputs in (text_inputs(1, 7), text_inputs(3, 11, pad_left=4, seed=1)):
        expected = llama.generate(**inputs, max_new_tokens=6, do_sample=False)
        assert torch.equal(loaded.generate(**inputs, max_new_tokens=6), expected)
    assert "decode.onnx" in (backend_for("onnx").outdated(Manifest.read(before)) or "")


def test_a_saved_export_in_todays_layout_is_not_outdated(llama, tmp_path) -> None:
    exported = OnnxExporter().export_for_generation(llama, text_inputs(1, 7), config=OnnxConfig(dynamic=True))
    folder = exported.save_pretrained(tmp_path / "onnx")
    assert backend_for("onnx").outdated(Manifest.read(folder)) is None
    copy = ExportedModel.from_pretrained(folder).save_pretrained(tmp_path / "copy")  # a copy keeps the layout
    assert backend_for("onnx").outdated(Manifest.read(copy)) is None


def test_sync_says_so_and_exports_it_again_when_asked(before, hub_api, hub_env, tmp_path) -> None:
    source = upload_source(hub_api, tmp_path / "model")
    data = json.loads((before / "export.json").read_text())
    data["source"] = {"repo_id": REPO, "revision": source, "requested_revision": "main"}
    data["task"] = "text-generation"
    folder = Path(shutil.copytree(before, tmp_path / "legacy"))
    (folder / "export.json").write_text(json.dumps(data))
    publish(REPO, {"onnx": folder})
    plan = plan_sync(REPO, ["onnx"], task="text-generation", configs={"onnx": data["config"]})
    (entry,) = plan.formats
    assert entry.status == UP_TO_DATE and "--relayout" in entry.reason and "decode.onnx" in entry.reason
    plan = plan_sync(REPO, ["onnx"], task="text-generation", configs={"onnx": data["config"]}, relayout=True)
    assert plan.formats[0].status == OLD_LAYOUT
    result = sync(REPO, ["onnx"], task="text-generation", configs={"onnx": data["config"]}, relayout=True)
    assert result.updated
    files = set(hub_api.list_repo_files(REPO))
    assert {"onnx/model.onnx", "onnx/model.onnx_data", "onnx/genai_config.json"} <= files
    assert not {"onnx/decode.onnx", "onnx/decode.onnx.data"} & files  # never mixed: the old files are deleted
