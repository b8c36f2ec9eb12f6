"""export_for_generation + generate(): captured stages, saved plans, and greedy tokens equal to eager generate."""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from tiny_models import build, seeded, text_inputs

from hub_export import (
    DynamoConfig,
    DynamoExporter,
    ExportedModel,
    OpenVINOConfig,
    OpenVINOExporter,
)
from hub_export.dims import Dim
from hub_export.errors import HubExportError, InputError
from hub_export.formats import backend_for
from hub_export.utils import decompose_for_generation

_BACKENDS = {
    name: (backend_for(name).exporter_class, backend_for(name).config_class)
    for name in ("dynamo", "executorch", "onnx", "openvino")
}
#: One case per code path: decoder-only (Llama; Qwen3 takes the same path, its prefill and decode graphs are checked
#: against eager in test_ort_fusions.py), GPT-2's cache and positions, encoder-decoders from audio (Whisper) and from
#: text (T5, on OpenVINO here and exported per component on Dynamo in test_per_component_configs).
_CASES = [
    ("llama", "dynamo"),
    ("gpt2", "dynamo"),
    ("whisper", "dynamo"),
    ("llama", "onnx"),
    ("whisper", "onnx"),
    ("gpt2", "openvino"),
    ("t5", "openvino"),
]
_ENCODER_DECODER = {"t5", "whisper"}


def _prompt(case) -> dict:
    return {k: v for k, v in case.sample.items() if not k.startswith("decoder")}


def _runs(name: str) -> list[dict]:
    """Inputs to generate from: a left-padded batch of 2 and a batch of 1 of other lengths than the capture."""
    if name == "whisper":
        gen = torch.Generator().manual_seed(3)
        return [
            {"input_features": torch.randn(2, 16, 60, generator=gen)},
            {"input_features": torch.randn(1, 16, 60, generator=gen)},
        ]
    return [text_inputs(2, 9, pad_left=3, seed=5), text_inputs(1, 4, seed=6)]


#: Layers per stack where not two: T5's OpenVINO conversion is the module's slowest, and Whisper keeps two layers
#: for encoder-decoder caches of several layers.
_LAYERS = {"t5": 1}


@pytest.fixture(scope="module")
def models() -> dict:
    return {}


def _case(models: dict, name: str):
    """The module's tiny ``name`` model, built on first use."""
    if name not in models:
        models[name] = build(name, layers=_LAYERS.get(name))
    return models[name]


@pytest.fixture(scope="module")
def exports(tmp_path_factory, models) -> dict:
    """Each (model, backend) exported once, saved and loaded back; built lazily on first use."""
    cache: dict = {}

    def get(name: str, backend: str):
        if (name, backend) not in cache:
            case = _case(models, name)
            exporter, config = _BACKENDS[backend]
            exported = exporter().export_for_generation(case.model, _prompt(case), config=config(dynamic=True))
            folder = tmp_path_factory.mktemp(f"{name}-{backend}") / "export"
            exported.save_pretrained(folder)
            cache[(name, backend)] = (case, exported, ExportedModel.from_pretrained(folder), folder)
        return cache[(name, backend)]

    return get


@pytest.mark.parametrize("name,backend", _CASES)
def test_greedy_tokens_equal_eager_generate(exports, name, backend):
    case, exported, loaded, _ = exports(name, backend)
    for component in exported.components.values():
        assert component.metadata.parity["max_abs_diff"] < 1e-5
    for inputs in [_prompt(case), *_runs(name)]:
        expected = case.model.generate(**inputs, max_new_tokens=8, do_sample=False)
        produced = loaded.generate(**inputs, max_new_tokens=8)
        assert produced.dtype == torch.int64
        assert torch.equal(produced, expected), (
            inputs["input_ids" if "input_ids" in inputs else "input_features"].shape,
            produced,
            expected,
        )


def test_saved_export_describes_the_loop(exports):
    _, exported, loaded, folder = exports("llama", "dynamo")
    manifest = json.loads((folder / "export.json").read_text())
    assert set(manifest["components"]) == {"decode"}  # one program serves the prompt and every step
    plan = manifest["generation"]
    assert plan == exported.generation == loaded.generation
    assert plan["kind"] == "decoder_only" and plan["token_input"] == "input_ids" and plan["position_ids"] is True
    assert plan["attention_mask"] == "extend" and plan["returns_prompt"] is True
    assert plan["one_graph"] is True and plan["stages"] == {"prefill": "decode", "decode": "decode"}
    assert [p.name for p in folder.glob("*.pt2")] == ["model.pt2"]  # the weights once, named as a model graph
    assert (folder / "generation_config.json").is_file()
    assert loaded.generation_config.eos_token_id == 2
    decode = {s.name: s.shape for s in loaded.components["decode"].metadata.signature.inputs}
    assert decode["input_ids"] == ("batch", "sequence")  # a prompt, or one token
    assert loaded.components["decode"].metadata.signature.dims["sequence"].min == 1
    assert decode["input.past_key_values.0.key"][2] == "past_sequence"
    outputs = {s.name for s in loaded.components["decode"].metadata.signature.outputs}
    assert {"logits", "output.past_key_values.0.key", "output.past_key_values.1.value"} <= outputs


