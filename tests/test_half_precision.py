"""Half precision: bfloat16 and float16 models export, save, load and run on every format whose runtime has them,
within the per-dtype parity tolerance of eager in the same dtype; export.json records the dtype of every input,
output and stored weight; a runtime that cannot run a dtype is refused before tracing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny_models import build, text_inputs

from hub_export import ExportedModel
from hub_export.errors import ExportError
from hub_export.export.exporter import PARITY_RTOL, parity_tolerance
from hub_export.formats import backend_for
from hub_export.manifest import Manifest
from hub_export.structure import flatten_value

#: (format, dtype) cells run here: each a different runtime path (docs/precision.md has every cell, measured).
#: ExecuTorch's is lowered with static shapes and run at the sample's (a dynamic lowering takes 2.6x longer; dtypes do
#: not depend on the shapes, which tests/test_executorch.py covers); the others run at another batch and length too.
STATIC = {"executorch"}
CELLS = [
    ("dynamo", "bfloat16"),
    ("onnx", "float16"),
    ("openvino", "bfloat16"),
    ("executorch", "float16"),
]


def leaves(output: Any) -> list[tuple[str, torch.Tensor]]:
    found: list = []
    flatten_value(output, (), found)
    return found


def half_llama(dtype: str) -> Any:
    """The tiny Llama of tiny_models with one layer (half the tracing and lowering), in ``dtype``."""
    from transformers import LlamaForCausalLM

    case = build("llama")
    config = case.model.config
    config.num_hidden_layers = 1
    torch.manual_seed(0)
    case.model = LlamaForCausalLM(config).eval().to(getattr(torch, dtype))
    return case


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(format, dtype) -> (case, saved folder, loaded export), each exported once."""
    done: dict[tuple[str, str], tuple[Any, Path, ExportedModel]] = {}

    def get(fmt: str, dtype: str) -> tuple[Any, Path, ExportedModel]:
        if (fmt, dtype) not in done:
            case = half_llama(dtype)
            backend = backend_for(fmt)
            exported = backend.exporter_class().export(
                case.model, case.sample, config=backend.config_class(dynamic=fmt not in STATIC)
            )
            folder = exported.save_pretrained(tmp_path_factory.mktemp(f"{fmt}-{dtype}") / fmt)
            done[(fmt, dtype)] = (case, folder, ExportedModel.from_pretrained(folder))
        return done[(fmt, dtype)]

    return get


@pytest.mark.parametrize("fmt,dtype", CELLS)
def test_half_model_matches_eager_in_its_dtype(exports: Any, fmt: str, dtype: str) -> None:
    case, _, loaded = exports(fmt, dtype)
    parity = loaded.components["model"].metadata.parity
    assert parity["dtype"] == dtype and parity["rtol"] == PARITY_RTOL[dtype]
    assert parity["atol"] == parity_tolerance(
        backend_for(fmt).exporter_class.parity_atol, dtype, parity["max_abs_expected"]
    )
    assert parity["max_abs_diff"] <= parity["atol"]
    inputs = case.sample if fmt in STATIC else case.other
    with torch.no_grad():
        expected = leaves(case.model(**inputs))
    got = leaves(loaded(**inputs))
    assert [n for n, _ in got] == [n for n, _ in expected]
    magnitude = max(float(t.abs().max()) for _, t in expected)
    for (name, a), (_, b) in zip(got, expected):
        assert a.dtype == b.dtype == getattr(torch, dtype), name  # not widened, not reinterpreted
        # a few units in the last place of the dtype at the outputs' magnitude (measured: 0 to 1.5)
        assert float((a.double() - b.double()).abs().max()) <= PARITY_RTOL[dtype] * magnitude, name


@pytest.mark.parametrize("fmt,dtype", CELLS)
def test_manifest_records_every_dtype(exports: Any, fmt: str, dtype: str) -> None:
    _, folder, _ = exports(fmt, dtype)
    component = Manifest.read(folder).components["model"]
    assert component.dtype == dtype
    assert {s.name: s.dtype for s in component.signature.inputs} == {"input_ids": "int64", "attention_mask": "int64"}
    assert {s.dtype for s in component.signature.outputs} == {dtype}  # logits and the KV cache
    assert set(component.weights or {}) == {dtype}
    raw = json.loads((folder / "export.json").read_text())["components"]["model"]
    assert raw["parity"]["max_abs_expected"] > 0 and raw["weights"][dtype]["bytes"] > 0


