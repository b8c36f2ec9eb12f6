"""Compiled Dynamo exports (``DynamoConfig(compile="aoti")``): AOTInductor packages beside the program, loaded only
with ``trust_native_code=True`` and only on the target they were compiled for.

AOTInductor compiles are slow (a C++ build per component, growing with the graph): one generation export of the tiny
Llama, with one layer, its packages reading the export's weights (``compiled_weights="shared"``), is compiled once
for the whole module and most tests read it; the default packages holding their own frozen weights are compiled for a
two-layer MLP.
"""

from __future__ import annotations

import json
import re
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny_models import build, text_inputs

from hub_export import DynamoConfig, DynamoExporter, ExportedModel
from hub_export.backends.dynamo.compiled import current_target, load_compiled
from hub_export.backends.dynamo.io import load_program
from hub_export.errors import ConfigError, DeviceUnavailableError, UnsafeExportError
from hub_export.formats import SafetyOptions
from hub_export.manifest import Manifest


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Path]:
    """(tiny case, the in-memory compiled export, its saved folder)."""
    case = build("llama", layers=1)
    config = DynamoConfig(dynamic=True, compile="aoti", compiled_weights="shared")
    exported = DynamoExporter().export_for_generation(case.model, case.sample, config=config)
    folder = exported.save_pretrained(tmp_path_factory.mktemp("aoti") / "pt2")
    return case, exported, folder


def _eager(case: Any, inputs: dict[str, Any], new: int) -> torch.Tensor:
    with torch.no_grad():
        return case.model.generate(**inputs, max_new_tokens=new, min_new_tokens=new, do_sample=False)


def test_compiled_generate_equals_eager(compiled: Any) -> None:
    case, exported, folder = compiled
    loaded = ExportedModel.from_pretrained(folder, trust_native_code=True)
    assert all(runner.compiled for runner in loaded.runners.values())  # the packages run, not .module()
    for inputs in (case.sample, text_inputs(2, 9, pad_left=3, seed=5)):  # other batch and lengths: dims kept
        expected = _eager(case, inputs, 6)
        assert torch.equal(loaded.generate(**inputs, max_new_tokens=6, eos_token_id=[]), expected)
    assert torch.equal(
        exported.generate(**case.sample, max_new_tokens=6, eos_token_id=[]), _eager(case, case.sample, 6)
    )
    for component in exported.components.values():
        assert component.metadata.parity["max_abs_diff"] <= 1e-4  # measured on the compiled package

    # written again from the loaded programs (not copied): each portable .pt2 names the shared file written with it
    for component in loaded.components.values():
        component._files_dir = None
    again = ExportedModel.from_pretrained(loaded.save_pretrained(folder.parent / "again"), trust_native_code=True)
    for component in again.components.values():
        assert "shared.safetensors" in [f.path for f in component.metadata.files]
    expected = _eager(case, case.sample, 3)
    assert torch.equal(again.generate(**case.sample, max_new_tokens=3, eos_token_id=[]), expected)


def test_native_code_is_refused_by_default(compiled: Any) -> None:
    _, _, folder = compiled
    with pytest.raises(UnsafeExportError, match=r"prefill\.aoti\.pt2.*native code.*trust_native_code=True"):
        ExportedModel.from_pretrained(folder)
    plain = ExportedModel.from_pretrained(folder, trust_native_code=True, lazy=True)
    assert not plain.components["decode"].loaded  # lazy: nothing read until used


def test_manifest_records_the_native_role_and_the_target(compiled: Any) -> None:
    _, _, folder = compiled
    manifest = Manifest.read(folder)
    roles = manifest.roles()
    assert roles["prefill.aoti.pt2"] == roles["decode.aoti.pt2"] == "native"
    assert roles["prefill.pt2"] == "program"  # the portable program stays in the export
    for entry in manifest.components.values():
        assert entry.extra["compile"] == "aoti"
        assert entry.extra["compiled_weights"] == "shared"
        assert entry.extra["target"] == current_target("cpu")
    assert json.loads((folder / "export.json").read_text())["config"]["compile"] == "aoti"


def test_packages_read_the_exports_weights_once(compiled: Any) -> None:
    _, _, folder = compiled
    manifest = Manifest.read(folder)
    for name, entry in manifest.components.items():
        with zipfile.ZipFile(folder / f"{name}.aoti.pt2") as archive:
            names = archive.namelist()
        # no weights in the package: no serialized blob, no pickled weights, no constants folder
        assert not [n for n in names if "weights" in n or "/constants/" in n or n.endswith(".bin")], names
        assert "shared.safetensors" in [f.path for f in entry.files]
    loaded = ExportedModel.from_pretrained(folder, trust_native_code=True)
    prefill, decode = (loaded.runners[n].module.hub_export_constants for n in ("prefill", "decode"))
    assert prefill and set(prefill) == set(decode)
    # every weight both packages read is one memory: the shared file's pages, mapped once in the process
    assert all(prefill[n].data_ptr() == decode[n].data_ptr() for n in prefill if prefill[n].numel())