def test_encoder_decoder_plan(exports):
    _, _, loaded, _ = exports("whisper", "dynamo")
    plan = loaded.generation
    assert set(loaded.components) == {"encoder", "prefill", "decode"}
    assert plan["kind"] == "encoder_decoder" and plan["token_input"] == "decoder_input_ids"
    assert plan["decoder_start_token_id"] == 1 and plan["returns_prompt"] is False  # Whisper's generate drops it
    decode = {s.name: s.shape for s in loaded.components["decode"].metadata.signature.inputs}
    assert decode["input.past_key_values.0.decoder.key"][2] == "past_sequence"
    assert decode["input.past_key_values.0.encoder.key"][2] == "encoder_sequence"


def test_decode_graph_runs_at_other_cache_lengths(exports):
    case, _, loaded, _ = exports("gpt2", "dynamo")
    decode = loaded.runners["decode"]
    for length in (3, 20):
        inputs = text_inputs(2, length, seed=length)
        with torch.no_grad():
            cache = case.model(**inputs, use_cache=True).past_key_values
            step = {
                "input_ids": torch.tensor([[5], [7]]),
                "attention_mask": torch.ones(2, length + 1, dtype=torch.int64),
                "position_ids": torch.full((2, 1), length),
            }
            produced = decode(**step, past_key_values=cache)
            expected = case.model(**step, past_key_values=cache, use_cache=True)
        assert produced.past_key_values.get_seq_length() == length + 1
        assert float((produced.logits[:, -1] - expected.logits[:, -1]).abs().max()) < 1e-5


def test_eos_stops_rows_and_pads_like_eager(exports):
    case, _, loaded, _ = exports("llama", "dynamo")
    inputs = text_inputs(2, 9, pad_left=3, seed=5)
    greedy = case.model.generate(**inputs, max_new_tokens=8, do_sample=False)
    eos = int(greedy[0, 11])  # row 0 stops at its third new token
    expected = case.model.generate(**inputs, max_new_tokens=8, do_sample=False, eos_token_id=eos, pad_token_id=0)
    produced = loaded.generate(**inputs, max_new_tokens=8, eos_token_id=eos, pad_token_id=0)
    assert torch.equal(produced, expected)
    assert (produced[0, 12:] == 0).all()


def test_sampling_is_seeded_and_top_k_1_is_greedy(exports):
    _, _, loaded, _ = exports("llama", "dynamo")
    inputs = text_inputs(2, 5, seed=9)
    first = loaded.generate(**inputs, max_new_tokens=6, do_sample=True, temperature=0.8, top_p=0.9, seed=123)
    again = loaded.generate(**inputs, max_new_tokens=6, do_sample=True, temperature=0.8, top_p=0.9, seed=123)
    assert torch.equal(first, again) and first.shape == (2, 11)
    top1 = loaded.generate(**inputs, max_new_tokens=6, do_sample=True, top_k=1, seed=0)
    assert torch.equal(top1, loaded.generate(**inputs, max_new_tokens=6))


def test_streamer_receives_prompt_then_each_token(exports):
    _, _, loaded, _ = exports("llama", "dynamo")

    class Recorder:
        def __init__(self) -> None:
            self.chunks, self.ended = [], False

        def put(self, ids):
            self.chunks.append(ids.clone())

        def end(self):
            self.ended = True

    inputs = text_inputs(1, 4, seed=2)
    recorder = Recorder()
    produced = loaded.generate(**inputs, max_new_tokens=3, streamer=recorder)
    assert recorder.ended and len(recorder.chunks) == 4
    assert torch.equal(recorder.chunks[0], inputs["input_ids"])
    assert torch.equal(torch.cat([c.reshape(1, -1) for c in recorder.chunks], dim=-1), produced)


def test_decompose_restores_the_model_and_leaves_inputs_alone(models):
    case = _case(models, "llama")
    inputs = _prompt(case)
    before = {k: v.clone() for k, v in inputs.items()}
    case.model.train()
    try:
        stages = decompose_for_generation(case.model, inputs, multi_token_decode=True)
        assert case.model.training
    finally:
        case.model.eval()
    assert "forward" not in vars(case.model)
    assert all(torch.equal(inputs[k], before[k]) for k in inputs)
    assert list(stages) == ["prefill", "decode"]
    prefill_module, prefill = stages["prefill"]
    _, decode = stages["decode"]
    assert prefill_module is case.model and "past_key_values" not in prefill
    assert prefill["input_ids"].shape == (1, 7) and prefill["attention_mask"].shape == (1, 7)
    assert decode["input_ids"].shape == (1, 2)  # two decode steps merged into one call
    assert decode["past_key_values"].get_seq_length() == 7 and decode["attention_mask"].shape == (1, 9)
    with torch.no_grad():
        logits = case.model(**decode).logits
    assert torch.isfinite(logits).all()


