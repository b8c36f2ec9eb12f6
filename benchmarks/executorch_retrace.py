"""ExecuTorch lowering with and without one of hub_export's speed patches: export seconds, the calls of the work the
patch saves and their seconds, and whether the saved files are the same bytes.

``--patch retrace`` (the default): ``xnnpack_passes_retrace_changed_graphs``, counting the re-traces
``ExportPass.call`` ran; ``--patch partitions``: ``partition_graphs_recompiled_once``, counting
``GraphModule.recompile`` calls. Each model is exported twice in one process, first without the patch, then with
it, from the same seed; XNNPACK's pattern graphs (built by the first lowering of a process) are built before the
first case:

    python benchmarks/executorch_retrace.py                 # every case
    python benchmarks/executorch_retrace.py llama bert      # some
    python benchmarks/executorch_retrace.py --model qwen2.5-0.5b --layers 2   # a real config, fewer layers
    python benchmarks/executorch_retrace.py --patch partitions --model qwen2.5-0.5b --layers 4

Prints one line per case, and the load average and versions (runs: ``benchmarks/results/executorch-retrace.txt``,
``benchmarks/results/executorch-partitions.txt``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # the hub_export of this checkout, not an installed one

import torch  # noqa: E402

Case = tuple[Callable[[], Any], dict[str, Any], dict[str, Any]]  # model, sample, export options


def _ids() -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 100, (1, 8))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def _xnnpack_int8(dynamic: bool) -> Any:
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    from hub_export import PT2EQuantizer

    config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=dynamic)
    return PT2EQuantizer(XNNPACKQuantizer().set_global(config))


def cases() -> dict[str, Case]:
    import transformers as t

    small = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
    decoder = {**small, "num_key_value_heads": 2, "vocab_size": 128}
    image = {"pixel_values": torch.randn(1, 3, 32, 32)}
    llama = lambda: t.AutoModelForCausalLM.from_config(t.LlamaConfig(**decoder))  # noqa: E731
    resnet = lambda: t.AutoModelForImageClassification.from_config(  # noqa: E731
        t.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1])
    )
    wav2vec2 = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "conv_dim": (16, 16),
        "conv_stride": (5, 2),
        "conv_kernel": (10, 3),
        "num_feat_extract_layers": 2,
        "num_conv_pos_embeddings": 16,
        "num_conv_pos_embedding_groups": 2,
    }
    dynamic = {"dynamic": True}
    return {
        "llama": (llama, _ids(), dynamic),
        "qwen3": (
            lambda: t.AutoModelForCausalLM.from_config(t.Qwen3Config(**decoder, head_dim=16)),
            _ids(),
            dynamic,
        ),
        "gpt2": (
            lambda: t.AutoModelForCausalLM.from_config(t.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=128)),
            _ids(),
            dynamic,
        ),
        "bert": (lambda: t.AutoModel.from_config(t.BertConfig(**small, vocab_size=128)), _ids(), dynamic),
        "vit": (
            lambda: t.AutoModelForImageClassification.from_config(t.ViTConfig(**small, image_size=32, patch_size=8)),
            image,
            dynamic,
        ),
        "resnet": (resnet, image, dynamic),
        "mobilenet_v2": (
            lambda: t.AutoModelForImageClassification.from_config(
                t.MobileNetV2Config(depth_multiplier=0.25, image_size=32)
            ),
            image,
            {},
        ),
        "wav2vec2": (
            lambda: t.AutoModel.from_config(t.Wav2Vec2Config(**wav2vec2)),
            {"input_values": torch.randn(1, 400)},
            dynamic,
        ),
        "resnet_int8_static": (resnet, image, {"dynamic": True, "quantizer": "static"}),
        "llama_int8_dynamic": (llama, _ids(), {"quantizer": "dynamic"}),
        "llama_generation": (llama, _ids(), {"generation": True}),
    }


def _export(make: Callable[[], Any], sample: dict[str, Any], options: dict[str, Any]) -> Any:
    from hub_export import ExecutorchConfig, ExecutorchExporter

    torch.manual_seed(0)
    model = make().eval()
    if options.get("generation"):
        return ExecutorchExporter().export_for_generation(model, sample)
    quantizer = options.get("quantizer")
    quantizer = _xnnpack_int8(quantizer == "dynamic") if quantizer else None
    config = ExecutorchConfig(dynamic=options.get("dynamic", False), quantizer=quantizer)
    exporter = ExecutorchExporter()
    if "bounds" in options:  # a real config's vocabulary: logits at the config's bounds would not fit
        exporter.max_batch, exporter.max_sequence_cap = options["bounds"]
    return exporter.export(model, sample, config=config)


#: --patch -> (the patch's name in hub_export.backends.executorch.patches, the class and method whose calls it saves)
PATCHES = {
    "retrace": ("xnnpack_passes_retrace_changed_graphs", "executorch.exir.pass_base:ExportPass", "call", "re-traces"),
    "partitions": ("partition_graphs_recompiled_once", "torch.fx:GraphModule", "recompile", "recompiles"),
}


def measure(name: str, case: Case, which: str = "retrace") -> str:
    import importlib

    from hub_export.backends.executorch import patches

    attribute, where, method, what = PATCHES[which]
    module_name, class_name = where.split(":")
    owner = getattr(importlib.import_module(module_name), class_name)
    patch = getattr(patches, attribute)
    original = getattr(owner, method)
    counts = {"n": 0, "s": 0.0}

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            counts["n"] += 1
            counts["s"] += time.perf_counter() - started

    row, digests = [name], []
    setattr(owner, method, timed)  # the patch, when on, calls through this
    try:
        for label, choice in (("without", contextlib.nullcontext), ("with", patch)):
            setattr(patches, attribute, choice)
            counts.update(n=0, s=0.0)
            started = time.perf_counter()
            exported = _export(*case)
            seconds = time.perf_counter() - started
            with tempfile.TemporaryDirectory() as directory:
                exported.save_pretrained(directory)
                files = sorted(p for p in Path(directory).rglob("*") if p.is_file())
                digests.append({p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files})
            row.append(f"{label}: export {seconds:.1f} s, {counts['n']} {what} {counts['s']:.1f} s")
    finally:
        setattr(owner, method, original)
        setattr(patches, attribute, patch)
    row.append("same bytes" if digests[0] == digests[1] else "DIFFERENT BYTES")
    return " | ".join(row)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="cases (default: all)")
    parser.add_argument("--model", help="a real config from benchmarks/_models.py instead (dynamic shapes)")
    parser.add_argument("--layers", type=int, default=2, help="decoder layers of --model")
    parser.add_argument("--patch", choices=sorted(PATCHES), default="retrace", help="the patch measured")
    args = parser.parse_args(argv)
    if args.model:
        from _models import build
        from scale import ET_BOUNDS

        selected = {
            f"{args.model} ({args.layers} layers)": (
                lambda: build(args.model, layers=args.layers),
                _ids(),
                {"dynamic": True, "bounds": ET_BOUNDS},
            )
        }
    else:
        every = cases()
        selected = {name: every[name] for name in args.names or every}
    from executorch.backends.xnnpack.partition.graphs import bilinear_2d

    bilinear_2d.get_graphs_dict()  # cached: built once per process, by whichever lowering comes first
    for name, case in selected.items():
        print(measure(name, case, args.patch), flush=True)
    from scale import versions

    print(f"load average {os.getloadavg()}; {versions()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
