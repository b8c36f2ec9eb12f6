"""Generation cells of the coverage benchmark: ``export_for_generation`` + ``generate`` vs eager ``generate``.

A cell ``gen-<format>`` exports a generative case with ``export_for_generation(..., dynamic=True)`` on its prompt,
then generates :data:`NEW_TOKENS` greedy tokens from the prompt and from a left-padded batch of another length, and
passes when both are token-identical to eager ``model.generate``. In the zoo the cases are the generative families
(decoder, MoE, SSM, encoder-decoder, vision-language); with ``--all`` every model type of a generative head
(:data:`GENERATIVE_HEADS`), whose other prompt is cut to a batch of two (its first row left-padded where the model
takes a mask), and the export is also saved, loaded back and run on that batch again.
The peer's ``ExportedModel`` has no ``generate`` (its multi-component exports do not run): its cell records
whether ``export_for_generation`` succeeded and fails with that reason.
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

#: zoo families whose models generate
GENERATIVE_FAMILIES = ("decoder", "moe", "ssm", "seq2seq", "vlm")
#: heads of the every-architecture matrix whose models generate (``--all``)
GENERATIVE_HEADS = ("causal-lm", "seq2seq-lm", "speech-seq2seq", "image-text-to-text")
NEW_TOKENS = 8


def is_generation_backend(backend: str) -> bool:
    return backend.startswith("gen-")


def _prompt(inputs: dict[str, Any]) -> dict[str, Any]:
    """The inputs ``generate`` takes: no decoder ids (it makes its own), no forward-only flags."""
    drop = ("token_type_ids", "use_cache", "return_dict", "output_hidden_states", "output_attentions")
    return {k: v for k, v in inputs.items() if not k.startswith("decoder_") and k not in drop}


def _batch_of_two(inputs: dict[str, Any]) -> dict[str, Any]:
    """The first two rows of a text prompt (every value a tensor of the same batch); others as they are."""
    import torch

    tensors = [v for v in inputs.values() if isinstance(v, torch.Tensor)]
    if len(tensors) != len(inputs) or len({t.shape[0] for t in tensors}) != 1 or tensors[0].shape[0] <= 2:
        return inputs
    return {k: v[:2] for k, v in inputs.items()}


def _vlm_batch_of_two(case: Any) -> dict[str, Any] | None:
    """For an image-text-to-text type: two images and a longer text than the sample's, its first row left-padded by
    two tokens (the harness's other inputs hold three images, which ``_batch_of_two`` cannot cut: patches are not
    per row); None where the harness cannot build them."""
    if getattr(case, "head", None) != "image-text-to-text":
        return None
    from _tiny_inputs import _Ids, _vlm_inputs

    inputs, error = _vlm_inputs(case.model, _Ids(case.model.config), 2, 9, 1)
    if error is not None or "attention_mask" not in inputs:
        return None
    inputs["attention_mask"] = inputs["attention_mask"].clone()
    inputs["attention_mask"][0, :2] = 0
    return inputs


def _export(tool: str, fmt: str, model: Any, prompt: dict[str, Any], quantizer: Any = None) -> Any:
    if tool == "hub":
        from hub_export.configs import AutoExportConfig
        from hub_export.export.auto import exporter_class

        config = AutoExportConfig.config_class(fmt)(dynamic=True, quantizer=quantizer)
        return exporter_class(fmt)().export_for_generation(model, prompt, config=config)
    from transformers.exporters import AutoExportConfig, AutoHfExporter

    config = AutoExportConfig.from_dict({"export_format": fmt, "dynamic": True})
    return AutoHfExporter.from_config(config).export_for_generation(model, prompt, config=config)


def _generation_defaults(model: Any, head: str | None) -> list[str]:
    """Give a tiny model the generation settings its checkpoints carry, where its config class's defaults leave
    them unset and then no ``generate`` runs as it should, eager or exported (notes on what was set):

    * an encoder-decoder's decoder start id (with no BOS id either, ``generate`` refuses): the pad id, else 0;
    * ``is_decoder=True`` for a causal-LM head whose config says it is not a decoder (BERT-generation: without
      it the model attends both ways and keeps no cache; transformers asks for it when used standalone).
    The model keeps them for the child's later cells (they are what generation needs, not the forward columns)."""
    config, generation = model.config, model.generation_config
    notes = []
    if getattr(config, "is_encoder_decoder", False):
        if generation.decoder_start_token_id is None and generation.bos_token_id is None:
            pad = generation.pad_token_id if generation.pad_token_id is not None else getattr(config, "pad_token_id", 0)
            generation.decoder_start_token_id = pad if isinstance(pad, int) else 0
            notes.append(f"decoder_start_token_id={generation.decoder_start_token_id} (the config leaves it unset)")
    elif head == "causal-lm" and getattr(config, "is_decoder", None) is False:
        config.is_decoder = True
        notes.append("is_decoder=True (the config's default is an encoder)")
    return notes