def test_decompose_encoder_decoder_stages(models):
    case = _case(models, "t5")
    stages = decompose_for_generation(case.model, _prompt(case))
    assert list(stages) == ["encoder", "prefill", "decode"]
    assert stages["encoder"][0] is case.model.get_encoder()
    assert set(stages["encoder"][1]) >= {"input_ids", "attention_mask"}
    assert stages["prefill"][1]["decoder_input_ids"].shape == (2, 1)
    cache = stages["decode"][1]["past_key_values"]
    assert type(cache).__name__ == "EncoderDecoderCache"
    assert cache.self_attention_cache.get_seq_length() == 2  # past one token: a symbolic past_sequence
    assert cache.cross_attention_cache.get_seq_length() == 7


def test_per_component_configs(models):
    """T5 (one layer): a static encoder, dynamic prefill and decode; their parity with eager on Dynamo."""
    case = _case(models, "t5")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exported = DynamoExporter().export_for_generation(
            case.model,
            _prompt(case),
            config={"encoder": DynamoConfig(dynamic=False), "default": DynamoConfig(dynamic=True)},
        )
    assert exported.components["encoder"].metadata.signature.inputs[0].shape == (2, 7)  # static
    assert exported.components["prefill"].metadata.signature.inputs[0].shape[0] == "batch"
    for component in exported.components.values():
        assert component.metadata.parity["max_abs_diff"] < 1e-5
    inputs = _prompt(case)  # the static encoder's shape: generate() equals eager's
    expected = case.model.generate(**inputs, max_new_tokens=8, do_sample=False)
    assert torch.equal(exported.generate(**inputs, max_new_tokens=8), expected)


def test_multi_token_decode_generates_and_continues_several_tokens(models, tmp_path):
    """Dynamo: the loop's re-fed token and shortened cache do not depend on the format (ONNX's multi-token decode
    graph generates through test_ort_fusions.py::test_generate_with_fused_export_matches_eager; OpenVINO's below)."""
    case = _case(models, "llama")
    exporter, config = _BACKENDS["dynamo"]
    exported = exporter().export_for_generation(
        case.model, _prompt(case), config=config(dynamic=True), multi_token_decode=True
    )
    loaded = ExportedModel.from_pretrained(exported.save_pretrained(tmp_path / "export"))
    assert loaded.generation["multi_token_decode"] is True
    assert {s.name: s.shape for s in loaded.components["decode"].metadata.signature.inputs}["input_ids"] == (
        "batch",
        "sequence",
    )
    for inputs in [
        _prompt(case),
        *_runs("llama"),
    ]:  # one-token steps: the previous token re-fed, cache shortened by one
        expected = case.model.generate(**inputs, max_new_tokens=8, do_sample=False)
        assert torch.equal(loaded.generate(**inputs, max_new_tokens=8), expected)
    inputs = text_inputs(2, 6, pad_left=2, seed=8)
    with torch.no_grad():  # four speculative tokens at once against a cache, as eager computes them
        cache = case.model(**inputs, use_cache=True).past_key_values
        step = {
            "input_ids": torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]]),
            "attention_mask": torch.cat([inputs["attention_mask"], torch.ones(2, 4, dtype=torch.int64)], -1),
        }
        step["position_ids"] = step["attention_mask"].cumsum(-1)[:, -4:] - 1
        expected = case.model(**step, past_key_values=copy.deepcopy(cache), use_cache=True)
        produced = loaded.runners["decode"](**step, past_key_values=cache)
    assert produced.past_key_values.get_seq_length() == 10 and produced.logits.shape == (2, 4, 96)  # every position
    assert float((produced.logits - expected.logits).abs().max()) < 1e-4


def test_static_cache_with_multi_token_decode_is_one_graph_for_every_step(models, tmp_path):
    from transformers import GenerationConfig

    case = _case(models, "llama")
    config = GenerationConfig(
        **{**case.model.generation_config.to_dict(), "cache_implementation": "static", "max_cache_len": 24}
    )
    exported = DynamoExporter().export_for_generation(
        case.model, _prompt(case), config=DynamoConfig(dynamic=True), generation_config=config, multi_token_decode=True
    )
    assert {s.name: s.shape for s in exported.components["decode"].metadata.signature.inputs}["input_ids"] == (
        "batch",
        "sequence",
    )
    for inputs in [_prompt(case), *_runs("llama")]:  # the StaticCache's write position moves back for the re-fed token
        expected = case.model.generate(**inputs, max_new_tokens=8, do_sample=False, generation_config=config)
        assert torch.equal(exported.generate(**inputs, max_new_tokens=8), expected)


def test_multi_token_decode_with_a_stateful_decode(monkeypatch):
    from hub_export.generation import export as generation_export

    case = build("llama", layers=1)  # two OpenVINO exports: a one-layer cache shows what a stateful decode can take
    exported = OpenVINOExporter().export_for_generation(
        case.model, _prompt(case), config=OpenVINOConfig(dynamic=True), multi_token_decode=True
    )
    # one graph taking one token as well as several: steps need no shortened cache, which a stateful graph cannot do
    assert exported.generation["one_graph"] is True and exported.generation["stateful"] == ["decode"]
    expected = case.model.generate(**_prompt(case), max_new_tokens=3, do_sample=False)
    assert torch.equal(exported.generate(**_prompt(case), max_new_tokens=3), expected)
    monkeypatch.setattr(generation_export, "_export_one_graph", lambda *args: "two graphs (test)")
    two = OpenVINOExporter().export_for_generation(
        case.model, _prompt(case), config=OpenVINOConfig(dynamic=True), multi_token_decode=True
    )
    with pytest.raises(HubExportError, match="stateful=False"):  # a decode graph taking two tokens or more
        two.generate(**_prompt(case), max_new_tokens=3)


