"""generate() is transformers' GenerationMixin over the exported graphs: every strategy, logits processor, stopping
criterion and streamer gives the eager model's tokens, on ONNX and on OpenVINO (stateful decode: beam search
reorders the state kept inside OpenVINO)."""

from __future__ import annotations

import pytest
import torch
from tiny_models import build
from tiny_tokenizers import llama_tokenizer
from transformers import GenerationMixin

from hub_export import ExportedModel, OnnxConfig, OnnxExporter, OpenVINOConfig, OpenVINOExporter
from hub_export.generation.mixin import RunnerState
from hub_export.model import ExportedModelForCausalLM

_BACKENDS = {"onnx": (OnnxExporter, OnnxConfig), "openvino": (OpenVINOExporter, OpenVINOConfig)}
_PROMPTS = ["the cat sat on the mat", "birds sang"]


@pytest.fixture(scope="module")
def llama():
    return build("llama").model, llama_tokenizer()


@pytest.fixture(scope="module", params=sorted(_BACKENDS))
def loaded(request, llama, tmp_path_factory):
    model, tokenizer = llama
    exporter, config = _BACKENDS[request.param]
    prompt = tokenizer(["the cat sat on the mat"], return_tensors="pt")
    exported = exporter().export_for_generation(model, prompt, config=config(dynamic=True))
    folder = exported.save_pretrained(tmp_path_factory.mktemp(request.param) / "export")
    return ExportedModel.from_pretrained(folder)


def _both(model, loaded, inputs, seed=None, **settings):
    results = []
    for runner in (model, loaded):
        if seed is not None:
            torch.manual_seed(seed)
        results.append(runner.generate(**inputs, **settings))
    return results


def test_the_export_is_a_generation_mixin(loaded):
    assert isinstance(loaded, ExportedModelForCausalLM) and isinstance(loaded, GenerationMixin)
    assert loaded.can_generate() and loaded.main_input_name == "input_ids"
    assert loaded.config.model_type == "llama" and loaded.generation_config.eos_token_id == 2


@pytest.mark.parametrize(
    "settings",
    [
        pytest.param({}, id="greedy"),
        pytest.param({"num_beams": 3}, id="beam-search"),
        pytest.param({"num_beams": 3, "num_return_sequences": 2, "length_penalty": 0.5}, id="beams-returned"),
        pytest.param({"do_sample": True, "top_k": 20, "top_p": 0.9, "temperature": 0.8}, id="sampling"),
        pytest.param({"repetition_penalty": 1.3, "no_repeat_ngram_size": 2}, id="repetition"),
        pytest.param({"bad_words_ids": [[5], [7, 8]], "eos_token_id": [2, 9]}, id="bad-words-several-eos"),
    ],
)
def test_strategy_tokens_equal_eager(llama, loaded, settings):
    model, tokenizer = llama
    for prompts in (_PROMPTS, _PROMPTS[:1]):
        inputs = tokenizer(prompts, return_tensors="pt", padding=True)
        expected, produced = _both(model, loaded, inputs, seed=0, max_new_tokens=8, **settings)
        assert torch.equal(produced, expected), (settings, produced, expected)


def test_min_new_tokens_holds_back_eos(llama, loaded):
    model, tokenizer = llama
    inputs = tokenizer(_PROMPTS, return_tensors="pt", padding=True)
    greedy = model.generate(**inputs, max_new_tokens=8)
    eos = int(greedy[0, inputs["input_ids"].shape[1] + 1])  # row 0 would stop at its second new token
    short, _ = _both(model, loaded, inputs, max_new_tokens=8, eos_token_id=eos)
    expected, produced = _both(model, loaded, inputs, max_new_tokens=8, eos_token_id=eos, min_new_tokens=6)
    assert torch.equal(produced, expected)
    start = inputs["input_ids"].shape[1]
    assert int(short[0, start + 1]) == eos and eos not in expected[0, start : start + 6].tolist()


