"""The ``.pt2`` loader reads the archive as data and cannot fall back: one test per path ``torch.export.load`` takes.

``torch.export.load`` falls back to the pre-2.8 layout when its archive reader raises, reads a legacy
``data/weights/model.pt`` whenever it exists, joins an absolute ``path_name`` to another record, retries sample inputs
with ``weights_only=False``, extracts AOTInductor libraries, loads every ``models/<name>.json`` with its own sample
inputs and configs, and reads ``extra/`` files. Each test builds the archive that takes that path and
shows that both the check and the loader alone (``io.load_program``, as if the check had been skipped) refuse it,
that the payload never runs, and that torch's own loader is never called. The grammars, the zip reader and the
pickle walker are tested directly too.
"""

from __future__ import annotations

import io
import pickle
import shutil
from pathlib import Path

import pytest
import safety_corpus as corpus
import torch
from tiny_models import EmbeddingHead, embedding_head_export

from hub_export import ExportedModel
from hub_export._pickle import walk_pickle
from hub_export.backends.dynamo import io as pt2_io
from hub_export.backends.dynamo._archive import StoredArchive
from hub_export.backends.dynamo._grammar import check_guard, check_sym_expr, check_target
from hub_export.backends.dynamo._pt2 import ALLOWED_GLOBALS
from hub_export.errors import UnsafeExportError
from hub_export.formats import SafetyOptions, backend_for
from hub_export.manifest import Manifest

SAMPLE = {"input_ids": torch.tensor([[1, 5, 9, 3]])}


@pytest.fixture(scope="module")
def base() -> Path:
    """A dynamic ``.pt2`` export (it has symbolic sizes and guards)."""
    return embedding_head_export("pt2-dynamic")  # shared with other modules: copied before any change