def test_generate_needs_a_generation_export():
    from tiny_models import EmbeddingHead

    sample = {"input_ids": text_inputs(2, 5, vocab=64)["input_ids"]}  # any plain export: the smallest model's
    plain = DynamoExporter().export(EmbeddingHead().eval(), sample, config=DynamoConfig(dynamic=True))
    with pytest.raises(HubExportError, match="export_for_generation"):
        plain.generate(**sample, max_new_tokens=2)


@pytest.mark.parametrize("name,backend", [("gpt2", "dynamo"), ("llama", "onnx")])
def test_one_token_prompt_runs_decode_on_an_empty_cache(exports, name, backend):
    case, _, loaded, _ = exports(name, backend)
    inputs = {"input_ids": torch.tensor([[5], [9]]), "attention_mask": torch.ones(2, 1, dtype=torch.int64)}
    expected = case.model.generate(**inputs, max_new_tokens=5, do_sample=False)
    assert torch.equal(loaded.generate(**inputs, max_new_tokens=5), expected)


# -- OpenVINO stateful=True (the default): the decode KV cache is ReadValue/Assign state inside OpenVINO --
@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_openvino_stateful_generate_equals_eager_and_resets(exports, name):
    case, _, loaded, _ = exports(name, "openvino")
    prompt = _prompt(case)
    assert loaded.generation["stateful"] == ["decode"]
    # one stateful graph serves the prompt (its state starts empty) and every step
    assert loaded.runners["decode"].stateful and loaded.generation["stages"]["prefill"] == "decode"
    for inputs in [prompt, *_runs(name)]:
        expected = case.model.generate(**inputs, max_new_tokens=8, do_sample=False)
        first = loaded.generate(**inputs, max_new_tokens=8)
        again = loaded.generate(**inputs, max_new_tokens=8)  # the state of the previous sequence is reset
        assert torch.equal(first, expected), (first, expected)
        assert torch.equal(again, expected)


def test_openvino_saved_decode_keeps_the_cache_as_state(exports):
    _, exported, loaded, folder = exports("llama", "openvino")
    xml = (folder / "openvino_model.xml").read_text()  # optimum-intel's and OpenVINO GenAI's name
    assert 'type="ReadValue"' in xml and 'type="Assign"' in xml
    assert "past_key_values" not in "".join(
        p.get_friendly_name() for p in loaded.components["decode"].program.get_parameters()
    )
    assert not (folder / "openvino_prefill.xml").exists()  # the decode graph serves the prompt too
    state = loaded.components["decode"].metadata.extra["state"]
    assert [
        "input.past_key_values.0.key",
        "output.past_key_values.0.key",
        "input.past_key_values.0.keyoutput.past_key_values.0.key",
    ] in state
    assert len(state) == 4  # 2 layers x key/value
    assert exported.components["decode"].metadata.parity["max_abs_diff"] < 1e-5


def test_openvino_stateful_runner_continues_from_its_state(exports):
    case, _, loaded, _ = exports("gpt2", "openvino")
    decode = loaded.runners["decode"]
    assert decode.state_inputs == ["past_key_values"]
    inputs = text_inputs(2, 5, seed=4)
    with torch.no_grad():
        cache = case.model(**inputs, use_cache=True).past_key_values
    mask = inputs["attention_mask"]
    decode.reset()
    for index, ids in enumerate([torch.tensor([[5], [7]]), torch.tensor([[11], [13]])]):
        mask = torch.cat([mask, torch.ones(2, 1, dtype=mask.dtype)], dim=-1)
        step = {"input_ids": ids, "attention_mask": mask, "position_ids": torch.full((2, 1), 5 + index)}
        # the first call seeds the state with the eager cache; the second passes no cache at all
        produced = decode(**step, past_key_values=copy.deepcopy(cache)) if index == 0 else decode(**step)
        with torch.no_grad():
            expected = case.model(**step, past_key_values=cache, use_cache=True)  # grows `cache` by one token
        assert float((produced.logits - expected.logits).abs().max()) < 1e-5
        assert (produced.past_key_values is None) == (index == 1)
    decode.reset()  # a fresh sequence starts from an empty cache of the inputs' batch
    step = {
        "input_ids": torch.tensor([[3], [4], [8]]),
        "attention_mask": torch.ones(3, 1, dtype=torch.int64),
        "position_ids": torch.zeros(3, 1, dtype=torch.int64),
    }
    with torch.no_grad():
        expected = case.model(**step, use_cache=True)
    assert float((decode(**step).logits - expected.logits).abs().max()) < 1e-5


