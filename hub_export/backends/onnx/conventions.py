"""What ONNX's own runtimes and tools read in an export folder: file names, graph names, dims, their config files.

transformers.js, optimum-onnx's ``ORTModelFor...`` and onnxruntime-genai each load a folder by convention, not by
our ``export.json``; an export follows all three:

* **File names.** A model's graph is ``model.onnx``, its weights ``model.onnx_data`` (transformers.js fetches
  ``<file>_data`` beside ``<file>``), and a quantized or half-precision graph carries the suffix transformers.js's
  ``dtype`` option selects (``model_quantized.onnx`` for ``dtype: "q8"``, ``model_q4.onnx``, ``model_fp16.onnx``):
  :func:`file_stem`. The graph of a decoder-only generation export (the one ``decode`` graph serving the prompt and
  every step) is that ``model``; a graph export (a plain forward) of a causal LM without cache inputs is
  ``decoder_model`` instead, the name optimum gives such a decoder: transformers.js always feeds a decoder one token after the
  first step, expecting a cache it could feed back, so it must not find such a graph as ``model.onnx`` and generate
  wrong tokens without an error. Components of other exports keep their own names (``encoder.onnx``).
* **Graph names.** The cache fed back is ``past_key_values.<layer>.key|value`` (``.decoder.``/``.encoder.`` in
  between for an encoder-decoder), the cache returned ``present.<layer>...``: :func:`graph_input_name`,
  :func:`graph_output_name` (``export.json`` keeps hub_export's own names, ``input.past_key_values.0.key``).
* **Dims.** ``batch_size``, ``sequence_length``, ``past_sequence_length``, ``total_sequence_length``
  (:data:`GRAPH_DIMS`): transformers.js sizes the empty cache of the first step from the cache input's shape,
  reading ``batch_size`` and taking any other symbol as 0.
* **Config files.** ``config.json`` gets ``transformers.js_config.use_external_data_format`` (transformers.js then
  fetches ``model.onnx_data``; without it, it loads ``model.onnx`` alone), and a decoder-only generation export
  gets onnxruntime-genai's ``genai_config.json``: :func:`write_runtime_files`.

Exports made before these conventions (``decode.onnx``, ``model.onnx.data``, ``input.``/``output.`` graph names)
still load: the runner finds each input by either name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...formats import one_graph_stem
from ...manifest import ComponentEntry, Manifest

__all__ = [
    "GENAI_CONFIG",
    "GRAPH_DIMS",
    "STEMS",
    "TRANSFORMERS_JS_CONFIG",
    "file_stem",
    "graph_dim",
    "graph_input_name",
    "graph_output_name",
    "write_runtime_files",
]

#: hub_export's dim names -> the names ONNX's tools read (optimum's, which transformers.js reads).
GRAPH_DIMS = {
    "batch": "batch_size",
    "sequence": "sequence_length",
    "past_sequence": "past_sequence_length",
    "total_sequence": "total_sequence_length",
    "encoder_sequence": "encoder_sequence_length",
    "decoder_sequence": "decoder_sequence_length",
}
#: transformers.js's ``dtype`` option -> the suffix of the file it loads (its ``DEFAULT_DTYPE_SUFFIX_MAPPING``).
DTYPE_SUFFIXES = {
    "fp32": "",
    "fp16": "_fp16",
    "int8": "_int8",
    "uint8": "_uint8",
    "q8": "_quantized",
    "q4": "_q4",
    "q4f16": "_q4f16",
}
#: The stems an ONNX component's files may carry besides the component's name.
STEMS = tuple(f"{base}{suffix}" for base in ("model", "decoder_model") for suffix in DTYPE_SUFFIXES.values())
#: onnxruntime-genai's config file.
GENAI_CONFIG = "genai_config.json"
#: The key of ``config.json`` holding transformers.js's options (read at the repo root).
TRANSFORMERS_JS_CONFIG = "transformers.js_config"
#: The cache kwarg whose flat tensors are renamed (``past_key_values.0.key`` in, ``present.0.key`` out).
_CACHE = "past_key_values"
_DIM_PATTERN = re.compile(r"\b(" + "|".join(sorted(GRAPH_DIMS, key=len, reverse=True)) + r")\b")


def graph_input_name(name: str) -> str:
    """The ONNX graph name of a flat input: a cache fed back (``input.past_key_values.0.key``) loses its prefix."""
    return name.removeprefix("input.")


def graph_output_name(name: str) -> str:
    """The ONNX graph name of a flat output: the cache a graph returns to be fed back is ``present.<layer>...``
    (``output.past_key_values.0.key`` -> ``present.0.key``); ``output.X`` of another cache is ``present.X``."""
    if not name.startswith("output."):
        return name
    name = name.removeprefix("output.")
    return "present" + name[len(_CACHE) :] if name.startswith(_CACHE + ".") else f"present.{name}"


def graph_dim(name: str) -> str:
    """An ONNX graph's name for a dim or a size expression over dims (``past_sequence + sequence`` ->
    ``past_sequence_length + sequence_length``)."""
    return _DIM_PATTERN.sub(lambda m: GRAPH_DIMS[m.group(1)], name)


def file_stem(component: str, entry: ComponentEntry, generation: Mapping[str, Any] | None) -> str:
    """The name of a component's files (see the module docstring): ``model`` + the dtype suffix for a model's one
    graph, ``decoder_model`` + suffix for a causal LM's plain forward, else the component's name."""
    if generation is None:
        if component != "model":
            return component
        base = "decoder_model" if _is_causal_lm(entry) and not _feeds_a_cache(entry) else "model"
    elif one_graph_stem(component, entry, generation) == "model":
        base = "model"
    else:
        return component
    return base + DTYPE_SUFFIXES[_dtype(entry)]


def _is_causal_lm(entry: ComponentEntry) -> bool:
    """Whether the component is a causal LM's forward (a class transformers' text-generation auto class loads)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return entry.architecture in set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())


