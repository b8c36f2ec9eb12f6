"""``generate()`` on one torch thread against torch's thread pool, on one export, in one process, alternating.

    python benchmarks/loop_threads.py SPEED_EXPORTS/qwen2-0.5b/hub-onnx-int4 [--new-tokens 32] [--pairs 4]

The folder is an export made by ``benchmarks/generation.py --compare --workdir SPEED_EXPORTS`` (its prompt is
``prompt.json`` in the folder above). Each pair runs one ``generate()`` as the library does (the loop's torch work on
one thread, see ``hub_export/generation/_threads.py``) and one with torch's own thread count, the order alternating;
it prints the tokens/s of each, the paired ratios, whether the tokens are the same, the load average and versions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--pairs", type=int, default=4)
    args = parser.parse_args()

    import torch
    import transformers

    import hub_export.generation.mixin as mixin
    from hub_export import ExportedModel

    ids = json.loads((args.folder.parent / "prompt.json").read_text())["input_ids"][0]
    model = ExportedModel.from_pretrained(args.folder)
    tensor = torch.tensor([ids])
    one_thread = mixin.loop_threads

    def generate() -> tuple[float, list[int]]:
        start = time.perf_counter()
        out = model.generate(
            input_ids=tensor,
            attention_mask=torch.ones_like(tensor),
            max_new_tokens=args.new_tokens,
            min_new_tokens=args.new_tokens,
        )
        return args.new_tokens / (time.perf_counter() - start), out[0, len(ids) :].tolist()

    print(f"hardware: {platform.processor() or platform.machine()}, {len(os.sched_getaffinity(0))} cores available")
    print(f"versions: torch {torch.__version__}, transformers {transformers.__version__}, format {model.export_format}")
    print(f"torch threads: {torch.get_num_threads()}, load average before: {os.getloadavg()[0]:.1f}")
    generate()  # warm-up
    speeds: dict[str, list[float]] = {"one thread": [], "torch pool": []}
    tokens: dict[str, list[int]] = {}
    for pair in range(args.pairs):
        order = ["one thread", "torch pool"] if pair % 2 == 0 else ["torch pool", "one thread"]
        for name in order:
            mixin.loop_threads = one_thread if name == "one thread" else (lambda _: contextlib.nullcontext())
            speeds[name].append(0.0)
            speeds[name][-1], tokens[name] = generate()
    mixin.loop_threads = one_thread
    ratios = [a / b for a, b in zip(speeds["one thread"], speeds["torch pool"])]
    for name, values in speeds.items():
        print(f"{name}: tok/s {', '.join(f'{v:.2f}' for v in values)}")
    print(
        f"one thread / torch pool, paired: {', '.join(f'{r:.2f}' for r in ratios)}; median "
        f"{statistics.median(ratios):.2f}x; same tokens: {tokens['one thread'] == tokens['torch pool']}; "
        f"load average after: {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