def test_openvino_stateful_false_keeps_explicit_cache_tensors(exports):
    # the same decode signature under stateful=False (or outside export_for_generation) pairs no cache tensor
    # with state, so convert_model's explicit past_key_values Parameters/Results stay (today's behaviour)
    _, _, loaded, _ = exports("llama", "openvino")
    meta = loaded.components["decode"].metadata
    traced = SimpleNamespace(signature=meta.signature)
    exporter = OpenVINOExporter()
    assert exporter._state_pairs(traced, OpenVINOConfig(stateful=True)) == []  # a plain export()
    exporter._generation = True
    assert exporter._state_pairs(traced, OpenVINOConfig(stateful=False)) == []
    assert [list(p) for p in exporter._state_pairs(traced, OpenVINOConfig())] == [s[:2] for s in meta.extra["state"]]
    assert exporter._extra(traced, OpenVINOConfig(stateful=False)) == {
        "compress_to_fp16": False,
        "stateful": False,
        "inference_precision": "f32",
    }


# -- static KV cache (GenerationConfig(cache_implementation="static")): preallocated buffers updated in place --
@pytest.fixture(scope="module", params=["dynamo", "onnx", "executorch"])
def static_llama(request, models, tmp_path_factory):
    """Dynamo: the program mutates its inputs; ONNX: I/O binding writes each output.X into input.X's buffer;
    ExecuTorch: the runtime returns the updated inputs, which the runner writes back into the caller's buffers (its
    Llama has one layer: lowering time grows with the graph, and writing back does not depend on the layer count)."""
    from transformers import GenerationConfig

    if request.param == "executorch":
        case = build("llama", layers=1)
    else:
        case = _case(models, "llama")
    config = GenerationConfig(
        **{**case.model.generation_config.to_dict(), "cache_implementation": "static", "max_cache_len": 24}
    )
    exporter, export_config = _BACKENDS[request.param]
    exported = exporter().export_for_generation(
        case.model, _prompt(case), config=export_config(dynamic=True), generation_config=config
    )
    folder = exported.save_pretrained(tmp_path_factory.mktemp(f"llama-static-{request.param}") / "export")
    return case, config, exported, ExportedModel.from_pretrained(folder), folder


def test_static_cache_generate_equals_eager_static_generate(static_llama, monkeypatch, tmp_path):
    case, config, exported, loaded, folder = static_llama
    assert loaded.generation["cache_implementation"] == "static" and loaded.generation_config.max_cache_len == 24
    for component in exported.components.values():
        assert component.metadata.parity["max_abs_diff"] < 1e-5
    node = dict(loaded.components["decode"].metadata.signature.input_structure)["past_key_values"]
    assert (
        node["class"] == "StaticCache"
        and node["max_cache_len"] == 24
        and set(node["layers"][0]) == {"key", "value", "length"}
    )
    signature = loaded.components["prefill"].metadata.signature
    shapes = {s.name: s.shape for s in signature.inputs}
    # the key buffers' length is fixed by the static cache: a dim admitting 24 only (the values' axis stays symbolic)
    assert shapes["input.past_key_values.0.key"] == ("batch", 2, "past_sequence_24", 8)
    assert signature.dims["past_sequence_24"] == Dim("past_sequence_24", 24, 24)
    for inputs in [_prompt(case), *_runs("llama")]:
        expected = case.model.generate(**inputs, max_new_tokens=8, do_sample=False, generation_config=config)
        assert torch.equal(loaded.generate(**inputs, max_new_tokens=8), expected)
    if (folder / "prefill.pte").exists():  # ExecuTorch: both programs read their weights from one shared.ptd
        assert [p.name for p in folder.glob("*.ptd")] == ["shared.ptd"]
        manifest = json.loads((folder / "export.json").read_text())
        assert [f["path"] for f in manifest["files"]].count("shared.ptd") == 1
        assert all("shared.ptd" in manifest["components"][name]["files"] for name in ("prefill", "decode"))
        from hub_export.backends.executorch import io as executorch_io

        written, copy_file = [], executorch_io.copy_file
        monkeypatch.setattr(
            executorch_io, "copy_file", lambda src, dst: written.append(Path(dst).name) or copy_file(src, dst)
        )
        programs = {name: component.program for name, component in exported.components.items()}
        files = executorch_io.save_programs(programs, tmp_path)  # their own .ptd files compared, then one written
        assert sorted(written) == ["decode.pte", "prefill.pte", "shared.ptd"]
        assert files == {name: [f"{name}.pte", "shared.ptd"] for name in ("prefill", "decode")}
    with pytest.raises(InputError, match="max_cache_len=24"):
        loaded.generate(**text_inputs(1, 9, seed=1), max_new_tokens=20)


