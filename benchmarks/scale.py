"""Real-size models through every format: export time and memory, files, load, first call, parity; the peer alongside.

Random-weight models from the published configs of Qwen2.5-0.5B, Llama-3.2-1B and Llama-3.2-3B (``_models.py``:
built on the meta device, materialized in the target dtype, nothing downloaded). Each cell (model, dtype, tool,
format) runs in its own process, so its peak RSS is its own:

1. build the model; eager logits of the call inputs (batch 2 x 48 tokens);
2. export with ``dynamic=True`` on a batch-1 sample of 32 tokens; **extra peak** is the process's peak RSS during
   the export above its RSS with the model built, divided by the model's weights (tied weights counted once);
3. save; files in MB;
4. the model is freed; load (``from_pretrained`` and the runners) with the verified-file memory on (a file hashed
   when saved is not hashed again) and off (every byte hashed), and the runtime's own load of the same files
   (ONNX Runtime session, OpenVINO read + compile, ``torch.export.load``, ExecuTorch ``load_program``);
5. first call at batch 2 x 48; parity is the max abs diff of the logits against eager, in the model's dtype.

``--generation`` runs ``export_for_generation`` instead: its graphs, files, export s, load s, the peak RSS of loading
and generating 16 tokens and the peak RSS of a second generate once loaded (both above the process before the model
was built, so they include what exporting left behind), the same two in a new process that only loads and generates
(above that process with the libraries imported: what a user of the export sees), tokens == eager. ``--hub`` publishes saved exports
(``--keep DIR``) to the embedded hub and downloads them back, against curl on the largest file.

    python benchmarks/scale.py --models qwen2.5-0.5b llama-3.2-1b --keep /tmp/exports
    python benchmarks/scale.py --models llama-3.2-3b --dtypes bfloat16 --formats dynamo onnx openvino
    python benchmarks/scale.py --generation --models qwen2.5-0.5b --formats onnx openvino
    python benchmarks/scale.py --hub /tmp/exports/llama-3.2-1b-float32-hub-*
    python benchmarks/scale.py --report-only            # the tables from the results file

Results are appended to ``--results`` (JSON lines); the report keeps the latest row of each cell and prints the
load average and versions it was measured with.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # the hub_export of this checkout, not an installed one

FORMATS = ["dynamo", "onnx", "openvino", "executorch"]
ET_BOUNDS = (2, 128)  # ExecuTorch's dynamic=True bounds here (batch, sequence): the call is 2 x 48
DEFAULT_RESULTS = HERE / "scale-results.jsonl"
MB = 1e6


class RssSampler:
    """The process's RSS every 5 ms in a thread; :meth:`phase` gives a block's peak."""

    def __init__(self) -> None:
        self._page = os.sysconf("SC_PAGE_SIZE")
        self.peak = self.now()
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def now(self) -> int:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * self._page

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self.now())

    def reset(self) -> int:
        self.peak = self.now()
        return self.peak


class _StageSeconds:
    """A stage listener (``hub_export._progress``): each stage's seconds and the RSS peak it reached above
    ``base`` (the sampler's peak is reset when a stage starts)."""

    def __init__(self, sampler: RssSampler, base: int) -> None:
        self.sampler, self.base = sampler, base
        self.seconds: dict[str, float] = {}
        self.peaks: dict[str, int] = {}

    def started(self, name: str) -> None:
        self.outer_peak = self.sampler.peak
        self.sampler.peak = self.sampler.now()

    def finished(self, name: str, seconds: float, failed: bool) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.peaks[name] = max(self.peaks.get(name, 0), self.sampler.peak - self.base)
        self.sampler.peak = max(self.sampler.peak, self.outer_peak)


def _listening(tool: str, listener: Any) -> Any:
    """``hub_export._progress.listen(listener)`` for our exports; nothing for the peer's."""
    import contextlib

    if tool != "hub":
        return contextlib.nullcontext()
    from hub_export._progress import listen

    return listen(listener)


def _dir_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / MB


def _inputs(batch: int, seq: int, seed: int) -> dict[str, Any]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 30000, (batch, seq), generator=gen)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def _logits(output: Any) -> Any:
    return output["logits"] if isinstance(output, dict) or hasattr(output, "keys") else output.logits


