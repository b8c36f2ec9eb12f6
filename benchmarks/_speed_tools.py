"""The tools ``benchmarks/generation.py --compare`` measures, and how each one is prepared, loaded and run.

Every tool runs in its own process (:mod:`_speed_worker`): ours under the project's interpreter, the peers
(onnxruntime-genai, optimum-intel) under ``--peer-python``, an environment of their own, since they pin other
transformers versions. Nothing here imports a tool's package at module level.

A tool's artifacts live in ``<workdir>/<size>/<tool>/``; the random-weight model it is built from is
``<workdir>/<size>/hf`` (``save_pretrained``), its prompt ``<workdir>/<size>/prompt.json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Model shapes (random weights, real configs at real sizes): hidden, intermediate, layers, heads, kv heads, vocab.
SIZES: dict[str, dict[str, Any]] = {
    "small": {
        "model_type": "llama",
        "hidden_size": 512,
        "intermediate_size": 1536,
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "vocab_size": 32000,
        "max_position_embeddings": 512,
        "tie_word_embeddings": False,
    },
    "qwen2-0.5b": {
        "model_type": "qwen2",
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": True,
    },
    "llama-1b": {
        "model_type": "llama",
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
        "tie_word_embeddings": True,
    },
}


@dataclass(frozen=True)
class Tool:
    """One row of the comparison.

    Attributes:
        name: Row name.
        runtime: The runtime that executes it (rows of one runtime and precision are compared with each other).
        precision: Weight precision (fp32, int8, int4).
        peer: Whether it is a peer tool (runs under ``--peer-python``).
        module: The import that must succeed for it to run (the tool is skipped with the reason otherwise).
    """

    name: str
    runtime: str
    precision: str
    peer: bool
    module: str


TOOLS: dict[str, Tool] = {
    t.name: t
    for t in (
        Tool("eager", "PyTorch", "fp32", False, "transformers"),
        Tool("hub-dynamo", "PyTorch", "fp32", False, "hub_export"),
        Tool("hub-dynamo-aoti", "PyTorch", "fp32", False, "hub_export"),
        Tool("hub-dynamo-aoti-1t", "PyTorch", "fp32", False, "hub_export"),
        Tool("hub-onnx", "ONNX Runtime", "fp32", False, "onnxruntime"),
        Tool("genai", "ONNX Runtime", "fp32", True, "onnxruntime_genai"),
        Tool("hub-onnx-int4", "ONNX Runtime", "int4", False, "onnxruntime"),
        Tool("hub-onnx-int4-1t", "ONNX Runtime", "int4", False, "onnxruntime"),
        Tool("genai-int4", "ONNX Runtime", "int4", True, "onnxruntime_genai"),
        Tool("hub-openvino", "OpenVINO", "fp32", False, "openvino"),
        Tool("optimum", "OpenVINO", "fp32", True, "optimum.intel"),
        Tool("hub-openvino-int8", "OpenVINO", "int8", False, "nncf"),
        Tool("hub-openvino-int8-kvu8", "OpenVINO", "int8", False, "nncf"),
        Tool("hub-openvino-int8-kvf32", "OpenVINO", "int8", False, "nncf"),
        Tool("optimum-int8", "OpenVINO", "int8", True, "optimum.intel"),
        Tool("hub-openvino-int4", "OpenVINO", "int4", False, "nncf"),
        Tool("hub-openvino-int4-1t", "OpenVINO", "int4", False, "nncf"),
        Tool("optimum-int4", "OpenVINO", "int4", True, "optimum.intel"),
        Tool("hub-executorch", "ExecuTorch", "fp32", False, "executorch"),
    )
}

#: Rows that load another row's export with runner options of their own: row -> (the export's row, options).
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "hub-dynamo-aoti-1t": ("hub-dynamo-aoti", {"num_threads": 1}),
    "hub-onnx-int4-1t": ("hub-onnx-int4", {"intra_op_num_threads": 1}),
    "hub-openvino-int4-1t": ("hub-openvino-int4", {"num_threads": 1}),
    # the KV cache in OpenVINO's CPU default (u8) and in float32, whatever the runner's default for the export is
    "hub-openvino-int8-kvu8": ("hub-openvino-int8", {"config": {"KV_CACHE_PRECISION": "u8"}}),
    "hub-openvino-int8-kvf32": ("hub-openvino-int8", {"config": {"KV_CACHE_PRECISION": "f32"}}),
}

#: int4 settings shared by our OpenVINO export and optimum-intel's (asymmetric, one scale per 128 weights, all layers).
OV_INT4 = {"group_size": 128, "ratio": 1.0, "sym": False}


def build_hf_model(size: str, folder: Path, seed: int = 0) -> dict[str, Any]:
    """Save a random-weight model of ``size`` to ``folder`` (built on the meta device, materialized in fp32)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = dict(SIZES[size])
    config = AutoConfig.for_model(
        spec.pop("model_type"), bos_token_id=1, eos_token_id=2, pad_token_id=0, torch_dtype="float32", **spec
    )
    torch.manual_seed(seed)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    model = model.to_empty(device="cpu")
    model.tie_weights()  # to_empty unties them: a tied config would otherwise save two different tables
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.normal_(0.0, 0.02)
    model.model.rotary_emb = type(model.model.rotary_emb)(config=config)  # computed buffers, not random ones
    model.eval().save_pretrained(folder)
    params = sum(p.numel() for p in model.parameters())
    return {"params": params, "weight_bytes": params * 4}


