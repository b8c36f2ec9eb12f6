"""One weights file for the OpenVINO components of one export that read the same constants.

``openvino.save_model`` writes each component's constants to its own ``.bin``; a generation export's ``prefill`` and
``decode`` graphs read the same weights, so each ``.bin`` would hold all of them. OpenVINO reads an IR's weights from
any file it is given (``Core.read_model(xml, bin)``) at the ``offset``/``size`` of each ``Const`` layer, so the
components are saved as usual, then every distinct constant (same size, same bytes) is copied once into
``openvino_shared.bin`` and each ``.xml`` of the group points into it; the components' own ``.bin`` files go.

Components sharing nothing keep their own ``.bin``. Components sharing anything all read ``openvino_shared.bin``
(one IR reads one weights file): downloading one of them fetches what the others read only for themselves, which for
prefill/decode is nothing but a few small constants.
"""

from __future__ import annotations

import hashlib
import xml.etree.ElementTree as ET  # noqa: N817 - the IR was written by this process, see safety.py for loading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..._files import HashingWriter
from .config import SHARED_WEIGHTS

__all__ = ["share_weights"]

_CHUNK = 8 * 1024 * 1024
_ALIGN = 64  # where each constant starts in the shared file


def _consts(root: Any) -> list[Any]:
    """The ``<data>`` elements of every ``Const`` layer with bytes in the ``.bin``."""
    found = []
    for layer in root.iter("layer"):
        data = layer.find("data") if layer.get("type") == "Const" else None
        if data is not None and data.get("offset") is not None and int(data.get("size", "0")) > 0:
            found.append(data)
    return found


def _chunks(handle: Any, offset: int, size: int) -> Iterator[bytes]:
    """The ``size`` bytes of ``handle`` from ``offset``, in chunks of at most ``_CHUNK`` bytes."""
    handle.seek(offset)
    left = size
    while left:
        chunk = handle.read(min(_CHUNK, left))
        if not chunk:
            raise OSError(f"{handle.name}: shorter than its IR's constants")
        yield chunk
        left -= len(chunk)


def _digest(handle: Any, offset: int, size: int) -> str:
    digest = hashlib.sha256()
    for chunk in _chunks(handle, offset, size):
        digest.update(chunk)
    return digest.hexdigest()


def share_weights(directory: Path, written: dict[str, list[str]]) -> dict[str, list[str]]:
    """Move the constants of components that share any into :data:`SHARED_WEIGHTS`, each distinct one once.

    Args:
        directory: The export folder, holding each component's ``.xml`` and ``.bin``.
        written: Component name -> its files (``.xml``, ``.bin``), as ``save_program`` returned them.

    Returns:
        Component name -> the files it reads now, its ``.xml`` first.
    """
    directory = Path(directory)
    trees = {name: ET.parse(directory / files[0]) for name, files in written.items()}
    consts = {name: _consts(tree.getroot()) for name, tree in trees.items()}
    sizes: dict[int, set[str]] = {}
    for name, datas in consts.items():
        for data in datas:
            sizes.setdefault(int(data.get("size")), set()).add(name)
    # a constant's key: its size, and its bytes' digest when another component has a constant of that size
    keys: dict[str, list[tuple[int, str]]] = {}
    users: dict[tuple[int, str], set[str]] = {}
    for name, datas in consts.items():
        keys[name] = []
        with open(directory / written[name][1], "rb") as handle:
            for data in datas:
                offset, size = int(data.get("offset")), int(data.get("size"))
                key = (size, _digest(handle, offset, size) if len(sizes[size]) > 1 else f"{name}@{offset}")
                keys[name].append(key)
                users.setdefault(key, set()).add(name)
    group = [name for name in written if any(len(users[key]) > 1 for key in keys[name])]
    if len(group) < 2:
        return written
    placed: dict[tuple[int, str], int] = {}
    with HashingWriter(directory / SHARED_WEIGHTS) as out:
        for name in group:
            with open(directory / written[name][1], "rb") as handle:
                for data, key in zip(consts[name], keys[name]):
                    if key not in placed:
                        if out.tell() % _ALIGN:
                            out.write(b"\0" * (_ALIGN - out.tell() % _ALIGN))
                        placed[key] = out.tell()
                        for chunk in _chunks(handle, int(data.get("offset")), key[0]):
                            out.write(chunk)
                    data.set("offset", str(placed[key]))
    result = dict(written)
    for name in group:
        xml, own = written[name][:2]
        with HashingWriter(directory / xml) as graph:
            graph.write(ET.tostring(trees[name].getroot(), encoding="utf-8", xml_declaration=True))
        (directory / own).unlink()
        result[name] = [xml, SHARED_WEIGHTS]
    return result
