"""What a Dynamo export may share between components (backends/dynamo/_shared.py): a buffer a program writes stays
its own, whether it writes it in place, returns it mutated or hands it to a control-flow subgraph; and how a
``.pt2`` is written (backends/dynamo/_writer.py)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch

from hub_export.backends.dynamo._shared import REFERENCES, _written_buffers
from hub_export.backends.dynamo._writer import write_pt2


class _Buffers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        for name in ("read", "mutated", "in_scan", "viewed"):
            self.register_buffer(name, torch.ones(3))
        self.scale = torch.nn.Parameter(torch.full((3,), 2.0))
        self.offset = torch.arange(3.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * self.scale + self.offset  # a parameter and a lifted tensor constant
        self.mutated.add_(1)  # a state update: torch.export lifts it to buffers_to_mutate

        def body(carry: torch.Tensor, xs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return carry + self.in_scan, carry * xs

        carry, _ = torch._higher_order_ops.scan(body, x[0], x)
        return carry + self.read + self.viewed[:2].sum()


@pytest.fixture(scope="module")
def program() -> Any:
    return torch.export.export(_Buffers(), (torch.randn(4, 3),))


def test_buffers_a_program_writes_are_never_shared(program: Any) -> None:
    assert _written_buffers(program) == {"mutated", "in_scan"}


def test_a_pt2_is_written_once_as_torch_export_save_writes_it(program: Any, tmp_path: Path) -> None:
    (tmp_path / "torch").mkdir()
    torch.export.save(program, str(tmp_path / "torch" / "model.pt2"))
    assert write_pt2(program, tmp_path / "model.pt2") == {}
    assert (tmp_path / "model.pt2").read_bytes() == (tmp_path / "torch" / "model.pt2").read_bytes()  # deterministic
    with zipfile.ZipFile(tmp_path / "model.pt2") as archive:
        whole = {name.split("/", 1)[1] for name in archive.namelist()}
        config = json.loads(archive.read("model/data/weights/model_weights_config.json"))["config"]
    # the shared payloads (the parameter, a buffer read only) are left out of the one write, and named
    refs = write_pt2(program, tmp_path / "shared.pt2", {"scale": "s", "read": "r"}, {"s": 12, "r": 12, "x": 4})
    payload = {fqn: "data/weights/" + meta["path_name"] for fqn, meta in config.items()}
    assert refs == {payload["scale"]: {"key": "s", "nbytes": 12}, payload["read"]: {"key": "r", "nbytes": 12}}
    with zipfile.ZipFile(tmp_path / "shared.pt2") as archive:
        names = {name.split("/", 1)[1] for name in archive.namelist()}
        assert json.loads(archive.read(f"shared/{REFERENCES}")) == {"payloads": refs}
    assert names == (whole - set(refs)) | {REFERENCES}
    # a size that is not the key's keeps the payload in the archive
    assert write_pt2(program, tmp_path / "other.pt2", {"scale": "s"}, {"s": 8}) == {}
