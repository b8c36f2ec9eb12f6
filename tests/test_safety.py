"""hub_export.safety: hostile export files are refused before a backend parses them; the sentinel never appears.

Each hostile file is a real export with one file altered and ``export.json`` updated to the altered bytes, so
the sha256 check passes and the safety check (or the runtime's verification) is what refuses it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import re
import shutil
import zipfile
from pathlib import Path

import pytest
import torch
from tiny_models import EmbeddingHead, embedding_head_export

from hub_export import (
    ExportedModel,
)
from hub_export.backends.dynamo.safety import scan_pickle
from hub_export.errors import IntegrityError, ManifestError, UnsafeExportError

SAMPLE = {"input_ids": torch.tensor([[1, 5, 9, 3]])}
FORMATS = ("pt2", "onnx", "openvino", "executorch")


class Payload:
    """Unpickling this creates the sentinel file (what a hostile pickle would do, harmlessly)."""

    def __init__(self, sentinel: Path) -> None:
        self.sentinel = str(sentinel)

    def __reduce__(self):
        return (open, (self.sentinel, "w"))


@pytest.fixture(scope="module")
def saved() -> dict[str, Path]:
    """One saved export of :class:`~tiny_models.EmbeddingHead` per format, default configs (shared with other modules:
    the tests copy it before changing it)."""
    return {name: embedding_head_export(name) for name in FORMATS}


def _copy(saved: dict[str, Path], fmt: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(saved[fmt], tmp_path / fmt))


def _rewrite(folder: Path, relative: str, data: bytes) -> None:
    """Replace a file and make export.json agree with it (size and sha256), as an attacker would."""
    (folder / relative).write_bytes(data)
    _reseal(folder, relative)


def _reseal(folder: Path, relative: str) -> None:
    manifest = json.loads((folder / "export.json").read_text())
    data = (folder / relative).read_bytes()
    for entry in manifest["files"]:
        if entry["path"] == relative:
            entry["size"], entry["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    (folder / "export.json").write_text(json.dumps(manifest))


def test_every_format_loads_and_runs(saved) -> None:
    expected = EmbeddingHead().eval()(**SAMPLE)["logits"]
    for fmt, folder in saved.items():
        got = ExportedModel.from_pretrained(folder)(**SAMPLE)["logits"]
        assert float((got - expected).abs().max()) < 1e-4, fmt


# -- .pt2 -------------------------------------------------------------------------------------------------------
def _hostile_pt2(folder: Path, sentinel: Path) -> None:
    """Replace the sample inputs' pickle (torch.load falls back to weights_only=False on it) with the payload."""
    path = folder / "model.pt2"
    source = zipfile.ZipFile(io.BytesIO(path.read_bytes()))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as out:
        for info in source.infolist():
            data = source.read(info.filename)
            if "sample_inputs" in info.filename:
                nested_in = zipfile.ZipFile(io.BytesIO(data))
                nested = io.BytesIO()
                with zipfile.ZipFile(nested, "w") as inner:
                    for item in nested_in.infolist():
                        blob = nested_in.read(item.filename)
                        inner.writestr(
                            item, pickle.dumps(Payload(sentinel)) if item.filename.endswith(".pkl") else blob
                        )
                data = nested.getvalue()
            out.writestr(info, data)
    _rewrite(folder, "model.pt2", buffer.getvalue())


def test_pt2_pickle_payload_is_refused(saved, tmp_path: Path) -> None:
    folder = _copy(saved, "pt2", tmp_path)
    sentinel = tmp_path / "pwned"
    _hostile_pt2(folder, sentinel)
    with pytest.raises(UnsafeExportError, match=r"model\.pt2:.*sample_inputs.*data\.pkl.*io\.open"):
        ExportedModel.from_pretrained(folder)
    assert not sentinel.exists()


def test_pt2_trust_pickles_skips_the_check(saved, tmp_path: Path) -> None:
    """The documented danger: with trust_pickles=True the payload runs (here: it only creates the sentinel)."""
    folder = _copy(saved, "pt2", tmp_path)
    sentinel = tmp_path / "pwned"
    _hostile_pt2(folder, sentinel)
    with pytest.raises(UnsafeExportError, match="sample inputs are not"):  # unpickled, then refused as inputs
        ExportedModel.from_pretrained(folder, trust_pickles=True)
    assert sentinel.exists()