def _runtime_load(fmt: str, folder: Path) -> float:
    """Seconds the format's runtime takes to load the saved files by itself (ready to run)."""
    start = time.perf_counter()
    if fmt == "onnx":
        import onnxruntime as ort

        from hub_export.backends.onnx.runner import make_session_options

        session = ort.InferenceSession(str(folder / "model.onnx"), make_session_options(), ["CPUExecutionProvider"])
        del session
    elif fmt == "openvino":
        import openvino

        core = openvino.Core()
        model = core.read_model(str(folder / "openvino_model.xml"))
        hint = model.get_rt_info(["runtime_options", "INFERENCE_PRECISION_HINT"]).astype(str)
        compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": hint})
        del compiled, model
    elif fmt == "dynamo":
        import torch

        module = torch.export.load(str(folder / "model.pt2")).module()
        del module
    elif fmt == "executorch":
        from executorch.runtime import Runtime

        ptd = folder / "model.ptd"
        program = Runtime.get().load_program(folder / "model.pte", data_path=str(ptd) if ptd.exists() else None)
        program.load_method("forward")
        del program
    seconds = time.perf_counter() - start
    gc.collect()
    return seconds


def _export(tool: str, fmt: str, model: Any, sample: dict[str, Any], generation: bool) -> Any:
    if tool == "hub":
        from hub_export import AutoHfExporter
        from hub_export.configs import AutoExportConfig

        config = AutoExportConfig.config_class(fmt)(dynamic=True)
        exporter = AutoHfExporter.from_config(config)
        if fmt == "executorch":  # memory is planned for the bounds: the defaults (batch 8 x 4096 tokens) would plan
            exporter.max_batch, exporter.max_sequence_cap = ET_BOUNDS  # 35 GiB of logits for a 150k vocabulary
        if generation:
            return exporter.export_for_generation(model, sample, config=config)
        return exporter.export(model, sample, config=config)
    from transformers.exporters import AutoExportConfig, AutoHfExporter

    config = AutoExportConfig.from_dict({"export_format": fmt, "dynamic": True})
    exporter = AutoHfExporter.from_config(config)
    if generation:
        return exporter.export_for_generation(model, sample, config)
    return exporter.export(model, sample, config)


def _load(tool: str, folder: Path) -> Any:
    if tool == "hub":
        from hub_export import ExportedModel

        loaded = ExportedModel.from_pretrained(folder)
        loaded.runners  # noqa: B018 - sessions/compiled models, ready to run
        return loaded
    from transformers.exporters import ExportedModel as PeerModel

    return PeerModel.from_pretrained(folder)