def test_static_cache_is_updated_in_the_callers_buffers(static_llama):
    case, _, _, loaded, _ = static_llama
    from hub_export.generation.loop import _empty_cache

    prefill, decode = loaded.runners["prefill"], loaded.runners["decode"]
    cache = _empty_cache(prefill, "past_key_values", 2)
    keys, length = cache.layers[0].keys, cache.layers[0].cumulative_length
    inputs = text_inputs(2, 5, seed=4)
    out = prefill(**inputs, position_ids=torch.arange(5)[None].expand(2, -1), past_key_values=cache)
    assert out.past_key_values.layers[0].keys.data_ptr() == keys.data_ptr() and int(length) == 5
    assert keys[:, :, :5].abs().sum() > 0 and keys[:, :, 5:].abs().sum() == 0
    step = {"input_ids": torch.tensor([[3], [4]]), "position_ids": torch.full((2, 1), 5)}
    step["attention_mask"] = torch.cat([inputs["attention_mask"], torch.ones(2, 1, dtype=torch.int64)], dim=-1)
    out = decode(**step, past_key_values=cache)
    assert out.past_key_values.layers[0].keys.data_ptr() == keys.data_ptr() and int(length) == 6
    assert keys[:, :, 5].abs().sum() > 0 and keys[:, :, 6:].abs().sum() == 0
    with torch.no_grad():  # the same two steps in eager, from the prompt without a cache
        eager = case.model(
            **{
                **inputs,
                "input_ids": torch.cat([inputs["input_ids"], step["input_ids"]], -1),
                "attention_mask": step["attention_mask"],
            }
        )
    assert float((out.logits[:, -1] - eager.logits[:, -1]).abs().max()) < 1e-5


def test_sliding_window_model_generates_through_full_length_caches(tmp_path):
    """Gemma 2 alternates sliding-window and global layers: generate() gives it sliding-window caches that keep only
    the window; the export runs on full-length caches (the window comes from the mask), token-identical to eager."""
    from zoo import build as build_zoo

    case = build_zoo("gemma2")
    prompt = {k: v for k, v in case.sample.items() if k != "token_type_ids"}
    exported = DynamoExporter().export_for_generation(case.model, prompt, config=DynamoConfig(dynamic=True))
    loaded = ExportedModel.from_pretrained(exported.save_pretrained(tmp_path / "export"))
    assert case.model.config.sliding_window < 16  # the runs below go past the window
    for inputs in [prompt, text_inputs(2, 12, pad_left=3, seed=3)]:
        expected = case.model.generate(**inputs, max_new_tokens=8, do_sample=False)
        assert torch.equal(loaded.generate(**inputs, max_new_tokens=8), expected)


