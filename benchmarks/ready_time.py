"""Time to a ready model: a fresh process imports hub_export, loads an export and generates, per source tree.

    python benchmarks/ready_time.py SPEED_EXPORTS/qwen2-0.5b/hub-onnx-int4 --trees OLD_CHECKOUT . [--rounds 3]

The folder is an export made by ``benchmarks/generation.py --compare --workdir SPEED_EXPORTS`` (its prompt is
``prompt.json`` in the folder above). Each round starts one process per source tree (``PYTHONPATH``), the order
alternating between rounds; a process times, from before ``import torch``: ``ExportedModel.from_pretrained`` (load),
then one greedy ``generate()`` of ``--new-tokens`` (ready: what ``generation.py``'s "ready" column counts), in wall
seconds and in CPU seconds of the process (all its threads: the figure a loaded machine moves least), and counts the
modules imported. It prints each run, the medians and the paired per-round ratios against the first tree, the load
average and versions.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

_CHILD = r"""
import json, os, resource, sys, time
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
wall0, cpu0 = time.perf_counter(), cpu()
import torch
from hub_export import ExportedModel
folder = sys.argv[1]
model = ExportedModel.from_pretrained(folder)
wall1, cpu1 = time.perf_counter(), cpu()
ids = torch.tensor(json.load(open(os.path.join(os.path.dirname(folder.rstrip("/")), "prompt.json")))["input_ids"])
new = int(sys.argv[2])
model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new)
wall2, cpu2 = time.perf_counter(), cpu()
print(json.dumps({"load_s": wall1 - wall0, "load_cpu_s": cpu1 - cpu0, "ready_s": wall2 - wall0,
                  "ready_cpu_s": cpu2 - cpu0, "modules": len(sys.modules), "load": os.getloadavg()[0]}))
"""
_FIELDS = ("load_s", "load_cpu_s", "ready_s", "ready_cpu_s", "modules")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--trees", nargs="+", type=Path, default=[Path(__file__).resolve().parents[1]])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()

    trees = [str(t.resolve()) for t in args.trees]
    runs: dict[str, list[dict[str, float]]] = {t: [] for t in trees}
    print(f"load average before: {os.getloadavg()[0]:.1f}", flush=True)
    for index in range(args.rounds):
        for tree in trees if index % 2 == 0 else trees[::-1]:
            env = dict(os.environ, PYTHONPATH=tree, HF_HUB_DISABLE_TELEMETRY="1")
            command = [sys.executable, "-c", _CHILD, str(args.folder), str(args.new_tokens)]
            done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            if done.returncode or not lines:
                raise SystemExit(f"{tree}: failed ({done.stderr.strip()[-400:]})")
            runs[tree].append(json.loads(lines[-1]))
            print(f"round {index + 1} {tree}: {lines[-1]}", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    first = trees[0]
    for tree in trees:
        medians = {f: round(statistics.median(r[f] for r in runs[tree]), 2) for f in _FIELDS}
        ratios = {
            f: [round(a[f] / b[f], 2) for a, b in zip(runs[tree], runs[first])] for f in ("ready_s", "ready_cpu_s")
        }
        print(f"{tree}: medians {medians}; per-round ratios to {first}: {ratios}")
    import onnxruntime
    import torch
    import transformers

    print(
        f"python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}, "
        f"onnxruntime {onnxruntime.__version__}; {os.cpu_count()} CPUs"
    )


if __name__ == "__main__":
    main()