def run_cell(
    model_name: str,
    dtype_name: str,
    tool: str,
    fmt: str,
    workdir: Path,
    generation: bool,
    layers: Any,
    one_load: bool = False,
) -> dict:
    """One cell; returns its row (``error`` set when a stage failed). ``one_load``: only the ``from_pretrained``
    load that the first call runs on (no runtime's own load, no load hashing every byte)."""
    import torch
    from _models import build, unique_weight_bytes

    row: dict[str, Any] = {
        "model": model_name,
        "dtype": dtype_name,
        "tool": tool,
        "format": fmt,
        "kind": "generation" if generation else "model",
        "layers": layers,
    }
    sampler = RssSampler()
    row["rss_libraries_mb"] = sampler.reset() / MB
    stage, stages, weights = "build", None, 1
    start = time.perf_counter()
    try:
        start = time.perf_counter()
        model = build(model_name, getattr(torch, dtype_name), layers=layers)
        row["build_s"] = time.perf_counter() - start
        weights = unique_weight_bytes(model)
        row["weights_mb"] = weights / MB
        # ExecuTorch cells trace on batch 2, as their published figures were measured (a batch-1 sample lowered to a
        # program failing at batch 1 with the batch bounded at 2, fixed since: patches.retrace_without_size_one_hints)
        sample, call = _inputs(2 if fmt == "executorch" else 1, 32, 0), _inputs(2, 48, 1)
        stage = "eager"
        with torch.no_grad():
            if generation:
                eager = model.generate(**sample, max_new_tokens=16, min_new_tokens=16, do_sample=False)
            else:
                eager = _logits(model(**call)).float()
        gc.collect()
        stage = "export"
        base = sampler.reset()
        start = time.perf_counter()
        stages = _StageSeconds(sampler, base)
        with _listening(tool, stages):
            exported = _export(tool, fmt, model, sample, generation)
        row["export_s"] = time.perf_counter() - start
        row["export_stages"] = stages.seconds  # hub_export's stages: seconds, and the RSS peak above the model
        row["export_stage_peaks"] = {name: peak / weights for name, peak in stages.peaks.items()}
        row["export_extra_peak"] = (sampler.peak - base) / weights
        row["export_extra_after"] = (sampler.now() - base) / weights
        stage = "save"
        folder = workdir / f"{model_name}-{dtype_name}-{tool}-{fmt}{'-gen' if generation else ''}"
        sampler.reset()
        start = time.perf_counter()
        exported.save_pretrained(folder)
        row["save_s"] = time.perf_counter() - start
        row["save_extra_peak"] = (sampler.peak - base) / weights
        row["files_mb"] = _dir_mb(folder)
        row["files"] = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}
        row["folder"] = str(folder)
        del exported, model
        gc.collect()
        libraries = row["rss_libraries_mb"] * MB
        if tool == "hub" and not generation and not one_load:
            stage = "runtime load"
            row["runtime_load_s"] = _runtime_load(fmt, folder)
            stage = "load (hashing)"
            os.environ["HUB_EXPORT_VERIFIED_CACHE"] = "0"
            start = time.perf_counter()
            loaded = _load(tool, folder)
            row["load_hashing_s"] = time.perf_counter() - start
            del loaded
            gc.collect()
            os.environ.pop("HUB_EXPORT_VERIFIED_CACHE")
        stage = "load"
        sampler.reset()
        start = time.perf_counter()
        loaded = _load(tool, folder)
        row["load_s"] = time.perf_counter() - start
        row["load_rss"] = (sampler.now() - libraries) / weights
        stage = "first call"
        start = time.perf_counter()
        with torch.no_grad():
            if generation:
                got = loaded.generate(**sample, max_new_tokens=16)
            else:
                got = _logits(loaded(**call))
        row["first_call_s"] = time.perf_counter() - start
        if generation:
            row["tokens_equal"] = bool(got.shape == eager.shape and (got == eager).all())
            row["rss_generating"] = (sampler.peak - libraries) / weights  # peak of the load and first generate
            sampler.reset()
            start = time.perf_counter()
            loaded.generate(**sample, max_new_tokens=16)
            row["tokens_per_s"] = 16 / (time.perf_counter() - start)
            row["rss_steady"] = (sampler.peak - libraries) / weights  # peak of a second generate, once loaded
            row["components"] = list(loaded.components)
            del loaded
            gc.collect()
            stage = "fresh process"
            fresh = _fresh_generate(folder)
            row["fresh_tokens_equal"] = fresh.pop("tokens") == eager.tolist()
            row.update({k: v / weights if k.startswith("fresh_rss") else v for k, v in fresh.items()})
        else:
            row["max_abs_diff"] = float((torch.as_tensor(got).float() - eager).abs().max())
            row["logits_scale"] = float(eager.abs().max())
        stage = "done"
    except BaseException as exc:  # noqa: BLE001 - a failure is a result
        if isinstance(exc, KeyboardInterrupt):
            raise
        row["error"] = (
            f"[{stage}] {type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
        )
        row["trace"] = "".join(traceback.format_exception(exc)[-4:])[-2000:]
        if stage == "export" and stages is not None:  # how far it got, and with what memory
            row["export_stages"] = stages.seconds
            row["export_stage_peaks"] = {name: peak / weights for name, peak in stages.peaks.items()}
            row["export_failed_after_s"] = time.perf_counter() - start
    row["peak_rss_mb"] = sampler.peak / MB
    return row