def test_pt2_payload_is_refused_when_loaded_from_the_hub(saved, tmp_path: Path, hub_env) -> None:
    from hub_export.hub.publish import publish

    folder = _copy(saved, "pt2", tmp_path)
    sentinel = tmp_path / "pwned"
    _hostile_pt2(folder, sentinel)
    publish("me/hostile", {"pt2": folder})
    with pytest.raises(UnsafeExportError, match="io.open"):
        ExportedModel.from_pretrained("me/hostile", subfolder="pt2")
    lazy = ExportedModel.from_pretrained("me/hostile", subfolder="pt2", lazy=True)
    with pytest.raises(UnsafeExportError, match="io.open"):
        lazy.components["model"].program
    assert not sentinel.exists()


def test_pt2_archive_with_duplicate_entries_is_refused(saved, tmp_path: Path) -> None:
    folder = _copy(saved, "pt2", tmp_path)
    buffer = io.BytesIO((folder / "model.pt2").read_bytes())
    with zipfile.ZipFile(buffer, "a") as archive, pytest.warns(UserWarning, match="Duplicate name"):
        archive.writestr("model/archive_format", b"pt2")
    _rewrite(folder, "model.pt2", buffer.getvalue())
    with pytest.raises(UnsafeExportError, match="duplicate entry name"):
        ExportedModel.from_pretrained(folder)


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_scan_pickle_refuses_code_at_every_protocol(protocol: int, tmp_path: Path) -> None:
    for payload in (Payload(tmp_path / "x"), os.system, print):
        with pytest.raises(UnsafeExportError, match="not an allow-listed"):
            scan_pickle(pickle.dumps(payload, protocol=protocol), "f:e")
    with pytest.raises(UnsafeExportError, match="unexpected bytes"):
        scan_pickle(pickle.dumps(1) + b"junk", "f:e")
    with pytest.raises(UnsafeExportError, match="not a valid pickle"):
        scan_pickle(b"\x80\x04garbage", "f:e")
    assert not (tmp_path / "x").exists()


def test_scan_pickle_accepts_torch_save_of_tensors() -> None:
    for protocol in (2, 4):
        buffer = io.BytesIO()
        torch.save({"w": torch.nn.Parameter(torch.ones(2)), "i": torch.arange(3)}, buffer, pickle_protocol=protocol)
        with zipfile.ZipFile(buffer) as archive:
            scan_pickle(archive.read(next(n for n in archive.namelist() if n.endswith(".pkl"))), "f:e")


# -- ONNX -------------------------------------------------------------------------------------------------------
def _edit_onnx(folder: Path, edit) -> None:
    import onnx

    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    edit(model)
    _rewrite(folder, "model.onnx", model.SerializeToString())


def _set_external(model, **values: str) -> None:
    tensor = next(t for t in model.graph.initializer if t.external_data)
    for item in list(tensor.external_data):
        if item.key in values and values[item.key] is None:
            tensor.external_data.remove(item)
        elif item.key in values:
            item.value = values[item.key]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"location": "../secret.bin"}, "outside the export folder"),
        ({"location": "/etc/passwd"}, "outside the export folder"),
        ({"location": "config.json"}, "does not list"),
        ({"offset": "98000"}, "passes the end"),
        ({"length": "10000000"}, "passes the end"),
        ({"offset": "12000", "length": None}, "passes the end"),  # no length: the tensor's own size counts
    ],
)
def test_onnx_external_data_escapes_are_refused(saved, tmp_path: Path, values, message) -> None:
    folder = _copy(saved, "onnx", tmp_path)
    (tmp_path / "secret.bin").write_bytes(b"s" * 100_000)
    _edit_onnx(folder, lambda m: _set_external(m, **values))
    with pytest.raises(UnsafeExportError, match=message):
        ExportedModel.from_pretrained(folder)


def test_onnx_symlinked_data_out_of_the_folder_is_refused(saved, tmp_path: Path) -> None:
    folder = _copy(saved, "onnx", tmp_path)
    outside = tmp_path / "elsewhere.data"
    shutil.move(folder / "model.onnx_data", outside)
    os.symlink(outside, folder / "model.onnx_data")  # same bytes, so the sha256 check passes
    with pytest.raises(ManifestError, match="is or passes through a symlink"):
        ExportedModel.from_pretrained(folder)


