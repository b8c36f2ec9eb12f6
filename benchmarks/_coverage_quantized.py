"""Quantized generation cells of ``coverage.py --all``: the weight quantization users ship, and how close it stays.

A cell ``gen-<format>-<int8|int4>`` exports like a ``gen-<format>`` cell with the weight-only quantizer of
:data:`QUANTIZED` (ONNX Runtime's ``MatMulNBits`` for ONNX, the format onnxruntime-genai and transformers.js load;
NNCF weight compression for OpenVINO, as optimum-intel applies it), and generates the same prompts. Its tokens
are not eager's float tokens, and no eager reference runs the same kernels, so the measure is one of closeness:
:func:`eager_ranks` scores every token the quantized export chose with the eager float model given the same
prefix (teacher-forced on the export's own output), and a run passes when each chosen token is among eager's
:data:`TOP_K` most likely (rank 0 is eager's own greedy choice). Positions after a row's end-of-sequence token are
not scored (generate pads them). The row records the worst rank and the share of rank-0 tokens.
"""

from __future__ import annotations

import inspect
from typing import Any

#: a chosen token passes when eager ranks it among its TOP_K most likely next tokens
TOP_K = 5


def _onnx(bits: int) -> Any:
    from hub_export import OnnxRuntimeQuantizer, OnnxRuntimeWeightOnlyConfig

    return OnnxRuntimeQuantizer(OnnxRuntimeWeightOnlyConfig(bits=bits))


def _openvino(mode: str) -> Any:
    from hub_export import NNCFQuantizer, NNCFWeightCompressionConfig

    # int4: one scale per output channel (group_size=-1), as tiny widths are not multiples of the usual 128
    settings = {"group_size": -1} if mode.startswith("int4") else {}
    return NNCFQuantizer(NNCFWeightCompressionConfig(mode, **settings))


#: backend -> (format, the quantizer's factory, its argument)
QUANTIZED: dict[str, tuple[str, Any, Any]] = {
    "gen-onnx-int8": ("onnx", _onnx, 8),
    "gen-onnx-int4": ("onnx", _onnx, 4),
    "gen-openvino-int8": ("openvino", _openvino, "int8_asym"),
    "gen-openvino-int4": ("openvino", _openvino, "int4_sym"),
}


def split_backend(backend: str) -> tuple[str, Any]:
    """``gen-onnx-int8`` -> ``("onnx", its quantizer)``; ``gen-onnx`` -> ``("onnx", None)``."""
    if backend in QUANTIZED:
        fmt, factory, argument = QUANTIZED[backend]
        return fmt, factory(argument)
    return backend[len("gen-") :], None


def _eos_ids(model: Any) -> set[int]:
    eos = getattr(model.generation_config, "eos_token_id", None)
    return set(eos if isinstance(eos, list) else [] if eos is None else [eos])


def eager_ranks(model: Any, inputs: dict[str, Any], produced: Any) -> Any:
    """The rank under eager's next-token logits of each new token in ``produced`` (-1 where not scored)."""
    import torch

    with torch.no_grad():
        if getattr(model.config, "is_encoder_decoder", False):
            logits = model(**inputs, decoder_input_ids=produced).logits[:, :-1]
            chosen = produced[:, 1:]
        else:
            length = inputs["input_ids"].shape[1]
            full = {**inputs, "input_ids": produced}
            mask = inputs.get("attention_mask")
            if mask is not None:
                new = produced.shape[1] - length
                full["attention_mask"] = torch.cat([mask, mask.new_ones(mask.shape[0], new)], dim=-1)
                if "position_ids" in inspect.signature(model.forward).parameters:  # as generate() counts them
                    positions = full["attention_mask"].long().cumsum(-1) - 1
                    full["position_ids"] = positions.masked_fill(full["attention_mask"] == 0, 1)
            logits = model(**full).logits[:, length - 1 : -1]
            chosen = produced[:, length:]
    picked = logits.gather(-1, chosen[..., None])
    ranks = (logits > picked).sum(-1)
    ended = torch.zeros_like(chosen, dtype=torch.bool)
    for eos in _eos_ids(model):  # after a row's first end-of-sequence token generate only pads
        hit = (chosen == eos).long().cumsum(-1)
        ended |= (hit - (chosen == eos).long()) > 0
    return ranks.masked_fill(ended, -1)


def closeness(model: Any, inputs: dict[str, Any], produced: Any, where: str, row: dict[str, Any]) -> str | None:
    """Score a quantized run (see the module docstring); None when it passes, else why not. ``row`` collects the
    worst rank and the rank-0 share over the cell's runs."""
    ranks = eager_ranks(model, inputs, produced)
    scored = ranks[ranks >= 0]
    worst = int(scored.max()) if scored.numel() else 0
    row["worst_rank"] = max(worst, row.get("worst_rank", 0))
    share = float((scored == 0).float().mean()) if scored.numel() else 1.0
    row["eager_choice_share"] = round(min(share, row.get("eager_choice_share", 1.0)), 3)
    if worst < TOP_K:
        return None
    return f"{where}: a chosen token ranks {worst} under eager's next-token logits (top {TOP_K} passes)"
