"""ONNX Runtime fusions: fused (``OnnxConfig(ort_fusions="cpu")``) vs unfused ONNX vs eager PyTorch latency on CPU.

Not a test. A ~50M-parameter Llama built from a ``LlamaConfig`` with random weights is exported twice with
``dynamic=True`` on two forward calls: prefill (batch 1, 128 tokens, no cache) and one decode step (1 token on a
128-token ``DynamicCache``). Each variant runs through ``ExportedModel.__call__``; fused and unfused calls
alternate so a busy neighbour slows both alike, eager runs in its own block. Prints the median latency (ms) and
the ``com.microsoft`` ops of the fused graph. Usage::

    python benchmarks/ort_fusions.py [--iters 20]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from typing import Any, Callable

import torch

from hub_export import OnnxConfig, OnnxExporter

SEQUENCE = 128


def _model() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=24000, hidden_size=512, intermediate_size=1408, num_hidden_layers=8, num_attention_heads=8,
        num_key_value_heads=4, max_position_embeddings=512,
    )
    return LlamaForCausalLM(config).eval()


def _inputs(model: Any) -> dict[str, Callable[[], dict[str, Any]]]:
    ids = torch.randint(3, model.config.vocab_size, (1, SEQUENCE + 1))
    prefill = {"input_ids": ids[:, :SEQUENCE], "attention_mask": torch.ones(1, SEQUENCE, dtype=torch.int64)}
    with torch.no_grad():
        cache = model(**prefill, use_cache=True).past_key_values
    layers = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]

    def decode() -> dict[str, Any]:  # a fresh cache per call: the model appends to the one it is given
        from transformers import DynamicCache

        fresh = DynamicCache(config=model.config)
        for index, (key, value) in enumerate(layers):
            fresh.update(key, value, index)
        return {"input_ids": ids[:, SEQUENCE:], "attention_mask": torch.ones(1, SEQUENCE + 1, dtype=torch.int64),
                "past_key_values": fresh}

    return {"prefill": lambda: dict(prefill), "decode": decode}


def _median_ms(fn: Callable[[], Any], iters: int) -> float:
    fn()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    model = _model()
    params = sum(p.numel() for p in model.parameters()) / 1e6
    rows = []
    for stage, make in _inputs(model).items():
        unfused = OnnxExporter().export(model, make(), config=OnnxConfig(dynamic=True))
        fused = OnnxExporter().export(model, make(), config=OnnxConfig(dynamic=True, ort_fusions="cpu"))
        contrib = fused.components["model"].metadata.extra.get("contrib_ops", [])
        pair: dict[str, list[float]] = {"unfused": [], "fused": []}
        for _ in range(3):  # alternate blocks
            pair["unfused"].append(_median_ms(lambda: unfused(**make()), args.iters // 3 + 1))
            pair["fused"].append(_median_ms(lambda: fused(**make()), args.iters // 3 + 1))
        with torch.no_grad():
            eager = _median_ms(lambda: model(**make()), args.iters)
            expected = model(**make()).logits
        diff = float((fused(**make()).logits - expected).abs().max())
        u, f = statistics.median(pair["unfused"]), statistics.median(pair["fused"])
        rows.append((stage, eager, u, f, u / f, diff, ", ".join(contrib)))
    print(f"Llama {params:.0f}M parameters, batch 1, sequence {SEQUENCE}, torch threads {torch.get_num_threads()}\n")
    print("| stage | eager ms | ONNX unfused ms | ONNX fused ms | unfused/fused | fused max abs diff | contrib ops |")
    print("|---|---|---|---|---|---|---|")
    for stage, eager, u, f, ratio, diff, contrib in rows:
        print(f"| {stage} | {eager:.1f} | {u:.1f} | {f:.1f} | {ratio:.2f}x | {diff:.1e} | {contrib} |")


if __name__ == "__main__":
    main()