def _differs(produced: Any, expected: Any, where: str) -> str | None:
    import torch

    if produced.shape == expected.shape and torch.equal(produced, expected):
        return None
    same = int((produced == expected).all(-1).sum()) if produced.shape == expected.shape else 0
    shapes = "" if produced.shape == expected.shape else f", shape {tuple(produced.shape)} vs {tuple(expected.shape)}"
    return f"{where}: {same}/{expected.shape[0]} rows token-identical{shapes}"


def run_generation_cell(case: Any, tool: str, backend: str, row: dict[str, Any], all_mode: bool = False) -> dict:
    """Fill ``row`` for one generation cell (exceptions propagate to the caller, which records them).

    Stages (a failing row's reason starts with its stage): ``build`` (eager ``generate`` fails on the tiny model:
    there is no reference, the harness's side), ``export_for_generation``, ``generate <prompt>``, and with
    ``all_mode`` ``save`` / ``load`` / ``run loaded`` (the round trip)."""
    import torch
    from _coverage_quantized import closeness, split_backend

    fmt, quantizer = split_backend(backend)
    prompt = _prompt(case.sample)
    other = _prompt(case.other)
    notes = _generation_defaults(case.model, getattr(case, "head", None))
    if all_mode:
        other = _batch_of_two(_vlm_batch_of_two(case) or other)
        from _tiny_audio_prompts import audio_prompts

        row["stage"] = "build"
        with_audio = audio_prompts(case)
        if with_audio is not None:
            prompt, other = (_prompt(p) for p in with_audio)
            notes.append("prompts with audio (the forward columns ran text alone)")
    runs = [("sample", prompt), ("other", other)]
    if notes:
        row["notes"] = "; ".join(filter(None, [row.get("notes"), *notes]))
    expected = {}
    row["stage"] = "build"  # eager generate is the reference: a tiny model that cannot generate is not built
    with torch.no_grad():
        for where, inputs in runs:
            expected[where] = case.model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)
    start = time.perf_counter()
    row["stage"] = "export_for_generation"
    exported = _export(tool, fmt, case.model, prompt, quantizer)
    row["export_s"] = round(time.perf_counter() - start, 2)
    if not hasattr(exported, "generate"):
        row.pop("stage")
        row["reason"] = (
            f"exported {sorted(exported.components)} but its ExportedModel has no generate(): the components do not run"
        )
        return row
    mismatches, produced = [], {}
    for where, inputs in runs:
        row["stage"] = f"generate {where}"
        produced[where] = exported.generate(**inputs, max_new_tokens=NEW_TOKENS)
        if quantizer is None:
            mismatch = _differs(produced[where], expected[where], where)
        else:
            row["stage"] = f"score {where}"
            mismatch = closeness(case.model, inputs, produced[where], where, row)
        if mismatch:
            mismatches.append(mismatch)
    row.pop("stage")
    row["max_diff"] = 0.0 if not mismatches else float("inf")
    row["ok"] = not mismatches
    if mismatches:
        what = (
            "greedy tokens differ from eager generate" if quantizer is None else "quantized tokens not close to eager"
        )
        row["reason"] = f"{what} (" + "; ".join(mismatches) + ")"
    elif all_mode:  # the loaded export gives the tokens this one gave (eager's, unless quantized)
        _round_trip(exported, other, produced["other"], row)
    return row


def _round_trip(exported: Any, inputs: dict[str, Any], expected: Any, row: dict[str, Any]) -> None:
    """``save_pretrained``, ``ExportedModel.from_pretrained``, the other prompt generated again by the loaded one."""
    from hub_export import ExportedModel

    with tempfile.TemporaryDirectory(prefix="coverage-gen-") as folder:
        row["stage"] = "save"
        exported.save_pretrained(folder)
        row["stage"] = "load"
        loaded = ExportedModel.from_pretrained(folder)
        row["stage"] = "run loaded"
        mismatch = _differs(loaded.generate(**inputs, max_new_tokens=NEW_TOKENS), expected, "other")
        del loaded
    row.pop("stage")
    if mismatch:
        row["ok"] = False
        row["max_diff"] = float("inf")
        row["reason"] = f"after save/load: greedy tokens differ from those before saving ({mismatch})"