def versions() -> dict[str, str]:
    """Versions of what the figures depend on, and the machine."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version(), "cpus": str(os.cpu_count())}
    for name in ("torch", "transformers", "onnxruntime", "onnx-ir", "onnxscript", "openvino", "executorch"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "-"
    return out


def _fresh_generate(folder: Path) -> dict[str, Any]:
    """Load a generation export and generate in a new process, as a user does (nothing left over from exporting):
    RSS above the process with the libraries imported, for the load + first generate and for a second generate."""
    command = [sys.executable, __file__, "--fresh-generate", str(folder)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise RuntimeError(f"the fresh process failed: {done.stderr.strip()[-500:]}")
    return json.loads(lines[-1])


def fresh_generate(folder: Path) -> None:
    """The child of :func:`_fresh_generate`: prints its figures as one JSON line."""
    import importlib.util

    import torch
    import transformers  # noqa: F401 - imported before the baseline, as the runtimes below

    import hub_export.generation.mixin  # noqa: F401

    for runtime in ("onnxruntime", "openvino"):
        if importlib.util.find_spec(runtime) is not None:
            importlib.import_module(runtime)
    sample = _inputs(1, 32, 0)
    sampler = RssSampler()
    base = sampler.reset()
    start = time.perf_counter()
    loaded = _load("hub", folder)
    load_s = time.perf_counter() - start
    with torch.no_grad():
        got = loaded.generate(**sample, max_new_tokens=16)
    first = sampler.peak - base
    sampler.reset()
    with torch.no_grad():
        loaded.generate(**sample, max_new_tokens=16)
    steady = sampler.peak - base
    figures = {"fresh_load_s": load_s, "fresh_rss_load_generate": first, "fresh_rss_generating": steady}
    print(json.dumps({**figures, "tokens": got.tolist()}), flush=True)


def _child(args: argparse.Namespace) -> None:
    model_name, dtype_name, tool, fmt = args.cell
    row = run_cell(model_name, dtype_name, tool, fmt, Path(args.workdir), args.generation, args.layers, args.one_load)
    row.update(load_average=os.getloadavg(), versions=versions(), measured=time.strftime("%Y-%m-%d %H:%M"))
    import hub_export

    where = str(Path(hub_export.__file__).parent)
    commit = subprocess.run(["git", "-C", where, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    row["commit"] = commit.stdout.strip() or None  # the hub_export code measured (uncommitted edits aside)
    with open(args.results, "a") as handle:
        handle.write(json.dumps(row) + "\n")
    status = row.get("error") or "ok"
    print(f"  {model_name} {dtype_name} {tool} {fmt}: {status}", flush=True)


def drive(args: argparse.Namespace) -> None:
    """One child process per cell, one at a time (the biggest first asks for the most memory: run them alone)."""
    keep = Path(args.keep) if args.keep else None
    for model_name in args.models:
        for dtype_name in args.dtypes:
            for fmt in args.formats:
                for tool in args.tools:
                    workdir = keep or Path(tempfile.mkdtemp(prefix="scale-", dir=args.tmp))
                    workdir.mkdir(parents=True, exist_ok=True)
                    command = [
                        sys.executable,
                        __file__,
                        "--cell",
                        model_name,
                        dtype_name,
                        tool,
                        fmt,
                        "--workdir",
                        str(workdir),
                        "--results",
                        str(args.results),
                    ]
                    command += ["--generation"] if args.generation else []
                    command += ["--layers", str(args.layers)] if args.layers else []
                    command += ["--one-load"] if args.one_load else []
                    print(f"{model_name} {dtype_name} {tool} {fmt} (load average {os.getloadavg()[0]:.1f})", flush=True)
                    try:
                        subprocess.run(command, timeout=args.timeout, check=False)
                    except subprocess.TimeoutExpired:
                        with open(args.results, "a") as handle:
                            row = {"model": model_name, "dtype": dtype_name, "tool": tool, "format": fmt}
                            row.update(kind="generation" if args.generation else "model", layers=args.layers)
                            handle.write(json.dumps({**row, "error": f"timed out after {args.timeout} s"}) + "\n")
                    if keep is None:
                        shutil.rmtree(workdir, ignore_errors=True)


# -- Hub transfer -----------------------------------------------------------------------------------------------
def hub_transfer(folders: list[Path], results: Path) -> None:
    """Publish each saved export folder to the embedded hub (server in its own process) and download it back into a
    fresh cache (every file sha256-verified), then curl the largest file both ways; MB/s and the client's RSS."""
    from hub_transfer import ServerProcess, _curl, _signed_put_url
    from huggingface_hub import HfApi

    from hub_export._files import sha256_file
    from hub_export.hub.download import download_export
    from hub_export.hub.publish import publish

    sampler = RssSampler()
    with tempfile.TemporaryDirectory(prefix="scale-hub-") as tmp:
        server = ServerProcess(Path(tmp) / "hub", [])
        try:
            api = HfApi(endpoint=server.url, token="bench")
            for folder in folders:
                total = _dir_mb(folder) * MB
                largest = max((p for p in folder.iterdir() if p.is_file()), key=lambda p: p.stat().st_size)
                row: dict[str, Any] = {"kind": "hub", "folder": folder.name, "bytes": total, "largest": largest.name}
                repo = f"bench/{folder.name}"
                base = sampler.reset()
                start = time.perf_counter()
                publish(repo, {"export": folder}, endpoint=server.url, token="bench")
                row["publish_s"] = time.perf_counter() - start
                row["publish_client_extra_mb"] = (sampler.peak - base) / MB
                cache = Path(tmp) / "cache"
                base = sampler.reset()
                start = time.perf_counter()
                download_export(repo, subfolder="export", cache_dir=cache, endpoint=server.url, token="bench")
                row["download_s"] = time.perf_counter() - start
                row["download_client_extra_mb"] = (sampler.peak - base) / MB
                shutil.rmtree(cache)
                target = Path(tmp) / "curl.bin"
                start = time.perf_counter()
                _curl("-o", str(target), f"{server.url}/{repo}/resolve/main/export/{largest.name}")
                row["curl_download_s"] = time.perf_counter() - start
                target.unlink()
                digest = sha256_file(largest)
                api.create_repo(f"{repo}-curl")
                put = _signed_put_url(server.url, f"{repo}-curl", digest, largest.stat().st_size)
                start = time.perf_counter()
                _curl("-T", str(largest), put)
                row["curl_upload_s"] = time.perf_counter() - start
                size = largest.stat().st_size
                row["publish_mb_s"] = total / MB / row["publish_s"]
                row["download_mb_s"] = total / MB / row["download_s"]
                row["curl_download_mb_s"] = size / MB / row["curl_download_s"]
                row["curl_upload_mb_s"] = size / MB / row["curl_upload_s"]
                row["server_rss_peak_mb"] = server.peak / MB
                row.update(load_average=os.getloadavg(), versions=versions(), measured=time.strftime("%Y-%m-%d %H:%M"))
                print(json.dumps({k: v for k, v in row.items() if k != "versions"}), flush=True)
                with open(results, "a") as handle:
                    handle.write(json.dumps(row) + "\n")
        finally:
            server.stop()


