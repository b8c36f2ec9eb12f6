"""Byte-flip fuzz of an ExecuTorch export: does a damaged ``.pte`` ever crash the process that loads it?

Each variant flips one byte of ``model.pte`` (XOR 0xFF and XOR 0x01), re-seals ``export.json`` (size and sha256
recomputed, so only the safety checks stand in the way), loads the folder with ``ExportedModel.from_pretrained`` and
calls it once. Variants run in batches in child processes; a child that dies (a crash: a signal or an abort) or
stops answering for ``--timeout`` seconds (a hang) is recorded for the variant it was running and the next child
resumes after it. Outcomes:

* ``refused``: a hub_export error (``UnsafeExportError``, ``IntegrityError``...) at load or call time;
* ``ran``: loaded and called (a flip the program tolerates: a weight, a name, padding);
* ``crashed`` / ``hung``: the process died or stopped;
* ``error``: an exception that is not a hub_export error.

By default the XNNPACK delegate payloads of the program are flipped at every byte and the rest of the file every
``--file-step`` bytes. The base is a tiny model (``--model tiny``: embedding, tanh, linear) or a tiny Llama
(``--model llama``: 2 layers, hidden 32; ``llama-int8``: quantized with XNNPACK's dynamic int8 recipe), exported with
``ExecutorchConfig()``, random weights (``llama-int8`` keeps them in a ``.ptd``: the delegate names its weights there).

    python benchmarks/fuzz_pte.py --model tiny --payload-step 1 --file-step 7

Exits 1 when any variant crashed, hung or raised a non-hub_export error.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _sample(model: str) -> dict[str, Any]:
    import torch

    return {"input_ids": torch.tensor([[1, 5, 9, 3]])}


def build_base(model: str, folder: Path) -> Path:
    """Export the ``model`` base to ``folder`` (ExecuTorch, XNNPACK)."""
    import torch

    from hub_export import ExecutorchConfig, ExecutorchExporter

    torch.manual_seed(0)
    if model == "tiny":

        class Tiny(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.embed = torch.nn.Embedding(64, 32)
                self.head = torch.nn.Linear(32, 64)

            def forward(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
                return {"logits": self.head(torch.tanh(self.embed(input_ids)))}

        net: Any = Tiny().eval()
    else:
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(
            vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64,
        )  # fmt: skip
        net = LlamaForCausalLM(config).eval()
        net.config.use_cache = False
    config = ExecutorchConfig()
    if model == "llama-int8":  # XNNPACK's dynamic int8 recipe: quantized weights, per-token activations
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )

        from hub_export.quantization import PT2EQuantizer

        recipe = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True)
        config = ExecutorchConfig(quantizer=PT2EQuantizer(XNNPACKQuantizer().set_global(recipe)), external_data=True)
    exported = ExecutorchExporter().export(net, _sample(model), config=config)
    return Path(exported.save_pretrained(folder))


def payload_ranges(pte: bytes) -> list[tuple[int, int]]:
    """``(start, end)`` in the file of each XNNPACK delegate payload kept in a segment."""
    import struct

    from hub_export.backends.executorch._flatbuf import Flat

    end = struct.unpack_from("<Q", pte, 16)[0] if pte[8:10] == b"eh" else len(pte)
    base = struct.unpack_from("<Q", pte, 24)[0] if pte[8:10] == b"eh" else 0
    buf = Flat(pte[:end])
    root = buf.root()
    segments = [(buf.scalar(s, 0, "<Q"), buf.scalar(s, 1, "<Q")) for s in buf.tables(root, 4, 1 << 20)]
    ranges = []
    for plan in buf.tables(root, 1, 1 << 20):
        for delegate in buf.tables(plan, 7, 1 << 20):
            processed = buf.child(delegate, 1)
            if buf.string(delegate, 0) == b"XnnpackBackend" and processed and buf.scalar(processed, 0, "<B") == 1:
                offset, size = segments[buf.scalar(processed, 1, "<I")]
                ranges.append((base + offset, base + offset + size))
    return ranges


def _reseal(folder: Path, name: str) -> None:
    manifest = json.loads((folder / "export.json").read_text())
    data = (folder / name).read_bytes()
    for entry in manifest["files"]:
        if entry["path"] == name:
            entry["size"], entry["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    (folder / "export.json").write_text(json.dumps(manifest, indent=1))


def child(base: Path, todo_path: Path, log_path: Path, model: str) -> None:
    """Run the variants of ``todo_path`` in order, appending a start and a result line per variant to the log."""
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))  # a runaway allocation fails instead of swapping
    from hub_export import ExportedModel
    from hub_export.errors import HubExportError

    todo = json.loads(todo_path.read_text())
    work = Path(tempfile.mkdtemp(prefix="work-", dir=todo_path.parent))  # removed with the run, even after a crash
    shutil.copytree(base, work, dirs_exist_ok=True)
    original = (base / "model.pte").read_bytes()
    sample = _sample(model)
    with open(log_path, "a", buffering=1) as log:
        for offset, xor in todo:
            data = bytearray(original)
            if offset >= 0:  # -1: the control, unmodified
                data[offset] ^= xor
            (work / "model.pte").write_bytes(data)
            _reseal(work, "model.pte")
            log.write(json.dumps({"start": [offset, xor]}) + "\n")
            try:
                ExportedModel.from_pretrained(work)(**sample)
                outcome = "ran"
            except HubExportError as exc:
                outcome = f"refused:{type(exc).__name__}"
            except Exception as exc:  # noqa: BLE001 - the point: anything else is a finding
                outcome = f"error:{type(exc).__name__}: {str(exc)[:200]}"
            log.write(json.dumps({"done": [offset, xor], "outcome": outcome}) + "\n")
    shutil.rmtree(work, ignore_errors=True)


def run(base: Path, variants: list[tuple[int, int]], model: str, timeout: float) -> dict[tuple[int, int], str]:
    """Every variant's outcome, children restarted after each crash or hang."""
    results: dict[tuple[int, int], str] = {}
    scratch = Path(tempfile.mkdtemp(prefix="fuzz-pte-run-"))
    todo_path, log_path = scratch / "todo.json", scratch / "log.jsonl"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    while True:
        todo = [v for v in variants if v not in results]
        if not todo:
            break
        todo_path.write_text(json.dumps(todo))
        log_path.write_text("")
        args = [sys.executable, __file__, "--child", str(base), str(todo_path), str(log_path), "--model", model]
        proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seen, last, hung = 0, time.monotonic(), False
        try:
            while proc.poll() is None:
                time.sleep(0.5)
                size = log_path.stat().st_size
                if size != seen:
                    seen, last = size, time.monotonic()
                elif time.monotonic() - last > timeout:
                    hung = True
                    break
        finally:  # a hang, or the run interrupted: the child goes too
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        started = None
        for line in log_path.read_text().splitlines():
            row = json.loads(line)
            if "start" in row:
                started = tuple(row["start"])
            else:
                results[tuple(row["done"])] = row["outcome"]
                started = None
        if started is not None:
            results[started] = "hung" if hung else f"crashed:rc={proc.returncode}"  # type: ignore[index]
        elif proc.returncode != 0 and not [v for v in todo if v in results]:
            raise SystemExit(f"the child failed before its first variant (rc={proc.returncode})")
    shutil.rmtree(scratch, ignore_errors=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=("tiny", "llama", "llama-int8"), default="tiny")
    parser.add_argument("--base", type=Path, help="an exported folder of --model to fuzz (default: export one)")
    parser.add_argument("--payload-step", type=int, default=1, help="flip every Nth byte of the XNNPACK payloads")
    parser.add_argument("--file-step", type=int, default=7, help="flip every Nth byte of the rest of the file")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds without progress that count as a hang")
    parser.add_argument("--json", type=Path, help="write every variant's outcome here")
    parser.add_argument("--child", nargs=3, metavar=("BASE", "TODO", "LOG"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(Path(args.child[0]), Path(args.child[1]), Path(args.child[2]), args.model)
        return
    from importlib.metadata import version

    import torch

    base = args.base or build_base(args.model, Path(tempfile.mkdtemp(prefix="fuzz-pte-base-")) / "export")
    pte = (base / "model.pte").read_bytes()
    ranges = payload_ranges(pte)
    inside = {o for start, end in ranges for o in range(start, end)}
    offsets = sorted({o for start, end in ranges for o in range(start, end, args.payload_step)}
                     | {o for o in range(0, len(pte), args.file_step) if o not in inside})  # fmt: skip
    variants = [(-1, 0)] + [(o, xor) for o in offsets for xor in (0xFF, 0x01)]
    print(f"model={args.model} file={len(pte)} bytes, XNNPACK payloads {ranges}, {len(variants) - 1} variants")
    print(f"torch {torch.__version__}, executorch {version('executorch')}, python {platform.python_version()}")
    started = time.monotonic()
    results = run(base, variants, args.model, args.timeout)
    control = results.pop((-1, 0))
    if control != "ran":
        raise SystemExit(f"the unmodified export does not run ({control}): every variant would be refused")
    counts = collections.Counter(r.split(":")[0] for r in results.values())
    in_payload = collections.Counter(r.split(":")[0] for (o, _), r in results.items() if o in inside)
    print(f"{time.monotonic() - started:.0f} s, load average {os.getloadavg()[0]:.2f}")
    print("all variants:", dict(counts))
    print("inside the XNNPACK payloads:", dict(in_payload))
    print("refusals by error:", dict(collections.Counter(r for r in results.values() if r.startswith("refused"))))
    for (offset, xor), outcome in sorted(results.items()):
        if not outcome.startswith(("refused", "ran")):
            print(f"  byte {offset} ^ {xor:#04x}: {outcome}")
    if args.json:
        args.json.write_text(json.dumps([[o, x, r] for (o, x), r in sorted(results.items())]))
    sys.exit(1 if counts.keys() - {"refused", "ran"} else 0)


if __name__ == "__main__":
    main()