@pytest.fixture
def torch_loaders_forbidden(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """torch's own loaders raise if called; ``torch.load`` records the ``weights_only`` of every call."""
    import torch._export.serde.serialize as serialize
    import torch.export.pt2_archive._package as package

    def forbidden(*args, **kwargs):
        raise AssertionError("torch's own .pt2 loader was called")

    original_artifact = serialize.deserialize_torch_artifact

    def artifact(serialized):  # the deserializer passes our checked dicts through it; bytes would be unpickled
        if isinstance(serialized, (bytes, bytearray)):
            raise AssertionError("torch was handed pickled bytes to load")
        return original_artifact(serialized)

    monkeypatch.setattr(torch.export, "load", forbidden)
    monkeypatch.setattr(package, "load_pt2", forbidden)
    monkeypatch.setattr(serialize, "deserialize_torch_artifact", artifact)
    monkeypatch.setattr(torch._C._aoti, "AOTIModelPackageLoader", forbidden, raising=False)
    calls: list[bool] = []
    original = torch.load

    def recording_load(*args, **kwargs):
        calls.append(kwargs.get("weights_only"))
        return original(*args, **kwargs)

    monkeypatch.setattr(torch, "load", recording_load)
    return calls


def _variant(base: Path, tmp_path: Path, vid: str) -> tuple[Path, Path]:
    """Build the corpus variant ``vid`` from ``base``; returns its folder and its sentinel."""
    variant = next(v for v in corpus.variants() if v.vid == vid)
    for name in ("outside", "sentinels", "variants"):
        (tmp_path / name).mkdir(exist_ok=True)
    folder = corpus.build_variant(variant, base, tmp_path / "variants", tmp_path / "outside", tmp_path / "sentinels")
    return folder, tmp_path / "sentinels" / vid


def _refused_by_check_and_loader(folder: Path, match: str, *, by_check: bool = True) -> None:
    """Loading refuses it, the check alone too (unless only loading can tell), and the loader on its own (the check
    skipped)."""
    with pytest.raises(UnsafeExportError, match=match):
        ExportedModel.from_pretrained(folder)
    entry = Manifest.read(folder).components["model"]
    if by_check:
        with pytest.raises(UnsafeExportError, match=match):
            backend_for("dynamo").check_files(folder, "model", entry, SafetyOptions())
    with pytest.raises(UnsafeExportError, match=match):
        pt2_io.load_program(folder, "model", entry, SafetyOptions())


def test_a_good_archive_loads_without_torch_export_load(base: Path, torch_loaders_forbidden: list[bool]) -> None:
    expected = EmbeddingHead().eval()(**SAMPLE)["logits"]
    loaded = ExportedModel.from_pretrained(base)
    other = {"input_ids": torch.tensor([[3, 1, 4, 1, 5, 9], [2, 6, 5, 3, 5, 8]])}
    assert float((loaded(**SAMPLE)["logits"] - expected).abs().max()) < 1e-5
    assert loaded(**other)["logits"].shape == (2, 6, 64)  # dynamic sizes survive the rebuild
    assert torch_loaders_forbidden and all(flag is True for flag in torch_loaders_forbidden)


def test_a_load_validates_the_program_once_and_maps_its_weights(
    base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from hub_export.backends.dynamo import _pt2

    folder = Path(shutil.copytree(base, tmp_path / "copy"))
    archive = folder / "model.pt2"
    validated: list[str] = []
    original = _pt2.validate_document
    monkeypatch.setattr(_pt2, "validate_document", lambda value, kind: (validated.append(kind), original(value, kind)))
    loaded = ExportedModel.from_pretrained(folder)
    assert validated.count("ExportedProgram") == 1  # the load reuses what the check validated
    weight = next(t for t in loaded.components["model"].program.state_dict.values() if t.numel() > 1)
    maps = [line.split() for line in Path("/proc/self/maps").read_text().splitlines()]
    ranges = [m[0].split("-") for m in maps if m[-1] == str(archive.resolve())]
    address = weight.untyped_storage().data_ptr()
    assert any(int(low, 16) <= address < int(high, 16) for low, high in ranges)  # over the file: no copy
    before = archive.read_bytes()
    with torch.no_grad():
        weight.add_(1.0)
    assert archive.read_bytes() == before  # copy-on-write: the file is never written
    entry = Manifest.read(folder).components["model"]
    validated.clear()
    backend_for("dynamo").check_files(folder, "model", entry, SafetyOptions())
    info = archive.stat()
    os.utime(archive, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000))  # changed since the check
    pt2_io.load_program(folder, "model", entry, SafetyOptions())
    assert validated.count("ExportedProgram") == 2  # checked again


@pytest.mark.parametrize(
    ("vid", "match"),
    [
        ("pt2-fallback-pre-2.8-layout", r"not under the archive's one root folder|not an entry torch.export.save"),
        ("pt2-fallback-archive-format-pt1", r"not an entry torch.export.save writes|archive_format does not hold"),
        ("pt2-legacy-weights-model-pt", "legacy pickled weights file"),
        ("pt2-legacy-constants-model-pt", "legacy pickled weights file"),
        ("pt2-path-name-absolute", r"path_name|not a payload file name"),
        ("pt2-path-name-traversal", r"path_name|not a payload file name"),
        ("pt2-aoti-shared-library", "AOTInductor-compiled native code"),
        ("pt2-aoti-zip-slip", r"not a plain relative path"),
        ("pt2-pickle-weights-only-failure-not-retried", r"weights_only=True\) refused it|not \(args, kwargs\)"),
        ("pt2-second-program", "not an entry torch.export.save writes for one program"),
        ("pt2-extra-file", "not an entry torch.export.save writes for one program"),
    ],
)
def test_each_fallback_of_torch_export_load_is_refused(
    base: Path, tmp_path: Path, torch_loaders_forbidden: list[bool], vid: str, match: str
) -> None:
    folder, sentinel = _variant(base, tmp_path, vid)
    # allow-listed globals that torch.load(weights_only=True) then refuses: only loading can tell
    _refused_by_check_and_loader(folder, match, by_check=vid != "pt2-pickle-weights-only-failure-not-retried")
    assert not sentinel.exists()
    assert all(flag is True for flag in torch_loaders_forbidden)  # never weights_only=False


@pytest.mark.parametrize(
    ("vid", "match"),
    [
        ("pt2-sympify-first-expression", "symbolic expression"),
        ("pt2-guards-exec-call", "not allowed in a guard"),
        ("pt2-guards-string-breakout", r"guard \[\d+\]"),
        ("pt2-target-torch-os-system", "is not an operator of"),
        ("pt2-target-aten-from-file", "reads or writes files"),
        ("pt2-forward-arg-name-injection", "is not an identifier"),
        ("pt2-pickle-p0-sample-inputs", "io.open"),
        ("pt2-pickled-weight-payload", "io.open"),
        ("pt2-constant-opaque-object", "pickled Python or TorchBind object"),
        ("pt2-deflate-bomb-4gib", "compressed"),
        ("pt2-raw-empty-storage-huge-zeros", "empty payload|reaches element"),
    ],
)
def test_code_in_a_pt2_is_refused_before_torch_reads_it(
    base: Path, tmp_path: Path, torch_loaders_forbidden: list[bool], vid: str, match: str
) -> None:
    folder, sentinel = _variant(base, tmp_path, vid)
    _refused_by_check_and_loader(folder, match)
    assert not sentinel.exists()


def test_trust_pickles_opens_pickles_and_nothing_else(base: Path, tmp_path: Path) -> None:
    folder, sentinel = _variant(base, tmp_path, "pt2-pickle-p2-sample-inputs")
    with pytest.raises(UnsafeExportError, match="sample inputs are not"):
        ExportedModel.from_pretrained(folder, trust_pickles=True)
    assert sentinel.exists()  # the documented danger: the pickle ran
    folder, sentinel = _variant(base, tmp_path, "pt2-sympify-first-expression")
    with pytest.raises(UnsafeExportError, match="symbolic expression"):
        ExportedModel.from_pretrained(folder, trust_pickles=True)
    assert not sentinel.exists()


def test_trust_native_code_admits_aoti_entries_but_this_loader_never_loads_them(
    base: Path, tmp_path: Path, torch_loaders_forbidden: list[bool]
) -> None:
    folder, _ = _variant(base, tmp_path, "pt2-aoti-shared-library")
    entry = Manifest.read(folder).components["model"]
    options = SafetyOptions(trust_native_code=True)
    backend_for("dynamo").check_files(folder, "model", entry, options)
    program = pt2_io.load_program(folder, "model", entry, options)  # AOTIModelPackageLoader would raise
    assert isinstance(program, torch.export.ExportedProgram)


def test_a_renamed_archive_is_not_a_program(base: Path, tmp_path: Path) -> None:
    folder = Path(shutil.copytree(base, tmp_path / "renamed"))
    corpus.rename(folder, "model.pt2", "model.PT2")
    corpus.reseal(folder)
    from hub_export.errors import ManifestError

    with pytest.raises(ManifestError, match="'model.PT2' is not a file a dynamo export has"):
        ExportedModel.from_pretrained(folder)


# -- the grammars -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "Symbol('s85', positive=True, integer=True)",
        "Mul(Integer(64), Symbol('s85', positive=True, integer=True))",
        "Pow(Symbol('s85', positive=True, integer=True), Integer(2))",
        "Add(Mul(Integer(-1), Symbol('s0', integer=True)), Integer(1024))",
        "FloorDiv(Symbol('s0', integer=True), Integer(2))",
        "Equality(Symbol('s0', integer=True), Integer(1))",
        "And(StrictGreaterThan(Symbol('s0', integer=True), Integer(1)), LessThan(Symbol('s0'), Integer(8)))",
        "Max(Integer(3), Symbol('u0', integer=True))",
        "CeilToInt(FloatTrueDiv(Add(ToFloat(Symbol('s1', positive=True, integer=True)), Float('-0.5', precision=53)), "
        "Float('1.0', precision=53)))",
        "true",
    ],
)
def test_symbolic_expressions_torch_writes_parse(text: str) -> None:
    check_sym_expr(text)


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('id')",
        "Symbol('s0'); import os",
        "Symbol('__class__')",
        "Symbol('s0', evaluate=exec)",
        "Pow(Integer(10), Integer(1000000000))",
        "Integer(" + "9" * 40 + ")",
        "Add(" * 100 + "Integer(1)" + ")" * 100,
        "Float('1.0', precision=1000000000)",  # a Float literal is data torch writes; this precision is not
        "Float('nan', precision=53)",
        "S.Reals",
        "Lambda(Symbol('s0'), Symbol('s0'))",
    ],
)
def test_other_symbolic_expressions_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        check_sym_expr(text)


