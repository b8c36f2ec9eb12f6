"""One decode graph serving the prompt and every step (hub_export.generation._one_graph): what the export holds,
the check that decides it (the prefill + decode fallback, which still loads and generates: test_weights_once.py's
``two_graph_exports``)."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from tiny_models import build, text_inputs

from hub_export import ExportedModel
from hub_export.formats import backend_for
from hub_export.generation._one_graph import check_one_graph, one_token_step
from hub_export.generation.decompose import decompose_with_capture

FORMATS = ("dynamo", "onnx", "openvino", "executorch")
#: format -> the one graph file of a one-graph export: named as each format's own generation tools load it
GRAPH_FILES = {
    "dynamo": "model.pt2",
    "onnx": "model.onnx",
    "openvino": "openvino_model.xml",
    "executorch": "decode.pte",
}


def _export(fmt: str, model, **kwargs):
    backend = backend_for(fmt)
    return backend.exporter_class().export_for_generation(
        model, text_inputs(1, 7), config=backend.config_class(dynamic=True), **kwargs
    )


@pytest.fixture(scope="module")
def llama():
    return build("llama").model


@pytest.fixture(scope="module")
def saved(llama, tmp_path_factory):
    """Each format's one-graph export of the tiny Llama, saved and loaded back (and the runners its export built, and
    the model: ExecuTorch's is the one-layer Llama, lowering time grows with the graph and the cache's layers are
    handled alike)."""
    cache: dict = {}

    def get(fmt: str):
        if fmt not in cache:
            model = build("llama", layers=1).model if fmt == "executorch" else llama
            exporter_class = backend_for(fmt).exporter_class
            original, built = exporter_class.parity_runner, []

            def counted(self, program, metadata):
                built.append(metadata)
                return original(self, program, metadata)

            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(exporter_class, "parity_runner", counted)
                exported = _export(fmt, model)
            folder = exported.save_pretrained(tmp_path_factory.mktemp(fmt) / "export")
            cache[fmt] = (exported, ExportedModel.from_pretrained(folder), folder, built, model)
        return cache[fmt]

    return get


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_decode_graph_serves_the_prompt_and_every_step(saved, fmt):
    exported, loaded, folder, _, llama = saved(fmt)
    plan = json.loads((folder / "export.json").read_text())["generation"]
    assert list(loaded.components) == ["decode"] and plan == loaded.generation
    assert plan["stages"] == {"prefill": "decode", "decode": "decode"} and plan["one_graph"] is True
    assert plan["multi_token_decode"] is False
    signature = loaded.components["decode"].metadata.signature
    query = dict((s.name, s.shape) for s in signature.inputs)["input_ids"][1]
    assert signature.dims[query].min == 1  # one token (a step, a one-token prompt) as well as a whole prompt
    cache_axis = dict((s.name, s.shape) for s in signature.inputs)["input.past_key_values.0.key"][2]
    assert signature.dims[cache_axis].min == 0  # a prompt's empty cache (ExecuTorch traces it bounded from 1)
    graphs = sorted(p.name for p in folder.iterdir() if p.suffix in (".onnx", ".xml", ".pt2", ".pte"))
    # beside it, ExecuTorch's LLM runner's own program (model.pte: its contract, docs/interop.md), never loaded here
    assert graphs == [GRAPH_FILES[fmt], *(["model.pte"] if fmt == "executorch" else [])]
    if fmt == "executorch":  # one program, its weights in one .ptd: XNNPACK packs them once, for one method
        assert [p.name for p in folder.glob("*.ptd")] == ["decode.ptd"]
    runner = loaded.runners["decode"]
    seen: list[int] = []  # torch's thread count inside each step
    before = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:
        run_flat = runner.run_flat
        patch.setattr(runner, "run_flat", lambda tensors: seen.append(torch.get_num_threads()) or run_flat(tensors))
        torch.set_num_threads(2)
        try:
            for inputs in (text_inputs(1, 7), text_inputs(2, 1, seed=2), text_inputs(3, 11, pad_left=4, seed=1)):
                expected = llama.generate(**inputs, max_new_tokens=6, do_sample=False)
                assert torch.equal(loaded.generate(**inputs, max_new_tokens=6), expected), inputs["input_ids"].shape
            assert torch.get_num_threads() == 2  # restored after each call
        finally:
            torch.set_num_threads(before)
    # ONNX Runtime and OpenVINO run on their own threads: the loop's torch work runs on one thread, never waking
    # torch's pool between steps; a torch program keeps torch's threads
    assert seen and set(seen) == ({2} if runner.uses_torch_threads else {1})
    assert (
        len(loaded.runners) == 1
    )  # one torch module / ONNX Runtime session / OpenVINO compiled model: the weights once


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_export_compiles_the_graph_once(saved, fmt):
    """The one-graph check runs on the parity runner: one ONNX Runtime session / OpenVINO compilation of the
    weights while exporting, not a second one for the check (at 0.5B, seconds and a copy of the weights)."""
    exported, _, _, built, _ = saved(fmt)
    assert exported.generation["one_graph"] is True
    # built once, for the parity check (ExecuTorch also checks the LLM runner's program, a component of its own)
    assert len(built) == (2 if fmt == "executorch" else 1) and built[0].parity is None


def test_the_graph_keeps_the_last_positions_logits_only(saved):
    _, loaded, _, _, _ = saved("onnx")
    prompt = text_inputs(2, 9, seed=3)
    from hub_export.generation.loop import _empty_cache

    decode = loaded.runners["decode"]
    out = decode(
        **prompt,
        position_ids=torch.arange(9).expand(2, -1),
        past_key_values=_empty_cache(decode, "past_key_values", 2),
    )
    assert out.logits.shape == (2, 1, 96)  # a prompt's step does not return vocab x prompt logits
    assert out.past_key_values.get_seq_length() == 9


def test_the_check_refuses_a_graph_that_differs_from_eager(saved, llama):
    exported, _, _, _, _ = saved("onnx")
    components, capture = decompose_with_capture(llama, text_inputs(2, 7), multi_token_decode=True)
    prompt, plan = components["prefill"][1], exported.generation
    step = one_token_step(capture, "input_ids")
    backend = backend_for("onnx")
    exporter = backend.exporter_class()
    component = exported.components["decode"]
    runner = exporter.parity_runner(component.program, component.metadata)
    assert check_one_graph(runner, component.metadata, llama, prompt, step, plan) is None
    other = copy.deepcopy(llama)
    with torch.no_grad():
        other.model.layers[0].mlp.down_proj.weight.mul_(3.0)
    why = check_one_graph(runner, component.metadata, other, prompt, step, plan)
    assert why is not None and "differs from eager on the sample prompt" in why


def test_the_decode_graph_traces_one_length_for_every_cache_and_takes_a_one_token_prompt(llama) -> None:
    """Every self-attention key and value is traced on one length symbol (``generation.export._batch_tied``: the
    sample's caches share a length), not one symbol each, and the bounds stay the model's: a one-token prompt on an
    empty cache generates eager's tokens."""
    exported = _export("dynamo", llama)
    program = exported.components["decode"].program
    lengths = {
        str(node.meta["val"].shape[2])
        for node in program.graph.nodes
        if node.op == "placeholder" and node.meta.get("val") is not None and node.meta["val"].dim() == 4
    }
    assert len(lengths) == 1, lengths
    prompt = {"input_ids": torch.tensor([[5], [7]]), "attention_mask": torch.ones(2, 1, dtype=torch.long)}
    expected = llama.generate(**prompt, max_new_tokens=4, do_sample=False)
    assert torch.equal(exported.generate(**prompt, max_new_tokens=4, do_sample=False), expected)
