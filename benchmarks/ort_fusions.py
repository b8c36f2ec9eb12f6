"""ONNX Runtime fusions: fused (``OnnxConfig(ort_fusions="cpu")``) vs unfused ONNX vs eager PyTorch latency on CPU.

Not a test. A ~50M-parameter Llama built from a ``LlamaConfig`` with random weights (head size 64, so ORT's CPU
``GroupQueryAttention`` rotates inside) is exported twice with ``dynamic=True`` on two forward calls: prefill
(batch 1, 128 tokens, no cache, logits of every position) and one decode step (1 token on a 128-token
``DynamicCache``). Each variant runs through ``ExportedModel.__call__``; fused and unfused calls alternate call by
call so a busy neighbour slows both alike (decode runs 5x the iterations), eager runs in its own block. The ratio
is given of the medians and of the best calls (the least disturbed). Prints the median latency (ms) and the
``com.microsoft`` ops of the fused graph, then ONNX Runtime's profile of both graphs: the share of kernel time in
``MatMul`` (the weight products, which no fusion removes) bounds the speed-up any fusion can give,
``unfused total / unfused MatMul``. Usage::

    python benchmarks/ort_fusions.py [--iters 20]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from hub_export import OnnxConfig, OnnxExporter

SEQUENCE = 128


def _model() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=24000,
        hidden_size=512,
        intermediate_size=1408,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=512,
    )
    return LlamaForCausalLM(config).eval()


def prefill_and_decode_inputs(model: Any, sequence: int = SEQUENCE) -> dict[str, Callable[[], dict[str, Any]]]:
    """``{"prefill": make, "decode": make}``: a ``sequence``-token prompt, and one token against its cache (each
    call of ``make`` returns fresh kwargs; benchmarks/ort_moe.py uses it too)."""
    from transformers import DynamicCache

    ids = torch.randint(3, model.config.vocab_size, (1, sequence + 1))
    prefill = {"input_ids": ids[:, :sequence], "attention_mask": torch.ones(1, sequence, dtype=torch.int64)}
    with torch.no_grad():
        cache = model(**prefill, use_cache=True).past_key_values
    layers = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]

    def decode() -> dict[str, Any]:  # a fresh cache per call: the model appends to the one it is given
        fresh = DynamicCache(config=model.config)
        for index, (key, value) in enumerate(layers):
            fresh.update(key, value, index)
        mask = torch.ones(1, sequence + 1, dtype=torch.int64)
        return {"input_ids": ids[:, sequence:], "attention_mask": mask, "past_key_values": fresh}

    return {"prefill": lambda: dict(prefill), "decode": decode}


def _median_ms(fn: Callable[[], Any], iters: int) -> float:
    fn()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _paired_ms(fns: dict[str, Callable[[], Any]], iters: int) -> dict[str, list[float]]:
    """Latencies (ms) of each function, calls interleaved (the order flips every round) so load hits all alike."""
    names = list(fns)
    for name in names:
        fns[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(iters):
        for name in names if round_ % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            fns[name]()
            times[name].append((time.perf_counter() - start) * 1e3)
    return times


def kernel_ms(
    components: dict[str, Any], make: Callable[[], dict[str, Any]], iters: int
) -> dict[str, dict[str, float]]:
    """Kernel time per run (ms) by op type of each component, from ONNX Runtime's profiler (runs interleaved; one
    warm-up run counted in; benchmarks/ort_moe.py uses it too)."""
    import json
    import os
    import tempfile

    import onnxruntime as ort

    from hub_export.backends.onnx import OnnxRunner

    runners = {}
    for name, component in components.items():
        options = ort.SessionOptions()
        options.intra_op_num_threads = len(os.sched_getaffinity(0))
        options.log_severity_level = 3
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tempfile.mkdtemp(), name)
        runners[name] = OnnxRunner.from_program(component.program, component.metadata, session_options=options)
    for _ in range(iters + 1):
        for runner in runners.values():
            runner(**make())
    totals: dict[str, dict[str, float]] = {}
    for name, runner in runners.items():
        with open(runner.session.end_profiling()) as handle:
            events = json.load(handle)
        totals[name] = {}
        for event in events:
            if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
                op = event["args"]["op_name"]
                totals[name][op] = totals[name].get(op, 0.0) + event["dur"] / 1e3 / (iters + 1)
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    model = _model()
    params = sum(p.numel() for p in model.parameters()) / 1e6
    rows, profiles = [], []
    for stage, make in prefill_and_decode_inputs(model).items():
        unfused = OnnxExporter().export(model, make(), config=OnnxConfig(dynamic=True))
        fused = OnnxExporter().export(model, make(), config=OnnxConfig(dynamic=True, ort_fusions="cpu"))
        contrib = fused.components["model"].metadata.extra.get("contrib_ops", [])
        iters = args.iters * (5 if stage == "decode" else 1)
        times = _paired_ms({"unfused": lambda: unfused(**make()), "fused": lambda: fused(**make())}, iters)
        with torch.no_grad():
            eager = _median_ms(lambda: model(**make()), args.iters)
            expected = model(**make()).logits
        diff = float((fused(**make()).logits - expected).abs().max())
        u, f = statistics.median(times["unfused"]), statistics.median(times["fused"])
        best = min(times["unfused"]) / min(times["fused"])
        rows.append((stage, eager, u, f, u / f, best, diff, ", ".join(contrib)))
        graphs = {"unfused": unfused.components["model"], "fused": fused.components["model"]}
        for name, kernels in kernel_ms(graphs, make, max(iters // 2, 3)).items():
            matmul = sum(t for op, t in kernels.items() if op in _MATMULS)
            top = sorted(kernels.items(), key=lambda item: -item[1])[:4]
            profiles.append((stage, name, sum(kernels.values()), matmul, ", ".join(f"{op} {t:.1f}" for op, t in top)))
    print(f"Llama {params:.0f}M parameters, batch 1, sequence {SEQUENCE}, torch threads {torch.get_num_threads()}\n")
    print(
        "| stage | eager ms | ONNX unfused ms | ONNX fused ms | unfused/fused (median) | (best) | fused max abs diff | contrib ops |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for stage, eager, u, f, ratio, best, diff, contrib in rows:
        print(f"| {stage} | {eager:.1f} | {u:.1f} | {f:.1f} | {ratio:.2f}x | {best:.2f}x | {diff:.1e} | {contrib} |")
    print("\nONNX Runtime profile (kernel ms per run):\n")
    print("| stage | graph | kernels ms | MatMul ms | MatMul share | top ops (ms) |")
    print("|---|---|---|---|---|---|")
    for stage, name, total, matmul, top in profiles:
        print(f"| {stage} | {name} | {total:.1f} | {matmul:.1f} | {matmul / total:.0%} | {top} |")
    for stage, name, total, matmul, _ in profiles:
        if name == "unfused":
            print(
                f"\n{stage}: no fusion can beat unfused/fused = {total / matmul:.2f}x (kernels / MatMul kernels)",
                end="",
            )
    print()


#: Ops holding the weight products (their time is what fusions leave).
_MATMULS = {"MatMul", "FusedMatMul", "Gemm"}


if __name__ == "__main__":
    main()