def test_guards_are_checked_on_their_syntax_tree() -> None:
    for guard in (
        "L['tensors'][0].size()[1] + ((-1)*L['tensors'][1].size()[1]) <= 0",
        "L['x'].size()[3] >= 8 and L['x'].size()[2] >= 8",
        "max(2, L['x'].size()[0]) // 2 == L['y'].stride()[1]",
        "math.floor((1/2)*L['x'].size()[0]) <= 3",
        "not L['x'].storage_offset() == 0",
        "True",  # a guard torch simplified to a constant
    ):
        check_guard(guard)
    for guard in (
        "__import__('os').system('id')",
        "L['x'].__class__.__init__.__globals__",
        "L['x'].size(0) == 1",
        "L['x'].size()[0] ** 100000 > 1",
        "(lambda: 1)()",
        "L['x'].size()[0]\n== 1",
        "L['a b'].size()[0] == 1",
        "open('f') == 1",
        "None",
    ):
        with pytest.raises(ValueError):
            check_guard(guard)


def test_node_targets_are_an_allow_list() -> None:
    assert check_target("torch.ops.higher_order.wrap_with_set_grad_enabled") is True
    for target in ("torch.ops.aten.linear.default", "_operator.getitem", "torch.sym_max", "math.ceil"):
        assert check_target(target) is False
    for target in (
        "torch.os.system",
        "torch.ops.load_library",
        "torch.ops.aten.from_file.default",
        "_operator.attrgetter",
        "builtins.eval",
        "#ns:op",
        "torch.ops.higher_order.triton_kernel_wrapper_mutation",
        "torch.ops.evil_ns.op.default",
    ):
        with pytest.raises(ValueError):
            check_target(target)