@pytest.mark.parametrize("name", ["mamba2", "mamba"])
def test_state_space_model_generates_through_its_conv_and_ssm_states(tmp_path, name):
    """Mamba carries no key/value cache but per-layer conv and SSM states (a DynamicCache of LinearAttentionLayer
    passed as cache_params): the prefill returns them, the decode graph updates them (and takes no mask: generate()
    masks only the prompt). Greedy tokens equal eager generate for a left-padded batch of another length and for
    prompts shorter than the prefill takes (left-padded to it: Mamba-2's kernel); Mamba's scan is traced as one
    loop, so its prefill takes longer prompts too."""
    from zoo import build as build_zoo

    from hub_export.manifest import Manifest

    case = build_zoo(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the trace's warnings are not what this test checks
        exported = DynamoExporter().export_for_generation(case.model, case.sample, config=DynamoConfig(dynamic=True))
    manifest = Manifest.read(exported.save_pretrained(tmp_path / "export"))  # the schema takes the conv/recurrent nodes
    assert manifest.generation["cache"] == "cache_params" and manifest.generation["attention_mask"] == "extend"
    decode = exported.components["decode"].metadata
    assert [s.name for s in decode.signature.inputs][1:] == [
        f"input.cache_params.{i}.{part}" for i in range(2) for part in ("conv", "recurrent")
    ]
    for component in exported.components.values():
        assert component.metadata.parity["max_abs_diff"] < 1e-5
    runs = [
        text_inputs(3, 9, pad_left=3, seed=5),
        {"input_ids": case.other["input_ids"][:2, :2]},
        {"input_ids": case.other["input_ids"][:1, :5]},  # a batch of one: no guard of the trace may refuse it
        {"input_ids": case.other["input_ids"][:1, :1]},
    ]
    for inputs in runs + ([case.other] if name == "mamba" else []):
        expected = case.model.generate(**inputs, max_new_tokens=8, do_sample=False)
        assert torch.equal(exported.generate(**inputs, max_new_tokens=8), expected), inputs["input_ids"].shape


def _generates_as_eager(model: Any, tmp_path: Path, new_tokens: int, unsaved_too: bool = False) -> None:
    """A Dynamo generation export of ``model`` on a prompt of 7, reloaded, gives eager's greedy tokens on that
    prompt and on a left-padded batch of 11 (``unsaved_too``: the export before saving too)."""
    sample = text_inputs(2, 7)
    exported = DynamoExporter().export_for_generation(model, sample, config=DynamoConfig(dynamic=True))
    loaded = ExportedModel.from_pretrained(exported.save_pretrained(tmp_path / "export"))
    for inputs in (sample, text_inputs(2, 11, pad_left=2, seed=1)):
        expected = model.generate(**inputs, max_new_tokens=new_tokens, do_sample=False)
        if unsaved_too:
            assert torch.equal(exported.generate(**inputs, max_new_tokens=new_tokens), expected)
        assert torch.equal(loaded.generate(**inputs, max_new_tokens=new_tokens), expected)


def test_bert_to_bert_encoder_decoder_generates_as_eager(tmp_path):
    """EncoderDecoderModel with a BERT decoder: transformers' SDPA computes is_causal as ``q_length > 1 and ...``,
    a SymBool under a symbolic query length, which SDPA refuses (patches.tracing.sdpa_causal_flag_as_bool passes the
    value the guard fixed). The export generates eager's tokens, after a save and reload too."""
    from transformers import BertConfig, EncoderDecoderConfig, EncoderDecoderModel

    def bert_config(**extra: Any) -> Any:
        sizes = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
        return BertConfig(vocab_size=96, max_position_embeddings=64, **sizes, **extra)

    config = EncoderDecoderConfig.from_encoder_decoder_configs(
        bert_config(), bert_config(is_decoder=True, add_cross_attention=True)
    )
    config.decoder_start_token_id, config.pad_token_id = 1, 0
    model = seeded(EncoderDecoderModel, config)
    model.generation_config.decoder_start_token_id = 1
    _generates_as_eager(model, tmp_path, new_tokens=6, unsaved_too=True)


def test_several_ids_per_position_are_refused_before_tracing():
    """Dia feeds (batch, length, codebooks) decoder ids with its own delay pattern: export_for_generation refuses it
    with one line instead of failing inside the plan."""
    from hub_export.errors import ExportError
    from hub_export.generation.export import _refuse_several_ids_per_position

    capture = SimpleNamespace(multimodal=None, calls=[])
    components = {"prefill": (None, {"decoder_input_ids": torch.zeros(2, 1, 9, dtype=torch.int64)})}
    with pytest.raises(ExportError, match=r"several ids per position"):
        _refuse_several_ids_per_position(torch.nn.Identity(), components, capture)
    components = {"prefill": (None, {"decoder_input_ids": torch.zeros(2, 1, dtype=torch.int64)})}
    _refuse_several_ids_per_position(torch.nn.Identity(), components, capture)  # one id per position: accepted


def test_batch_tie_reads_the_batch_of_multimodal_rotary_positions():
    """M-RoPE position ids are (sections, batch, sequence) (Qwen2-VL's family, Cosmos 3): the check that every
    batched input has one batch size reads their second axis, so a language model taking them traces and runs."""
    from hub_export.generation.export import _batch_tied

    class Language(torch.nn.Module):
        def forward(self, input_ids: Any, position_ids: Any) -> Any:
            return input_ids + position_ids.sum(0)

    tied = _batch_tied(Language())
    ids, positions = torch.ones(2, 5, dtype=torch.int64), torch.arange(5).expand(3, 2, 5)
    assert torch.equal(tied(input_ids=ids, position_ids=positions), ids + 3 * torch.arange(5))
    with pytest.raises(RuntimeError):  # a true batch mismatch is still refused
        tied(input_ids=ids, position_ids=torch.arange(5).expand(3, 3, 5))


def test_model_whose_every_layer_slides_generates_past_its_window(tmp_path):
    """Mistral declares no layer_types, only sliding_window: transformers' generate() still gives every layer a
    sliding-window cache (get_layer_types_and_kwargs), which the capture replaces with full-length caches as for
    Gemma 2's declared layers; before, the traced decode graph kept a guard of the window (`mask > 1 + past`) and
    refused the first step. Prompts longer than the window generate eager's tokens, after a reload too."""
    from transformers import MistralConfig, MistralForCausalLM

    config = MistralConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, sliding_window=4,
    )  # fmt: skip
    model = seeded(MistralForCausalLM, config)
    _generates_as_eager(model, tmp_path, new_tokens=8)
    from hub_export.generation.decompose import _window_in_the_mask

    # a model whose mask has no window (it lets a sliding cache drop old keys, as Moshi's) keeps its sliding cache
    assert _window_in_the_mask(model) and not _window_in_the_mask(build("gpt2").model)


