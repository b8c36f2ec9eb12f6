"""An 8B-class decoder exported to int4 ONNX and OpenVINO on one machine: memory, time, files, speed, closeness.

Llama-3.1-8B's published config, built on the meta device and materialized in bfloat16 from random weights (16 GB,
nothing downloaded; ``_models.py``), exported with ``export_for_generation`` to int4 weights: ONNX Runtime's
``MatMulNBits`` (block 32, symmetric, ``accuracy_level`` 4, CPU fusions: the int4 layout onnxruntime-genai builds)
and OpenVINO with NNCF (``int4_sym``, group 128). Each stage of a format runs in its own process:

1. **export**: build, export, save. Peak RSS and peak anonymous RSS (``RssAnon``: the memory the kernel cannot drop;
   mapped files are file pages it can) over the process, the lowest ``MemAvailable`` of the machine meanwhile;
   export seconds; files.
2. **generate**: a fresh process loads the export and generates greedily from a 16-token prompt: load seconds, a
   2-token warm-up (not timed with the rounds: OpenVINO's CPU plugin prepares its kernels at the first calls),
   tokens/s of ``--new-tokens`` (median of ``--rounds``), peak RSS.
3. **score**: the same bfloat16 model is built again (same seed) and each token the export chose is ranked under
   eager's next-token logits for the same prefix (``_coverage_quantized.eager_ranks``: rank 0 is eager's own greedy
   choice), and again under eager with the export's own int4 weights: for ONNX quantized by ONNX Runtime's kernel
   and dequantized into the bfloat16 model (:func:`quantize_linears_as_onnx`), for OpenVINO decompressed by
   OpenVINO from the saved export (:func:`weights_of_openvino_export`). That reference differs from the export only
   by the kernels' arithmetic (ONNX's ``accuracy_level`` 4 rounds activations to int8 per block) and bfloat16
   rounding.

    python benchmarks/large_int4.py --formats onnx openvino --workdir /tmp/large
    python benchmarks/large_int4.py --model llama-3.2-1b --formats onnx --workdir /tmp/large   # a quick check
    python benchmarks/large_int4.py --report-only

Rows are appended to ``--results`` with the load average and versions.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # the hub_export of this checkout, not an installed one

DEFAULT_RESULTS = HERE / "large-int4-results.jsonl"
GB = 1e9


class Memory:
    """Every 20 ms in a thread: the process's peak RSS and peak RssAnon, and the machine's lowest MemAvailable."""

    def __init__(self) -> None:
        self.peak_rss = self.peak_anon = 0
        self.min_available = 1 << 62
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    @staticmethod
    def _fields(path: str, names: tuple[str, ...]) -> dict[str, int]:
        out = {}
        with open(path) as handle:
            for line in handle:
                key, _, rest = line.partition(":")
                if key in names:
                    out[key] = int(rest.split()[0]) * 1024
        return out

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            status = self._fields("/proc/self/status", ("VmRSS", "RssAnon"))
            self.peak_rss = max(self.peak_rss, status["VmRSS"])
            self.peak_anon = max(self.peak_anon, status["RssAnon"])
            available = self._fields("/proc/meminfo", ("MemAvailable",))["MemAvailable"]
            self.min_available = min(self.min_available, available)

    def figures(self) -> dict[str, float]:
        return {
            "peak_rss_gb": self.peak_rss / GB,
            "peak_anon_gb": self.peak_anon / GB,
            "min_available_gb": self.min_available / GB,
        }


def prompt() -> dict[str, Any]:
    import torch

    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 100000, (1, 16), generator=generator)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def config_for(fmt: str) -> Any:
    """The int4 export config of ``fmt``."""
    if fmt == "onnx":
        from hub_export import OnnxConfig, OnnxRuntimeQuantizer, OnnxRuntimeWeightOnlyConfig

        quantizer = OnnxRuntimeQuantizer(OnnxRuntimeWeightOnlyConfig(bits=4, block_size=32, accuracy_level=4))
        return OnnxConfig(dynamic=True, ort_fusions="cpu", quantizer=quantizer)
    from hub_export import NNCFQuantizer, NNCFWeightCompressionConfig, OpenVINOConfig

    return OpenVINOConfig(
        dynamic=True, quantizer=NNCFQuantizer(NNCFWeightCompressionConfig("int4_sym", group_size=128))
    )


def export_stage(model_name: str, fmt: str, folder: Path) -> dict[str, Any]:
    import torch
    from _models import build, unique_weight_bytes

    from hub_export import AutoHfExporter

    memory = Memory()
    started = time.perf_counter()
    model = build(model_name, torch.bfloat16)
    row: dict[str, Any] = {"build_s": time.perf_counter() - started, "weights_gb": unique_weight_bytes(model) / GB}
    config = config_for(fmt)
    started = time.perf_counter()
    exported = AutoHfExporter.from_config(config).export_for_generation(model, prompt(), config=config)
    row["export_s"] = time.perf_counter() - started
    started = time.perf_counter()
    exported.save_pretrained(folder)
    row["save_s"] = time.perf_counter() - started
    row["files_gb"] = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / GB
    parity = [c.metadata.parity for c in exported.components.values() if c.metadata.parity]
    row["max_abs_diff"] = max(p["max_abs_diff"] for p in parity) if parity else None
    return {**row, **memory.figures()}


def generate_stage(folder: Path, new_tokens: int, rounds: int) -> dict[str, Any]:

    from hub_export import ExportedModel

    memory = Memory()
    started = time.perf_counter()
    loaded = ExportedModel.from_pretrained(folder)
    loaded.runners  # noqa: B018 - sessions / compiled models, ready to run
    row: dict[str, Any] = {"load_s": time.perf_counter() - started}
    inputs, speeds = prompt(), []
    started = time.perf_counter()  # untimed warm-up: OpenVINO's CPU plugin prepares its kernels at the first calls
    loaded.generate(**inputs, max_new_tokens=2, min_new_tokens=2, do_sample=False)
    row["warmup_s"] = time.perf_counter() - started
    produced = None
    for _ in range(rounds):
        started = time.perf_counter()
        produced = loaded.generate(**inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
        speeds.append(new_tokens / (time.perf_counter() - started))
    row.update(tokens_per_s=statistics.median(speeds), speeds=speeds, tokens=produced.tolist(), **memory.figures())
    return row


def quantize_linears_as_onnx(model: Any, block_size: int = 32) -> int:
    """Give every ``nn.Linear`` of ``model`` the weights the ONNX int4 export holds: quantized by ONNX Runtime's own
    kernel (``DefaultWeightOnlyQuantizer.qbits_block_quant``, symmetric, blocks of ``block_size`` along the input
    axis, one scale per block and output column: a packed q/k/v projection quantizes each column alike) and
    dequantized, ``(q - 8) * scale``. Returns how many were replaced."""
    import numpy as np
    import torch
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, DefaultWeightOnlyQuantizer

    kernel = DefaultWeightOnlyQuantizer(DefaultWeightOnlyQuantConfig(block_size=block_size, is_symmetric=True, bits=4))
    done = 0
    with torch.no_grad():
        for module in model.modules():
            if not isinstance(module, torch.nn.Linear):
                continue
            weight = module.weight  # (out, in): the export multiplies by its transpose (in, out)
            transposed = torch.empty(weight.shape[::-1], dtype=torch.float32)
            transposed.copy_(weight.T)
            packed, scales, _ = kernel.qbits_block_quant(transposed.numpy())
            del transposed
            for start in range(0, packed.shape[0], 4096):  # output rows, a slice at a time (bounded memory)
                rows = packed[start : start + 4096]
                low = (rows & 0x0F).astype(np.int8) - 8
                high = (rows >> 4).astype(np.int8) - 8
                q = np.stack([low, high], -1).reshape(rows.shape[0], scales.shape[1], block_size)
                values = (q * scales[start : start + 4096, :, None]).reshape(rows.shape[0], -1)[:, : weight.shape[1]]
                weight[start : start + 4096].copy_(torch.from_numpy(values))
            done += 1
    return done


def weights_of_openvino_export(model: Any, folder: Path) -> int:
    """Give ``model`` the weights the OpenVINO export in ``folder`` computes with: each compressed constant of a
    ``MatMul`` or ``Gather`` (NNCF's int4 / int8 with their scales) is decompressed by OpenVINO itself (its
    decompression chain run as a model of its own) and copied into the parameter it came from, found by shape and
    by its first values (the export's constants carry no parameter names). Returns how many were replaced."""
    import openvino
    import openvino.opset13 as ops
    import torch

    core = openvino.Core()
    (xml,) = folder.rglob("*.xml")
    program = core.read_model(xml)
    compressed = ("i4", "u4", "i8", "u8")
    parameters = [p for _, p in model.named_parameters() if p.dim() == 2]
    done = 0
    with torch.no_grad():
        for op in program.get_ordered_ops():
            kind = op.get_type_name()
            if kind not in ("MatMul", "Gather"):
                continue
            weight = op.input_value(1 if kind == "MatMul" else 0)
            node = weight.get_node()
            while node.get_type_name() in ("Convert", "Multiply", "Subtract", "Reshape") and node.get_input_size():
                node = node.input_value(0).get_node()
            if node.get_type_name() != "Constant" or node.get_output_element_type(0).get_type_name() not in compressed:
                continue
            (values,) = core.compile_model(openvino.Model([ops.result(weight)], []), "CPU")({}).values()
            values = torch.from_numpy(values)
            if kind == "MatMul" and not op.get_attributes()["transpose_b"]:
                values = values.T
            fingerprint = values.reshape(-1)[:256]
            candidates = [p for p in parameters if tuple(p.shape) == tuple(values.shape)]
            if not candidates:
                continue
            target = min(candidates, key=lambda p: float((p.reshape(-1)[:256].float() - fingerprint).abs().sum()))
            target.copy_(values)
            done += 1
    return done


def score_stage(model_name: str, fmt: str, tokens: list[list[int]], folder: Path) -> dict[str, Any]:
    """Ranks of the export's tokens under the float model's logits, and under the logits of the model with the
    export's own int4 weights: for ONNX quantized again by ONNX Runtime's kernel (:func:`quantize_linears_as_onnx`),
    for OpenVINO read from the export (:func:`weights_of_openvino_export`)."""
    import torch
    from _coverage_quantized import eager_ranks
    from _models import build

    model = build(model_name, torch.bfloat16)
    produced = torch.tensor(tokens)
    out: dict[str, Any] = {}
    for reference in ("float", "int4"):
        if reference == "int4" and fmt == "onnx":
            out["quantized_linears"] = quantize_linears_as_onnx(model)
        elif reference == "int4":
            out["quantized_linears"] = weights_of_openvino_export(model, folder)
        ranks = eager_ranks(model, prompt(), produced)
        scored = ranks[ranks >= 0]
        suffix = "" if reference == "float" else "_int4_reference"
        out[f"ranks{suffix}"] = ranks.tolist()
        out[f"worst_rank{suffix}"] = int(scored.max())
        out[f"eager_choice_share{suffix}"] = float((scored == 0).float().mean())
    return out


def _versions() -> dict[str, str]:
    from scale import versions

    out = versions()
    from importlib.metadata import version

    out["nncf"] = version("nncf")
    return out


def _in_child(stage: str, *args: str) -> dict[str, Any]:
    """Run a stage in a fresh process. Its peak anonymous memory and the machine's lowest available memory are also
    sampled from here, so a stage the kernel kills (out of memory) still leaves its figures."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen([sys.executable, __file__, "--stage", stage, *args], stdout=out, stderr=err, text=True)
        peak_anon, min_available = 0, 1 << 62
        while child.poll() is None:
            try:
                peak_anon = max(peak_anon, Memory._fields(f"/proc/{child.pid}/status", ("RssAnon",))["RssAnon"])
            except (OSError, KeyError):  # the child is exiting
                pass
            min_available = min(min_available, Memory._fields("/proc/meminfo", ("MemAvailable",))["MemAvailable"])
            time.sleep(0.05)
        out.seek(0)
        err.seek(0)
        lines = [line for line in out.read().splitlines() if line.startswith("{")]
        messages = [line for line in err.read().splitlines() if not _noise(line)]
    if child.returncode or not lines:
        why = f"exit {child.returncode}"
        if child.returncode == -signal.SIGKILL and min_available < 0.5 * GB:
            why = f"killed out of memory: peak anonymous {peak_anon / GB:.1f} GB, {min_available / GB:.2f} GB left"
        tail = "\n".join(messages)[-1500:]
        return {
            "error": f"{stage} failed ({why})" + (f": {tail}" if tail else ""),
            f"{stage}_peak_anon_gb": peak_anon / GB,
            f"{stage}_min_available_gb": min_available / GB,
        }
    return json.loads(lines[-1])


def _noise(line: str) -> bool:
    """A line of the libraries' start-up warnings, left out of an error's message."""
    return line.startswith(("Failed to load", "W12", "W11")) or "Warning" in line or not line.strip()


def run(args: argparse.Namespace) -> None:
    for fmt in args.formats:
        folder = Path(args.workdir) / f"{args.model}-{fmt}-int4"
        row: dict[str, Any] = {"model": args.model, "format": fmt, "load_average_before": os.getloadavg()}
        print(f"{args.model} {fmt}: export", flush=True)
        row.update(_in_child("export", args.model, fmt, str(folder)))
        if "error" not in row:
            print(f"{args.model} {fmt}: generate", flush=True)
            generated = _in_child("generate", str(folder), str(args.new_tokens), str(args.rounds))
            row.update({f"generate_{k}" if k.startswith(("peak", "min")) else k: v for k, v in generated.items()})
        if "error" not in row:
            print(f"{args.model} {fmt}: score", flush=True)
            row.update(_in_child("score", args.model, fmt, json.dumps(row["tokens"]), str(folder)))
        row.update(load_average_after=os.getloadavg(), versions=_versions(), measured=time.strftime("%Y-%m-%d %H:%M"))
        with open(args.results, "a") as handle:
            handle.write(json.dumps(row) + "\n")
        print(json.dumps({k: v for k, v in row.items() if k not in ("tokens", "ranks", "versions")}), flush=True)


def report(results: Path) -> str:
    rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    latest = {(r["model"], r["format"]): r for r in rows}
    lines = [
        "| model | format | export s | peak RSS GB | peak anon GB | lowest available GB | files GB | load s | tok/s "
        "| worst rank (float) | eager's choice (float) | worst rank (int4 eager) | eager's choice (int4 eager) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (model, fmt), r in sorted(latest.items()):
        if "error" in r:
            lines.append(f"| {model} | {fmt} | {r['error'][:120]} |" + " |" * 10)
            continue
        lines.append(
            f"| {model} | {fmt} int4 | {r['export_s']:.0f} | {r['peak_rss_gb']:.1f} | {r['peak_anon_gb']:.1f} "
            f"| {r['min_available_gb']:.1f} | {r['files_gb']:.2f} | {r['load_s']:.1f} | {r['tokens_per_s']:.2f} "
            f"| {r['worst_rank']} | {r['eager_choice_share']:.0%} | {r.get('worst_rank_int4_reference', '-')} "
            f"| {_share(r.get('eager_choice_share_int4_reference'))} |"
        )
    return "\n".join(lines)


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", default="llama-3.1-8b")
    parser.add_argument("--formats", nargs="+", default=["onnx", "openvino"], choices=["onnx", "openvino"])
    parser.add_argument("--workdir", default="large-exports")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--stage", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stage:
        stage, *rest = args.stage
        if stage == "export":
            out = export_stage(rest[0], rest[1], Path(rest[2]))
        elif stage == "generate":
            out = generate_stage(Path(rest[0]), int(rest[1]), int(rest[2]))
        else:
            out = score_stage(rest[0], rest[1], json.loads(rest[2]), Path(rest[3]))
        print(json.dumps(out), flush=True)
        return 0
    if not args.report_only:
        run(args)
    print(report(args.results))
    if args.results == DEFAULT_RESULTS:
        from charts import large_memory_bars

        print(large_memory_bars(args.results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
