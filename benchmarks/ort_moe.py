"""Mixture of experts on ONNX Runtime's CPU provider: ``MoE`` (``ort_fusions="cuda"``) vs the per-expert loop.

Not a test. Each Mixtral (random weights) is exported twice with ``dynamic=True``: ``ort_fusions="cpu"`` (the
experts stay the per-expert loop of standard ops) and ``ort_fusions="cuda"`` (one ``com.microsoft::MoE`` per layer);
both get the same attention and normalization fusions, so the ratio is the experts' alone. Stages: prefill (batch 1,
``--sequence`` tokens, no cache) and one decode step (1 token on that cache). Calls alternate between the two graphs
(the order flips every round) so a busy neighbour slows both alike. Prints median and best latencies, their ratio,
the max abs diff of each graph's logits against eager, and ONNX Runtime's kernel time per run of each graph (they
differ only in the experts; profiled runs interleaved too) and of its ``MoE`` nodes. The cuda graph runs ``MoE`` on
ORT's CPU kernel here: this measures that kernel, not CUDA's. Usage::

    python benchmarks/ort_moe.py [--iters 20] [--sequence 128]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from hub_export import OnnxConfig, OnnxExporter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ort_fusions import kernel_ms, prefill_and_decode_inputs  # noqa: E402

MODELS = {  # name -> MixtralConfig kwargs
    "tiny (hidden 32, 4 experts, top-2)": dict(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
    ),
    "moderate (hidden 512, 8 experts, top-2)": dict(
        vocab_size=1024,
        hidden_size=512,
        intermediate_size=1024,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        num_local_experts=8,
        num_experts_per_tok=2,
    ),
}


def _model(config: dict[str, Any]) -> Any:
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    return MixtralForCausalLM(MixtralConfig(max_position_embeddings=1024, **config)).eval()


def _paired_ms(fns: dict[str, Callable[[], Any]], iters: int) -> dict[str, list[float]]:
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for round_ in range(iters):
        for name in list(fns) if round_ % 2 == 0 else list(fns)[::-1]:
            start = time.perf_counter()
            fns[name]()
            times[name].append((time.perf_counter() - start) * 1e3)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--sequence", type=int, default=128)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    rows = []
    for name, config in MODELS.items():
        model = _model(config)
        for stage, make in prefill_and_decode_inputs(model, args.sequence).items():
            graphs = {
                provider: OnnxExporter().export(model, make(), config=OnnxConfig(dynamic=True, ort_fusions=provider))
                for provider in ("cpu", "cuda")
            }
            with torch.no_grad():
                expected = model(**make()).logits
            diffs = {p: float((g(**make()).logits - expected).abs().max()) for p, g in graphs.items()}
            iters = args.iters * (5 if stage == "decode" else 1)
            times = _paired_ms({p: (lambda g=g: g(**make())) for p, g in graphs.items()}, iters)
            loop, moe = (statistics.median(times[p]) for p in ("cpu", "cuda"))
            best = min(times["cpu"]) / min(times["cuda"])
            kernels = kernel_ms({p: g.components["model"] for p, g in graphs.items()}, make, max(iters // 2, 3))
            total = {p: sum(k.values()) for p, k in kernels.items()}
            rows.append(
                (
                    name,
                    stage,
                    loop,
                    moe,
                    loop / moe,
                    best,
                    diffs["cpu"],
                    diffs["cuda"],
                    total["cpu"],
                    total["cuda"],
                    kernels["cuda"].get("MoE", 0.0),
                )
            )
    print(f"batch 1, sequence {args.sequence}, ORT CPU provider, torch threads {torch.get_num_threads()}\n")
    print(
        "| model | stage | loop ms | MoE ms | loop/MoE (median) | (best) | loop diff | MoE diff | kernels ms, loop |"
        " kernels ms, MoE | of which MoE |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, stage, loop, moe, ratio, best, d_loop, d_moe, k_loop, k_moe, k_node in rows:
        print(
            f"| {name} | {stage} | {loop:.2f} | {moe:.2f} | {ratio:.2f}x | {best:.2f}x | {d_loop:.1e} | {d_moe:.1e} "
            f"| {k_loop:.2f} | {k_moe:.2f} | {k_node:.2f} |"
        )


if __name__ == "__main__":
    main()
