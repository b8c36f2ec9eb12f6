"""hub_export.patches.modeling: transformers' modeling code that pins a dynamic axis while tracing (a Python list
or loop over a size) is traced from a tensor rewrite, so the export accepts other sizes with eager's numbers; the
patches are restored after tracing and refuse to run silently when their target is gone."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tiny_models import seeded, text_inputs
from torch.export import Dim

from hub_export import DynamoConfig, DynamoExporter
from hub_export.errors import PatchTargetMissing
from hub_export.patches.audio_codecs import encodec_encode_one_chunk
from hub_export.patches.modeling import MODELING_PATCHES, ModelingPatch, symbolic_sizes


def _ids(batch: int, length: int, vocab: int = 64) -> dict[str, torch.Tensor]:
    return text_inputs(batch, length, vocab=vocab, seed=batch * 100 + length)


def _tiny(config_cls: type, model_cls: type, **sizes: object) -> torch.nn.Module:
    return seeded(model_cls, config_cls(**sizes))


def _export_and_compare(model: torch.nn.Module, sample: dict, others: list[dict]) -> dict:
    exported = DynamoExporter().export(model, sample, config=DynamoConfig(dynamic=True))
    with torch.no_grad():
        for inputs in [sample, *others]:
            torch.testing.assert_close(exported(**inputs)["logits"], model(**inputs)["logits"], rtol=0, atol=1e-5)
    return exported.components["model"].metadata.signature.dims


def test_cpmant_sequence_stays_dynamic() -> None:
    """CpmAntModel._prepare_attention_mask builds its padding mask from list(range(sequence)): pinned before."""
    from transformers import CpmAntConfig, CpmAntForCausalLM
    from transformers.models.cpmant.modeling_cpmant import CpmAntModel

    original = CpmAntModel._prepare_attention_mask
    model = _tiny(
        CpmAntConfig,
        CpmAntForCausalLM,
        vocab_size=64,
        hidden_size=32,
        num_attention_heads=2,
        dim_head=16,
        dim_ff=64,
        num_hidden_layers=1,
        prompt_length=4,
        prompt_types=4,
        segment_types=4,
        position_bias_num_buckets=32,
        position_bias_max_distance=64,
    )
    dims = _export_and_compare(model, _ids(2, 7), [_ids(3, 11), _ids(2, 16)])
    assert dims["sequence"].min != dims["sequence"].max and dims["sequence"].multiple_of == 1
    assert CpmAntModel._prepare_attention_mask is original  # restored after tracing


def test_reformer_batch_stays_dynamic() -> None:
    """Reformer's axial position encodings were gathered row by row (a loop over the batch): pinned before. The
    sequence stays bounded by the axial table (8 x 8 positions), which the dims say."""
    from transformers import ReformerConfig, ReformerForMaskedLM

    model = _tiny(
        ReformerConfig,
        ReformerForMaskedLM,
        vocab_size=64,
        hidden_size=32,
        num_attention_heads=2,
        attention_head_size=16,
        feed_forward_size=64,
        attn_layers=["local"],  # one layer: the axial positions are what pinned the batch
        axial_pos_shape=[8, 8],
        axial_pos_embds_dim=[16, 16],
        local_attn_chunk_length=16,
        lsh_attn_chunk_length=16,
        num_buckets=4,
        max_position_embeddings=64,
        is_decoder=False,
        hidden_dropout_prob=0.0,
        local_attention_probs_dropout_prob=0.0,
    )
    dims = _export_and_compare(model, _ids(2, 7), [_ids(3, 11), _ids(4, 7)])
    assert dims["batch"].max is None
    assert dims["sequence"].max is not None and dims["sequence"].max <= 64


def test_clvp_rotary_cache_does_not_pin_the_sequence() -> None:
    """CLVP's rotary embedding cached under the length eager last saw (9 here): tracing at 7 compared with it."""
    from types import SimpleNamespace

    from transformers.models.clvp.modeling_clvp import ClvpRotaryPositionalEmbedding

    class Rotated(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rotary = ClvpRotaryPositionalEmbedding(SimpleNamespace(projection_dim=64, num_attention_heads=1))
            self.proj = torch.nn.Linear(32, 32)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
            hidden = self.proj(torch.nn.functional.one_hot(input_ids % 32, 32).float())
            return {"logits": hidden * self.rotary(hidden).cos()}

    model = Rotated().eval()
    with torch.no_grad():
        model(**_ids(2, 9))  # fills the cache with another length
    dims = _export_and_compare(model, _ids(2, 7), [_ids(3, 11)])
    assert dims["sequence"].max is None


def test_mamba_selective_scan_keeps_the_sequence_dynamic() -> None:
    """Mamba's reference selective scan loops over the sequence in Python (FalconMamba here; Mamba, Jamba and Zamba
    share the function): traced as one scan, the export takes other lengths with eager's numbers, and the module
    function is restored after tracing."""
    from transformers import FalconMambaConfig, FalconMambaForCausalLM
    from transformers.models.falcon_mamba import modeling_falcon_mamba

    original = modeling_falcon_mamba.mamba_selective_scan
    model = _tiny(
        FalconMambaConfig,
        FalconMambaForCausalLM,
        vocab_size=64,
        hidden_size=16,
        state_size=4,
        num_hidden_layers=1,
        expand=2,
        conv_kernel=3,
        time_step_rank=4,
    )
    dims = _export_and_compare(model, _ids(2, 7), [_ids(3, 11), _ids(2, 3)])
    assert dims["sequence"].max is None and dims["sequence"].min <= 3
    assert modeling_falcon_mamba.mamba_selective_scan is original


def test_recurrent_gemma_rg_lru_keeps_the_sequence_dynamic() -> None:
    """RecurrentGemma's RG-LRU loops over the sequence in Python in its linear mode: traced as one loop."""
    from transformers import RecurrentGemmaConfig, RecurrentGemmaForCausalLM

    model = _tiny(
        RecurrentGemmaConfig,
        RecurrentGemmaForCausalLM,
        vocab_size=64,
        hidden_size=16,
        lru_width=16,
        intermediate_size=32,
        num_hidden_layers=2,
        block_types=["recurrent", "attention"],
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        attention_window_size=8,
    )
    dims = _export_and_compare(model, _ids(2, 7), [_ids(3, 11)])
    assert dims["sequence"].max is None


def test_an_lstm_keeps_the_sequence_dynamic() -> None:
    """torch's LSTM decomposes into one cell per step while exporting (the RNN-T prediction network of Parakeet and
    Nemotron ASR): traced as one loop per layer, with and without a given state, it takes other lengths."""

    class Predictor(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.embed = torch.nn.Embedding(64, 8)
            self.lstm = torch.nn.LSTM(8, 8, num_layers=1, batch_first=True)  # cheaper: each layer is one more loop
            self.head = torch.nn.Linear(8, 64)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
            state = self.lstm(self.embed(input_ids))[1] if input_ids.shape[1] > 3 else None
            output, (hidden, cell) = self.lstm(self.embed(input_ids), state)
            return {"logits": self.head(output), "hidden": hidden, "cell": cell}

    model = Predictor().eval()
    original = torch.nn.LSTM.forward
    dims = _export_and_compare(model, _ids(2, 7), [_ids(3, 11), _ids(2, 5)])
    assert dims["sequence"].max is None
    assert torch.nn.LSTM.forward is original


def test_recurrences_trace_as_while_loop_where_a_format_asks() -> None:
    """OpenVINO's frontend converts while_loop, not scan: the same recurrence under ``recurrences_as("while_loop")``
    gives the same numbers at every length, and an unknown operator is refused."""
    from hub_export.patches.recurrence import over_time, recurrences_as

    class Cumulative(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            def step(carry: list, xs: list, consts: list) -> tuple[list, list]:
                total = carry[0] * 0.5 + xs[0]
                return [total.clone()], [total * 2]

            final, (ys,) = over_time(step, [torch.zeros_like(x[:, 0])], [x.movedim(1, 0)])
            return final[0], ys.movedim(0, 1)

    def reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        total, ys = torch.zeros_like(x[:, 0]), []
        for t in range(x.shape[1]):
            total = total * 0.5 + x[:, t]
            ys.append(total * 2)
        return total, torch.stack(ys, 1)

    sample = torch.randn(2, 5, 3)
    with recurrences_as("while_loop"):
        program = torch.export.export(Cumulative(), (sample,), dynamic_shapes=({0: Dim.AUTO, 1: Dim.AUTO},))
    assert any("while_loop" in str(node.target) for node in program.graph.nodes)
    for x in (sample, torch.randn(3, 9, 3)):
        for got, want in zip(program.module()(x), reference(x)):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    with pytest.raises(ValueError, match="scan"), recurrences_as("for"):
        pass


def test_rwkv_wkv_step_is_upstreams(monkeypatch: pytest.MonkeyPatch) -> None:
    """RWKV's WKV recurrence (``rwkv_linear_attention_cpu``, a Python loop over the sequence) written as a step for
    :func:`~hub_export.patches.recurrence.over_time` (whose export keeps the sequence: the test above) gives
    upstream's outputs and state, with and without a given state. The step runs under a Python loop here: torch's
    eager ``scan`` compiles its body (slow), and the loop operators are tested above."""
    from transformers.models.rwkv.modeling_rwkv import rwkv_linear_attention_cpu

    from hub_export.patches import recurrence
    from hub_export.patches.recurrence import rwkv_wkv_scan

    def loop(step: Any, init: list, xs: list, consts: list = ()) -> tuple[list, list]:
        carry, ys = list(init), []
        for t in range(xs[0].shape[0]):
            carry, y = step(carry, [x[t] for x in xs], list(consts))
            ys.append(y)
        return carry, [torch.stack(column) for column in zip(*ys)]

    monkeypatch.setattr(recurrence, "over_time", loop)

    torch.manual_seed(0)
    decay, first, key, value = torch.randn(4), torch.randn(4), torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    want = rwkv_linear_attention_cpu(decay, first, key, value, return_state=True)
    got = rwkv_wkv_scan(rwkv_linear_attention_cpu)(decay, first, key, value, return_state=True)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    state = [s * 0.5 for s in want[1]]
    got = rwkv_wkv_scan(rwkv_linear_attention_cpu)(decay, first, key, value, state=state)
    torch.testing.assert_close(got, rwkv_linear_attention_cpu(decay, first, key, value, state=state), rtol=0, atol=0)


def test_funnel_position_vectors_keep_the_sequence_dynamic() -> None:
    """Funnel's relative-shift position vectors come from list(range(sequence)) (pinned before): the patch's
    vectors are upstream's at every length upstream takes, and traced they follow the length."""
    from transformers import FunnelConfig
    from transformers.models.funnel.modeling_funnel import FunnelAttentionStructure

    from hub_export.patches.modeling import _funnel_position_embeds

    vectors = _funnel_position_embeds(FunnelAttentionStructure.get_position_embeds)
    flat = lambda embeds: [t for pair in embeds for t in pair if t is not None]  # noqa: E731
    for separate_cls, truncate_seq in ((True, True), (True, False), (False, False)):
        config = FunnelConfig(d_model=8, block_sizes=[1, 1, 1], separate_cls=separate_cls, truncate_seq=truncate_seq)
        structure = FunnelAttentionStructure(config).eval()
        for length in (5, 7, 8, 11):
            want = flat(structure.get_position_embeds(length, torch.float32, "cpu"))
            torch.testing.assert_close(flat(vectors(structure, length, torch.float32, "cpu")), want, rtol=0, atol=0)

    class Positions(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
            return flat(vectors(structure, x.shape[1], x.dtype, x.device))

    program = torch.export.export(Positions(), (torch.zeros(1, 7),), dynamic_shapes=({1: Dim.AUTO},))
    want = flat(structure.get_position_embeds(11, torch.float32, "cpu"))
    torch.testing.assert_close(list(program.module()(torch.zeros(1, 11))), want, rtol=0, atol=0)


def test_patches_apply_only_to_models_holding_their_class() -> None:
    class Plain(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    with symbolic_sizes(Plain()) as applied:
        assert applied == 0


def test_a_missing_target_is_refused() -> None:
    import transformers.models.cpmant.modeling_cpmant  # noqa: F401 - the patch's module is imported

    gone = ModelingPatch(
        "transformers.models.cpmant.modeling_cpmant", "NoSuchClass", "forward", lambda f: f, "a test reason"
    )
    with pytest.raises(PatchTargetMissing, match="a test reason"), symbolic_sizes(torch.nn.Linear(1, 1), (gone,)):
        pass
    assert {p.owner for p in MODELING_PATCHES} >= {"CpmAntModel", "AxialPositionEmbeddings"}


def test_seanet_codec_padding_keeps_the_length_dynamic() -> None:
    """EnCodec's convolutions (shared with Mimi and PocketTTS) pad by int64 buffers read back as data-dependent values
    (GuardOnDataDependentSymNode): padded by the convolution's integers, the export takes other lengths with eager's
    numbers; EnCodec's one-chunk encode (a loop over range(0, length, length) before) returns eager's codes."""
    from transformers import EncodecConfig, EncodecModel
    from transformers.models.encodec.modeling_encodec import EncodecConv1d

    original = EncodecConv1d.forward
    config = EncodecConfig(
        use_causal_conv=False, pad_mode="reflect", norm_type="time_group_norm",  # asymmetric, reflected, normalized
        hidden_size=8, num_filters=4, num_residual_layers=1, upsampling_ratios=[2], codebook_size=16,
        num_lstm_layers=1, kernel_size=3, last_kernel_size=3, residual_kernel_size=3, target_bandwidths=[1.0],
        sampling_rate=200,  # one quantizer at 100 frames a second
    )  # fmt: skip
    torch.manual_seed(0)
    conv = EncodecConv1d(config, 2, 3, kernel_size=5, stride=3, dilation=1).eval()
    with symbolic_sizes(conv) as applied, torch.no_grad():
        program = torch.export.export(conv, (torch.randn(2, 2, 10),), dynamic_shapes=({0: Dim.AUTO, 2: Dim.AUTO},))
    assert applied == 1 and EncodecConv1d.forward is original  # restored after tracing
    with torch.no_grad():
        for size in (10, 17, 8, 33):
            audio = torch.randn(1, 2, size)
            torch.testing.assert_close(program.module()(audio), conv(audio), rtol=0, atol=0)
        model = EncodecModel(config).eval()
        audio = torch.randn(2, 1, 21)
        codes = encodec_encode_one_chunk(EncodecModel.encode)(model, audio).audio_codes
        assert torch.equal(codes, model.encode(audio).audio_codes)


def test_neucodec_output_length_keeps_the_length_dynamic() -> None:
    """NeuCodec cuts its audio to int(length * 1.5) (24 kHz out over 16 kHz in, a Python float: pinned before): on
    integers the export takes other lengths and cuts where eager does; a ratio that is no binary fraction (22.05 kHz
    over 16 kHz) keeps upstream's float."""
    from types import SimpleNamespace

    from transformers.models.neucodec.modeling_neucodec import NeuCodecModel

    from hub_export.patches.audio_codecs import _exact_ratio, neucodec_output_length_on_integers

    class Codec(torch.nn.Module):  # NeuCodec's contract: encode -> latents, decode -> audio 2 samples per latent
        def __init__(self) -> None:
            super().__init__()
            self.config = SimpleNamespace(output_sampling_rate=24_000, input_sampling_rate=16_000, return_dict=True)
            self.sample_rate_conversion_factor = 1.5

        def encode(self, input_values: torch.Tensor, **kwargs: Any) -> Any:
            latents = input_values[..., ::2] * 2
            return SimpleNamespace(latents=latents, audio_codes=latents.long(), audio_codes_mask=None)

        def decode(self, latents: torch.Tensor, **kwargs: Any) -> tuple:
            return (torch.repeat_interleave(latents, 4, dim=-1),)

    codec = Codec()
    patched = neucodec_output_length_on_integers(NeuCodecModel.forward)

    class Forward(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.codec = codec

        def forward(self, input_values: torch.Tensor) -> torch.Tensor:
            return patched(self.codec, input_values, input_values).audio_values

    program = torch.export.export(Forward(), (torch.randn(1, 1, 10),), dynamic_shapes=({2: Dim.AUTO},))
    for length in (10, 7, 16):
        audio = torch.randn(1, 1, length)
        want = NeuCodecModel.forward(codec, audio, audio).audio_values
        assert want.shape[-1] == int(length * 1.5)
        torch.testing.assert_close(program.module()(audio), want, rtol=0, atol=0)
    assert _exact_ratio(24_000, 16_000) == 1.5 and _exact_ratio(22_050, 16_000) is None


def test_nemotron_chunk_loops_keep_the_length_dynamic_within_one_chunk() -> None:
    """Nemotron 3 Diarization (and Nemotron 3.5 Transcribe's chunk list) loop over chunks of the recording in Python
    (the length pinned before): a sample of one chunk traces its one iteration, the export takes every length of one
    chunk with eager's numbers, and a longer one is refused (the bound is the chunk)."""
    from transformers import Nemotron3DiarizationConfig, Nemotron3DiarizationForAudioFrameClassification
    from transformers.models.nemotron3_5_transcribe.modeling_nemotron3_5_transcribe import (
        Nemotron3_5TranscribeAudioModel,
    )

    from hub_export.patches.chunks import transcribe_one_chunk

    audio = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
    config = Nemotron3DiarizationConfig(
        audio_config={**audio, "num_mel_bins": 8, "subsampling_factor": 8},
        head_config={"hidden_size": 8, "num_speakers": 2, "audio_hidden_size": 16},
        streaming_config={"num_speakers": 2, "speaker_cache_length": 8, "fifo_length": 8},
        chunk_length=4, chunk_right_context=1, fifo_length=4, speaker_cache_update_period=2,
    )  # fmt: skip
    model = seeded(Nemotron3DiarizationForAudioFrameClassification, config)
    original = Nemotron3DiarizationForAudioFrameClassification.forward

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_features: torch.Tensor) -> torch.Tensor:
            return self.model(input_features).logits

    torch.manual_seed(0)
    with symbolic_sizes(model) as applied, torch.no_grad():
        program = torch.export.export(Logits(), (torch.randn(2, 24, 8),), dynamic_shapes=({1: Dim.AUTO},))
    assert applied == 1 and Nemotron3DiarizationForAudioFrameClassification.forward is original
    with torch.no_grad():
        for frames in (24, 16, 32):  # 3, 2 and 4 encoder frames: one chunk
            features = torch.randn(2, frames, 8)
            torch.testing.assert_close(program.module()(features), model(features).logits, rtol=0, atol=1e-5)
        with pytest.raises(AssertionError, match="Guard failed"):
            program.module()(torch.randn(2, 40, 8))  # 5 encoder frames: two chunks

    class Chunks(torch.nn.Module):
        def forward(self, features: torch.Tensor) -> torch.Tensor:
            chunks = transcribe_one_chunk(Nemotron3_5TranscribeAudioModel._get_chunks)(stub, features.shape[1])
            return features[:, chunks[0][0]] * 2

    stub = type("Stub", (), {"config": type("C", (), {"diarization_config": config})()})()
    chunks = torch.export.export(Chunks(), (torch.randn(1, 3),), dynamic_shapes=({1: Dim.AUTO},))
    assert torch.equal(chunks.module()(torch.ones(1, 4)), torch.full((1, 4), 2.0))
    upstream = Nemotron3_5TranscribeAudioModel._get_chunks
    assert transcribe_one_chunk(upstream)(stub, 6) == upstream(stub, 6)  # eager: upstream's two chunks


def test_fastspeech2_length_regulator_traces_with_a_data_dependent_length() -> None:
    """FastSpeech2-Conformer's length regulator branched on the durations' sum and looped over the batch
    (GuardOnDataDependentSymNode before): gathered, it returns upstream's frames (all-zero durations and a speed
    included), and exported, it takes other durations with the frame count a data-dependent size."""
    from transformers.models.fastspeech2_conformer import modeling_fastspeech2_conformer as upstream

    from hub_export.patches.durations import length_regulator_gathered

    patched = length_regulator_gathered(upstream.length_regulator)
    hidden = torch.randn(2, 4, 3, generator=torch.Generator().manual_seed(0))
    durations = [torch.tensor([[1, 0, 3, 2], [2, 2, 0, 0]]), torch.zeros(2, 4, dtype=torch.long)]
    for duration, speed in ((durations[0], 1.0), (durations[1], 1.0), (durations[0], 1.6)):
        want = upstream.length_regulator(hidden, duration.clone(), speed)
        torch.testing.assert_close(patched(hidden, duration.clone(), speed), want, rtol=0, atol=0)

    class Regulator(torch.nn.Module):
        def forward(self, hidden: torch.Tensor, duration: torch.Tensor) -> torch.Tensor:
            return patched(hidden, duration.clone())

    program = torch.export.export(Regulator(), (hidden, durations[0]), dynamic_shapes=({1: Dim.AUTO}, {1: Dim.AUTO}))
    for duration in (torch.tensor([[4, 1, 0], [0, 0, 2]]), torch.tensor([[3, 3, 3, 3, 1], [1, 0, 0, 0, 0]])):
        states = torch.randn(2, duration.shape[1], 3)
        want = upstream.length_regulator(states, duration.clone())
        torch.testing.assert_close(program.module()(states, duration), want, rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["longcat_flash"])
def test_experts_loops_over_the_ids_hit_trace_per_expert(kind: str) -> None:
    """LongCat-Flash's and Step 3.7's experts iterate over the ids hit (nonzero, then .item()): data-dependent.
    Traced per expert, they add the same contributions in the same order (identity experts and the sentinel id
    included)."""
    if kind == "longcat_flash":
        from transformers import LongcatFlashConfig as Config
        from transformers.models.longcat_flash.modeling_longcat_flash import LongcatFlashExperts as Experts

        config, top = Config(hidden_size=8, expert_ffn_hidden_size=6, n_routed_experts=3, zero_expert_num=2), 4
    else:
        from transformers.models.step3p7.configuration_step3p7 import Step3p7TextConfig as Config
        from transformers.models.step3p7.modeling_step3p7 import Step3p7Experts as Experts

        config, top = Config(hidden_size=8, moe_intermediate_size=6, num_local_experts=3), 3  # 3: the sentinel
    experts = seeded(Experts, config)
    for weight in (experts.gate_up_proj, experts.down_proj):
        torch.nn.init.normal_(weight, std=0.2)
    generator = torch.Generator().manual_seed(1)

    def routed(tokens: int) -> tuple[torch.Tensor, ...]:
        ids = torch.stack([torch.randperm(top + 1, generator=generator)[:2] for _ in range(tokens)])
        return torch.randn(tokens, 8, generator=generator), ids, torch.rand(tokens, 2, generator=generator)

    tokens = Dim("tokens", min=2, max=64)
    with symbolic_sizes(experts) as applied, torch.no_grad():
        program = torch.export.export(experts, routed(7), dynamic_shapes=({0: tokens}, {0: tokens}, {0: tokens}))
    assert applied == 1
    with torch.no_grad():
        for inputs in (routed(7), routed(13)):
            torch.testing.assert_close(program.module()(*inputs), experts(*inputs), rtol=0, atol=1e-6)


def test_dbrx_experts_trace_per_expert() -> None:
    """DBRX's experts iterate over the ids hit (``for expert_idx in expert_hit``: GuardOnDataDependentSymNode
    ``Eq(u0, 0)`` in unbind). Traced per expert, they take other batches and lengths with eager's numbers, experts
    no token picked included."""
    from transformers.models.dbrx.configuration_dbrx import DbrxFFNConfig
    from transformers.models.dbrx.modeling_dbrx import DbrxExperts

    experts = seeded(DbrxExperts, DbrxFFNConfig(hidden_size=8, ffn_hidden_size=6, moe_num_experts=4, moe_top_k=2))
    for weight in experts.parameters():
        torch.nn.init.normal_(weight, std=0.2)
    generator = torch.Generator().manual_seed(1)

    def routed(batch: int, length: int) -> tuple[torch.Tensor, ...]:
        ids = torch.stack([torch.randperm(3, generator=generator)[:2] for _ in range(batch * length)])  # 3 unused
        weights = torch.rand(batch * length, 2, generator=generator)
        return torch.randn(batch, length, 8, generator=generator), ids, weights

    batch, tokens = Dim("batch", min=1, max=8), Dim("tokens", min=2, max=64)
    shapes = ({0: batch, 1: Dim("sequence", min=2, max=8)}, {0: tokens}, {0: tokens})
    with symbolic_sizes(experts) as applied, torch.no_grad():
        program = torch.export.export(experts, routed(2, 3), dynamic_shapes=shapes, strict=False)
    assert applied == 1
    with torch.no_grad():
        for inputs in (routed(2, 3), routed(3, 5)):
            torch.testing.assert_close(program.module()(*inputs), experts(*inputs), rtol=0, atol=1e-6)


def test_switch_router_cast_and_experts_trace() -> None:
    """Switch Transformers' router casts its classifier in every forward (Module.to swapped fake parameters held by
    weakrefs: "Couldn't swap Linear.weight", pytorch/pytorch#153056) and its experts loop over the ids hit
    (nonzero): traced as a no-op cast and a loop over every expert, the sparse MLP takes other token counts with
    eager's numbers, and Module.to is torch's again after tracing."""
    from transformers import SwitchTransformersConfig
    from transformers.models.switch_transformers.modeling_switch_transformers import SwitchTransformersSparseMLP

    from hub_export.patches.tracing import tracing_patches

    original = torch.nn.Module.to
    config = SwitchTransformersConfig(d_model=8, d_ff=12, num_experts=3, expert_capacity=3)
    mlp = seeded(SwitchTransformersSparseMLP, config)
    sequence = Dim("sequence", min=2, max=64)
    with tracing_patches(True, mlp), torch.no_grad():
        program = torch.export.export(mlp, (torch.randn(2, 5, 8),), dynamic_shapes=({1: sequence},), strict=False)
    assert torch.nn.Module.to is original
    with torch.no_grad():
        for length in (5, 9):  # 9 tokens a row overflow the capacity of 3: tokens dropped as in eager
            states = torch.randn(2, length, 8)
            torch.testing.assert_close(program.module()(states), mlp(states), rtol=0, atol=1e-6)


def test_custom_experts_run_every_expert_on_every_token_for_executorch() -> None:
    """The ExecuTorch runtime cannot run the per-expert token counts of DBRX's and Switch Transformers' patched loops
    (error 0x12): ExecuTorch traces them with every expert on every token, weighted by the routing, which equals
    eager, holds no size read from the routing (no nonzero), and is chosen for those classes only."""
    from transformers import SwitchTransformersConfig
    from transformers.models.dbrx.configuration_dbrx import DbrxFFNConfig
    from transformers.models.dbrx.modeling_dbrx import DbrxExperts
    from transformers.models.switch_transformers.modeling_switch_transformers import SwitchTransformersSparseMLP

    from hub_export import ExecutorchConfig, ExecutorchExporter
    from hub_export.patches.experts import dense_experts_forward
    from hub_export.patches.tracing import experts_as_standard_ops, tracing_patches

    experts = seeded(DbrxExperts, DbrxFFNConfig(hidden_size=8, ffn_hidden_size=6, moe_num_experts=4, moe_top_k=2))
    for weight in experts.parameters():
        torch.nn.init.normal_(weight, std=0.2)
    generator = torch.Generator().manual_seed(3)
    ids = torch.stack([torch.randperm(3, generator=generator)[:2] for _ in range(10)])  # expert 3 unused
    inputs = (torch.randn(2, 5, 8, generator=generator), ids, torch.rand(10, 2, generator=generator))
    choose = lambda module: ExecutorchExporter().experts_forward(module, ExecutorchConfig())  # noqa: E731
    with torch.no_grad():
        torch.testing.assert_close(dense_experts_forward(experts)(*inputs), experts(*inputs), rtol=0, atol=1e-6)
        with experts_as_standard_ops(experts, choose) as switched:
            program = torch.export.export(experts, inputs, strict=False)
    assert switched == 1 and "forward" not in vars(experts)
    assert not any("nonzero" in str(node.target) for node in program.graph.nodes)
    config = SwitchTransformersConfig(d_model=8, d_ff=12, num_experts=3, expert_capacity=3)
    mlp = seeded(SwitchTransformersSparseMLP, config)
    with torch.no_grad():
        for length in (5, 9):  # 9 tokens a row overflow the capacity of 3: tokens dropped as in eager
            states = torch.randn(2, length, 8)
            expected = mlp(states)
            with tracing_patches(True, mlp), experts_as_standard_ops(mlp, choose) as switched:
                assert switched == 1
                torch.testing.assert_close(mlp(states), expected, rtol=0, atol=1e-6)
    assert dense_experts_forward(torch.nn.Linear(2, 2)) is None


def test_placeholder_branches_trace_as_a_check_and_a_select() -> None:
    """Ovis2 wrote its visual indicators under ``if mask.any()`` and HunYuan-VL checked its placeholder count with a
    Python ``if`` (GuardOnDataDependentSymNode): Ovis2 exported keeps eager's logits at another length, and HunYuan-VL's
    check still refuses a mismatch in eager."""
    from types import SimpleNamespace

    from transformers import Ovis2Config, Ovis2ForConditionalGeneration

    from hub_export.patches.placeholders import hunyuan_vl_placeholder_mask
    from hub_export.patches.tracing import tracing_patches

    vision = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
    text = {**vision, "vocab_size": 64, "num_key_value_heads": 1, "head_dim": 8}
    config = Ovis2Config(
        vision_config={**vision, "image_size": 16, "patch_size": 8, "vocab_size": 32, "num_visual_indicator_tokens": 2},
        text_config=text,
        image_token_id=60,
        visual_indicator_token_ids=[61, 62],
        vocab_size=64,
        hidden_size=16,
    )
    model = seeded(Ovis2ForConditionalGeneration, config)

    def ids(extra: int) -> torch.Tensor:  # an indicator, the image's 4 placeholders, an indicator, text
        return torch.tensor(
            [[61, 60, 60, 60, 60, 62, *range(5, 7 + extra)], [1, 61, 60, 60, 60, 60, 62, *range(7, 8 + extra)]]
        )

    class Logits(torch.nn.Module):
        def forward(self, input_ids: torch.Tensor, pixel_values: torch.Tensor) -> torch.Tensor:
            return model(input_ids=input_ids, pixel_values=pixel_values).logits

    pixels = torch.randn(2, 3, 16, 16)
    with tracing_patches(True, model), torch.no_grad():
        sample = (ids(0), pixels)
        program = torch.export.export(Logits(), sample, dynamic_shapes=({1: Dim("s", max=64)}, None), strict=False)
    with torch.no_grad():
        for inputs in ((ids(0), pixels), (ids(3), pixels)):
            # the graph's kernels may block the matmuls differently from eager's (a last-bit difference, 1e-7)
            torch.testing.assert_close(program.module()(*inputs), Logits()(*inputs), rtol=1e-5, atol=1e-6)

    owner = SimpleNamespace(config=SimpleNamespace(image_token_id=3), get_input_embeddings=None)
    mask_of = hunyuan_vl_placeholder_mask(None)
    embeds, tokens = torch.zeros(1, 4, 2), torch.tensor([[3, 3, 1, 2]])
    assert mask_of(owner, tokens, embeds, torch.zeros(2, 2))[..., 0].tolist() == [[True, True, False, False]]
    with pytest.raises(ValueError, match="Image features and image tokens do not match"):
        mask_of(owner, tokens, embeds, torch.zeros(3, 2))


def test_longformer_global_attention_keeps_the_mask_an_input() -> None:
    """Longformer (LED copies it) branched on any global token (.item() of the mask: data-dependent) and padded to its
    window only when needed (the sequence bounded to [5, 7]): traced once, the graph serves masks with and without
    global tokens at other lengths with eager's numbers, and keeps no Piecewise range check (a .pt2 refused it). The
    batch stays static here (half the tracing time); the mask no longer fixes it either."""
    from transformers import LongformerConfig, LongformerModel

    from hub_export.patches.tracing import tracing_patches

    config = LongformerConfig(
        vocab_size=64, hidden_size=16, num_attention_heads=2, intermediate_size=32, num_hidden_layers=1,
        attention_window=4, max_position_embeddings=40, pad_token_id=1,
    )  # fmt: skip
    model = _tiny(LongformerConfig, LongformerModel, **config.to_diff_dict())

    def inputs(batch: int, length: int, global_tokens: bool) -> dict[str, torch.Tensor]:
        sample = _ids(batch, length)
        if global_tokens:
            sample["attention_mask"][0, 0] = sample["attention_mask"][-1, 2] = 2
        return sample

    sample = inputs(2, 6, False)
    with tracing_patches(True, model), torch.no_grad():
        program = torch.export.export(model, (), sample, dynamic_shapes={k: {1: Dim.AUTO} for k in sample})
        patched = [model(**inputs(2, length, True)).last_hidden_state for length in (6, 8)]
    assert not any("Piecewise" in str(node.meta.get("val")) for node in program.graph.nodes)
    with torch.no_grad():
        for length, want in zip((6, 8), patched):  # the patched forward is upstream's, bit for bit
            torch.testing.assert_close(want, model(**inputs(2, length, True)).last_hidden_state, rtol=0, atol=0)
        module = program.module()
        for length, global_tokens in ((11, True), (8, False)):
            x = inputs(2, length, global_tokens)
            got = module(**x)["last_hidden_state"]
            torch.testing.assert_close(got, model(**x).last_hidden_state, rtol=0, atol=1e-5)


def test_pegasus_x_block_padding_is_upstreams() -> None:
    """Pegasus-X pads to its block only `if seq_len % block_size`: padded first (the same patch as Longformer's), its
    encoder returns upstream's states on every length, padded or not."""
    from transformers import PegasusXConfig, PegasusXModel

    from hub_export.patches.modeling import symbolic_sizes

    model = _tiny(
        PegasusXConfig, PegasusXModel, vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, block_size=4,
        num_global_tokens=2, max_position_embeddings=40,
    )  # fmt: skip
    encoder = model.get_encoder()
    with torch.no_grad():
        for length in (6, 8, 9):
            x = _ids(2, length)
            x["attention_mask"][1, :2] = 0
            want = encoder(**x).last_hidden_state
            with symbolic_sizes(model) as applied:
                got = encoder(**x).last_hidden_state
            assert applied == 1 and got.is_contiguous()
            torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_minimax_lightning_attention_keeps_the_sequence_dynamic() -> None:
    """MiniMax's lightning attention loops over blocks of ``block_size`` tokens in Python (bounded to the traced
    block count before): traced as one loop over zero-padded blocks, the export takes other block counts with
    eager's numbers, and the state a prompt leaves in the cache is upstream's, bit for bit."""
    from transformers import MiniMaxConfig
    from transformers.models.minimax.modeling_minimax import MiniMaxCache, MiniMaxLightningAttention

    config = MiniMaxConfig(hidden_size=16, num_attention_heads=2, head_dim=8, num_hidden_layers=2, block_size=4)

    class Lightning(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.embed = torch.nn.Embedding(64, 16)
            self.attention = MiniMaxLightningAttention(config, layer_idx=1)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, cache: Any = None) -> dict:
            hidden = self.embed(input_ids)
            return {"logits": self.attention(hidden, None, attention_mask, past_key_values=cache)[0]}

    model = Lightning().eval()
    original = MiniMaxLightningAttention.forward
    padded = _ids(2, 6) | {"attention_mask": torch.tensor([[0, 0, 1, 1, 1, 1], [1] * 6])}
    dims = _export_and_compare(model, _ids(2, 7), [_ids(3, 11), _ids(2, 4), padded])  # 2 blocks; 3, 1 and 2
    assert dims["sequence"].max is None
    assert MiniMaxLightningAttention.forward is original
    for inputs in (_ids(2, 7), _ids(1, 8), padded):  # a prompt's state: the last block partial, whole, masked
        want, got = MiniMaxCache(), MiniMaxCache()
        with torch.no_grad():
            model(**inputs, cache=want)
            with symbolic_sizes(model):
                model(**inputs, cache=got)
        torch.testing.assert_close(got.linear_cache[1], want.linear_cache[1], rtol=0, atol=0)


def test_canine_local_attention_keeps_the_sequence_dynamic() -> None:
    """CANINE's local attention loops over chunks of the sequence in Python (pinned before): one attention with a
    window mask, its export takes other lengths with eager's numbers; with the first position attending to all and
    every window to the first key (upstream's other chunk layouts) it matches eager too."""
    from transformers import CanineConfig
    from transformers.models.canine.modeling_canine import CanineAttention

    config = CanineConfig(hidden_size=16, num_attention_heads=2, intermediate_size=32)
    windows = {"attend_from_chunk_width": 4, "attend_from_chunk_stride": 4, "attend_to_chunk_stride": 4}

    class Local(torch.nn.Module):
        def __init__(self, **flags: bool) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.embed = torch.nn.Embedding(64, 16)
            self.attention = CanineAttention(config, local=True, attend_to_chunk_width=6, **windows, **flags)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict:
            mask = attention_mask[:, None, :].expand(-1, input_ids.shape[1], -1).float()
            return {"logits": self.attention(self.embed(input_ids), mask)[0]}

    original = CanineAttention.forward
    padded = _ids(2, 8) | {"attention_mask": torch.tensor([[1, 1, 1, 0, 0, 0, 0, 0], [1] * 8])}  # a padded window
    dims = _export_and_compare(Local().eval(), _ids(2, 7), [_ids(3, 11), _ids(2, 3), padded])
    assert dims["sequence"].max is None
    assert CanineAttention.forward is original
    flags = {"first_position_attends_to_all": True, "always_attend_to_first_position": True}
    model = Local(**flags).eval()
    for inputs in (_ids(2, 7), padded):
        with torch.no_grad():
            want = model(**inputs)["logits"]
            with symbolic_sizes(model):
                torch.testing.assert_close(model(**inputs)["logits"], want, rtol=0, atol=1e-6)


def test_canine_downsampled_mask_keeps_the_sequence_dynamic() -> None:
    """CANINE pools its character mask with MaxPool1d, whose output size is computed on the traced length (pinned
    before): the strided maximum traces with the length symbolic and gives upstream's mask at other lengths."""
    from transformers import CanineConfig, CanineModel

    config = CanineConfig(hidden_size=16, num_attention_heads=2, intermediate_size=32, num_hidden_layers=1)
    model = seeded(CanineModel, config)

    class Pool(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.canine = model

        def forward(self, mask: torch.Tensor) -> torch.Tensor:
            return self.canine._downsample_attention_mask(mask, config.downsampling_rate)

    def mask(length: int) -> torch.Tensor:
        return (torch.arange(length)[None, :] < torch.tensor([[length], [length // 2]])).long()

    with symbolic_sizes(model):
        program = torch.export.export(Pool(), (mask(12),), dynamic_shapes=({1: Dim.AUTO},))
    for length in (9, 12, 19):  # two molecules or more (torch guards a derived size of 1)
        want = model._downsample_attention_mask(mask(length), config.downsampling_rate)
        torch.testing.assert_close(program.module()(mask(length)), want, rtol=0, atol=0)
