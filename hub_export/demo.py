"""``make demo``: the main job end to end on the embedded hub.

1. start the embedded hub (real HTTP on loopback) and publish a tiny Llama (random weights) as a model repo;
2. load it pinned to its commit, export it to every available format, and publish all exports in one commit;
3. load one format back by its subfolder with lazy download, run it, compare with eager, print the traffic;
4. publish the same exports again: nothing changes, no commit;
5. ``hub-export sync``: up to date (no weights downloaded), then a new checkpoint is pushed and sync re-exports it;
6. generation: ``export_for_generation`` to ONNX, ``generate()`` next to eager ``model.generate``.

Only the demo's own lines are printed; ``HUB_EXPORT_DEBUG=1`` shows what other libraries print too.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

OUTPUT = Path(os.environ.get("HUB_EXPORT_DEMO_DIR", "demo-output")).resolve()
os.environ["HF_HUB_DISABLE_XET"] = "1"
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
os.environ["HF_HUB_CACHE"] = str(OUTPUT / "hf-cache")
os.environ.pop("HF_HUB_OFFLINE", None)


def _say(text: str) -> None:
    print(text, flush=True)


def _tiny_llama(directory: Path, seed: int = 0) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    LlamaForCausalLM(config).save_pretrained(directory)


def _available_formats() -> list[str]:
    from hub_export.export.auto import exporter_class
    from hub_export.formats import ExportFormat

    formats = []
    for fmt in ExportFormat:
        try:
            exporter = exporter_class(fmt)()
            exporter.check_available(exporter.config_class())
            formats.append(fmt.value)
        except (ImportError, RuntimeError) as exc:
            _say(f"   (skipping {fmt.value}: {str(exc).splitlines()[0]})")
    return formats


def main() -> int:
    """Run the demo; returns the exit code. Other libraries' warnings and logs are hidden (``HUB_EXPORT_DEBUG=1``
    shows them), so the output reads top to bottom."""
    shutil.rmtree(OUTPUT, ignore_errors=True)
    OUTPUT.mkdir(parents=True)
    from hub_export.embedded_hub.server import HubServer

    with HubServer(OUTPUT / "hub-root") as server:
        os.environ["HF_ENDPOINT"] = server.url  # before huggingface_hub is imported: it reads it once
        from hub_export.cli._console import debug_requested, quiet_third_party

        if debug_requested():
            return _run(server)
        with quiet_third_party(lambda text: _say(f"   warning: {text}"), native=True):
            return _run(server)


def _run(server: Any) -> int:
    """Steps 1-6 against ``server`` (see the module docstring)."""
    import torch
    from huggingface_hub import HfApi

    from hub_export import ExportedModel
    from hub_export.export.auto import exporter_class
    from hub_export.hub.publish import publish
    from hub_export.hub.source import load_source

    api = HfApi(endpoint=server.url)
    repo = "demo/tiny-llama"
    _say(f"1. embedded hub at {server.url}; creating {repo}")
    with tempfile.TemporaryDirectory() as tmp:
        _tiny_llama(Path(tmp))
        api.create_repo(repo, exist_ok=True)
        api.upload_folder(repo_id=repo, folder_path=tmp, commit_message="Add tiny Llama")
    model = load_source(repo, revision="main", endpoint=server.url)
    source = model._hub_export_source
    _say(f"   source pinned at {source.revision}")

    gen = torch.Generator().manual_seed(1)
    inputs = {
        "input_ids": torch.randint(3, 128, (1, 12), generator=gen),
        "attention_mask": torch.ones(1, 12, dtype=torch.int64),
    }
    _say("2. exporting (dynamic=True)")
    exports = {}
    for fmt in _available_formats():
        exporter = exporter_class(fmt)()
        exported = exporter.export(model, inputs, config=exporter.config_class(dynamic=True))
        parity = exported.components["model"].metadata.parity["max_abs_diff"]
        folder = exported.export_format.value if fmt != "dynamo" else "pt2"
        exports[folder] = exported
        _say(f"   {fmt:<10} -> {folder + '/':<12} max abs diff vs eager {parity:.2e}")
    result = publish(repo, exports, endpoint=server.url)
    _say(
        f"   published {len(exports)} exports in one commit {result.commit_sha[:12]} (tag {result.tag}), "
        f"{result.uploaded_bytes} bytes uploaded"
    )

    target = "onnx" if "onnx" in exports else next(iter(exports))
    _say(f"3. loading {repo}/{target} lazily from the hub and running it")
    server.clear_log()
    loaded = ExportedModel.from_pretrained(repo, subfolder=target, revision=result.commit_sha, lazy=True)
    before_run = sum(r.bytes_sent for r in server.log)
    other = {
        "input_ids": torch.randint(3, 128, (3, 20), generator=gen),
        "attention_mask": torch.ones(3, 20, dtype=torch.int64),
    }
    other["attention_mask"][0, :5] = 0
    out = loaded(**other)
    with torch.no_grad():
        expected = model(**other)
    diff = float((out.logits - expected.logits).abs().max())
    _say(f"   {type(out).__name__}: logits {tuple(out.logits.shape)}, max abs diff vs eager {diff:.2e}")
    _say(f"   before the first call: {before_run} bytes (manifest + config); after: traffic per path:")
    for path, stats in server.summary().items():
        _say(f"     {stats['requests']:>2} req {stats['bytes_sent']:>9} B  {path}")
    total = sum(r.bytes_sent for r in server.log)
    _say(f"   total {len(server.log)} requests, {total} bytes (no weights, no other subfolder)")

    _say("4. publishing the same exports again")
    again = publish(repo, exports, endpoint=server.url)
    _say(f"   changed={again.changed}, uploaded {again.uploaded_bytes} bytes, head still {again.commit_sha[:12]}")

    from hub_export.hub.sync import sync

    formats = [f for f in ("onnx", "openvino") if f in exports]
    _say(f"5. hub-export sync {repo} --format {' --format '.join(formats)}")
    server.clear_log()
    first = sync(repo, formats, endpoint=server.url)
    weights = sum(1 for r in server.log if r.path.endswith(".safetensors"))
    _say(f"   up to date: updated={first.updated}, {weights} weight downloads, source {first.plan.source_sha[:12]}")
    with tempfile.TemporaryDirectory() as tmp:
        _tiny_llama(Path(tmp), seed=1)
        api.upload_folder(
            repo_id=repo, folder_path=tmp, commit_message="New checkpoint", allow_patterns=["*.safetensors"]
        )
    second = sync(repo, formats, endpoint=server.url)
    _say(
        f"   after a new checkpoint: updated={second.updated}, commit {str(second.commit_sha)[:12]}, "
        f"tag {second.tag}, source {second.plan.source_sha[:12]}"
    )
    _say("6. export_for_generation (ONNX) and generate(max_new_tokens=8), batch of 2 with left padding")
    from hub_export import OnnxConfig, OnnxExporter

    prompt = {
        "input_ids": torch.randint(3, 128, (2, 7), generator=gen),
        "attention_mask": torch.ones(2, 7, dtype=torch.int64),
    }
    prompt["attention_mask"][1, :3] = 0
    generator = OnnxExporter().export_for_generation(model, prompt, config=OnnxConfig(dynamic=True))
    generator.save_pretrained(OUTPUT / "tiny-llama-generation")
    ids = ExportedModel.from_pretrained(OUTPUT / "tiny-llama-generation").generate(**prompt, max_new_tokens=8)
    with torch.no_grad():
        eager_ids = model.generate(**prompt, max_new_tokens=8, do_sample=False)
    same = ids.shape == eager_ids.shape and bool((ids == eager_ids).all())
    for row, (ours, theirs) in enumerate(zip(ids.tolist(), eager_ids.tolist())):
        _say(f"   row {row} exported: {ours[-8:]}\n         eager:    {theirs[-8:]}")
    _say(f"   token-identical: {same}")
    if diff > 1e-3 or again.changed or first.updated or not second.updated or not same:
        _say("demo FAILED")
        return 1
    _say("demo OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
