"""hub_export.patches.graph: rewrites for the formats that re-run ``run_decompositions`` while lowering."""

from __future__ import annotations

import warnings

import torch
from tiny_models import seeded, text_inputs

from hub_export import OpenVINOConfig, OpenVINOExporter


def test_a_view_of_the_transposed_attention_output_converts_to_openvino() -> None:
    """AFMoE views its attention output (``output.view(*input_shape, -1)``): traced, the transpose before it is
    contiguous (the CPU kernel's layout) and the view legal; OpenVINO's ``run_decompositions`` replaces the kernel by
    math of the default layout and the view failed ("Cannot view a tensor with shape ...", pytorch/pytorch#141107).
    As a reshape it converts, and the export runs another batch and length. One (dense) layer: every layer's
    attention views its output the same way."""
    from transformers import AfmoeConfig, AfmoeForCausalLM

    config = AfmoeConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=8,
        num_experts=4,
        num_experts_per_tok=2,
        layer_types=["full_attention"],
        sliding_window=4,
    )
    model = seeded(AfmoeForCausalLM, config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exported = OpenVINOExporter().export(model, text_inputs(2, 7), config=OpenVINOConfig(dynamic=True))
    inputs = text_inputs(3, 11, seed=1)
    with torch.no_grad():
        got, expected = exported(**inputs), model(**inputs)
    assert got.logits.shape == expected.logits.shape == (3, 11, 96)
