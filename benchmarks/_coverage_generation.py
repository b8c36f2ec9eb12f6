"""Generation cells of the coverage benchmark: ``export_for_generation`` + ``generate`` vs eager ``generate``.

A cell ``gen-<format>`` exports a generative zoo case (decoder, MoE, SSM, encoder-decoder, vision-language) with
``export_for_generation(..., dynamic=True)`` on its prompt, then generates 8 greedy tokens from the prompt and from
a left-padded batch of another length, and passes when both are token-identical to eager ``model.generate``.
The peer's ``ExportedModel`` has no ``generate`` (its multi-component exports do not run): its cell records
whether ``export_for_generation`` succeeded and fails with that reason.
"""

from __future__ import annotations

import time
from typing import Any

#: zoo families whose models generate
GENERATIVE_FAMILIES = ("decoder", "moe", "ssm", "seq2seq", "vlm")
NEW_TOKENS = 8


def is_generation_backend(backend: str) -> bool:
    return backend.startswith("gen-")


def _prompt(inputs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in inputs.items() if not k.startswith("decoder_") and k != "token_type_ids"}


def _export(tool: str, fmt: str, model: Any, prompt: dict[str, Any]) -> Any:
    if tool == "hub":
        from hub_export.configs import AutoExportConfig
        from hub_export.export.auto import exporter_class

        config = AutoExportConfig.config_class(fmt)(dynamic=True)
        return exporter_class(fmt)().export_for_generation(model, prompt, config=config)
    from transformers.exporters import AutoExportConfig, AutoHfExporter

    config = AutoExportConfig.from_dict({"export_format": fmt, "dynamic": True})
    return AutoHfExporter.from_config(config).export_for_generation(model, prompt, config=config)


def run_generation_cell(case: Any, tool: str, backend: str, row: dict[str, Any]) -> dict[str, Any]:
    """Fill ``row`` for one generation cell (exceptions propagate to the caller, which records them)."""
    import torch

    fmt = backend[len("gen-") :]
    prompt = _prompt(case.sample)
    runs = [prompt, _prompt(case.other)]
    start = time.perf_counter()
    row["stage"] = "export_for_generation"
    exported = _export(tool, fmt, case.model, prompt)
    row["export_s"] = round(time.perf_counter() - start, 2)
    if not hasattr(exported, "generate"):
        row.pop("stage")
        row["reason"] = (
            f"exported {sorted(exported.components)} but its ExportedModel has no generate(): the components do not run"
        )
        return row
    mismatches = []
    for where, inputs in zip(("sample", "other"), runs):
        row["stage"] = f"generate {where}"
        with torch.no_grad():
            expected = case.model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)
        produced = exported.generate(**inputs, max_new_tokens=NEW_TOKENS)
        if produced.shape != expected.shape or not torch.equal(produced, expected):
            same = int((produced == expected).all(-1).sum()) if produced.shape == expected.shape else 0
            mismatches.append(f"{where}: {same}/{expected.shape[0]} rows token-identical")
    row.pop("stage")
    row["max_diff"] = 0.0 if not mismatches else float("inf")
    row["ok"] = not mismatches
    if mismatches:
        row["reason"] = "greedy tokens differ from eager generate (" + "; ".join(mismatches) + ")"
    return row
