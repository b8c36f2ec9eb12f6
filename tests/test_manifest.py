"""export.json: a saved manifest validates; malformed or hostile manifests raise ManifestError and run nothing."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from tiny_models import build

from hub_export import DynamoConfig, DynamoExporter, ExportedModel, ManifestError
from hub_export.manifest import Manifest, schema, schema_path

SENTINEL_NAME = "pwned-sentinel"


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    case = build("llama")
    directory = tmp_path_factory.mktemp("manifest") / "export"
    DynamoExporter().export(case.model, case.sample, config=DynamoConfig(dynamic=True)).save_pretrained(directory)
    return directory


def test_saved_manifest_validates_and_round_trips(saved: Path) -> None:
    text = (saved / "export.json").read_text()
    manifest = Manifest.loads(text)
    assert manifest.export_format == "dynamo" and manifest.source is None
    assert set(manifest.created_with) >= {"hub_export", "torch", "transformers"}
    component = manifest.components["model"]
    assert component.files[0].path == "model.pt2" and len(component.files[0].sha256) == 64
    assert component.architecture == "LlamaForCausalLM" and component.dtype == "float32"
    assert component.parity["max_abs_diff"] <= 1e-5
    assert json.loads(manifest.dumps()) == json.loads(text)
    assert (saved / "config.json").is_file()


def test_schema_is_the_repository_file() -> None:
    assert schema_path() == Path(__file__).resolve().parents[1] / "schemas" / "export.schema.json"
    assert schema()["$schema"].endswith("2020-12/schema")


def _set(data: dict, path: str, value) -> dict:
    data = copy.deepcopy(data)
    node = data
    keys = path.split("/")
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node[key]
    last = keys[-1]
    if value is _DELETE:
        del node[int(last) if isinstance(node, list) else last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return data


_DELETE = object()
C = "components/model"

HOSTILE = {
    "missing_components": ("components", _DELETE, "export.json: "),
    "missing_format": ("export_format", _DELETE, "export.json: "),
    "unknown_format": ("export_format", "tflite", "$.export_format"),
    "future_schema": ("schema_version", 99, "$.schema_version"),
    "schema_as_string": ("schema_version", "1", "$.schema_version"),
    "extra_top_level_key": ("loader", "os:system", "export.json: "),
    "files_not_list": (f"{C}/files", "model.pt2", "$.components.model.files"),
    "component_file_unlisted": (f"{C}/files/0", "other.pt2", "$.components.model.files[0]"),
    "unknown_role": ("files/0/role", "plugin", "$.files[0].role"),
    "size_expression_code": (f"{C}/outputs/0/shape/0", "__import__('os')", "$.components.model.outputs[0].shape[0]"),
    "size_negative": ("files/0/size", -1, "$.files[0].size"),
    "sha_short": ("files/0/sha256", "abc", "$.files[0].sha256"),
    "absolute_path": ("files/0/path", "/etc/passwd", "$.files[0].path"),
    "traversal_path": ("files/0/path", "../../outside.pt2", "$.files[0].path"),
    "inner_traversal": ("files/0/path", "sub/../../x.pt2", "$.files[0].path"),
    "backslash_path": ("files/0/path", "sub\\model.pt2", "$.files[0].path"),
    "windows_drive": ("files/0/path", "C:/model.pt2", "$.files[0].path"),
    "home_path": ("files/0/path", "~/model.pt2", "$.files[0].path"),
    "output_class_eval": (f"{C}/output_structure/class", "builtins:eval", "$.components.model.output_structure"),
    "output_class_dotted": (f"{C}/output_structure/class", "os.system", "$.components.model.output_structure"),
    "output_class_not_allowed": (f"{C}/output_structure/class", "Popen", "$.components.model.output_structure.class"),
    "output_class_torch_module": (
        f"{C}/output_structure/class",
        "LlamaForCausalLM",
        "$.components.model.output_structure.class",
    ),
    "cache_class_not_allowed": (
        f"{C}/output_structure/fields/1/1/class",
        "QuantizedCache",
        "$.components.model.output_structure",
    ),
    "node_with_callable": (
        f"{C}/output_structure/fields/0/1/callable",
        "os:system",
        "$.components.model.output_structure",
    ),
    "index_past_end": (
        f"{C}/output_structure/fields/0/1/index",
        999,
        "$.components.model.output_structure.logits.index",
    ),
    "unknown_dtype": (f"{C}/inputs/0/dtype", "object", "$.components.model.inputs[0].dtype"),
    "bad_dim_name": (f"{C}/inputs/0/shape/0", "__import__('os')", "$.components.model.inputs[0].shape[0]"),
    "bad_component_name": ("components", {"../x": {}}, "$.components"),
    "architecture_code": (f"{C}/architecture", "os:system", "$.components.model.architecture"),
    "bad_source_revision": ("source", {"repo_id": "a/b", "revision": "main"}, "$.source"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_manifest_is_rejected_with_its_json_path(saved: Path, case: str, tmp_path: Path, monkeypatch) -> None:
    path, value, where = HOSTILE[case]
    data = _set(json.loads((saved / "export.json").read_text()), path, value)
    export = tmp_path / "export"
    export.mkdir()
    (export / "export.json").write_text(json.dumps(data))
    # nothing but the manifest is there: loading must fail before any other file is needed or opened
    opened: list[str] = []
    import builtins

    real_open = builtins.open

    def spy(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy)
    with pytest.raises(ManifestError) as info:
        ExportedModel.from_pretrained(export)
    assert str(info.value).startswith(where), str(info.value)
    assert not [f for f in opened if f.endswith((".pt2", "config.json"))]


def test_not_json_and_missing_manifest(tmp_path: Path) -> None:
    (tmp_path / "export.json").write_text("{not json")
    with pytest.raises(ManifestError, match="not valid JSON"):
        ExportedModel.from_pretrained(tmp_path)
    with pytest.raises(ManifestError, match="no export.json"):
        ExportedModel.from_pretrained(tmp_path / "empty" if (tmp_path / "empty").mkdir() is None else tmp_path)


def test_hostile_manifest_runs_nothing(saved: Path, tmp_path: Path) -> None:
    sentinel = tmp_path / SENTINEL_NAME
    payload = f"__import__('pathlib').Path({str(sentinel)!r}).touch()"
    data = json.loads((saved / "export.json").read_text())
    attempts = [
        _set(data, f"{C}/output_structure/class", f"builtins:eval({payload})"),
        _set(data, f"{C}/output_structure/class", "eval"),
        _set(data, f"{C}/architecture", payload),
        _set(data, f"{C}/output_structure/fields/0/1", {"type": "constant", "value": payload, "call": "builtins:exec"}),
    ]
    for i, hostile in enumerate(attempts):
        export = tmp_path / f"e{i}"
        export.mkdir()
        for name in ("model.pt2", "config.json"):
            (export / name).write_bytes((saved / name).read_bytes())
        (export / "export.json").write_text(json.dumps(hostile))
        with pytest.raises(ManifestError):
            ExportedModel.from_pretrained(export)
    assert not sentinel.exists()


def test_symlink_out_of_the_folder_is_rejected(saved: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "model.pt2").write_bytes((saved / "model.pt2").read_bytes())
    export = tmp_path / "export"
    export.mkdir()
    (export / "export.json").write_text((saved / "export.json").read_text())
    (export / "model.pt2").symlink_to(outside / "model.pt2")
    with pytest.raises(ManifestError, match=r"files\[0\].path.*is or passes through a symlink"):
        ExportedModel.from_pretrained(export)


def test_write_validates(saved: Path, tmp_path: Path) -> None:
    import dataclasses

    manifest = Manifest.read(saved)
    broken = dataclasses.replace(manifest, export_format="tflite")
    with pytest.raises(ManifestError, match="export_format"):
        broken.write(tmp_path)
    assert not (tmp_path / "export.json").exists()


def test_optional_layout_files_are_known_but_not_required() -> None:
    from hub_export.formats import FileLayout

    layout = FileLayout(subfolder="pt2", files=((".pt2", "program"),), optional=((".aoti.pt2", "native"),))
    assert layout.component_files("decode") == {"decode.pt2": "program", "decode.aoti.pt2": "native"}
    assert layout.paths("decode", ["decode.pt2"]) == {"program": "decode.pt2"}
    assert layout.paths("decode", ["decode.pt2", "decode.aoti.pt2"])["native"] == "decode.aoti.pt2"
    with pytest.raises(ManifestError, match="no program file"):
        layout.paths("decode", ["decode.aoti.pt2"])


def test_publish_and_sync_hold_float_exports_to_their_tolerance_and_record_quantized_ones() -> None:
    from hub_export.manifest import ComponentEntry
    from hub_export.signature import Signature, TensorSpec

    signature = Signature((TensorSpec("x", "float32", ("batch",)),), (TensorSpec("y", "float32", ()),), (), None)
    entry = ComponentEntry((), signature, None, "float32", "cpu", parity={"max_abs_diff": 2.6e-3, "atol": 1e-3})
    assert entry.over_tolerance() == "max abs diff vs eager 0.0026 is over atol 0.001"
    within = ComponentEntry((), signature, None, "float32", "cpu", parity={"max_abs_diff": 1e-4, "atol": 1e-3})
    assert within.over_tolerance() is None
    # an int8 weight-only ONNX export of the tiny Llama differs by 2.6e-3: recorded, publishable
    quantized = ComponentEntry((), signature, None, "float32", "cpu", parity=entry.parity, quantization={"bits": 8})
    assert quantized.over_tolerance() is None


def _matches_page(page: object, real: object, where: str = "$") -> list[str]:
    """Where the page's example differs from a real manifest: ``"..."`` and ``"<...>"`` stand for anything, a list
    on the page may stop early, sizes and measured differences need only be numbers."""
    if isinstance(page, str) and (page == "..." or (page.startswith("<") and page.endswith(">"))):
        return []
    if where.endswith((".size", ".max_abs_diff")):
        return [] if isinstance(page, (int, float)) and isinstance(real, (int, float)) else [where]
    if isinstance(page, dict) and isinstance(real, dict):
        if set(page) != set(real):
            return [f"{where}: keys {sorted(set(page) ^ set(real))} on one side only"]
        return [d for key in page for d in _matches_page(page[key], real[key], f"{where}.{key}")]
    if isinstance(page, list) and isinstance(real, list):
        if len(page) > len(real):
            return [f"{where}: longer on the page"]
        return [d for i, item in enumerate(page) for d in _matches_page(item, real[i], f"{where}[{i}]")]
    return [] if page == real else [f"{where}: page {page!r}, real {real!r}"]


def test_the_manifest_page_example_is_what_an_export_writes(tmp_path: Path) -> None:
    """docs/manifest.md's example: the ONNX export of the tiny Llama, as ``save_pretrained`` writes it today."""
    import re

    from hub_export import OnnxConfig, OnnxExporter
    from hub_export.manifest import Source

    page = (Path(__file__).resolve().parents[1] / "docs" / "manifest.md").read_text()
    example = json.loads(re.search(r"```json\n(\{.*?\n\})\n```", page, re.S).group(1))
    case = build("llama")
    exported = OnnxExporter().export(case.model, case.sample, config=OnnxConfig(dynamic=True))
    exported.source = Source("demo/tiny-llama", "0" * 40, "main")
    real = json.loads((exported.save_pretrained(tmp_path / "onnx") / "export.json").read_text())
    assert _matches_page(example, real) == []
