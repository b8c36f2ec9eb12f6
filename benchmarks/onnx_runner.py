"""ONNX runner overhead: ``ExportedModel.__call__`` vs a raw ``InferenceSession.run`` vs eager PyTorch.

Not a test. For a tiny Llama and a small (~60M parameters) Llama built from a ``LlamaConfig`` with random
weights, at batch 1 / sequence 128, it exports with ``OnnxConfig(dynamic=True)``, saves, loads with
``ExportedModel.from_pretrained`` and measures in one run the median latency of:

* eager: ``model(**inputs)`` under ``torch.no_grad()``;
* raw ORT: ``session.run(None, feed)`` on the very session the export's runner holds, with numpy inputs made once;
* ExportedModel: ``exported(**inputs)`` (validation, torch <-> numpy, rebuilding ``CausalLMOutputWithPast`` and its
  ``DynamicCache``).

Raw and ExportedModel calls alternate (first one, then the other), ``--iters`` times each, so a busy neighbour slows both alike (eager runs in
its own block: torch's and ORT's thread pools would fight over the cores). The wrapper's overhead is given both as
the paired median ratio ExportedModel / raw and as the wrapper's own work alone (``exported(**inputs)`` with the
session answering from a cache), which noise cannot inflate.

Prints a markdown table with the ratios. Usage::

    python benchmarks/onnx_runner.py [--iters 30]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from hub_export import ExportedModel, OnnxConfig, OnnxExporter

BATCH, SEQUENCE = 1, 128


def _models() -> dict[str, Any]:
    from transformers import LlamaConfig

    common = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    return {
        "tiny Llama": LlamaConfig(
            vocab_size=96,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            **common,
        ),
        "small Llama": LlamaConfig(
            vocab_size=32000,
            hidden_size=512,
            intermediate_size=1536,
            num_hidden_layers=8,
            num_attention_heads=8,
            num_key_value_heads=8,
            max_position_embeddings=256,
            **common,
        ),
    }


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


class _CachedSession:
    """Stands in for the runner's session: returns outputs computed once, so only the wrapper's own work is timed."""

    def __init__(self, session: Any, outputs: list[Any]) -> None:
        self._session, self._outputs = session, outputs

    def run(self, names: Any, feed: Any) -> list[Any]:
        return self._outputs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


def bench(name: str, config: Any, iters: int, workdir: Path) -> dict[str, Any]:
    """Export, save, load one model and time the three ways of running it, call by call in turn."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    gen = torch.Generator().manual_seed(0)
    inputs = {
        "input_ids": torch.randint(3, config.vocab_size, (BATCH, SEQUENCE), generator=gen),
        "attention_mask": torch.ones(BATCH, SEQUENCE, dtype=torch.int64),
    }
    exported = OnnxExporter().export(model, inputs, config=OnnxConfig(dynamic=True))
    folder = exported.save_pretrained(workdir / name.replace(" ", "_"))
    exported = ExportedModel.from_pretrained(folder)
    runner = exported.runners["model"]
    session = runner.session
    feed = {k: v.numpy() for k, v in inputs.items()}
    with torch.no_grad():
        expected = model(**inputs).logits

    def eager() -> Any:
        with torch.no_grad():
            return model(**inputs)

    runs = {"eager": eager, "raw": lambda: session.run(None, feed), "wrapper": lambda: exported(**inputs)}
    for fn in runs.values():  # warm-up
        for _ in range(3):
            fn()
    samples: dict[str, list[float]] = {k: [] for k in runs}
    # eager apart (torch's and ORT's thread pools would fight over the cores), raw and wrapper call by call in turn
    samples["eager"] = [_timed(eager) for _ in range(iters)]
    for i in range(iters):  # alternate which goes first, so neither always runs right after the other
        for key in ("raw", "wrapper") if i % 2 == 0 else ("wrapper", "raw"):
            samples[key].append(_timed(runs[key]))
    result: dict[str, Any] = {k: statistics.median(v) for k, v in samples.items()}
    result["paired"] = statistics.median(w / r for w, r in zip(samples["wrapper"], samples["raw"]))
    # the wrapper's own cost, without the session's: validation, torch <-> numpy, rebuilding the ModelOutput
    runner.session = _CachedSession(session, session.run(runner._outputs, feed))
    result["own_us"] = statistics.median(_timed(lambda: exported(**inputs)) for _ in range(200)) * 1000
    runner.session = session
    result["params"] = sum(p.numel() for p in model.parameters())
    result["max_abs_diff"] = float((exported(**inputs).logits - expected).abs().max())
    return result


def main() -> None:
    """Run the benchmark and print the markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=30, help="calls of each kind, in turn")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, config in _models().items():
            rows.append((name, bench(name, config, args.iters, Path(tmp))))
    print(
        f"\nbatch {BATCH}, sequence {SEQUENCE}, torch {torch.__version__}, threads {torch.get_num_threads()}; "
        f"median ms over {args.iters} calls of each\n"
    )
    print(
        "| model | params | eager PyTorch (ms) | raw ORT session.run (ms) | ExportedModel (ms) | ExportedModel / raw "
        "(paired median) | wrapper's own work | own work / raw | eager / ExportedModel | max abs diff |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in rows:
        print(
            f"| {name} | {r['params'] / 1e6:.2f}M | {r['eager']:.2f} | {r['raw']:.2f} | {r['wrapper']:.2f} | "
            f"{r['paired']:.3f}x | {r['own_us']:.0f} µs | {r['own_us'] / 10 / r['raw']:.2f}% | "
            f"{r['eager'] / r['wrapper']:.2f}x | {r['max_abs_diff']:.1e} |"
        )


if __name__ == "__main__":
    main()
