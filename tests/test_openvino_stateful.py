"""An OpenVINO generation export's cache state is laid out so that the CPU plugin fuses attention with it
(``hub_export/backends/openvino/_stateful.py``), and generation stays token-identical to eager."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny_models import llama, text_inputs

from hub_export import ExportedModel, OpenVINOConfig, OpenVINOExporter


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    case = llama(head_dim=128)  # real LLMs' head dim: the CPU plugin's attention takes other paths past 64
    exported = OpenVINOExporter().export_for_generation(case.model, case.sample, config=OpenVINOConfig(dynamic=True))
    return case, exported.save_pretrained(tmp_path_factory.mktemp("ov") / "export")


def _decode_runner(folder: Path) -> Any:
    loaded = ExportedModel.from_pretrained(folder, device="cpu")
    return loaded, loaded.runners["decode"]


def test_the_state_has_a_beam_gather_and_an_initializer(saved: Any) -> None:
    _, folder = saved
    _, runner = _decode_runner(folder)
    model = runner.compiled_model
    assert "beam_idx" in {name for port in model.inputs for name in port.get_names()}
    import openvino

    ir = openvino.Core().read_model(folder / "openvino_model.xml")
    states = [op for op in ir.get_ops() if op.get_type_name() == "ReadValue"]
    assert states and all(op.get_input_size() == 1 for op in states)  # a zero initializer each
    concats = [t.get_node() for op in states for t in op.output(0).get_target_inputs()]
    assert "Concat" not in {n.get_type_name() for n in concats}  # read through the beam Gather


def test_the_cpu_plugin_fuses_attention_with_the_state(saved: Any) -> None:
    case, folder = saved
    _, runner = _decode_runner(folder)
    kinds = collections.Counter(
        str(op.get_rt_info()["layerType"].astype(str)) for op in runner.compiled_model.get_runtime_model().get_ops()
    )
    layers = case.model.config.num_hidden_layers
    assert kinds["ScaledDotProductAttention"] == layers, kinds  # one fused node per layer, no MatMul/Softmax chain
    assert kinds["Softmax"] == 0
    precision = str(runner.compiled_model.get_property("KV_CACHE_PRECISION")).lower()
    assert "f32" in precision or "float32" in precision  # a float32 export keeps a float32 cache


def test_fused_generate_equals_eager_and_beam_search_runs(saved: Any) -> None:
    case, folder = saved
    loaded, _ = _decode_runner(folder)
    for inputs in (case.sample, text_inputs(2, 9, pad_left=3, seed=5)):
        with torch.no_grad():
            expected = case.model.generate(**inputs, max_new_tokens=6, min_new_tokens=6, do_sample=False)
        assert torch.equal(loaded.generate(**inputs, max_new_tokens=6, min_new_tokens=6, do_sample=False), expected)
    with torch.no_grad():
        beams = case.model.generate(**case.sample, max_new_tokens=5, num_beams=3, do_sample=False)
    assert torch.equal(loaded.generate(**case.sample, max_new_tokens=5, num_beams=3, do_sample=False), beams)


def test_the_kv_cache_precision_comes_from_the_export_and_the_config_overrides_it(saved: Any) -> None:
    import dataclasses

    from hub_export.backends.openvino.runner import _compile_properties, kv_cache_precision
    from hub_export.errors import ManifestError

    _, folder = saved
    loaded, runner = _decode_runner(folder)
    entry = loaded.components["decode"].metadata
    assert entry.extra["kv_cache_precision"] == "f32" and kv_cache_precision(entry) == "f32"
    older = dataclasses.replace(entry, extra={k: v for k, v in entry.extra.items() if k != "kv_cache_precision"})
    assert kv_cache_precision(older) is None  # the inference precision decides (f32)
    assert kv_cache_precision(dataclasses.replace(entry, extra={**entry.extra, "kv_cache_precision": "u8"})) == "u8"
    with pytest.raises(ManifestError, match="kv_cache_precision"):
        kv_cache_precision(dataclasses.replace(entry, extra={**entry.extra, "kv_cache_precision": "CPU_RUNTIME"}))
    program = runner.compiled_model.get_runtime_model()  # any model: only its rt_info is read
    properties = _compile_properties(program, "AUTO", {"KV_CACHE_PRECISION": "u8"}, kv_cache_precision="f32")
    # on AUTO the caller's value replaces the per-device default (OpenVINO would keep the per-device one)
    assert properties["DEVICE_PROPERTIES"]["CPU"]["KV_CACHE_PRECISION"] == "u8"
    assert _compile_properties(program, "CPU", None, kv_cache_precision="u8")["KV_CACHE_PRECISION"] == "u8"
    _, u8 = _decode_runner_with(folder, {"KV_CACHE_PRECISION": "u8"})
    import openvino

    assert u8.compiled_model.get_property("KV_CACHE_PRECISION") == openvino.Type.u8


def _decode_runner_with(folder: Path, config: dict[str, Any]) -> Any:
    loaded = ExportedModel.from_pretrained(folder, device="cpu", config=config)
    return loaded, loaded.runners["decode"]