def _feeds_a_cache(entry: ComponentEntry) -> bool:
    """Whether the graph takes a cache it also returns (traced from a step with ``past_key_values``)."""
    return any(spec.name.startswith("input.") for spec in entry.signature.inputs)


def _dtype(entry: ComponentEntry) -> str:
    """transformers.js's ``dtype`` name of a component: its weights' quantization, else its float dtype."""
    recipe = entry.quantization or {}
    settings = recipe.get("settings") or {}
    half = entry.dtype == "float16"
    if not recipe:
        return "fp16" if half else "fp32"
    mode = str(settings.get("mode", ""))
    if settings.get("method") == "compress_weights":  # NNCF weight compression: int8_asym, int4_sym, ...
        four = mode.startswith("int4")
    elif mode == "weight_only":  # ONNX Runtime's MatMulNBits
        four = settings.get("bits") == 4
    elif mode == "dynamic":
        return "q8" if settings.get("weight_type", "int8") == "int8" else "uint8"
    else:  # calibrated quantization of weights and activations
        return "uint8" if settings.get("weight_type") == "uint8" else "int8"
    return ("q4f16" if half else "q4") if four else "q8"


def write_runtime_files(directory: Path, manifest: Manifest) -> list[str]:
    """``transformers.js_config`` in ``config.json`` (when a component reads an external data file) and, for a
    decoder-only generation export, onnxruntime-genai's ``genai_config.json``; returns the files written."""
    directory = Path(directory)
    written = []
    config_path = directory / "config.json"
    if config_path.is_file() and any(
        entry.path.endswith((".onnx_data", ".onnx.data")) for entry in manifest.component_files()
    ):
        config = json.loads(config_path.read_text(encoding="utf-8"))
        if set_external_data_flag(config):
            config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            written.append("config.json")
    genai = genai_config(directory, manifest)
    if genai is not None:
        (directory / GENAI_CONFIG).write_text(json.dumps(genai, indent=2) + "\n", encoding="utf-8")
        written.append(GENAI_CONFIG)
    return written


def set_external_data_flag(config: dict[str, Any]) -> bool:
    """Add ``transformers.js_config.use_external_data_format: true`` to a ``config.json``'s data; returns whether it
    changed (a value already there is kept)."""
    options = config.setdefault(TRANSFORMERS_JS_CONFIG, {})
    if not isinstance(options, dict) or "use_external_data_format" in options:
        return False
    options["use_external_data_format"] = True
    return True


