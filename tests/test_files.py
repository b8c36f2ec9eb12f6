"""``hub_export._files``: digests remembered by file identity, hashing while writing, verification."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from hub_export import _files
from hub_export._files import (
    HashingWriter,
    copy_file,
    known_sha256,
    remember_sha256,
    sha256_file,
    verify_file,
)
from hub_export.errors import IntegrityError
from hub_export.manifest import FileEntry


@pytest.fixture(autouse=True)
def private_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test remembers digests in its own store, starting from an empty in-process memory."""
    store = tmp_path / "cache"
    monkeypatch.setenv("HUB_EXPORT_CACHE", str(store))
    monkeypatch.delenv("HUB_EXPORT_VERIFIED_CACHE", raising=False)
    monkeypatch.setattr(_files, "_KNOWN", {})
    return store


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_a_remembered_file_is_not_read_again(tmp_path: Path) -> None:
    path = _write(tmp_path / "w.bin", b"weights" * 1000)
    assert known_sha256(path) is None
    remember_sha256(path, "0" * 64)  # a digest the bytes do not have: returning it proves nothing was read
    assert sha256_file(path) == "0" * 64


def test_a_changed_file_is_hashed_again(tmp_path: Path) -> None:
    path = _write(tmp_path / "w.bin", b"a" * 4096)
    digest = sha256_file(path)
    assert known_sha256(path) == digest == hashlib.sha256(b"a" * 4096).hexdigest()
    with open(path, "r+b") as handle:  # same size, one byte changed in place
        handle.seek(100)
        handle.write(b"b")
    assert known_sha256(path) is None
    entry = FileEntry("w.bin", 4096, digest)
    with pytest.raises(IntegrityError, match="sha256"):
        verify_file(path, entry)


def test_the_digest_survives_the_process_in_the_store(tmp_path: Path, private_store: Path, monkeypatch) -> None:
    path = _write(tmp_path / "w.bin", b"x" * 10_000)
    digest = sha256_file(path)
    assert list((private_store / "verified").iterdir())  # one small record per file
    monkeypatch.setattr(_files, "_KNOWN", {})  # a new process: nothing in memory
    assert known_sha256(path) == digest


def test_remembering_can_be_turned_off(tmp_path: Path, monkeypatch) -> None:
    path = _write(tmp_path / "w.bin", b"y" * 100)
    remember_sha256(path, "0" * 64)
    monkeypatch.setenv("HUB_EXPORT_VERIFIED_CACHE", "0")
    assert known_sha256(path) is None
    assert sha256_file(path) == hashlib.sha256(b"y" * 100).hexdigest()


def test_hashing_writer_records_what_it_wrote(tmp_path: Path) -> None:
    import numpy as np

    array = np.arange(1000, dtype=np.float32)
    with HashingWriter(tmp_path / "data.bin") as out:
        out.write(b"header")
        out.write(array.view(np.uint8))  # any buffer, written without a copy
    expected = hashlib.sha256(b"header" + array.tobytes()).hexdigest()
    assert out.sha256 == expected and out.size == 6 + array.nbytes
    assert known_sha256(tmp_path / "data.bin") == expected


def test_a_failed_write_is_never_remembered(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), HashingWriter(tmp_path / "partial.bin") as out:
        out.write(b"half")
        raise RuntimeError("interrupted")
    assert known_sha256(tmp_path / "partial.bin") is None


def test_copy_file_hashes_on_the_way(tmp_path: Path) -> None:
    source = _write(tmp_path / "a.bin", b"z" * 20_000)
    digest = copy_file(source, tmp_path / "b.bin")
    assert digest == hashlib.sha256(b"z" * 20_000).hexdigest() == known_sha256(tmp_path / "b.bin")
    assert (tmp_path / "b.bin").read_bytes() == source.read_bytes()


class _CountingSha256:
    """``hashlib`` as ``_files`` sees it, counting the digests it starts (each one is a full read of a file)."""

    def __init__(self) -> None:
        self.started = 0

    def sha256(self, *args):
        self.started += 1
        return hashlib.sha256(*args)


def test_a_second_load_reads_no_verified_file_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tiny_models import build

    from hub_export import DynamoConfig, DynamoExporter, ExportedModel

    case = build("llama")
    folder = DynamoExporter().export(case.model, case.sample, config=DynamoConfig()).save_pretrained(tmp_path / "pt2")
    counting = _CountingSha256()
    monkeypatch.setattr(_files, "hashlib", counting)
    monkeypatch.setattr(_files, "_KNOWN", {})  # a new process: only the store remembers
    ExportedModel.from_pretrained(folder)
    assert counting.started == 0  # every file was hashed when it was saved, and is unchanged since
    program = folder / "model.pt2"
    with open(program, "r+b") as handle:  # a changed file is read and refused
        handle.seek(program.stat().st_size // 2)
        byte = handle.read(1)
        handle.seek(-1, 1)
        handle.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(IntegrityError, match="model.pt2"):
        ExportedModel.from_pretrained(folder)
    assert counting.started == 1