def test_constants_must_match_the_package(compiled: Any) -> None:
    _, _, folder = compiled
    entry = Manifest.read(folder).components["decode"]
    options = SafetyOptions(trust_native_code=True)
    program = load_program(folder, "decode", entry, options)
    state = program.exported.state_dict
    fqn = next(n for n, t in state.items() if t.dim() == 2 and t.shape[0] != t.shape[1])
    state[fqn] = state[fqn].t()
    with pytest.raises(UnsafeExportError, match=rf"constant '{re.escape(fqn)}' is .* compiled for"):
        load_compiled(program, "cpu", "decode")
    del state[fqn]
    with pytest.raises(UnsafeExportError, match="reads a constant .* its program lacks"):
        load_compiled(program, "cpu", "decode")


def test_packed_packages_hold_their_frozen_prepacked_weights(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)).eval()
    config = DynamoConfig(dynamic=True, compile="aoti")  # compiled_weights="packed", the default
    exported = DynamoExporter().export(model, {"input": torch.randn(2, 16)}, config=config)
    package = exported.components["model"].program.package
    with zipfile.ZipFile(package) as archive:
        source = "".join(archive.read(n).decode() for n in archive.namelist() if n.endswith(".wrapper.cpp"))
    # frozen weights: the linear layers run oneDNN's linear on weights prepacked at compile time, not aten mm
    assert "_linear_pointwise" in source
    folder = exported.save_pretrained(tmp_path / "pt2")
    assert Manifest.read(folder).components["model"].extra["compiled_weights"] == "packed"
    loaded = ExportedModel.from_pretrained(folder, trust_native_code=True)
    runner = loaded.runners["model"]
    assert runner.compiled and not hasattr(runner.module, "hub_export_constants")  # its own weights, none handed
    x = torch.randn(5, 16)  # another batch: the dim is kept
    with torch.no_grad():
        assert torch.allclose(loaded(input=x), model(x), atol=1e-4)


def _with_target(folder: Path, tmp_path: Path, **changes: Any) -> Path:
    """A copy of the export whose recorded target differs (export.json is not hashed; the files are)."""
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    data = json.loads((copy / "export.json").read_text())
    for component in data["components"].values():
        component["extra"]["target"].update(changes)
    (copy / "export.json").write_text(json.dumps(data))
    return copy


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"cpu_features": ["sse2", "avx9000"]}, "lacks avx9000"),  # sse2: every x86-64 CPU has it
        ({"machine": "riscv64"}, "compiled for riscv64 CPUs"),
        ({"torch": "1.0"}, "compiled with torch 1.0"),
        ({"device": "cuda"}, "compiled by AOTInductor for 'cuda'"),
    ],
)
def test_another_target_is_refused_before_loading(compiled: Any, tmp_path: Path, changes: Any, match: str) -> None:
    case, _, folder = compiled
    loaded = ExportedModel.from_pretrained(_with_target(folder, tmp_path, **changes), trust_native_code=True)
    device = "cpu" if changes.get("device") == "cuda" else None
    with pytest.raises(DeviceUnavailableError, match=match):
        loaded.to(device).generate(**case.sample, max_new_tokens=2)


def test_compiled_for_cpu_refuses_another_device(compiled: Any) -> None:
    case, _, folder = compiled
    loaded = ExportedModel.from_pretrained(folder, trust_native_code=True, device="cuda")
    with pytest.raises(DeviceUnavailableError, match="compiled by AOTInductor for 'cpu' and cannot run on 'cuda'"):
        loaded.generate(**case.sample, max_new_tokens=2)


def test_compile_option_is_checked() -> None:
    with pytest.raises(ConfigError, match="compile must be None or 'aoti'"):
        DynamoConfig(compile="tvm")
    assert DynamoConfig.from_dict(DynamoConfig(compile="aoti").to_dict()).compile == "aoti"
    with pytest.raises(ConfigError, match="compiled_weights must be 'packed' or 'shared'"):
        DynamoConfig(compile="aoti", compiled_weights="mmap")  # type: ignore[arg-type]
    shared = DynamoConfig(compile="aoti", compiled_weights="shared")
    assert DynamoConfig.from_dict(shared.to_dict()).compiled_weights == "shared"


def test_num_threads_applies_to_each_call_and_is_restored(compiled: Any) -> None:
    case, _, folder = compiled
    loaded = ExportedModel.from_pretrained(folder, trust_native_code=True, num_threads=1)
    seen: list[int] = []
    for runner in loaded.runners.values():
        assert runner.num_threads == 1
        module = runner.module
        runner.module = lambda *inputs, _module=module: (seen.append(torch.get_num_threads()), _module(*inputs))[1]
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        out = loaded.generate(**case.sample, max_new_tokens=4, eos_token_id=[])
        assert torch.get_num_threads() == 2  # the process keeps its own count
    finally:
        torch.set_num_threads(before)
    assert torch.equal(out, _eager(case, case.sample, 4))
    assert seen and set(seen) == {1}  # every call (prompt and steps) ran on one thread


@pytest.mark.parametrize("bad", [0, 1.5, True, "2"])
def test_num_threads_is_checked(compiled: Any, bad: Any) -> None:
    _, _, folder = compiled
    with pytest.raises(ConfigError, match="num_threads must be an int >= 1"):
        _ = ExportedModel.from_pretrained(folder, trust_native_code=True, num_threads=bad).runners
