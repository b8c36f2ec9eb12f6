"""benchmarks/_tiny_configs.py (the harness of ``coverage.py --all``): tiny configs that the config classes' own
validators accept (refusals read and fixed by rule, or backed off), and sample inputs for the families whose main
input is neither text, image nor audio. Config-only and one tiny model, so it stays fast."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from _config_backoff import construct, fix_from_message  # noqa: E402


@pytest.mark.parametrize(
    ("message", "before", "after"),
    [
        (
            "num_attention_heads (4) must be the same as num_key_value_heads (2).",
            {"num_attention_heads": 4, "num_key_value_heads": 2},
            {"num_attention_heads": 2, "num_key_value_heads": 2},
        ),
        (
            "index_topk (4) must be divisible by index_kpool (16).",
            {"index_topk": 4, "index_kpool": 16},
            {"index_topk": 4, "index_kpool": 4},
        ),
        (
            "`adaptor_config.intermediate_size` (64) must equal `text_config.hidden_size // 4` (8).",
            {"adaptor_config": {"intermediate_size": 64}, "text_config": {"hidden_size": 32}},
            {"adaptor_config": {"intermediate_size": 8}, "text_config": {"hidden_size": 32}},
        ),
        (
            "hidden_size_per_layer_input must be 0, got 256",
            {"text_config": {"hidden_size_per_layer_input": 256}},
            {"text_config": {"hidden_size_per_layer_input": 0}},
        ),
    ],
)
def test_validator_messages_are_fixed_by_rule(message: str, before: dict, after: dict) -> None:
    assert fix_from_message(before, message) is not None
    assert before == after


def test_an_unread_refusal_backs_off_to_the_defaults_then_keeps_the_layers() -> None:
    def build(d: dict) -> dict:
        if d["layers"] < 4:
            raise ValueError("merge_index must be less than the smallest of intermediate_indices")
        return d

    notes: list[str] = []
    shrunk = {"layers": 2, "merge_index": 2, "intermediate_indices": [1]}
    default = {"layers": 24, "merge_index": 2, "intermediate_indices": [5, 11]}
    built = construct(
        build, shrunk, default, lambda: {"layers": 24, "merge_index": 2, "intermediate_indices": [5]}, notes
    )
    assert built["layers"] == 24 and notes == ["layer counts kept (validator)"]


def test_tiny_configs_pass_their_own_validators() -> None:
    import _tiny_configs as tiny

    notes: list[str] = []
    glm = tiny.tiny_config("glm5_next_text", notes=notes)  # kv heads kept equal to the heads; kpool divides topk
    assert glm.num_attention_heads == glm.num_key_value_heads and glm.index_topk % glm.index_kpool == 0
    hrm = tiny.tiny_config("hrm_text")  # the per-stack layer count is derived again from the shrunk count
    assert hrm.num_hidden_layers == hrm.num_layers_per_stack * hrm.H_cycles * (hrm.L_cycles + 1)
    assert hrm.num_layers_per_stack <= 4


def test_decision_transformer_inputs_are_built() -> None:
    import _tiny_configs as tiny

    case = tiny.build_case("decision_transformer")
    assert {"states", "actions", "returns_to_go", "timesteps"} <= set(case.sample)
    assert case.other["states"].shape[:2] == (3, 9)  # another batch and another number of steps


def test_constant_weights_are_perturbed_and_random_draws_fixed() -> None:
    import torch
    from _tiny_random import break_ties, fix_randomness

    class Masked(torch.nn.Module):  # a zero-initialised router and a ViT-MAE-style random masking
        def __init__(self) -> None:
            super().__init__()
            self.router = torch.nn.Linear(4, 3)
            torch.nn.init.zeros_(self.router.weight)
            torch.nn.init.zeros_(self.router.bias)

        def forward(self, x: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
            noise = torch.rand(x.shape[0], x.shape[1]) if noise is None else noise
            return self.router(x) + noise.argsort(-1)[..., None]

    model = Masked()
    assert break_ties(model) == ["router.weight"]  # the 1-D bias keeps its value
    assert len(set(model.router.weight.flatten().tolist())) == 12
    sample, other = {"x": torch.randn(2, 5, 4)}, {"x": torch.randn(3, 6, 4)}
    assert fix_randomness(model, sample, other) == "random draws fixed: noise"
    assert sample["noise"].shape == (2, 5) and other["noise"].shape == (3, 6)
    assert torch.equal(model(**sample), model(**sample))

    class Speech(torch.nn.Module):  # VITS: draws scaled by a noise_scale setting, no input to fix them
        def __init__(self) -> None:
            super().__init__()
            self.noise_scale = 0.667

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.randn_like(x) * self.noise_scale

    speech, sample = Speech(), {"x": torch.randn(2, 3)}
    assert fix_randomness(speech, sample, {"x": torch.randn(3, 3)}).startswith("random draws fixed: noise_scale")
    assert speech.noise_scale == 0.0 and torch.equal(speech(**sample), speech(**sample))


def test_top_k_ties_can_be_kept_at_the_lower_index() -> None:
    """ONNX's TopK keeps the lower index among equal values; eager under ``lower_index_ties`` does too."""
    import torch
    from _tiny_random import lower_index_ties

    scores = torch.tensor([[0.0, 2.0, 0.0, 0.0, 2.0, 1.0]])
    with lower_index_ties() as calls:
        assert scores.topk(4).indices.tolist() == [[1, 4, 5, 0]]
        assert torch.topk(scores, 2, largest=False).indices.tolist() == [[0, 2]]
    assert len(calls) == 2 and torch.Tensor.topk is torch._C.TensorBase.topk  # the method is back


