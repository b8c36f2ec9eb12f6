"""One graph for the prompt and every step of a decoder-only generation export.

A decoder-only model's decode graph, traced on two new tokens against a filled cache (so that its query axis is
symbolic), also computes the prompt: the prompt's tokens against an empty cache. Where the format's exporter says
so (``HfExporter.one_generation_graph``: Dynamo, ONNX, OpenVINO, ExecuTorch), ``export_for_generation`` exports that
graph alone with its query axis admitting one token and its cache axis admitting none (:data:`CACHE_DIM`), then
checks it: the graph on the sample prompt with an empty cache must give eager's prefill logits, and on a one-token
step eager's decode logits. When both hold, the export has one component, ``decode``, and the plan maps the
``prefill`` stage to it, so the runtime holds the weights once (one torch program, one ONNX Runtime session, one
OpenVINO compiled model, one ExecuTorch method, whose XNNPACK delegate packs the weights once) instead of once per
graph. Otherwise it exports ``prefill`` and ``decode`` as before, and the plan's ``one_graph`` says why.
"""

from __future__ import annotations

import copy
import re
from typing import Any

__all__ = ["CACHE_DIM", "QUERY_DIM", "check_one_graph", "one_graph_refusal", "one_token_step", "prompt_step_refusal"]

#: The traced name of the decode graph's query axis (``input_ids`` axis 1 in a graph taking a cache).
QUERY_DIM = "sequence"
#: The traced name of the decode graph's cache axis (a cache leaf's axis 2). A prompt's step feeds it empty; a format
#: that bounds every dim from 1 (ExecuTorch plans memory for bounded dims) traced it so, yet its runtime runs a
#: zero-length cache: the signature admits 0, and :func:`check_one_graph` runs the graph on an empty cache.
CACHE_DIM = "past_sequence"


def one_graph_refusal(exporter: Any, model: Any, config: Any, main: Any, generation_config: Any) -> str | None:
    """Why this export cannot serve prompts with its decode graph, decided before capturing; None if it may try."""
    if not getattr(exporter, "one_generation_graph", False):
        return f"{exporter.export_format.value} exports a prefill graph and a decode graph"
    if not main.dynamic:
        return "dynamic=False pins the prompt length and the cache length of each graph"
    refusal = getattr(exporter, "one_graph_refusal", None)  # the format's own reason, for this config
    why = refusal(main) if callable(refusal) else None
    if why:
        return str(why)
    if isinstance(config, dict) and "prefill" in config:
        return "the config dict gives the prefill its own config"
    for each in config.values() if isinstance(config, dict) else (main,):
        quantizer = getattr(each, "quantizer", None)
        if quantizer is not None and quantizer.needs_calibration:
            return "a calibrating quantizer calibrates the prefill and the decode graph on their own inputs"
    model_config = getattr(model, "config", None)
    if bool(getattr(model_config, "is_encoder_decoder", False)):
        return "an encoder-decoder model"
    from .multimodal import find_parts

    if find_parts(model) is not None:
        return "a multimodal model: its prompt step chains encoders, projector and language model"
    config_of = generation_config if generation_config is not None else getattr(model, "generation_config", None)
    if (getattr(config_of, "cache_implementation", None) or "dynamic") != "dynamic":
        return "a static cache: the prefill fills preallocated buffers"
    return None


def prompt_step_refusal(components: dict[str, Any], capture: Any, cache: str) -> str | None:
    """Why the captured stages cannot be served by the decode graph alone; None if they can."""
    if capture.no_cache:
        return "the model generates without a cache (every step runs the whole sequence)"
    if set(components) != {"prefill", "decode"} or capture.multimodal is not None:
        return f"the model generates through {sorted(components)}"
    if cache != "past_key_values":
        return "a state-space cache (conv and SSM states) whose prefill and decode compute differently"
    from ..structure import flatten_value

    leaves: list[tuple[str, Any]] = []
    value = components["decode"][1].get(cache)
    if value is not None:
        flatten_value(value, (cache,), leaves)
    if any(re.search(r"\.(conv|recurrent)(\.\d+)?$", name) for name, _ in leaves):  # one state or several
        return "a hybrid cache with state-space layers (conv and SSM states), whose prompt and step compute differently"
    return None


def check_one_graph(
    runner: Any,
    metadata: Any,
    model: Any,
    prompt: dict[str, Any],
    step: dict[str, Any],
    plan: dict[str, Any],
) -> str | None:
    """Run the exported decode graph (``runner``: the export's parity runner, ``metadata``: its component's entry)
    on the sample prompt with an empty cache and on a one-token step; None when both give eager's last-position
    logits, else why not.

    The tolerance is ten times the component's own parity difference, at least ``1e-3`` of the logits' scale.
    """
    import torch

    from .loop import _empty_cache, _select

    token_input, cache = plan["token_input"], plan["cache"]
    spec = next((s for s in metadata.signature.inputs if s.name == token_input), None)
    query = spec.shape[1] if spec is not None and len(spec.shape) > 1 else None
    dims = metadata.signature.dims
    if not isinstance(query, str) or query not in dims or dims[query].min > 1:
        return f"the decode graph's {token_input} axis 1 does not take one token (traced as {query!r})"
    noise = float((metadata.parity or {}).get("max_abs_diff") or 0.0)
    batch = int(prompt[token_input].shape[0])
    cases = (("the sample prompt on an empty cache", prompt, True), ("a one-token decode step", step, False))
    for label, kwargs, empty in cases:
        with torch.no_grad():
            expected = model(**copy.deepcopy(kwargs)).logits[:, -1].float()
        given = copy.deepcopy(kwargs)
        if empty:
            given[cache] = _empty_cache(runner, cache, batch)
        try:
            got = runner(**_select(runner, given))[plan["logits"]][:, -1].float()
        except Exception as exc:  # noqa: BLE001 - whatever the runtime raises: the graph does not serve this
            return f"the decode graph failed on {label}: {type(exc).__name__}: {str(exc)[:300]}"
        if got.shape != expected.shape:
            return f"the decode graph returned logits of shape {tuple(got.shape)} on {label}, eager {tuple(expected.shape)}"
        diff = float((got - expected).abs().max())
        limit = max(10 * noise, 1e-3 * max(1.0, float(expected.abs().max())))
        if not diff <= limit:
            return f"the decode graph differs from eager on {label} (max abs diff {diff:.3g} > {limit:.3g})"
    return None


def one_token_step(capture: Any, token_input: str) -> dict[str, Any] | None:
    """The first captured call feeding one token against a filled cache (a plain decode step)."""
    for call in capture.calls[1:]:
        ids = call.get(token_input)
        if ids is not None and ids.dim() == 2 and ids.shape[1] == 1:
            return call
    return None