def genai_config(directory: Path, manifest: Manifest) -> dict[str, Any] | None:
    """onnxruntime-genai's ``genai_config.json`` for a decoder-only generation export whose one graph takes
    ``input_ids``, ``attention_mask`` and a key/value cache (``None`` for any other export): the model's sizes and
    ids from ``config.json``, the graph's file and names, and the search defaults of ``generation_config.json``."""
    plan = manifest.generation or {}
    decode = manifest.components.get("decode")
    if plan.get("one_graph") is not True or decode is None or not decode.files:
        return None
    inputs = [spec.name for spec in decode.signature.inputs]
    outputs = [spec.name for spec in decode.signature.outputs]
    if "input_ids" not in inputs or "attention_mask" not in inputs or f"input.{_CACHE}.0.key" not in inputs:
        return None
    if any(name.startswith("input.") and not name.startswith(f"input.{_CACHE}.") for name in inputs):
        return None  # another cache (state-space states) genai cannot feed
    config = _read_json(directory / "config.json")
    text: dict[str, Any] = config["text_config"] if isinstance(config.get("text_config"), dict) else config
    generation = _read_json(directory / "generation_config.json")
    layers = sum(1 for name in inputs if name.startswith(f"input.{_CACHE}.") and name.endswith(".key"))
    key = next(s for s in decode.signature.inputs if s.name == f"input.{_CACHE}.0.key")
    heads, head_size = key.shape[1], key.shape[3]
    if not isinstance(heads, int) or not isinstance(head_size, int):
        return None
    program = next(entry.path for entry in decode.files if entry.path.endswith(".onnx"))
    graph_inputs = {"input_ids": "input_ids", "attention_mask": "attention_mask"}
    if "position_ids" in inputs:
        graph_inputs["position_ids"] = "position_ids"
    graph_inputs |= {"past_key_names": f"{_CACHE}.%d.key", "past_value_names": f"{_CACHE}.%d.value"}
    graph_outputs = {
        "logits": "logits",
        "present_key_names": "present.%d.key",
        "present_value_names": "present.%d.value",
    }
    if "logits" not in outputs:
        return None
    eos = generation.get("eos_token_id", text.get("eos_token_id"))
    pad = generation.get("pad_token_id", text.get("pad_token_id"))
    if pad is None:
        pad = eos[0] if isinstance(eos, list) else eos
    context = _context_length(text)
    return {
        "model": {
            "bos_token_id": generation.get("bos_token_id", text.get("bos_token_id")),
            "context_length": context,
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "filename": program,
                "head_size": head_size,
                "hidden_size": text.get("hidden_size", heads * head_size),
                "inputs": graph_inputs,
                "outputs": graph_outputs,
                "num_attention_heads": text.get("num_attention_heads", heads),
                "num_hidden_layers": layers,
                "num_key_value_heads": heads,
            },
            "eos_token_id": eos,
            "pad_token_id": pad,
            # genai's generic decoder-only type: the graph computes everything (rotary, masks, norms), so none of its
            # per-architecture handling applies ("gpt2" would read GPT-2's old fused key/value cache layout)
            "type": "decoder",
            "vocab_size": text.get("vocab_size"),
        },
        "search": {
            "diversity_penalty": 0.0,
            "do_sample": bool(generation.get("do_sample", False)),
            "early_stopping": True,
            "length_penalty": 1.0,
            "max_length": context,
            "min_length": 0,
            "no_repeat_ngram_size": 0,
            "num_beams": 1,
            "num_return_sequences": 1,
            "past_present_share_buffer": False,  # the graph concatenates its cache: it grows every step
            "repetition_penalty": float(generation.get("repetition_penalty", 1.0)),
            "temperature": float(generation.get("temperature", 1.0)),
            "top_k": int(generation.get("top_k", 50) or 50),
            "top_p": float(generation.get("top_p", 1.0) or 1.0),
        },
    }


def _context_length(text: Mapping[str, Any]) -> int:
    for name in ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length"):
        value = text.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 2048


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}
