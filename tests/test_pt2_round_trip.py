"""Valid programs the strict ``.pt2`` reader must load: ``torch.vmap`` and ``torch.no_grad()`` inside ``forward``.

The reader (``backends/dynamo/_pt2.py``) refuses what it cannot vouch for; these are the shapes of valid exports it
used to refuse (coverage matrix: gemma4_audio's ``vmap``, phi4_multimodal's unused ``no_grad`` mask, reformer's
nested ``no_grad`` blocks, the float guards of vision models that take the square root of a patch count: dinov3_vit,
cohere2_vision, and of a patch count divided by a pooled length: gemma4_vision, diffusion_gemma), each
saved, loaded back and compared with eager, and the rules that admit them shown to still refuse their abuse.
"""

from __future__ import annotations

import copy
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch

from hub_export import DynamoConfig, DynamoExporter, ExportedModel
from hub_export.backends.dynamo._grammar import check_guard, check_sym_expr
from hub_export.backends.dynamo._program_schema import validate_document
from hub_export.backends.dynamo._vmap import PREDISPATCH


class VmapHead(torch.nn.Module):
    """An embedding whose rows are normalised by ``torch.vmap`` (as audio models map over frames)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(32, 8)
        self.head = torch.nn.Linear(8, 8)

    def forward(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        hidden = self.embed(input_ids)
        scaled = torch.vmap(lambda row: row / (row.norm(dim=-1, keepdim=True) + 1.0))(hidden)
        return {"logits": self.head(scaled)}


class DeadNoGradHead(torch.nn.Module):
    """A ``torch.no_grad()`` block whose mask nothing reads (a branch the inputs do not take), and one that is used."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(32, 8)

    def forward(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            unused = ~(input_ids == 3).unsqueeze(-1)  # noqa: F841 - the dead region under test
        with torch.no_grad():
            keep = (input_ids != 0).unsqueeze(-1)
        return {"logits": self.embed(input_ids) * keep}


class NestedNoGradHead(torch.nn.Module):
    """``no_grad`` blocks that call ``no_grad`` helpers first and last, as Reformer's layer (under ``no_grad``) calls
    its LSH attention, which sorts buckets under ``no_grad``: ``torch.export`` splits the outer block around the inner
    ones and keeps the empty pieces as regions with no inputs, no body and no outputs."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(32, 8)

    def order(self, values: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return torch.argsort(values, dim=-1, stable=True)

    def forward(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            first = self.order(input_ids)
            second = self.order(input_ids * 2)
            hidden = self.embed(input_ids) + first.unsqueeze(-1) + second.unsqueeze(-1)
        with torch.no_grad():
            hidden = hidden * 2
            last = self.order(hidden.sum(-1))
        return {"logits": hidden + last.unsqueeze(-1)}


def _round_trip(model: torch.nn.Module, folder: Path) -> tuple[ExportedModel, Path]:
    sample = {"input_ids": torch.tensor([[1, 3, 0, 5, 7], [2, 2, 3, 0, 1]])}
    exported = DynamoExporter().export(model, sample, config=DynamoConfig(dynamic=True))
    path = Path(exported.save_pretrained(folder))
    return ExportedModel.from_pretrained(path), path


@pytest.mark.parametrize("model_class", [VmapHead, DeadNoGradHead, NestedNoGradHead])
def test_valid_programs_load_back_and_match_eager(model_class: type, tmp_path: Path) -> None:
    model = model_class().eval()
    loaded, _ = _round_trip(model, tmp_path / "export")
    for ids in (torch.tensor([[1, 3, 0, 5, 7], [2, 2, 3, 0, 1]]), torch.tensor([[4, 3, 0], [1, 9, 9], [0, 0, 3]])):
        with torch.no_grad():
            expected = model(input_ids=ids)["logits"]
        torch.testing.assert_close(loaded(input_ids=ids)["logits"], expected, rtol=1e-5, atol=1e-5)


def test_an_unused_no_grad_region_is_not_in_the_program(tmp_path: Path) -> None:
    _, path = _round_trip(DeadNoGradHead().eval(), tmp_path / "export")
    targets = [node["target"] for node in _nodes(_program_json(path))]
    assert targets.count("torch.ops.higher_order.wrap_with_set_grad_enabled") == 1  # the used one stays


def test_nested_no_grad_blocks_leave_no_empty_region(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def regions(path: Path) -> list[dict[str, Any]]:
        nodes = _nodes(_program_json(path))
        return [node for node in nodes if node["target"] == "torch.ops.higher_order.wrap_with_set_grad_enabled"]

    _, path = _round_trip(NestedNoGradHead().eval(), tmp_path / "export")
    kept = regions(path)
    assert kept and all(node["outputs"] for node in kept)
    # torch.export does write the empty pieces (which torch.export.load cannot read back): the model is the case
    from hub_export.export import _program

    monkeypatch.setattr(_program, "drop_empty_regions", lambda program: 0)
    exported = DynamoExporter().export(
        NestedNoGradHead().eval(), {"input_ids": torch.tensor([[1, 3, 0, 5, 7]])}, config=DynamoConfig(dynamic=True)
    )
    assert any(not node["outputs"] for node in regions(Path(exported.save_pretrained(tmp_path / "raw"))))


@pytest.fixture(scope="module")
def vmap_program(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    _, path = _round_trip(VmapHead().eval(), tmp_path_factory.mktemp("vmap") / "export")
    return _program_json(path)


def _program_json(folder: Path) -> dict[str, Any]:
    with zipfile.ZipFile(folder / "model.pt2") as archive:
        name = next(n for n in archive.namelist() if n.endswith("models/model.json"))
        return json.loads(archive.read(name))


def _nodes(program: dict[str, Any]) -> list[dict[str, Any]]:
    return program["graph_module"]["graph"]["nodes"]


def _index(program: dict[str, Any], name: str) -> int:
    return next(i for i, node in enumerate(_nodes(program)) if node["target"] == PREDISPATCH + name)


def _drop(name: str) -> Any:
    def edit(program: dict[str, Any]) -> None:
        del _nodes(program)[_index(program, name)]

    return edit


def _arg(name: str, position: int, arg: dict[str, Any]) -> Any:
    def edit(program: dict[str, Any]) -> None:
        _nodes(program)[_index(program, name)]["inputs"][position]["arg"] = arg

    return edit


def _rename(old: str, new: str) -> Any:
    def edit(program: dict[str, Any]) -> None:
        _nodes(program)[_index(program, old)]["target"] = PREDISPATCH + new

    return edit


def _swap_open_close(program: dict[str, Any]) -> None:
    nodes = _nodes(program)
    opened, closed = _index(program, "_vmap_increment_nesting"), _index(program, "_vmap_decrement_nesting")
    nodes[opened], nodes[closed] = nodes[closed], nodes[opened]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_drop("_vmap_decrement_nesting"), "opened and never closed"),
        (_swap_open_close, "never opened"),
        (_arg("_add_batch_dim", 2, {"as_int": 2}), "vmap level"),
        (_arg("_remove_batch_dim", 1, {"as_int": 0}), "vmap level"),
        (_arg("_add_batch_dim", 1, {"as_int": 10**6}), "batch dimension"),
        (_arg("_vmap_increment_nesting", 1, {"as_string": "import os"}), "randomness"),
        (_arg("_add_batch_dim", 0, {"as_string": "x"}), "does not take"),
        (_rename("_vmap_decrement_nesting", "_jvp_decrement_nesting"), "not one torch.vmap writes"),
        (_rename("_vmap_decrement_nesting", "os"), "not one torch.vmap writes"),
    ],
)
def test_vmap_calls_must_nest_and_take_their_arguments(vmap_program: dict[str, Any], edit: Any, message: str) -> None:
    validate_document(vmap_program, "ExportedProgram")  # the program torch wrote passes
    changed = copy.deepcopy(vmap_program)
    edit(changed)
    with pytest.raises(ValueError, match=message):
        validate_document(changed, "ExportedProgram")


class SquarePatches(torch.nn.Module):
    """Takes the side of a square grid of 8x8 patches (``int(n ** 0.5)``), as ViT position embeddings do: torch
    guards the export with ``math.trunc(torch.sym_float(...) ** 0.5) == side``; and patch centres
    ``arange(0.5, rows)`` (DINOv3's RoPE), whose length is ``CeilToInt(FloatTrueDiv(... Float('-0.5') ...))``."""

    def forward(self, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        rows = pixel_values.shape[2] // 8
        side = int((rows * (pixel_values.shape[3] // 8)) ** 0.5)
        centres = torch.arange(0.5, rows, 1.0)
        return {"logits": pixel_values.mean((2, 3)) * side + centres.mean()}


def test_a_program_guarded_by_float_arithmetic_loads(tmp_path: Path) -> None:
    model = SquarePatches().eval()
    sample = {"pixel_values": torch.randn(1, 3, 64, 64)}
    path = DynamoExporter().export(model, sample, config=DynamoConfig(dynamic=True)).save_pretrained(tmp_path / "e")
    program = _program_json(Path(path))
    assert any("torch.sym_float" in guard and "** 0.5" in guard for guard in program["guards_code"])
    assert "FloatTrueDiv" in json.dumps(program["graph_module"])  # the size of arange(0.5, rows)
    loaded = ExportedModel.from_pretrained(path)
    for other in ({"pixel_values": torch.randn(2, 3, 64, 64)}, {"pixel_values": torch.randn(1, 3, 32, 128)}):
        for name, expected in model(**other).items():
            torch.testing.assert_close(loaded(**other)[name], expected)


class PooledPatches(torch.nn.Module):
    """Pools a square grid of patches to 3x3 (``k = int((n // length) ** 0.5)`` with ``length = n // 9``), as
    Gemma 4's vision pooler does: torch guards the export with
    ``math.trunc(torch.sym_float(n // (n // 9)) ** 0.5) == 3``, a floor division by a size inside a float."""

    def forward(self, patches: torch.Tensor) -> dict[str, torch.Tensor]:
        count = patches.shape[1]
        length = count // 9
        side = int((count // length) ** 0.5)
        return {"logits": patches.mean(1) * side}


def test_a_program_guarded_by_a_floor_division_inside_a_float_loads(tmp_path: Path) -> None:
    model = PooledPatches().eval()
    exported = DynamoExporter().export(model, {"patches": torch.randn(1, 36, 4)}, config=DynamoConfig(dynamic=True))
    path = exported.save_pretrained(tmp_path / "e")
    guards = _program_json(Path(path))["guards_code"]
    assert any("torch.sym_float" in guard and "// 9)" in guard and "** 0.5" in guard for guard in guards), guards
    loaded = ExportedModel.from_pretrained(path)
    for other in ({"patches": torch.randn(2, 45, 4)}, {"patches": torch.randn(1, 81, 4)}):
        torch.testing.assert_close(loaded(**other)["logits"], model(**other)["logits"])


def test_symbolic_sizes_admit_float_literals_and_torch_float_functions_only() -> None:
    check_sym_expr(
        "CeilToInt(FloatTrueDiv(Add(ToFloat(FloorDiv(Symbol('s68', positive=True, integer=True), Integer(8))), "
        "Float('-0.5', precision=53)), Float('1.0', precision=53)))"
    )
    for expr in (
        "Float('__import__', precision=53)",
        "Float('1.0', precision=100000)",
        "Float('1.0', dps=53)",
        "Float(Integer(1))",
        "Function('os')(Integer(1))",
    ):
        with pytest.raises(ValueError):
            check_sym_expr(expr)


def test_guards_admit_finite_floats_and_torch_number_helpers_only() -> None:
    for guard in (
        "math.trunc(torch.sym_float((L['t'][2].size()[3] // 8)*(L['t'][2].size()[2] // 8)) ** 0.5) == 8",
        "1 + (L['t'][0].size()[3] // 8) + ((-1)*math.ceil((((-0.5) + torch.sym_float(L['t'][0].size()[3] // 8))"
        " / 1.0))) >= 0",
        "torch.sym_max(L['t'][0].size()[0], 2) == torch.sym_int(torch.sym_sqrt(4.0)) + 0",
        "math.trunc(torch.sym_float(L['t'][2].size()[1] // (L['t'][2].size()[1] // 9)) ** 0.5) == 3",
        "L['t'][0].size()[1] % (L['t'][0].size()[1] // 4) == 0",
        "(L['t'][0].size()[0] ** 8) ** 8 > 1",
        # Florence-2's DaViT: one over the square root of a patch count
        "torch.sym_float((1 + (((-1) + L['t'][2].size()[3]) // 4))*(1 + (((-1) + L['t'][2].size()[2]) // 4))) "
        "** (-0.5) < 1.0",
    ):
        check_guard(guard)
    for guard in (
        "torch.load('f') == 1",
        "torch.sym_float.__globals__ == 1",
        "torch.sym_float(L['t'][0].size()[0], x=1) == 1.0",
        "L['t'][0].size()[0] == 1e999",
        "L['t'][0].size()[0] ** 1e6 > 1",
        "L['t'][0].size()[0] ** (-1e6) > 1",
        "L['t'][0].size()[0] ** (-L['t'][0].size()[0]) > 1",
        "L['t'][0].size()[0] ** (not 1) > 1",
        "L['t'][0].size()[0] == 'a'",
        "os.sym_float(1) == 1",
        "((L['t'][0].size()[0] ** 64) ** 64) ** 64 > 1",  # an integer of millions of digits at every call
        "(L['t'][0].size()[0] * (L['t'][0].size()[0] ** 2)) ** 64 > 1",
        "L['t'][0].size()[0] << 64 > 1",
    ):
        with pytest.raises(ValueError):
            check_guard(guard)