# -- the zip reader and the pickle walker ----------------------------------------------------------------------------
def _zip(entries: list[tuple[str, bytes]], method: int = 0) -> bytes:
    import zipfile

    buffer = io.BytesIO()

    with zipfile.ZipFile(buffer, "w", compression=method) as archive:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            info.compress_type = method
            archive.writestr(info, data)
    return buffer.getvalue()


def test_the_zip_reader_takes_torch_save_output_and_refuses_what_torch_does_not_write() -> None:
    buffer = io.BytesIO()
    torch.save({"w": torch.arange(6)}, buffer)
    archive = StoredArchive.from_bytes(buffer.getvalue(), "t", max_entries=100)
    assert archive.root == "archive" and "data.pkl" in archive.entries
    assert archive.read("data/0", 1 << 20) == torch.arange(6).numpy().tobytes()
    weights = archive.read_into_buffer("data/0")  # read straight into tensor memory (no zero-filled bytearray first)
    assert isinstance(weights, torch.Tensor) and torch.equal(weights.view(torch.int64), torch.arange(6))
    refused = {
        "compressed": (_zip([("a/x", b"x" * 100)], method=8), "compressed"),
        "two roots": (_zip([("a/x", b"1"), ("b/y", b"2")]), "one root folder"),
        "dot-dot": (_zip([("a/../x", b"1")]), "plain relative path"),
        "absolute": (_zip([("/a/x", b"1")]), "plain relative path"),
        "trailing": (_zip([("a/x", b"1")]) + b"junk", "no end record"),
        "not a zip": (pickle.dumps(1, protocol=0), "not a zip archive"),
    }
    for name, (data, match) in refused.items():
        with pytest.raises(UnsafeExportError, match=match):
            StoredArchive.from_bytes(data, name, max_entries=100)
    with pytest.raises(UnsafeExportError, match="over the 10 byte limit"):
        StoredArchive.from_bytes(_zip([("a/x", b"x" * 100)]), "big", max_entries=100).read("x", 10)


def test_the_pickle_walker_reads_every_protocol_and_refuses_code(tmp_path: Path) -> None:
    payload = corpus.Payload(tmp_path / "ran")
    for protocol in range(6):
        with pytest.raises(UnsafeExportError, match="io.open"):
            walk_pickle(pickle.dumps(payload, protocol=protocol), "p", ALLOWED_GLOBALS, max_bytes=1 << 20)
        walk_pickle(pickle.dumps({"a": [1, (2.0, "x")]}, protocol=protocol), "p", ALLOWED_GLOBALS, max_bytes=1 << 20)
    memo_global = b"\x80\x04\x8c\x02io\x94\x8c\x04open\x94h\x00h\x01\x93."  # names pushed from the memo
    with pytest.raises(UnsafeExportError, match="io.open"):
        walk_pickle(memo_global, "p", ALLOWED_GLOBALS, max_bytes=1 << 20)
    with pytest.raises(UnsafeExportError, match="persistent id"):
        walk_pickle(b"\x80\x02K\x01Q.", "p", ALLOWED_GLOBALS, max_bytes=1 << 20)
    with pytest.raises(UnsafeExportError, match="over the 16 byte limit"):
        walk_pickle(pickle.dumps(list(range(100))), "p", ALLOWED_GLOBALS, max_bytes=16)
    with pytest.raises(UnsafeExportError, match="unexpected bytes after"):
        walk_pickle(pickle.dumps(1) + b"x", "p", ALLOWED_GLOBALS, max_bytes=1 << 20)
    with pytest.raises(UnsafeExportError, match="computed name"):
        walk_pickle(b"\x80\x04K\x01K\x02\x93.", "p", ALLOWED_GLOBALS, max_bytes=1 << 20)
    assert not (tmp_path / "ran").exists()
