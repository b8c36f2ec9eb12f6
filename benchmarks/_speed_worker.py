"""One tool in one process, for ``benchmarks/generation.py --compare`` (not a user entry point).

    python benchmarks/_speed_worker.py prepare TOOL SIZE_DIR OUT
    python benchmarks/_speed_worker.py run TOOL SIZE_DIR OUT --new-tokens 64 --repeats 3

``run`` loads the tool, generates once to warm up, then ``--repeats`` times, and prints one JSON line: tokens/s of
each timed run (wall clock), CPU seconds per token of this process (all its threads), the seconds to a ready model
(load and warm-up), the new token ids, and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _speed_tools import load, prepare, prompt  # noqa: E402


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["prepare", "run"])
    parser.add_argument("tool")
    parser.add_argument("size_dir", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.command == "prepare":
        start = time.perf_counter()
        prepare(args.tool, args.size_dir, args.out)
        print(json.dumps({"tool": args.tool, "prepare_s": time.perf_counter() - start}))
        return
    ids = prompt(args.size_dir)["input_ids"][0]
    start = time.perf_counter()
    generate = load(args.tool, args.size_dir, args.out)
    new = generate(ids, args.new_tokens)
    ready = time.perf_counter() - start
    speeds, cpu = [], 0.0
    for _ in range(args.repeats):
        cpu_start, wall_start = _cpu_seconds(), time.perf_counter()
        new = generate(ids, args.new_tokens)
        wall = time.perf_counter() - wall_start
        cpu += _cpu_seconds() - cpu_start
        speeds.append(len(new) / wall)
    result = {
        "tool": args.tool,
        "tok_s": speeds,
        "cpu_ms_per_token": 1000 * cpu / max(1, args.repeats * len(new)),
        "ready_s": ready,
        "ids": new,
        "load": os.getloadavg()[0],
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
