"""The preprocessing files of a model (tokenizer, chat template, processor configs): read, checked, copied.

An export folder carries its source's preprocessing files, so that ``AutoTokenizer.from_pretrained(repo,
subfolder="onnx")`` and ``AutoProcessor`` give the source's tokenizer and processor. They are untrusted data: they
are taken by exact name (:data:`PREPROCESSING_FILES`, the side-file names of :data:`~hub_export.manifest.SIDE_FILE_ROLES`
whose role is ``tokenizer``, ``chat_template`` or ``processor``), never through a symlink out of their folder (the
huggingface_hub cache's ``blobs/`` excepted), each read up to :data:`MAX_PREPROCESSING_BYTES`, and checked as data by
:func:`check_preprocessing_file`: JSON files parse to an object and name no code (``auto_map``, which transformers
would import with ``trust_remote_code``, is refused), text files are UTF-8. Nothing here imports or runs them.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from ._files import verify_file
from .errors import UnsafeExportError
from .manifest import SIDE_FILE_ROLES, Manifest

__all__ = [
    "MAX_PREPROCESSING_BYTES",
    "PREPROCESSING_FILES",
    "PREPROCESSING_ROLES",
    "check_preprocessing_file",
    "listed_preprocessing",
    "read_preprocessing",
    "write_preprocessing",
]

#: The side-file roles that are preprocessing.
PREPROCESSING_ROLES = ("tokenizer", "chat_template", "processor")
#: File names copied from a source model into its exports.
PREPROCESSING_FILES = tuple(name for name, role in SIDE_FILE_ROLES.items() if role in PREPROCESSING_ROLES)
#: The largest preprocessing file read (a large vocabulary's tokenizer.json is tens of MB).
MAX_PREPROCESSING_BYTES = 64 * 1024 * 1024
#: Keys whose presence means the file asks transformers to import code from the repo.
_CODE_KEYS = ("auto_map",)
_MAX_DEPTH = 64


def _depth(value: object) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack and deepest < _MAX_DEPTH:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return deepest


def check_preprocessing_file(name: str, data: bytes) -> None:
    """Check one preprocessing file as data.

    Raises:
        UnsafeExportError: The name is not a preprocessing file's, the file is too large, a JSON file is not a JSON
            object or names remote code (``auto_map``), or a text file is not UTF-8.
    """
    if name not in PREPROCESSING_FILES:
        raise UnsafeExportError(f"{name!r} is not a preprocessing file name; known: {', '.join(PREPROCESSING_FILES)}.")
    if len(data) > MAX_PREPROCESSING_BYTES:
        raise UnsafeExportError(f"{name} is {len(data)} bytes, over the {MAX_PREPROCESSING_BYTES} byte limit.")
    if name.endswith(".model"):
        return  # a SentencePiece protobuf: parsed by sentencepiece as data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UnsafeExportError(f"{name} is not UTF-8 text; a tokenizer or processor file is text.") from None
    if not name.endswith(".json"):
        return
    try:
        parsed = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise UnsafeExportError(
            f"{name} is not valid JSON ({str(exc).splitlines()[0] if str(exc) else exc})."
        ) from None
    if not isinstance(parsed, dict):
        raise UnsafeExportError(f"{name} holds a JSON {type(parsed).__name__}, not an object.")
    if _depth(parsed) >= _MAX_DEPTH:
        raise UnsafeExportError(f"{name} is nested deeper than {_MAX_DEPTH} levels.")
    for key in _CODE_KEYS:
        if key in parsed:
            raise UnsafeExportError(
                f"{name} names remote code ({key!r}); hub_export copies and serves only in-library tokenizers and "
                f"processors: remove {key!r} from the source's {name}."
            )


def _read_bounded(path: Path) -> bytes | None:
    """The bytes of a regular file (a symlink only into a huggingface_hub ``blobs/`` folder), or None when absent."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        target = Path(os.path.realpath(path))
        if target.parent.name != "blobs":
            raise UnsafeExportError(f"{path} is a symlink out of its folder; refusing to read it.")
        info = os.stat(target)
        path = target
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeExportError(f"{path} is not a regular file; refusing to read it.")
    if info.st_size > MAX_PREPROCESSING_BYTES:
        raise UnsafeExportError(f"{path.name} is {info.st_size} bytes, over the {MAX_PREPROCESSING_BYTES} byte limit.")
    with open(path, "rb") as handle:
        return handle.read(MAX_PREPROCESSING_BYTES + 1)


def read_preprocessing(directory: str | Path) -> dict[str, bytes]:
    """The preprocessing files of a model folder (or a huggingface_hub snapshot), by name, each checked.

    Raises:
        UnsafeExportError: A file fails :func:`check_preprocessing_file` or is a symlink out of the folder.
    """
    found: dict[str, bytes] = {}
    for name in PREPROCESSING_FILES:
        data = _read_bounded(Path(directory) / name)
        if data is not None:
            check_preprocessing_file(name, data)
            found[name] = data
    return found


def write_preprocessing(files: Mapping[str, bytes], directory: str | Path) -> list[str]:
    """Write checked preprocessing files into ``directory`` (by exact name only); returns the names written.

    Raises:
        UnsafeExportError: A file fails :func:`check_preprocessing_file`.
    """
    written = []
    for name, data in files.items():
        check_preprocessing_file(name, data)
        (Path(directory) / name).write_bytes(data)
        written.append(name)
    return written


def listed_preprocessing(directory: str | Path, manifest: Manifest) -> dict[str, bytes]:
    """The preprocessing files ``manifest`` lists that are present in ``directory`` (a Hub download fetches them only
    when asked), each verified against its size and sha256 and checked as data.

    Raises:
        IntegrityError: A present file differs from its manifest entry.
        UnsafeExportError: A file fails :func:`check_preprocessing_file`.
    """
    found: dict[str, bytes] = {}
    for entry in manifest.side_files():
        if entry.path not in PREPROCESSING_FILES or not os.path.lexists(Path(directory) / entry.path):
            continue
        data = _read_bounded(Path(directory) / entry.path)
        if data is None:  # pragma: no cover - removed meanwhile
            continue
        verify_file(Path(directory) / entry.path, entry)
        check_preprocessing_file(entry.path, data)
        found[entry.path] = data
    return found
