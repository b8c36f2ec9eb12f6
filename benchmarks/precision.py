"""Half precision on every format: does a bfloat16 / float16 model export, load and run, and how close is it to eager?

Not a test. Each model (random weights, built from a config, then ``model.to(dtype)``) is exported with
``dynamic=True`` to each format, saved, loaded back with ``ExportedModel.from_pretrained`` and called on inputs of
another batch and length than the sample; eager PyTorch in the same dtype is the reference. Printed per cell: the
parity the export measured on its sample inputs (``max_abs_diff``, the ``atol`` it was held to), the difference on the
other inputs, both relative to the largest eager output, and that difference in units in the last place of the
dtype at that magnitude (``ulp``); with ``--generate``, ``export_for_generation`` + ``generate()`` and whether its
greedy tokens equal eager ``generate()``'s. A cell a runtime refuses shows its one-line error. Lines are also
appended to ``--results`` (JSON lines). Usage::

    python benchmarks/precision.py [--models llama qwen2 bert t5 llama-58m] [--formats dynamo onnx openvino
        executorch] [--dtypes bfloat16 float16] [--generate] [--openvino-hint f32 bf16 f16]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import torch

MANTISSA_BITS = {"float32": 23, "bfloat16": 7, "float16": 10}


def _text(batch: int, seq: int, vocab: int, seed: int, pad_left: int = 0) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (batch, seq), generator=gen)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[0, :pad_left] = 0
    return {"input_ids": ids, "attention_mask": mask}


def build(name: str) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """``(model, sample kwargs, other kwargs)`` of a model, float32, seeded."""
    import transformers as tf

    torch.manual_seed(0)
    small = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2}
    heads = {"num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128}
    ids = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    if name == "llama":
        model = tf.LlamaForCausalLM(tf.LlamaConfig(**small, **heads, **ids))
    elif name == "qwen2":
        model = tf.Qwen2ForCausalLM(tf.Qwen2Config(**small, **heads, **ids, tie_word_embeddings=True))
    elif name == "llama-58m":
        from generation import small_llama  # this script's folder is on sys.path

        model = small_llama()
        return model.eval(), _text(1, 16, 32000, 0), _text(2, 24, 32000, 1, pad_left=5)
    elif name == "bert":
        config = tf.BertConfig(**small, num_attention_heads=4, max_position_embeddings=128, num_labels=3)
        model = tf.BertForSequenceClassification(config)
        sample = {**_text(2, 8, 96, 0), "token_type_ids": torch.zeros(2, 8, dtype=torch.int64)}
        other = {**_text(3, 13, 96, 1, pad_left=3), "token_type_ids": torch.zeros(3, 13, dtype=torch.int64)}
        return model.eval(), sample, other
    elif name == "t5":
        config = tf.T5Config(
            vocab_size=96, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, decoder_start_token_id=0,
            pad_token_id=0, eos_token_id=1,
        )  # fmt: skip
        model = tf.T5ForConditionalGeneration(config)
        sample = {**_text(2, 7, 96, 0), "decoder_input_ids": _text(2, 3, 96, 7)["input_ids"]}
        other = {**_text(3, 10, 96, 1), "decoder_input_ids": _text(3, 5, 96, 8)["input_ids"]}
        return model.eval(), sample, other
    else:
        raise SystemExit(f"unknown model {name!r}")
    return model.eval(), _text(1, 7, 96, 0), _text(3, 11, 96, 1, pad_left=4)


def _leaves(output: Any) -> list[torch.Tensor]:
    from hub_export.structure import flatten_value

    leaves: list[Any] = []
    flatten_value(output, (), leaves)
    return [t for _, t in leaves]


def _ulp(diff: float, magnitude: float, dtype: str) -> float:
    """``diff`` in units in the last place of ``dtype`` at ``magnitude``."""
    if magnitude <= 0:
        return 0.0
    return diff / 2.0 ** (math.floor(math.log2(magnitude)) - MANTISSA_BITS[dtype])


def _config(fmt: str, hint: str | None) -> Any:
    from hub_export.formats import backend_for

    config_class = backend_for(fmt).config_class
    return config_class(dynamic=True, inference_precision=hint) if hint else config_class(dynamic=True)


def cell(name: str, fmt: str, dtype: str, hint: str | None, generate: bool) -> dict[str, Any]:
    """Export, save, load and call one (model, format, dtype); the measurements as a dict."""
    from hub_export import ExportedModel
    from hub_export.formats import backend_for

    model, sample, other = build(name)
    model = model.to(getattr(torch, dtype))
    row: dict[str, Any] = {"model": name, "format": fmt, "dtype": dtype, "hint": hint, "generate": generate}
    exporter = backend_for(fmt).exporter_class()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        if generate:
            prompt = {k: v for k, v in sample.items() if not k.startswith("decoder")}
            exported = exporter.export_for_generation(model, prompt, config=_config(fmt, hint))
            exported.save_pretrained(Path(tmp) / "x")
            loaded = ExportedModel.from_pretrained(Path(tmp) / "x")
            runs = [prompt, {k: v for k, v in other.items() if not k.startswith("decoder")}]
            equal = [
                torch.equal(
                    model.generate(**r, max_new_tokens=8, do_sample=False), loaded.generate(**r, max_new_tokens=8)
                )
                for r in runs
            ]
            row["tokens_equal"] = all(equal)
            row["parity"] = {n: c.metadata.parity for n, c in exported.components.items()}
        else:
            exported = exporter.export(model, sample, config=_config(fmt, hint))
            exported.save_pretrained(Path(tmp) / "x")
            loaded = ExportedModel.from_pretrained(Path(tmp) / "x")
            metadata = loaded.components["model"].metadata
            with torch.no_grad():
                expected = _leaves(model(**other))
            produced = _leaves(loaded(**other))
            diff = max(float((a.double() - b.double()).abs().max()) for a, b in zip(expected, produced))
            magnitude = max(float(a.double().abs().max()) for a in expected if a.is_floating_point())
            row.update(
                parity=metadata.parity,
                other_diff=diff,
                other_max_abs=magnitude,
                other_rel=diff / magnitude,
                other_ulp=_ulp(diff, magnitude, dtype),
                out_dtypes=sorted({s.dtype for s in metadata.signature.outputs}),
                weights=metadata.weights,
                dtypes_match=all(str(b.dtype).removeprefix("torch.") == s.dtype for b, s in zip(produced, metadata.signature.outputs)),
            )  # fmt: skip
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def _line(row: dict[str, Any]) -> str:
    head = f"{row['model']:10} {row['format']:10} {row['dtype']:9} {row['hint'] or '-':5}"
    if "error" in row:
        return f"{head} ERROR {row['error']}"
    if row["generate"]:
        worst = max(p["max_abs_diff"] for p in row["parity"].values())
        return f"{head} generate: tokens == eager {row['tokens_equal']}, worst stage parity {worst:.3g}"
    p = row["parity"]
    return (
        f"{head} parity {p['max_abs_diff']:.3g} (atol {p['atol']:.3g}), other inputs: diff {row['other_diff']:.3g} "
        f"= {row['other_rel']:.2e} of max |eager| {row['other_max_abs']:.3g} = {row['other_ulp']:.1f} ulp; "
        f"outputs {row['out_dtypes']} dtypes ok {row['dtypes_match']}; {row['seconds']} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["llama", "qwen2", "bert", "t5"])
    parser.add_argument("--formats", nargs="+", default=["dynamo", "onnx", "openvino", "executorch"])
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float16"])
    parser.add_argument("--openvino-hint", nargs="+", default=[None], help="inference_precision values to try")
    parser.add_argument("--generate", action="store_true", help="export_for_generation + generate() instead")
    parser.add_argument("--results", type=Path, default=None, help="append JSON lines here")
    args = parser.parse_args()
    import onnxruntime
    import openvino
    import transformers

    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f}; torch {torch.__version__}, transformers {transformers.__version__}, "
        f"onnxruntime {onnxruntime.__version__}, openvino {openvino.__version__}",
        flush=True,
    )
    for name in args.models:
        for dtype in args.dtypes:
            for fmt in args.formats:
                for hint in args.openvino_hint if fmt == "openvino" else [None]:
                    try:
                        row = cell(name, fmt, dtype, hint, args.generate)
                    except Exception as exc:  # a cell that fails is a result
                        last = traceback.extract_tb(exc.__traceback__)[-1]
                        row = {"model": name, "format": fmt, "dtype": dtype, "hint": hint, "generate": args.generate,
                               "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]} ({Path(last.filename).name}:{last.lineno})"}  # fmt: skip
                    print(_line(row), flush=True)
                    if args.results is not None:
                        with args.results.open("a", encoding="utf-8") as out:
                            out.write(json.dumps(row, default=str) + "\n")


if __name__ == "__main__":
    main()
