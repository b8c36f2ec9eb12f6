"""Damaged XNNPACK delegate payloads and kernel outputs of an ExecuTorch program are refused before the runtime parses
them (issue #21: the process never crashes).

Each variant edits one field of a tiny export's ``model.pte`` (the XNNPACK graph inside the delegate payload, its
header, or a kernel call's output): the checks refuse it by the rule it breaks, and a child process that loads every
variant re-sealed (sizes and sha256 recomputed) and calls it gets an ``UnsafeExportError`` for each, without dying.
``benchmarks/fuzz_pte.py`` flips every byte of the payload; these are its crash classes (a constant's dims past its
data was the crash found at byte 10454 of this export).
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from safety_corpus import reseal
from tiny_models import embedding_head_export

from hub_export.backends.executorch._flatbuf import Flat, Table
from hub_export.backends.executorch._plan import check_plan_indices
from hub_export.backends.executorch._xnnpack import check_xnnpack_delegates
from hub_export.errors import UnsafeExportError


@pytest.fixture(scope="module")
def base() -> Path:
    return embedding_head_export("executorch")  # shared with other modules: copied before any change


class Pte:
    """Where the fields of a ``.pte``'s first XNNPACK graph lie in the file."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.end, segment_base = struct.unpack_from("<QQ", data, 16)
        self.program = Flat(data[: self.end])
        root = self.program.root()
        self.plan = self.program.tables(root, 1, 16)[0]
        delegate = self.program.tables(self.plan, 7, 16)[0]
        processed = self.program.child(delegate, 1)
        assert processed is not None
        segment = self.program.tables(root, 4, 64)[self.program.scalar(processed, 1, "<I")]
        self.payload = segment_base + self.program.scalar(segment, 0, "<Q")
        graph_offset, graph_size = struct.unpack_from("<II", data, self.payload + 10)
        self.graph_start = self.payload + graph_offset
        self.graph = Flat(data[self.graph_start : self.graph_start + graph_size])
        self.root = self.graph.root()
        self.values = [self._tensor(v) for v in self.graph.tables(self.root, 2, 1024)]
        self.nodes = self.graph.tables(self.root, 1, 1024)

    def _tensor(self, value: Table) -> Table:
        tensor = self.graph.child(value, 1)
        assert tensor is not None
        return tensor

    def value(self, constant: bool = False, external: bool = False) -> Table:
        """The last tensor value that is (not) a constant and (not) external (the last external is the output, whose
        external id is not 0, the default a flatbuffer leaves out)."""
        return [
            t
            for t in self.values
            if bool(self.graph.scalar(t, 3, "<I")) == constant and bool(self.graph.scalar(t, 5, "<I")) == external
        ][-1]

    def at(self, table: Table, slot: int, width: int = 4) -> int:
        """The file offset of a graph table's field."""
        position = self.graph.field(table, slot, width)
        assert position is not None
        return self.graph_start + position

    def vector_at(self, table: Table, slot: int) -> int:
        """The file offset of a graph vector's first element."""
        return self.graph_start + self.graph.vector(table, slot, 4)[0]

    def kernel_output(self) -> tuple[int, int]:
        """``(file offset of the first kernel call's output argument, its value index)``."""
        calls = [
            i
            for chain in self.program.tables(self.plan, 5, 16)
            for i in self.program.tables(chain, 2, 1024)
            if self.program.scalar(i, 0, "<B") == 1
        ]
        body = self.program.child(calls[0], 1)
        assert body is not None
        start, count = self.program.vector(body, 1, 4)
        position = start + 4 * (count - 1)
        return position, struct.unpack_from("<i", self.data, position)[0]

    def value_of_kind(self, kind: int, besides: int = -1) -> int:
        """The index of the first program value of ``kind`` (5: tensor, 2: int) other than ``besides``."""
        values = self.program.tables(self.plan, 2, 4096)
        return next(i for i, v in enumerate(values) if self.program.scalar(v, 0, "<B") == kind and i != besides)


def _put(fmt: str, where: Callable[[Pte], int], value: Callable[[Pte], int]) -> Callable[[Pte, bytearray], None]:
    return lambda pte, data: struct.pack_into(fmt, data, where(pte), value(pte))


def _flip_dims(pte: Pte, data: bytearray) -> None:
    """The linear weight's last dim (32) grows by 0xFF << 16: XNNPACK packs that many columns, reading past the
    weight's data (byte 10454 of this export: a segfault on the first call)."""
    weight = max((t for t in pte.values if pte.graph.scalar(t, 3, "<I")), key=lambda t: pte.graph.count(t, 2, 4))
    data[pte.vector_at(weight, 2) + 4 * (pte.graph.count(weight, 2, 4) - 1) + 2] ^= 0xFF