def _lfm3() -> Any:
    from transformers import Lfm3Config, Lfm3ForCausalLM

    config = Lfm3Config(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        layer_types=["conv", "full_attention", "sliding_attention"],
        sliding_window=4,
        conv_L_cache=3,
        max_position_embeddings=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return seeded(Lfm3ForCausalLM, config)


def _inkling() -> Any:
    from transformers import InklingForCausalLM, InklingTextConfig

    config = InklingTextConfig(
        vocab_size=128,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        swa_num_attention_heads=4,
        swa_num_key_value_heads=2,
        swa_head_dim=8,
        sliding_window_size=4,
        d_rel=16,
        layer_types=["hybrid_sliding", "hybrid"],
        mlp_layer_types=["dense", "dense"],
        intermediate_size=64,
        max_position_embeddings=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return seeded(InklingForCausalLM, config)


@pytest.mark.parametrize("build_model", [_lfm3, _inkling], ids=["lfm3", "inkling"])
def test_hybrid_model_with_sliding_window_layers_generates_through_full_length_caches(tmp_path, build_model):
    """LFM3 keeps convolution states beside full and sliding-window attention layers, and Inkling's layers carry
    both a convolution state and attention (``hybrid_sliding``, ``hybrid``). generate() cuts the sliding parts'
    keys to the window; the export starts from the cache generate() builds from the config with those parts made
    full-length (the window comes from the mask), so the convolution states are where the model looks for them
    and the tokens are eager's, past the window, on a left-padded batch too."""
    from hub_export.generation.decompose import full_length_cache

    model = build_model()
    cache = full_length_cache(model)
    assert [type(layer).__name__ for layer in cache.layers] == (
        ["LinearAttentionLayer", "DynamicLayer", "DynamicLayer"]
        if build_model is _lfm3
        else ["LinearAttentionAndFullAttentionLayer", "LinearAttentionAndFullAttentionLayer"]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the trace's warnings are not what this test checks
        _generates_as_eager(model, tmp_path, new_tokens=8)


def test_batch_axes_leave_out_what_has_no_batch_axis_and_positions_get_one_per_row():
    """The batch tie of a dynamic generation export ties each batched input's batch axis: axis 1 of rotary positions
    (sections, batch, sequence), none for a tensor whose size there is not the batch (positions the model built
    for a batch of one and broadcast); those positions are given one row per batch row before the export."""
    from hub_export.generation._glue import positions_per_row
    from hub_export.generation.export import _batch_axes

    ids = torch.ones(2, 5, dtype=torch.int64)
    call = {"input_ids": ids, "attention_mask": ids, "position_ids": torch.arange(5)[None]}
    assert _batch_axes(call) == {"input_ids": 0, "attention_mask": 0}
    positions_per_row(call)
    assert torch.equal(call["position_ids"], torch.arange(5).expand(2, 5)) and _batch_axes(call)["position_ids"] == 0
    rotary = {"inputs_embeds": torch.ones(2, 5, 4), "position_ids": torch.zeros(3, 1, 5, dtype=torch.int64)}
    positions_per_row(rotary)
    assert rotary["position_ids"].shape == (3, 2, 5) and _batch_axes(rotary) == {"inputs_embeds": 0, "position_ids": 1}
    seq2seq = {"decoder_input_ids": ids, "decoder_position_ids": torch.arange(5)[None]}
    positions_per_row(seq2seq)
    assert seq2seq["decoder_position_ids"].shape == (2, 5)


@pytest.mark.parametrize(("name", "backend"), [("llama", "dynamo"), ("llama", "onnx"), ("t5", "openvino")])
def test_a_model_that_generates_without_a_cache_exports_its_whole_sequence_steps(tmp_path, name, backend):
    """A model whose generate() runs without a cache (use_cache=False in its generation config, as MPT's and
    Pix2Struct's configs have it) feeds the whole sequence at every step: the export has no cache either. A
    decoder-only model's prompt graph runs every step (its sequence axis is dynamic); an encoder-decoder's first
    decoder step has its graph (one token) and the later steps theirs. Tokens equal eager, left-padded too."""
    case = build(name)
    model = copy.deepcopy(case.model)
    model.generation_config.use_cache = False
    exporter, config = _BACKENDS[backend]
    exported = exporter().export_for_generation(model, _prompt(case), config=config(dynamic=True))
    plan = exported.generation
    assert plan["cache"] is None
    if name in _ENCODER_DECODER:
        assert list(exported.components) == ["encoder", "prefill", "decode"]
    else:
        assert list(exported.components) == ["prefill"] and plan["stages"]["decode"] == "prefill"
        assert plan["one_graph"] == "the model generates without a cache (every step runs the whole sequence)"
    loaded = ExportedModel.from_pretrained(exported.save_pretrained(tmp_path / "export"))
    for inputs in _runs(name):
        expected = model.generate(**inputs, max_new_tokens=6, do_sample=False)
        assert torch.equal(loaded.generate(**inputs, max_new_tokens=6), expected)


@pytest.mark.parametrize("backend", ["dynamo", "openvino"])
def test_a_decoder_prompt_longer_than_the_first_step_runs_through_the_decode_graph(tmp_path, backend):
    """An encoder-decoder's first decoder step is traced on one token (the start id); a caller's decoder prompt of
    several tokens (a forced prefix) runs that graph on its first token, then the decode graph on each other token
    against the cache (on OpenVINO, a stateful decode seeded by the first step's cache). Tokens equal eager."""
    case = build("t5")
    exporter, config = _BACKENDS[backend]
    exported = exporter().export_for_generation(case.model, _prompt(case), config=config(dynamic=True))
    inputs = text_inputs(2, 9, pad_left=3, seed=5)
    start = case.model.generation_config.decoder_start_token_id
    inputs["decoder_input_ids"] = torch.tensor([[start, 7, 9, 11], [start, 4, 5, 6]])
    expected = case.model.generate(**inputs, max_new_tokens=6, do_sample=False)
    assert torch.equal(exported.generate(**inputs, max_new_tokens=6), expected)