def test_stop_string_stops_like_eager(llama, loaded):
    model, tokenizer = llama
    inputs = tokenizer(_PROMPTS[:1], return_tensors="pt")
    greedy = model.generate(**inputs, max_new_tokens=8)
    stop = tokenizer.decode(greedy[0, inputs["input_ids"].shape[1] + 2])  # the third new word
    expected, produced = _both(model, loaded, inputs, max_new_tokens=8, stop_strings=[stop], tokenizer=tokenizer)
    assert torch.equal(produced, expected) and produced.shape[1] < greedy.shape[1]


def test_streamer_gets_the_eager_text(llama, loaded):
    from transformers import TextStreamer

    model, tokenizer = llama

    class Collect(TextStreamer):
        def __init__(self) -> None:
            super().__init__(tokenizer, skip_prompt=True)
            self.text = ""

        def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
            self.text += text

    inputs = tokenizer(_PROMPTS[:1], return_tensors="pt")
    streams = [Collect(), Collect()]
    for runner, streamer in zip((model, loaded), streams):
        runner.generate(**inputs, max_new_tokens=6, streamer=streamer)
    assert streams[0].text == streams[1].text and streams[0].text.strip()


def test_scores_and_dict_outputs(llama, loaded):
    model, tokenizer = llama
    inputs = tokenizer(_PROMPTS, return_tensors="pt", padding=True)
    settings = {"max_new_tokens": 4, "return_dict_in_generate": True, "output_scores": True}
    expected, produced = _both(model, loaded, inputs, **settings)
    assert torch.equal(produced.sequences, expected.sequences)
    for a, b in zip(produced.scores, expected.scores):
        assert torch.allclose(a, b, atol=1e-4)


def test_seed_argument_samples_reproducibly_without_touching_the_global_state(loaded, llama):
    _, tokenizer = llama
    inputs = tokenizer(_PROMPTS, return_tensors="pt", padding=True)
    state = torch.random.get_rng_state()
    first = loaded.generate(**inputs, max_new_tokens=6, do_sample=True, seed=3)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(first, loaded.generate(**inputs, max_new_tokens=6, do_sample=True, seed=3))


def test_unknown_generate_inputs_are_refused(loaded, llama):
    _, tokenizer = llama
    inputs = tokenizer(_PROMPTS[:1], return_tensors="pt")
    with pytest.raises(ValueError, match=r"not used by the model: \['pixel_values'\]"):
        loaded.generate(**inputs, pixel_values=torch.zeros(1, 3, 8, 8), max_new_tokens=2)


def test_a_step_gets_the_token_types_of_its_own_tokens(loaded):
    """Positions and token types (``token_type_ids``, and ``mm_token_type_ids`` of GLM-5 Next and other VLMs) are
    cut to the tokens a step feeds, as the model's own generate() does: a decode graph takes one token's types."""
    ids = torch.arange(6).reshape(1, 6)
    types = {"token_type_ids": torch.zeros(1, 6, dtype=torch.int64), "mm_token_type_ids": torch.ones(1, 6).long()}
    step = loaded.prepare_inputs_for_generation(ids, next_sequence_length=1, position_ids=ids, **types)
    assert step["input_ids"].tolist() == [[5]] and step["position_ids"].tolist() == [[5]]
    assert step["token_type_ids"].shape == step["mm_token_type_ids"].shape == (1, 1)