def prompt(folder: Path) -> dict[str, Any]:
    """The prompt every tool gets: ``{"input_ids": [[...]]}``."""
    return json.loads((folder / "prompt.json").read_text())


# -- preparing (exporting) -----------------------------------------------------------------------------------------


def prepare(tool: str, size_dir: Path, out: Path) -> None:
    """Export or build ``tool``'s artifacts from ``size_dir/hf`` into ``out`` (a variant: its export's row's)."""
    if tool in VARIANTS:
        source = VARIANTS[tool][0]
        if not (size_dir / source).is_dir():
            _PREPARE[source](size_dir, size_dir / source)
        out.mkdir(parents=True, exist_ok=True)
        return
    _PREPARE[tool](size_dir, out)


def _ours(size_dir: Path, out: Path, config_factory: Callable[[], Any]) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from hub_export.export.auto import AutoHfExporter

    model = AutoModelForCausalLM.from_pretrained(size_dir / "hf", dtype=torch.float32).eval()
    ids = torch.tensor(prompt(size_dir)["input_ids"])
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    config = config_factory()
    exporter = AutoHfExporter.from_config(config)
    exporter.export_for_generation(model, inputs, config=config).save_pretrained(out)


def _onnx(quantized: bool) -> Callable[[Path, Path], None]:
    def make() -> Any:
        from hub_export import OnnxConfig, OnnxRuntimeQuantizer, OnnxRuntimeWeightOnlyConfig

        quantizer = OnnxRuntimeQuantizer(OnnxRuntimeWeightOnlyConfig()) if quantized else None
        return OnnxConfig(dynamic=True, ort_fusions="cpu", quantizer=quantizer)

    return lambda size_dir, out: _ours(size_dir, out, make)


def _openvino(mode: str | None) -> Callable[[Path, Path], None]:
    def make() -> Any:
        from hub_export import NNCFQuantizer, NNCFWeightCompressionConfig, OpenVINOConfig

        quantizer = None
        if mode == "int8":
            quantizer = NNCFQuantizer(NNCFWeightCompressionConfig(mode="int8_asym"))
        elif mode == "int4":
            compression = NNCFWeightCompressionConfig(
                mode="int4_sym" if OV_INT4["sym"] else "int4_asym",
                group_size=OV_INT4["group_size"],
                ratio=OV_INT4["ratio"],
            )
            quantizer = NNCFQuantizer(compression)
        return OpenVINOConfig(dynamic=True, quantizer=quantizer)

    return lambda size_dir, out: _ours(size_dir, out, make)


def _dynamo(compile: str | None) -> Callable[[Path, Path], None]:
    def make() -> Any:
        from hub_export import DynamoConfig

        return DynamoConfig(dynamic=True, compile=compile)

    return lambda size_dir, out: _ours(size_dir, out, make)


def _executorch(size_dir: Path, out: Path) -> None:
    def make() -> Any:
        from hub_export import ExecutorchConfig

        return ExecutorchConfig(dynamic=True)

    _ours(size_dir, out, make)


def _genai(precision: str) -> Callable[[Path, Path], None]:
    def run(size_dir: Path, out: Path) -> None:
        import subprocess
        import sys

        command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(size_dir / "hf")]
        command += ["-o", str(out), "-p", precision, "-e", "cpu", "-c", str(out.parent / f"{out.name}-cache")]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)

    return run