def test_onnx_custom_domain_is_refused_unless_allowed(saved, tmp_path: Path) -> None:
    import onnx

    def add_custom(model) -> None:
        model.opset_import.append(onnx.helper.make_opsetid("evil.ops", 1))
        model.graph.node.append(onnx.helper.make_node("Run", [], ["unused"], domain="evil.ops"))

    folder = _copy(saved, "onnx", tmp_path)
    _edit_onnx(folder, add_custom)
    with pytest.raises(UnsafeExportError, match=r"custom operator domain\(s\) \['evil.ops'\]"):
        ExportedModel.from_pretrained(folder)
    from hub_export.formats import SafetyOptions, backend_for
    from hub_export.manifest import Manifest

    entry = Manifest.read(folder).components["model"]
    options = SafetyOptions(allow_custom_domains=frozenset({"evil.ops"}))
    backend_for("onnx").check_files(folder, "model", entry, options)  # passes the safety check


# -- OpenVINO ---------------------------------------------------------------------------------------------------
def test_openvino_truncated_bin_is_refused(saved, tmp_path: Path) -> None:
    folder = _copy(saved, "openvino", tmp_path)
    data = (folder / "openvino_model.bin").read_bytes()
    _rewrite(folder, "openvino_model.bin", data[: len(data) // 2])
    with pytest.raises(UnsafeExportError, match=r"need \d+ bytes of weights but the \.bin has"):
        ExportedModel.from_pretrained(folder)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda x: x.replace('<?xml version="1.0"?>', '<?xml version="1.0"?>\n<!DOCTYPE net [<!ENTITY a "b">]>'),
            "DTD",
        ),
        (lambda x: x.replace('version="opset1"', 'version="my_extension_opset"', 1), "needs an extension library"),
        (lambda x: re.sub(r'(<net name="[^"]*" version=")11(">)', r"\g<1>99\g<2>", x, count=1), "IR v10/v11"),
    ],
)
def test_openvino_hostile_xml_is_refused(saved, tmp_path: Path, edit, message) -> None:
    folder = _copy(saved, "openvino", tmp_path)
    text = (folder / "openvino_model.xml").read_text()
    hostile = edit(text)
    assert hostile != text
    _rewrite(folder, "openvino_model.xml", hostile.encode())
    with pytest.raises(UnsafeExportError, match=message):
        ExportedModel.from_pretrained(folder)


def test_openvino_constant_sizes_are_checked_against_their_shapes() -> None:
    """A Const's byte size must match its shape and type; an empty constant (a dimension 0, as an `unfold` of
    nothing gives) is one OpenVINO writes with size 1, and loads."""
    from xml.etree import ElementTree

    from hub_export.backends.openvino.safety import _const_end

    def const(shape: str, size: int, element_type: str = "i32") -> ElementTree.Element:
        layer = ElementTree.fromstring(
            f'<layer><data element_type="{element_type}" shape="{shape}" offset="8" /></layer>'
        )
        layer.find("data").set("size", str(size))  # type: ignore[union-attr]
        return layer

    assert _const_end(const("3, 0", 1), "m.xml", "empty") == 9  # what OpenVINO writes for an empty constant
    assert _const_end(const("0", 0), "m.xml", "empty") == 8
    assert _const_end(const("2, 3", 24), "m.xml", "full") == 32
    for shape, size in (("0", 2), ("2, 3", 23), ("2, 3", 25), ("", 1)):
        with pytest.raises(UnsafeExportError, match="expected"):
            _const_end(const(shape, size), "m.xml", "wrong")


# -- ExecuTorch -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("position", "message"), [(4, "bad file identifier"), (0, "root offset"), (20, "extended header")]
)
def test_executorch_header_bit_flips_are_refused(saved, tmp_path: Path, position: int, message: str) -> None:
    folder = _copy(saved, "executorch", tmp_path)
    data = bytearray((folder / "model.pte").read_bytes())
    data[position + (3 if position == 0 else 0)] ^= 0x7F
    _rewrite(folder, "model.pte", bytes(data))
    with pytest.raises(UnsafeExportError, match=message):
        ExportedModel.from_pretrained(folder)


def test_executorch_flatbuffer_bit_flip_is_refused(saved, tmp_path: Path) -> None:
    folder = _copy(saved, "executorch", tmp_path)
    data = bytearray((folder / "model.pte").read_bytes())
    data[64] ^= 0xFF  # inside the flatbuffer's vtables: the bounds-checked reader (and the runtime's verification)
    _rewrite(folder, "model.pte", bytes(data))
    with pytest.raises(UnsafeExportError, match="model.pte: .*(refusing to load it|runtime refused the program)"):
        ExportedModel.from_pretrained(folder)


