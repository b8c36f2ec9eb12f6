"""Tokens/s of ``ExportedModel.generate`` per backend vs eager ``model.generate``, measured in one run.

A small random-weight Llama built from a config (~50M parameters, fp32), prompt 64, 64 new tokens, batch 1,
greedy. Also prints the memory-bandwidth bound: weight bytes / measured read bandwidth, i.e. the best a decode
step can do when it must read every weight once.

    python benchmarks/generation.py [--formats dynamo onnx openvino executorch] [--new-tokens 64] [--repeats 3]

``--compare-loop REV`` also times, on the same loaded export and interleaved with ``generate()`` (transformers'
``GenerationMixin`` since it replaced the hand-written loop), the ``generate`` function of
``hub_export/generation/loop.py`` at git revision ``REV`` (e.g. the commit before the switch): the per-step overhead
of ``GenerationMixin`` as a tokens/s ratio that load on the machine affects alike.

With ``--compare`` it measures our exports beside the runtime-specific tools (onnxruntime-genai's model builder,
fp32 and int4; optimum-intel, fp32, int8 and int4), each tool in its own process, interleaved over rounds; with
``--contention`` two busy background processes share the cores meanwhile (see ``benchmarks/_speed_compare.py``)::

    python benchmarks/generation.py --compare [--contention] [--sizes small qwen2-0.5b llama-1b] \
        [--peer-python PEERS_VENV/bin/python] [--workdir DIR] [--rounds 3] [--tools hub-onnx genai ...]

The peers pin other transformers versions, so they live in an environment of their own (``--peer-python``; a tool
whose package does not import there is skipped with the reason). ``--workdir`` keeps the exports, so a second run
(say with ``--contention``) measures without exporting again.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch


def small_llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    return LlamaForCausalLM(config).eval()


def read_bandwidth(nbytes: int = 512 * 1024 * 1024, repeats: int = 5) -> float:
    """Bytes/s of summing a large float32 buffer (a read-bound kernel)."""
    buffer = torch.ones(nbytes // 4, dtype=torch.float32)
    buffer.sum()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        buffer.sum()
        best = min(best, time.perf_counter() - start)
    return nbytes / best


def timed(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def old_loop(revision: str) -> object:
    """``generate`` of ``hub_export/generation/loop.py`` at git ``revision`` (its package imports made absolute)."""
    root = Path(__file__).resolve().parents[1]
    source = subprocess.run(
        ["git", "show", f"{revision}:hub_export/generation/loop.py"],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    source = source.replace("from ..errors import", "from hub_export.errors import")
    source = source.replace("from ._prompt import", "from hub_export.generation._prompt import")
    path = Path(tempfile.mkdtemp()) / "hub_export_old_loop.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("hub_export_old_loop", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.generate


def interleaved(first, second, repeats: int) -> tuple[float, float, float, float]:
    """Median wall-clock and CPU seconds (this process, all threads) of ``first`` and ``second``, run alternately
    (each warmed up once): ``(first wall, second wall, first CPU, second CPU)``. On a loaded machine the wall
    clock mostly measures the other jobs; CPU time is what each call costs."""
    first(), second()
    wall: tuple[list[float], list[float]] = ([], [])
    cpu: tuple[list[float], list[float]] = ([], [])
    for i in range(repeats):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        for which in order:
            start, start_cpu = time.perf_counter(), time.process_time()
            (first, second)[which]()
            wall[which].append(time.perf_counter() - start)
            cpu[which].append(time.process_time() - start_cpu)
    return tuple(statistics.median(t) for t in (*wall, *cpu))  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--formats", nargs="+", default=["dynamo", "onnx", "openvino", "executorch"])
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compare-loop", metavar="REV", help="also time loop.py's generate at this git revision")
    parser.add_argument("--compare", action="store_true", help="our exports beside onnxruntime-genai, optimum-intel")
    parser.add_argument("--contention", action="store_true", help="with --compare: two busy processes meanwhile")
    parser.add_argument("--sizes", nargs="+", default=["small"], help="with --compare: small, qwen2-0.5b, llama-1b")
    parser.add_argument("--tools", nargs="+", default=None, help="with --compare: a subset of the tools")
    parser.add_argument("--peer-python", default=os.environ.get("PEER_PYTHON", sys.executable))
    parser.add_argument("--workdir", default=None, help="with --compare: where exports are kept (default: temporary)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--results", default=None, help="with --compare: append each row's runs to this jsonl file")
    args = parser.parse_args()
    if args.compare or args.contention:
        _compare(args)
        return

    from hub_export import ExportedModel
    from hub_export.export.auto import exporter_class

    model = small_llama()
    params = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    gen = torch.Generator().manual_seed(0)
    inputs = {
        "input_ids": torch.randint(3, 32000, (1, args.prompt), generator=gen),
        "attention_mask": torch.ones(1, args.prompt, dtype=torch.int64),
    }
    kwargs = {"max_new_tokens": args.new_tokens, "do_sample": False, "min_new_tokens": args.new_tokens}
    with torch.no_grad():
        eager_ids = model.generate(**inputs, **kwargs)
        eager_s = timed(lambda: model.generate(**inputs, **kwargs), args.repeats)
    rows = [("eager PyTorch", eager_s, True)]
    loops: list[tuple[str, float, float, float, float]] = []
    loop = old_loop(args.compare_loop) if args.compare_loop else None
    for fmt in args.formats:
        exporter = exporter_class(fmt)()
        with tempfile.TemporaryDirectory() as tmp:
            exported = exporter.export_for_generation(model, inputs, config=exporter.config_class(dynamic=True))
            exported.save_pretrained(Path(tmp) / fmt)
            loaded = ExportedModel.from_pretrained(Path(tmp) / fmt)
            ids = loaded.generate(**inputs, max_new_tokens=args.new_tokens)
            same = ids.shape == eager_ids.shape and bool((ids == eager_ids).all())
            run = lambda: loaded.generate(**inputs, max_new_tokens=args.new_tokens)  # noqa: E731
            if loop is not None:
                before = lambda: loop(loaded, **inputs, max_new_tokens=args.new_tokens)  # noqa: E731
                same = same and bool((before() == eager_ids).all())
                old_s, seconds, old_cpu, new_cpu = interleaved(before, run, args.repeats)
                loops.append((fmt, old_s, seconds, old_cpu, new_cpu))
            else:
                seconds = timed(run, args.repeats)
        rows.append((fmt, seconds, same))

    bandwidth = read_bandwidth()
    bound = bandwidth / weight_bytes  # tokens/s if each decode step only had to read every weight once
    print(
        f"small Llama: {params / 1e6:.1f}M params, {weight_bytes / 1e6:.0f} MB fp32; prompt {args.prompt}, "
        f"{args.new_tokens} new tokens, batch 1, greedy; read bandwidth {bandwidth / 1e9:.1f} GB/s"
    )
    import transformers

    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, {os.cpu_count()} CPUs, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print()
    print("| runtime | tokens/s | vs eager | tokens == eager |")
    print("|---|---:|---:|---|")
    for name, seconds, same in rows:
        print(f"| {name} | {args.new_tokens / seconds:.1f} | {eager_s / seconds:.2f}x | {'yes' if same else 'NO'} |")
    print(f"| memory-bandwidth bound (decode only) | {bound:.1f} | {bound / (args.new_tokens / eager_s):.2f}x | |")
    if loops:
        print()
        print(
            f"| runtime | loop.py@{args.compare_loop} tokens/s | GenerationMixin tokens/s | ratio | "
            "CPU ms/token before | CPU ms/token after | CPU ratio |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|")
        n = args.new_tokens
        for name, old_s, new_s, old_cpu, new_cpu in loops:
            print(
                f"| {name} | {n / old_s:.1f} | {n / new_s:.1f} | {old_s / new_s:.3f} | {old_cpu / n * 1e3:.2f} | "
                f"{new_cpu / n * 1e3:.2f} | {old_cpu / new_cpu:.3f} |"
            )


def _compare(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _speed_compare import run
    from _speed_tools import SIZES, TOOLS

    unknown = sorted(set(args.sizes) - set(SIZES)) + sorted(set(args.tools or ()) - set(TOOLS))
    if unknown:
        raise SystemExit(f"unknown size or tool {unknown}; sizes: {list(SIZES)}, tools: {list(TOOLS)}")
    args.tools = args.tools or list(TOOLS)
    if args.workdir is None:
        with tempfile.TemporaryDirectory(prefix="hub_export_speed_") as tmp:
            args.workdir = tmp
            run(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