def _optimum(precision: str) -> Callable[[Path, Path], None]:
    def run(size_dir: Path, out: Path) -> None:
        from optimum.intel import OVModelForCausalLM, OVWeightQuantizationConfig

        kwargs: dict[str, Any] = {"export": True, "compile": False}
        if precision == "fp32":
            kwargs["load_in_8bit"] = False
        elif precision == "int8":
            kwargs["quantization_config"] = OVWeightQuantizationConfig(bits=8)
        else:
            kwargs["quantization_config"] = OVWeightQuantizationConfig(bits=4, **OV_INT4)
        OVModelForCausalLM.from_pretrained(size_dir / "hf", **kwargs).save_pretrained(out)

    return run


def _nothing(size_dir: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)


_PREPARE: dict[str, Callable[[Path, Path], None]] = {
    "eager": _nothing,
    "hub-dynamo": _dynamo(None),
    "hub-dynamo-aoti": _dynamo("aoti"),
    "hub-onnx": _onnx(False),
    "hub-onnx-int4": _onnx(True),
    "hub-openvino": _openvino(None),
    "hub-openvino-int8": _openvino("int8"),
    "hub-openvino-int4": _openvino("int4"),
    "hub-executorch": _executorch,
    "genai": _genai("fp32"),
    "genai-int4": _genai("int4"),
    "optimum": _optimum("fp32"),
    "optimum-int8": _optimum("int8"),
    "optimum-int4": _optimum("int4"),
}


# -- loading and generating ------------------------------------------------------------------------------------------


def load(tool: str, size_dir: Path, folder: Path) -> Callable[[list[int], int], list[int]]:
    """Load ``tool`` and return ``generate(prompt_ids, new_tokens) -> new token ids`` (greedy, batch 1)."""
    if tool == "eager":
        return _load_eager(size_dir)
    if tool.startswith("genai"):
        return _load_genai(folder)
    if tool.startswith("optimum"):
        return _load_optimum(folder, tool)
    source, options = VARIANTS.get(tool, (tool, {}))
    return _load_ours(size_dir / source, trusted=source == "hub-dynamo-aoti", options=options)


def _load_eager(size_dir: Path) -> Callable[[list[int], int], list[int]]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(size_dir / "hf", dtype=torch.float32).eval()

    def generate(ids: list[int], new: int) -> list[int]:
        tensor = torch.tensor([ids])
        with torch.no_grad():
            out = model.generate(
                input_ids=tensor,
                attention_mask=torch.ones_like(tensor),
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
            )
        return out[0, len(ids) :].tolist()

    return generate


def _load_ours(folder: Path, trusted: bool, options: dict[str, Any]) -> Callable[[list[int], int], list[int]]:
    import torch

    from hub_export import ExportedModel

    model = ExportedModel.from_pretrained(folder, trust_native_code=trusted, **options)
    # transformers' GenerationMixin (min_new_tokens) where the export has it, else the plain loop (no EOS stop)
    stop = {"min_new_tokens": None} if hasattr(model, "can_generate") else {"eos_token_id": []}

    def generate(ids: list[int], new: int) -> list[int]:
        tensor = torch.tensor([ids])
        kwargs = {k: (new if v is None else v) for k, v in stop.items()}
        out = model.generate(input_ids=tensor, attention_mask=torch.ones_like(tensor), max_new_tokens=new, **kwargs)
        return out[0, len(ids) :].tolist()

    return generate


def _load_genai(folder: Path) -> Callable[[list[int], int], list[int]]:
    import numpy as np
    import onnxruntime_genai as og

    model = og.Model(str(folder))

    def generate(ids: list[int], new: int) -> list[int]:
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(ids) + new, min_length=len(ids) + new, do_sample=False)
        generator = og.Generator(model, params)
        generator.append_tokens(np.array([ids], dtype=np.int64))
        while not generator.is_done():
            generator.generate_next_token()
        return [int(t) for t in generator.get_sequence(0)][len(ids) :]

    return generate


def _load_optimum(folder: Path, tool: str) -> Callable[[list[int], int], list[int]]:
    import torch
    from optimum.intel import OVModelForCausalLM

    # float32 inference like ours (a CPU with bf16 support would otherwise run bf16); quantized weights take the
    # same hint as our quantized exports (f32 activations)
    model = OVModelForCausalLM.from_pretrained(folder, ov_config={"INFERENCE_PRECISION_HINT": "f32"})

    def generate(ids: list[int], new: int) -> list[int]:
        tensor = torch.tensor([ids])
        out = model.generate(
            input_ids=tensor,
            attention_mask=torch.ones_like(tensor),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
        )
        return out[0, len(ids) :].tolist()

    return generate