def test_sizes_the_config_derives_are_handed_back_to_it() -> None:
    import _tiny_configs as tiny
    from transformers import Zamba2Config

    shrunk = tiny._tiny_dict(tiny._defaults("zamba2"))
    fix = tiny._derived_sizes(Zamba2Config, tiny._defaults("zamba2"))
    assert fix is not None and "mamba_headdim" in fix[0]
    fix[1](shrunk)
    config = Zamba2Config.from_dict(shrunk)  # the class derives them from the shrunk sizes again
    assert config.mamba_headdim * config.n_mamba_heads == config.mamba_expand * config.hidden_size
    assert config.attention_hidden_size == 2 * config.hidden_size


def test_an_input_the_forward_asks_for_is_built_from_its_documented_shape() -> None:
    """LXMERT-style: optional parameters the forward's code requires, built from the shapes its docstring
    documents (the config's sizes by name, the batch of the other inputs)."""
    import torch
    from _tiny_missing import LENGTH, run_completing

    class Config:
        def __init__(self) -> None:
            self.visual_feat_dim = 6

    class Visual(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.config = Config()

        def forward(self, input_ids: torch.Tensor, visual_feats: torch.Tensor | None = None, box_ids=None):
            """
            visual_feats (`torch.Tensor` of shape `(batch_size, num_visual_features, visual_feat_dim)`):
            box_ids (`torch.Tensor` of shape `(batch_size, 2 x 2)`):
            """
            if visual_feats is None:
                raise ValueError("`visual_feats` cannot be `None`")
            if box_ids is None:
                raise ValueError("You have to specify box_ids")
            if input_ids.shape[1] > 4:
                raise ValueError("sequence too long")
            return visual_feats.sum(-1) + box_ids.sum()

    built = run_completing(Visual(), {"input_ids": torch.ones(3, 4, dtype=torch.int64)}, lambda *args: [])
    assert built["visual_feats"].shape == (3, LENGTH, 6) and built["visual_feats"].dtype == torch.float32
    assert built["box_ids"].shape == (3, 4) and built["box_ids"].dtype == torch.int64
    with pytest.raises(ValueError, match="sequence too long"):  # any other error is the model's own
        run_completing(Visual(), {"input_ids": torch.ones(3, 5, dtype=torch.int64)}, lambda *args: [])

    class Merged(torch.nn.Module):  # a None the code dereferences, held by a forward parameter (Video-LLaMA 3)
        def __init__(self) -> None:
            super().__init__()
            self.config = Config()

        def forward(self, pixel_values: torch.Tensor, image_merge_index: torch.Tensor | None = None) -> torch.Tensor:
            """image_merge_index (`torch.LongTensor` of shape `(batch_size,)`):"""
            return pixel_values[:, image_merge_index[0]]

    built = run_completing(Merged(), {"pixel_values": torch.randn(2, 3)}, lambda *args: [])
    assert built["image_merge_index"].tolist() == [1, 1]


def test_a_length_and_a_config_field_are_read_from_the_models_errors() -> None:
    from _tiny_adjust import _adjustment
    from _tiny_inputs import _wanted_length

    error = RuntimeError("The size of tensor a (7) must match the size of tensor b (33) at non-singleton dimension 1")
    assert _wanted_length(error, [7, 8, 16]) == 33  # the text must be as long as the audio's frames
    default = {"model_type": "dbrx", "attn_config": {"model_type": ""}, "rope_parameters": {"rope_theta": 5e5}}
    shrunk = {"model_type": "dbrx", "attn_config": {"model_type": ""}, "rope_parameters": {"rope_theta": 5e5}}
    fix = _adjustment(AttributeError("'DbrxAttentionConfig' object has no attribute 'rope_theta'"), default)
    assert fix is not None
    fix[1](shrunk)  # the modeling code reads a field its config class lacks: the value another level holds
    assert shrunk["attn_config"]["rope_theta"] == 5e5


def test_generation_cells_are_classed_and_prepared() -> None:
    """The generation columns (gen-<backend>): a cell is classed by its format's rules, differing tokens are parity
    (after a reload: round-trip); the other prompt is cut to a batch of two; a tiny config gets the generation
    settings its checkpoints carry."""
    import torch
    from _coverage_generation import _batch_of_two, _generation_defaults
    from _failure_classes import classify
    from transformers import BertGenerationConfig, BertGenerationDecoder, T5Config, T5ForConditionalGeneration

    def row(backend: str, reason: str) -> dict:
        return {"backend": backend, "ok": False, "reason": reason}

    assert classify(row("gen-onnx", "[generate sample] Fail] onnxruntime refused")) == "onnx-runtime"
    assert classify(row("gen-dynamo", "[generate sample] Fail] onnxruntime refused")) == "run-error"
    assert classify(row("gen-openvino", "greedy tokens differ from eager generate (other: 1/2 rows)")) == "parity"
    assert classify(row("gen-dynamo", "after save/load: greedy tokens differ from eager generate (x)")) == "round-trip"
    three = {"input_ids": torch.ones(3, 5, dtype=torch.int64), "attention_mask": torch.ones(3, 5)}
    assert {k: tuple(v.shape) for k, v in _batch_of_two(three).items()} == {
        "input_ids": (2, 5),
        "attention_mask": (2, 5),
    }
    mixed = {**three, "pixel_values": torch.ones(6, 3, 4, 4)}  # images per row: left as they are
    assert _batch_of_two(mixed) is mixed
    t5 = T5ForConditionalGeneration(T5Config(vocab_size=32, d_model=8, d_ff=16, num_layers=1, num_heads=2, d_kv=4))
    t5.generation_config.decoder_start_token_id = t5.generation_config.bos_token_id = None
    assert _generation_defaults(t5, "seq2seq-lm") and t5.generation_config.decoder_start_token_id == 0
    config = BertGenerationConfig(vocab_size=32, hidden_size=8, num_hidden_layers=1, num_attention_heads=2)
    decoder = BertGenerationDecoder(config)
    assert decoder.config.is_decoder is False
    assert _generation_defaults(decoder, "causal-lm") == ["is_decoder=True (the config's default is an encoder)"]
    assert decoder.config.is_decoder is True and _generation_defaults(decoder, "causal-lm") == []


def test_quantized_cells_score_tokens_by_eagers_ranks() -> None:
    """A quantized generation cell scores each chosen token by its rank under eager's logits given the same prefix:
    eager's own greedy output ranks 0 everywhere; a token swapped for eager's least likely one ranks last; positions
    after a row's end-of-sequence token are not scored."""
    import torch
    from _coverage_quantized import closeness, eager_ranks, split_backend
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2, n_positions=32)).eval()
    model.generation_config.eos_token_id = None
    inputs = {"input_ids": torch.randint(3, 60, (2, 5)), "attention_mask": torch.ones(2, 5, dtype=torch.int64)}
    inputs["attention_mask"][0, :2] = 0
    produced = model.generate(**inputs, max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert eager_ranks(model, inputs, produced).tolist() == [[0] * 4, [0] * 4]
    row: dict = {}
    assert closeness(model, inputs, produced, "sample", row) is None and row["eager_choice_share"] == 1.0
    positions = (inputs["attention_mask"].cumsum(-1) - 1).clamp(min=0)  # as generate() counts them
    with torch.no_grad():
        logits = model(**inputs, position_ids=positions).logits[:, -1]
    worse = produced.clone()
    worse[:, 5] = logits.argmin(-1)  # the first new token: eager's least likely
    assert eager_ranks(model, inputs, worse)[:, 0].tolist() == [63, 63]
    assert "ranks 63" in closeness(model, inputs, worse, "other", row)
    model.generation_config.eos_token_id = int(worse[0, 5])  # row 0 ends there: its later positions are not scored
    assert eager_ranks(model, inputs, worse)[0, 1:].tolist() == [-1, -1, -1]
    fmt, quantizer = split_backend("gen-openvino-int4")
    assert fmt == "openvino" and quantizer is not None and split_backend("gen-onnx") == ("onnx", None)