def _kernel_output(kind: int) -> Callable[[Pte, bytearray], None]:
    def edit(pte: Pte, data: bytearray) -> None:
        position, current = pte.kernel_output()
        struct.pack_into("<i", data, position, pte.value_of_kind(kind, besides=current))

    return edit


# name -> (edit, a fragment of the refusal)
VARIANTS: dict[str, tuple[Callable[[Pte, bytearray], None], str]] = {
    "constant-dims-past-its-data": (_flip_dims, "needs"),
    "tensor-num-dims-mismatch": (_put("<I", lambda p: p.at(p.value(constant=True), 1), lambda p: 5), "bad dims"),
    "external-id-past-the-call": (
        _put("<I", lambda p: p.at(p.value(external=True), 4), lambda p: 7),
        "external id 7",
    ),
    "external-element-size": (
        _put("<h", lambda p: p.at(p.value(external=True), 0, 2), lambda p: 2),
        "2-byte elements",
    ),
    "tensor-unknown-datatype": (_put("<h", lambda p: p.at(p.value(), 0, 2), lambda p: 11), "data type 11"),
    "value-id-repeated": (
        _put("<I", lambda p: p.at(p.value(constant=True), 6), lambda p: p.graph.scalar(p.value(), 6, "<I")),
        "already defined",
    ),
    "node-reads-undefined-value": (_put("<I", lambda p: p.at(p.graph.child(p.nodes[0], 1), 0), lambda p: 4242), "not defined"),  # type: ignore[arg-type]
    "node-type-unknown": (_put("<B", lambda p: p.at(p.nodes[0], 0, 1), lambda p: 99), "node type (99)"),
    "header-constants-past-payload": (_put("<Q", lambda p: p.payload + 22, lambda p: 1 << 40), "header is inconsistent"),
    "values-count-past-graph": (_put("<I", lambda p: p.vector_at(p.root, 2) - 4, lambda p: 1 << 20), "passes the end"),
    "graph-identifier": (_put("<I", lambda p: p.graph_start + 4, lambda p: 0x30304E58), "not XN01"),
    "kernel-output-not-a-tensor": (_kernel_output(2), "(int), where the schema takes tensor"),
    "kernel-output-another-tensor": (_kernel_output(5), "not its out argument"),
}  # fmt: skip


def _variant(base: Path, name: str) -> bytes:
    data = bytearray((base / "model.pte").read_bytes())
    pte = Pte(bytes(data))
    VARIANTS[name][0](pte, data)
    assert bytes(data) != pte.data
    return bytes(data)


def _check(data: bytes) -> None:
    """The checks :func:`~hub_export.backends.executorch.io.load_runtime_program` runs on a program's bytes."""
    import io

    end = struct.unpack_from("<Q", data, 16)[0]
    check_plan_indices(data[:end], "model.pte")
    check_xnnpack_delegates(data[:end], io.BytesIO(data), len(data), "model.pte", {})


def test_base_passes(base: Path) -> None:
    _check((base / "model.pte").read_bytes())


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_is_refused_by_its_rule(base: Path, name: str) -> None:
    with pytest.raises(UnsafeExportError, match="model.pte") as info:
        _check(_variant(base, name))
    assert VARIANTS[name][1] in str(info.value)


_CHILD = """
import json, sys
from hub_export import ExportedModel
from hub_export.errors import HubExportError
import torch
for folder in sys.argv[1:]:
    print(json.dumps({"start": folder}), flush=True)
    try:
        ExportedModel.from_pretrained(folder)(input_ids=torch.tensor([[1, 5, 9, 3]]))
        outcome = "ran"
    except HubExportError as exc:
        outcome = type(exc).__name__
    except Exception as exc:
        outcome = "other: " + repr(exc)[:300]
    print(json.dumps({"done": folder, "outcome": outcome}), flush=True)
"""


def test_variants_never_crash_a_loading_process(base: Path, tmp_path: Path) -> None:
    folders = []
    for name in ["control", *sorted(VARIANTS)]:
        folder = tmp_path / name
        shutil.copytree(base, folder)
        if name != "control":
            (folder / "model.pte").write_bytes(_variant(base, name))
            reseal(folder)
        folders.append(str(folder))
    process = subprocess.run(
        [sys.executable, "-c", _CHILD, *folders], capture_output=True, text=True, timeout=600, check=False
    )
    lines = [json.loads(line) for line in process.stdout.splitlines() if line.startswith("{")]
    outcomes = {Path(line["done"]).name: line["outcome"] for line in lines if "done" in line}
    started = [Path(line["start"]).name for line in lines if "start" in line]
    assert process.returncode == 0, f"the process died (rc {process.returncode}) on {started[-1]}"
    expected: dict[str, Any] = {name: "UnsafeExportError" for name in VARIANTS}
    assert outcomes == {"control": "ran", **expected}