def test_forward_steps_like_the_model(llama, loaded):
    """forward() is one step: the prompt (last logits and the cache), then a token against that cache."""
    model, tokenizer = llama
    inputs = tokenizer(_PROMPTS[:1], return_tensors="pt")
    with torch.no_grad():
        eager = model(**inputs, use_cache=True)
    first = loaded(inputs["input_ids"], attention_mask=inputs["attention_mask"])  # the main input positionally
    assert torch.allclose(first.logits[:, -1], eager.logits[:, -1], atol=1e-4)
    token = eager.logits[:, -1].argmax(-1, keepdim=True)
    mask = torch.cat([inputs["attention_mask"], torch.ones(1, 1, dtype=torch.int64)], dim=-1)
    second = loaded(token, attention_mask=mask, past_key_values=first.past_key_values)
    with torch.no_grad():
        expected = model(token, attention_mask=mask, past_key_values=eager.past_key_values, use_cache=True)
    assert torch.allclose(second.logits[:, -1], expected.logits[:, -1], atol=1e-4)
    stateful = loaded.export_format.value == "openvino"
    assert isinstance(second.past_key_values, RunnerState) == stateful
    assert second.past_key_values.get_seq_length() == mask.shape[1]


@pytest.mark.parametrize("loaded", ["onnx"], indirect=True)  # OpenVINO's stateful decode keeps its cache inside
def test_a_returned_cache_is_fed_back_as_is_and_a_changed_one_is_flattened(llama, loaded):
    """The decode runner feeds its own returned cache back without walking it; a copy, a cropped or reordered cache
    is flattened as any value, with the same logits."""
    import copy

    model, tokenizer = llama
    ids = tokenizer(_PROMPTS[:1], return_tensors="pt")["input_ids"]
    runner = loaded.runners[loaded.generation["stages"]["decode"]]
    n = ids.shape[1]

    def step(cache, length):
        return {
            "input_ids": ids[:, -1:],
            "attention_mask": torch.ones(1, length + 1, dtype=torch.int64),
            "position_ids": torch.tensor([[length]]),
            "past_key_values": cache,
        }

    cache = runner(**step(loaded(ids).past_key_values, n)).past_key_values  # returned by the decode runner
    assert set(runner._known(step(cache, n + 1))) == {"past_key_values"}
    duplicate = copy.deepcopy(cache)
    assert runner._known(step(duplicate, n + 1)) == {}
    fed = runner(**step(cache, n + 1)).logits
    assert torch.equal(fed, runner(**step(duplicate, n + 1)).logits)
    cropped = runner(**step(duplicate, n + 1)).past_key_values
    cropped.crop(-1)  # back to n + 1 positions
    assert runner._known(step(cropped, n + 1)) == {}
    assert torch.equal(runner(**step(cropped, n + 1)).logits, fed)
    reordered = runner(**step(copy.deepcopy(cache), n + 1)).past_key_values
    reordered.reorder_cache(torch.tensor([0]))
    assert runner._known(step(reordered, n + 2)) == {} and runner(**step(reordered, n + 2)).logits.shape == fed.shape


def test_min_length_processors_are_transformers_own_with_the_same_scores():
    from transformers import LogitsProcessorList
    from transformers.generation.logits_process import (
        MinLengthLogitsProcessor,
        MinNewTokensLengthLogitsProcessor,
        RepetitionPenaltyLogitsProcessor,
    )

    from hub_export.generation._processors import cheaper

    eos = torch.tensor([2, 7])
    given = LogitsProcessorList(
        [
            MinLengthLogitsProcessor(6, eos),
            MinNewTokensLengthLogitsProcessor(2, 5, eos),
            RepetitionPenaltyLogitsProcessor(1.5),
        ]
    )
    fast = cheaper(given)
    assert all(isinstance(mine, type(theirs)) for mine, theirs in zip(fast, given)) and len(fast) == len(given)
    assert type(fast[0]) is not MinLengthLogitsProcessor and type(fast[1]) is not MinNewTokensLengthLogitsProcessor
    assert fast[2] is given[2]  # other processors kept as they are
    scores = torch.randn(2, 11)
    for length in (3, 5, 6, 7, 9):
        ids = torch.randint(0, 11, (2, length), generator=torch.Generator().manual_seed(length))
        assert torch.equal(fast(ids, scores), given(ids, scores)), length