# -- report -----------------------------------------------------------------------------------------------------
def _latest(results: Path) -> list[dict]:
    rows: dict[tuple, dict] = {}
    for line in results.read_text().splitlines() if results.exists() else []:
        row = json.loads(line)
        key = tuple(row.get(k) for k in ("kind", "model", "dtype", "tool", "format", "layers", "folder"))
        rows[key] = row
    return list(rows.values())


def _f(value: Any, spec: str, suffix: str = "") -> str:
    return "—" if value is None else f"{value:{spec}}{suffix}"


def _graph_files(files: dict[str, int]) -> list[str]:
    """The components of a generation export, from its graph files (rows measured before ``components``)."""
    names = [n.removesuffix(".onnx") for n in files if n.endswith(".onnx")]
    return sorted(
        names + [n[len("openvino_") : -len(".xml")] for n in files if n.startswith("openvino_") and n.endswith(".xml")],
        reverse=True,
    )


def summary(rows: list[dict]) -> list[str]:
    """One table of hub_export's full-depth cells (no ``--layers``): memory, files, load, parity, or the failure."""
    latest: dict[tuple, dict] = {}  # the latest measurement of each cell, whatever folder it was saved in
    for row in sorted(rows, key=lambda r: r.get("measured") or ""):
        if row.get("kind") == "model" and row.get("tool") == "hub" and not row.get("layers"):
            latest[(row["model"], row["dtype"], row["format"])] = row
    cells = list(latest.values())
    order = {"qwen2.5-0.5b": 0, "llama-3.2-1b": 1, "llama-3.2-3b": 2}
    cells.sort(key=lambda r: (order.get(r["model"], 9), r["dtype"], FORMATS.index(r["format"])))
    lines = [
        "| model | format | weights MB | export s | extra peak / weights | files MB | load s (runtime's own) | "
        "max abs diff (largest logit) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in cells:
        head = f"| {row['model']} {row['dtype']} | {row['format']} | {_f(row.get('weights_mb'), '.0f')} |"
        if row.get("error"):
            lines.append(f"{head} failed: {row['error'][:160]} | | | | |")
            continue
        own = f" ({row['runtime_load_s']:.1f})" if row.get("runtime_load_s") is not None else ""
        lines.append(
            f"{head} {_f(row.get('export_s'), '.0f')} | {_f(row.get('export_extra_peak'), '.2f', 'x')} | "
            f"{_f(row.get('files_mb'), '.0f')} | {_f(row.get('load_s'), '.1f')}{own} | "
            f"{_f(row.get('max_abs_diff'), '.1e')} ({_f(row.get('logits_scale'), '.1f')}) |"
        )
    return lines + [""]


def report(results: Path) -> str:
    """Markdown tables of the latest rows."""
    rows = _latest(results)
    lines: list[str] = summary(rows)
    cells = [r for r in rows if r.get("kind") == "model"]
    peer = {(r["model"], r["dtype"], r["format"], r.get("layers")): r for r in cells if r["tool"] == "peer"}
    for key in dict.fromkeys((r["model"], r["dtype"], r.get("layers")) for r in cells if r["tool"] == "hub"):
        model_name, dtype_name, layers = key
        group = [r for r in cells if r["tool"] == "hub" and (r["model"], r["dtype"], r.get("layers")) == key]
        weights = group[0].get("weights_mb")
        title = f"{model_name} {dtype_name}" + (f" ({layers} layers)" if layers else "")
        lines += [f"#### {title}: {_f(weights, '.0f')} MB of weights", ""]
        lines += [
            "| format | export s (peer) | extra peak / weights (peer) | save s | files MB (peer) | load s | runtime's own "
            "load s | load, every byte hashed s | first call s | max abs diff (peer) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in sorted(group, key=lambda r: FORMATS.index(r["format"]) if r["format"] in FORMATS else 9):
            other = peer.get((model_name, dtype_name, row["format"], layers), {})

            def both(name: str, spec: str, suffix: str = "", row: dict = row, other: dict = other) -> str:
                theirs = other.get(name) if not other.get("error") or name in other else None
                text = _f(row.get(name), spec, suffix)
                return text + (f" ({_f(theirs, spec, suffix)})" if other else "")

            if row.get("error"):
                lines.append(f"| {row['format']} | failed: {row['error'][:120]} |" + " |" * 8)
                continue
            lines.append(
                f"| {row['format']} | {both('export_s', '.1f')} | {both('export_extra_peak', '.2f', 'x')} | "
                f"{_f(row.get('save_s'), '.1f')} | {both('files_mb', '.0f')} | {_f(row.get('load_s'), '.1f')} | "
                f"{_f(row.get('runtime_load_s'), '.1f')} | {_f(row.get('load_hashing_s'), '.1f')} | "
                f"{_f(row.get('first_call_s'), '.2f')} | {both('max_abs_diff', '.1e')} |"
            )
        failed = [r for r in group + list(peer.values()) if r.get("error") and (r["model"], r["dtype"]) == key[:2]]
        for row in failed:
            lines.append(f"\n{row['tool']} {row['format']}: {row['error']}")
        lines.append("")
    generation = [r for r in rows if r.get("kind") == "generation"]
    if generation:
        lines += [
            "| model | format | graphs | export s | load s | files MB | files / weights | RSS peak (load + generate) / "
            "weights | RSS generating, loaded / weights | new process: RSS peak (load + generate) / weights | "
            "new process: RSS generating / weights | tok/s | tokens == eager |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for row in generation:
            ratio = row["files_mb"] / row["weights_mb"] if row.get("files_mb") and row.get("weights_mb") else None
            equal = "yes" if row.get("tokens_equal") else ("NO" if "tokens_equal" in row else row.get("error", "—"))
            if row.get("fresh_tokens_equal") is False:
                equal += " (new process: NO)"
            graphs = " + ".join(row.get("components") or _graph_files(row.get("files", {})) or ["—"])
            lines.append(
                f"| {row['model']} {row['dtype']} | {row['format']} | {graphs} | {_f(row.get('export_s'), '.0f')} | "
                f"{_f(row.get('load_s'), '.1f')} | {_f(row.get('files_mb'), '.0f')} | {_f(ratio, '.2f', 'x')} | "
                f"{_f(row.get('rss_generating'), '.2f', 'x')} | {_f(row.get('rss_steady'), '.2f', 'x')} | "
                f"{_f(row.get('fresh_rss_load_generate'), '.2f', 'x')} | {_f(row.get('fresh_rss_generating'), '.2f', 'x')} | "
                f"{_f(row.get('tokens_per_s'), '.1f')} | {equal} |"
            )
        lines.append("")
    hub = [r for r in rows if r.get("kind") == "hub"]
    if hub:
        lines += [
            "| export | MB | publish MB/s | download MB/s | curl upload MB/s | curl download MB/s | client extra RSS MB "
            "(publish / download) | server peak RSS MB |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in hub:
            lines.append(
                f"| {row['folder']} | {row['bytes'] / MB:.0f} | {row['publish_mb_s']:.0f} | {row['download_mb_s']:.0f} | "
                f"{row['curl_upload_mb_s']:.0f} | {row['curl_download_mb_s']:.0f} | "
                f"{row['publish_client_extra_mb']:.0f} / {row['download_client_extra_mb']:.0f} | {row['server_rss_peak_mb']:.0f} |"
            )
        lines.append("")
    loads = sorted({round(r["load_average"][0], 1) for r in rows if r.get("load_average")})
    if loads:
        lines.append(f"Load average (1 min) at the end of the cells: {loads[0]}-{loads[-1]}.")
    if rows and rows[-1].get("versions"):
        lines.append("Versions: " + ", ".join(f"{k} {v}" for k, v in rows[-1]["versions"].items()) + ".")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments; run cells, the Hub transfer or the report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--models", nargs="+", default=["qwen2.5-0.5b", "llama-3.2-1b"])
    parser.add_argument("--dtypes", nargs="+", default=["float32"])
    parser.add_argument("--formats", nargs="+", default=FORMATS)
    parser.add_argument("--tools", nargs="+", default=["hub", "peer"], choices=["hub", "peer"])
    parser.add_argument("--generation", action="store_true", help="export_for_generation cells (hub_export only)")
    parser.add_argument("--layers", type=int, default=None, help="fewer layers (a quick check of the benchmark)")
    parser.add_argument(
        "--one-load", action="store_true", help="skip the runtime's own load and the load hashing every byte"
    )
    parser.add_argument("--keep", default=None, help="keep the saved exports in this folder")
    parser.add_argument("--tmp", default=None, help="where temporary exports go (default: the system's)")
    parser.add_argument("--timeout", type=int, default=7200, help="seconds per cell")
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    parser.add_argument("--hub", nargs="+", type=Path, default=None, help="saved export folders to publish/download")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--cell", nargs=4, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--fresh-generate", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fresh_generate:
        fresh_generate(args.fresh_generate)
        return 0
    if args.cell:
        _child(args)
        return 0
    if args.hub:
        hub_transfer(args.hub, args.results)
    elif not args.report_only:
        if args.generation:
            args.tools = ["hub"]
        drive(args)
    print(report(args.results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