def test_onnx_refuses_bfloat16_before_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    import hub_export.export.exporter as exporter_module

    def no_trace(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("traced a model the format cannot run")

    monkeypatch.setattr(exporter_module, "trace", no_trace)
    case = half_llama("bfloat16")
    backend = backend_for("onnx")
    with pytest.raises(ExportError, match=r"bfloat16 .*model\.to\(torch\.float16\).*dynamo, openvino or executorch"):
        backend.exporter_class().export(case.model, case.sample, config=backend.config_class(dynamic=True))


def test_openvino_compressed_weights_are_recorded_as_stored(tmp_path: Path) -> None:
    from hub_export import OpenVINOConfig, OpenVINOExporter

    case = build("llama", layers=1)  # float32; one layer: every weight is compressed alike
    config = OpenVINOConfig(dynamic=True, compress_to_fp16=True, inference_precision="f32")
    exported = OpenVINOExporter().export(case.model, case.sample, config=config)
    metadata = ExportedModel.from_pretrained(exported.save_pretrained(tmp_path / "ov")).components["model"].metadata
    weights = sum(p.numel() for p in case.model.parameters())
    assert metadata.weights is not None and metadata.weights["float16"]["bytes"] >= 2 * weights * 0.95
    assert metadata.weights.get("float32", {"bytes": 0})["bytes"] < 0.01 * 4 * weights  # scalars only
    parity = metadata.parity
    assert parity["dtype"] == "float32" and parity["rtol"] == PARITY_RTOL["float16"]  # weights rounded to fp16
    assert 1e-6 < parity["max_abs_diff"] <= parity["atol"]


def test_openvino_frontend_bfloat16_constant_of_a_temporary_tensor_is_held() -> None:
    """The frontend's bfloat16 constant of a tensor nothing else holds reads it after it was dropped, once
    :func:`hold_constant_memory` tied it to the model (without it, the memory is reused and the constant reads 7)."""
    import gc

    import openvino
    import openvino.opset13 as ops
    from openvino.frontend.pytorch import fx_decoder

    from hub_export.backends.openvino.patches import hold_constant_memory, low_precision_constants_held

    held: list[Any] = []
    with low_precision_constants_held(held):
        constant = fx_decoder.torch_tensor_to_ov_const(torch.full((4096,), 3.0, dtype=torch.bfloat16))
    model = openvino.Model([ops.result(ops.convert(constant, openvino.Type.f32))], [])
    assert hold_constant_memory(model, held) == 1
    del held
    gc.collect()
    reused = [torch.full((4096,), 7.0, dtype=torch.bfloat16) for _ in range(32)]
    (values,) = openvino.Core().compile_model(model, "CPU")({}).values()
    assert set(values.tolist()) == {3.0}, len(reused)


def test_openvino_bfloat16_constants_outlive_the_traced_program() -> None:
    """OpenVINO's frontend builds a bfloat16 constant over the torch tensor's memory without keeping it alive; a
    constant the traced program owned (the rotary ``inv_freq``) then read freed memory once the program was gone
    (NaN logits in 2 of 3 runs before the export held them). Run after that memory was reused, the export matches
    eager, twice."""
    import copy
    import gc

    from hub_export import OpenVINOConfig, OpenVINOExporter

    for attempt in (1, 2):
        case = build("llama", layers=1)
        model = copy.deepcopy(case.model).to(torch.bfloat16)
        exported = OpenVINOExporter().export(model, case.sample, config=OpenVINOConfig(dynamic=True))
        gc.collect()
        reused = [torch.full((n,), 7.0, dtype=torch.bfloat16) for n in range(1, 65) for _ in range(20)]
        with torch.no_grad():
            expected = model(**case.sample).logits.float()
        got = exported(**case.sample).logits.float()
        bound = PARITY_RTOL["bfloat16"] * float(expected.abs().max())
        assert float((got - expected).abs().max()) <= bound, (attempt, len(reused))


def test_openvino_bfloat16_generation_keeps_its_cache_as_bf16_state(tmp_path: Path) -> None:
    """OpenVINO computes a bfloat16 model in float32, so greedy tokens may part from eager bfloat16's at a near tie
    (measured on the two-layer Llama): each token chosen must be eager's best up to the bfloat16 tolerance."""
    from hub_export import OpenVINOConfig, OpenVINOExporter

    case = half_llama("bfloat16")
    prompt = dict(case.sample)
    exported = OpenVINOExporter().export_for_generation(case.model, prompt, config=OpenVINOConfig(dynamic=True))
    loaded = ExportedModel.from_pretrained(exported.save_pretrained(tmp_path / "gen"))
    assert loaded.runners["decode"].stateful
    assert {s.dtype for s in loaded.components["decode"].metadata.signature.outputs} == {"bfloat16"}
    for inputs in (prompt, text_inputs(2, 9, pad_left=3, seed=5)):
        produced = loaded.generate(**inputs, max_new_tokens=8)
        start = inputs["input_ids"].shape[1]
        assert produced.shape == (inputs["input_ids"].shape[0], start + 8)
        mask = torch.cat([inputs["attention_mask"], torch.ones_like(produced[:, start:])], dim=1)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # as generate() numbers a left-padded row
        with torch.no_grad():
            logits = case.model(input_ids=produced, attention_mask=mask, position_ids=positions).logits
        logits = logits[:, start - 1 : -1].double()
        assert_greedy_within_tolerance(logits, produced[:, start:], case.model.config.eos_token_id)


def assert_greedy_within_tolerance(logits: torch.Tensor, chosen: torch.Tensor, eos: int) -> None:
    """Each chosen token's eager logit is within the bfloat16 tolerance of eager's best (padding after EOS aside)."""
    gap = logits.max(-1).values - logits.gather(-1, chosen[..., None]).squeeze(-1)
    ended = (chosen == eos).long()
    after_eos = ended.cumsum(1) - ended > 0
    assert float(gap[~after_eos].max()) <= PARITY_RTOL["bfloat16"] * float(logits.abs().max())


def test_openvino_bfloat16_seq2seq_generation_runs_batches_of_other_sizes(tmp_path: Path) -> None:
    """T5's decode takes the bfloat16 encoder states as an input at a new batch and length every call (it corrupted
    the heap when handed to OpenVINO as a shared tensor)."""
    from hub_export import OpenVINOConfig, OpenVINOExporter

    case = build("t5", layers=1)  # one layer per stack: T5's OpenVINO conversion grows with the graph
    model = case.model.to(torch.bfloat16)
    prompt = {k: v for k, v in case.sample.items() if not k.startswith("decoder")}
    exported = OpenVINOExporter().export_for_generation(model, prompt, config=OpenVINOConfig(dynamic=True))
    assert "bfloat16" in {s.dtype for s in exported.components["decode"].metadata.signature.inputs}
    for inputs in (prompt, text_inputs(3, 10, seed=1), text_inputs(1, 5, seed=2)):
        produced = exported.generate(**inputs, max_new_tokens=8)
        with torch.no_grad():
            logits = model(**inputs, decoder_input_ids=produced[:, :-1]).logits.double()
        assert_greedy_within_tolerance(logits, produced[:, 1:], model.config.eos_token_id)


def test_tolerance_table() -> None:
    assert parity_tolerance(1e-4, "float32", 100.0) == 1e-4
    assert parity_tolerance(1e-4, "bfloat16", 16.0) == 0.5  # 4 units of bfloat16's last place at 16 (0.125)
    assert parity_tolerance(1e-4, "float16", 16.0) == 0.0625  # 4 units of float16's last place at 16
    assert parity_tolerance(1e-3, "float16", 0.0) == 1e-3


def test_cli_exports_in_the_dtype_asked(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from cli_run import run_cli, save_tiny_llama

    model = save_tiny_llama(tmp_path / "model")  # float32 checkpoint
    run = run_cli(capsys, "export", model, "-f", "dynamo", "-o", tmp_path / "bf16", "--dtype", "bfloat16", "--json")
    assert run.code == 0, run.err
    component = Manifest.read(tmp_path / "bf16").components["model"]
    assert component.dtype == "bfloat16" and {s.dtype for s in component.signature.outputs} == {"bfloat16"}
    refused = run_cli(capsys, "export", model, "-f", "onnx", "-o", tmp_path / "onnx", "--dtype", "bfloat16")
    assert refused.code != 0 and not (tmp_path / "onnx" / "export.json").exists()
    assert (
        "export with --dtype float16 (or float32), with --quantize int4 (or int8), or to another --format"
        in refused.err
    )
    # weight-only quantization takes the bfloat16 model: computed in float32 from weights quantized one at a time
    run = run_cli(
        capsys, "export", model, "-f", "onnx", "-o", tmp_path / "int4", "--dtype", "bfloat16", "--quantize", "int4"
    )
    assert run.code == 0, run.err
    component = Manifest.read(tmp_path / "int4").components["model"]
    assert component.dtype == "bfloat16" and component.extra["computes_in"] == "float32"
    assert component.quantization is not None and component.quantization["settings"]["bits"] == 4
    wrong = run_cli(capsys, "export", model, "-f", "dynamo", "-o", tmp_path / "q", "--quantize", "int8")
    assert wrong.code != 0 and "--quantize applies to the onnx and openvino formats, not dynamo" in wrong.err