def test_tampered_file_without_resealed_manifest_is_an_integrity_error(saved, tmp_path: Path) -> None:
    folder = _copy(saved, "executorch", tmp_path)
    data = bytearray((folder / "model.pte").read_bytes())
    data[-1] ^= 0x01
    (folder / "model.pte").write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="sha256"):
        ExportedModel.from_pretrained(folder)


def test_unlisted_config_symlinks_count_only_into_their_own_cached_repo(tmp_path: Path) -> None:
    """A version-1 manifest does not list config.json: a symlink to it is taken only as the Hub cache's own link."""
    from hub_export.loading import _plain_file

    repo, other = tmp_path / "models--a--b", tmp_path / "models--evil--c"
    snapshot = repo / "snapshots" / "c0ffee"
    for folder in (snapshot, repo / "blobs", other / "blobs", tmp_path / "elsewhere" / "blobs"):
        folder.mkdir(parents=True)
    targets = {
        "own": repo / "blobs" / "1234",
        "other-repo": other / "blobs" / "5678",
        "a-blobs-folder-elsewhere": tmp_path / "elsewhere" / "blobs" / "9abc",
        "plain-outside": tmp_path / "secret.json",
    }
    for target in targets.values():
        target.write_text("{}")
    for name, target in targets.items():
        link = snapshot / "config.json"
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        if name == "own":
            assert _plain_file(link)
        else:
            with pytest.raises(ManifestError, match="symlink out of the export folder"):
                _plain_file(link)
    outside_cache = tmp_path / "folder"
    outside_cache.mkdir()
    (outside_cache / "config.json").symlink_to(targets["own"])  # a blob, but the folder is no cache snapshot
    with pytest.raises(ManifestError, match="symlink out of the export folder"):
        _plain_file(outside_cache / "config.json")
    assert not _plain_file(outside_cache / "generation_config.json")  # absent: nothing to read


def test_executorch_program_failing_when_run_is_an_unsafe_export_error(saved, tmp_path: Path, monkeypatch) -> None:
    """A flip the runtime's verification lets through but execution trips on: a hub_export error, not RuntimeError
    (the XNNPACK graph check refuses this one first; without it, execution fails)."""
    folder = _copy(saved, "executorch", tmp_path)
    data = bytearray((folder / "model.pte").read_bytes())
    data[data.find(b"XN01") + 556] ^= 0xFF  # in the XNNPACK delegate's graph: a weight's dims
    _rewrite(folder, "model.pte", bytes(data))
    with pytest.raises(UnsafeExportError, match="needs 24448 bytes, but its constant holds 8192"):
        ExportedModel.from_pretrained(folder)
    monkeypatch.setattr("hub_export.backends.executorch.io.check_xnnpack_delegates", lambda *args: None)
    with pytest.raises(UnsafeExportError, match="ExecuTorch runtime"):
        ExportedModel.from_pretrained(folder)(**SAMPLE)


@pytest.mark.parametrize(
    ("delta", "message"),
    [
        (784, "an input names value 254, but the plan has 7"),
        (776, "an output names value 249, but the plan has 7"),
        (744, r"argument 2 of aten::embedding.out is value 2 \(tensor\), where the schema takes int"),
        (756, r"argument 5 of aten::embedding.out is value 3 \(int\), where the schema takes tensor"),
    ],
)
def test_executorch_plan_index_past_its_values_is_refused_before_the_runtime(
    saved, tmp_path: Path, delta: int, message: str
) -> None:
    """The runtime aborts the process (ET_CHECK in Method::get_value, EValue::toInt/toTensor) on an input naming a
    value past the plan's or a kernel argument of another kind than its schema's: checked before it reads the
    program."""
    folder = _copy(saved, "executorch", tmp_path)
    data = bytearray((folder / "model.pte").read_bytes())
    data[data.find(b"ET12") + delta] ^= 0xFF if delta > 770 else 0x01  # a plan's or a kernel call's value index
    _rewrite(folder, "model.pte", bytes(data))
    with pytest.raises(UnsafeExportError, match=rf"execution plan 0: .*{message}"):
        ExportedModel.from_pretrained(folder)(**SAMPLE)
