"""The compatibility table of docs/interop.md: each generative decoder of the zoo, published by ``sync``, run by each
runtime's own tools, with eager's greedy tokens as the reference.

Not a test. For every decoder-only case of ``tests/zoo.py`` (families decoder, moe, ssm; seq2seq and vision-language
models have layouts the runtimes' decoder loops do not read), a tiny model with the byte-level BPE tokenizer of
``tests/tiny_tokenizers.py`` is uploaded to an embedded hub as a model repo (``hf upload``'s way), and
``sync(repo, [fmt], task="text-generation")`` publishes its ONNX, OpenVINO and ExecuTorch generation exports, one
format at a time so that a format that fails does not hide the others. Each consumer of ``tests/consumers/decoders.py``
then loads the repo as published and generates 20 tokens greedily; a cell passes when its tokens are eager
``generate()``'s (or, for the consumers that return text, eager's text of them). The consumers run in their own
environments (``make consumers`` creates them).

Results go to ``docs/interop-results.jsonl`` (one row per case and consumer; a run replaces the rows it ran), and
the table between the ``compatibility`` markers of ``docs/interop.md`` is rewritten from the whole file::

    python benchmarks/interop.py [--cases llama mamba] [--consumers optimum-onnx "OpenVINO GenAI"]
        [--results docs/interop-results.jsonl] [--page docs/interop.md]
    python benchmarks/interop.py --report-only
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "consumers"))

RESULTS = ROOT / "docs" / "interop-results.jsonl"
PAGE = ROOT / "docs" / "interop.md"
START, END = "<!-- compatibility:start -->", "<!-- compatibility:end -->"
PROMPT = "the cat sat on the mat and"
DECODER_FAMILIES = ("decoder", "moe", "ssm")
FORMATS = ("onnx", "openvino", "executorch")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _reason(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip().splitlines()[0]
    return text if len(text) <= 240 else text[:237] + "..."


def _reference(model: Any, tokenizer: Any) -> dict[str, Any]:
    """Eager ``generate()``'s answers in the forms the consumers give theirs."""
    import torch

    inputs = tokenizer(PROMPT, return_tensors="pt", return_token_type_ids=False)
    bare = tokenizer(PROMPT, return_tensors="pt", add_special_tokens=False, return_token_type_ids=False)
    with torch.no_grad():
        ids = model.generate(**inputs, max_new_tokens=20, do_sample=False)
        bare_ids = model.generate(**bare, max_new_tokens=20, do_sample=False)
    prompt = inputs["input_ids"][0].tolist()
    new = ids[0, len(prompt) :]
    return {
        "ids": ids.tolist(),
        "prompt": prompt,
        "text": tokenizer.decode(new, skip_special_tokens=True),
        "text_with_special": tokenizer.decode(new),
        "bare_ids": bare_ids.tolist(),
        "num_bos": int(prompt[:1] == [tokenizer.bos_token_id]),
    }


def _missing(consumer: str, repo: str, files: list[str]) -> str | None:
    """Why the published folder holds nothing ``consumer`` loads, from the export's own plan; None when it does."""
    import decoders
    from huggingface_hub import hf_hub_download

    loads, folder = decoders.CONSUMERS[consumer], decoders.folder_of(consumer)
    if loads in files:
        return None
    plan = json.loads(Path(hf_hub_download(repo, f"{folder}/export.json")).read_text()).get("generation") or {}
    runtimes = plan.get("runtimes") or {}
    if consumer in ("ExecuTorch LLM runner", "optimum-executorch") and runtimes:
        why = next(iter(runtimes.values()))
    elif plan.get("one_graph") is not True:
        stages = ", ".join(sorted(set((plan.get("stages") or {}).values())))
        why = f"separate graphs ({stages}) that hub_export chains itself: {plan.get('one_graph')}"
    else:
        why = "see the export's plan"
    return f"no {loads}: {why}"


def _consume(consumer: str, repo: str, eager: dict[str, Any], work: Path) -> tuple[bool, str]:
    """Run ``consumer`` on ``repo``; (matches eager, what differs or why it failed)."""
    import decoders

    if consumer == "transformers.js":
        # its pipeline tokenizes without special tokens; generate() on the tokenized prompt is compared
        answer = decoders.transformers_js(repo, PROMPT, cache=work)
        return answer["ids"] == eager["ids"], "tokens differ from eager's"
    if consumer == "optimum-onnx":
        return decoders.optimum_onnx(repo, PROMPT)["ids"] == eager["ids"], "tokens differ from eager's"
    if consumer == "onnxruntime-genai":
        return decoders.onnxruntime_genai(repo, eager["prompt"])["ids"] == eager["ids"], "tokens differ from eager's"
    if consumer == "optimum-intel":
        return decoders.optimum_intel(repo, PROMPT)["ids"] == eager["ids"], "tokens differ from eager's"
    if consumer == "OpenVINO GenAI":
        return decoders.openvino_genai(repo, PROMPT)["text"] == eager["text"], "text differs from eager's"
    if consumer == "ExecuTorch LLM runner":
        text = decoders.executorch_runner(repo, PROMPT, num_bos=eager["num_bos"])["text"]
        return text == eager["text_with_special"], "text differs from eager's"
    if consumer == "optimum-executorch":
        answer = decoders.optimum_executorch(repo, eager["prompt"])
        return answer["ids"] == eager["ids"], "tokens differ from eager's"
    raise ValueError(f"unknown consumer {consumer!r}")


def run_case(case: str, work: Path, consumers: list[str]) -> list[dict[str, Any]]:
    """The rows of ``consumers`` for one zoo case (only the formats they read are exported)."""
    import decoders
    import zoo
    from huggingface_hub import HfApi
    from tiny_tokenizers import byte_level_tokenizer, save_as_hub_tokenizer

    from hub_export.hub.sync import sync

    tokenizer = byte_level_tokenizer()
    ids = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    model = zoo.build(case, vocab_size=len(tokenizer), **ids).model
    eager = _reference(model, tokenizer)
    repo = f"zoo/{case}"
    folder = work / case
    model.save_pretrained(folder)
    save_as_hub_tokenizer(tokenizer, folder)
    api = HfApi()
    api.create_repo(repo, exist_ok=True)
    api.upload_folder(repo_id=repo, folder_path=folder, commit_message="Add the model")
    exported: dict[str, str | None] = {}
    for fmt in [f for f in FORMATS if f in {decoders.folder_of(c) for c in consumers}]:
        try:
            sync(repo, [fmt], task="text-generation")
            exported[fmt] = None
        except Exception as error:  # noqa: BLE001 - a benchmark records every failure as its cell
            exported[fmt] = "export: " + _reason(error)
    rows = []
    files = api.list_repo_files(repo)
    for consumer in consumers:
        fmt = decoders.folder_of(consumer)
        start = time.perf_counter()
        row: dict[str, Any] = {"case": case, "family": zoo.FAMILIES[case], "consumer": consumer, "format": fmt}
        missing = None if exported[fmt] is not None else _missing(consumer, repo, files)
        if exported[fmt] is not None or missing is not None:
            row.update(ok=False, reason=exported[fmt] or missing)
        else:
            try:
                ok, differs = _consume(consumer, repo, eager, work)
                row.update(ok=ok, reason=None if ok else differs)
            except Exception as error:  # noqa: BLE001
                row.update(ok=False, reason=_reason(error))
                row["trace"] = traceback.format_exc()[-2000:]
        row["s"] = round(time.perf_counter() - start, 1)
        print(json.dumps({k: v for k, v in row.items() if k != "trace"}), flush=True)
        rows.append(row)
    return rows


def decoder_cases() -> list[str]:
    import zoo

    return [name for name, family in zoo.FAMILIES.items() if family in DECODER_FAMILIES]


#: Failures whose cause is on the consumer's side: (consumer, a marker of the reason, what it means). Each was read in
#: the consumer's own source (its version in tests/consumers/); the cell stays failed.
CONSUMER_LIMITS: list[tuple[str, str, str]] = [
    (
        "optimum-onnx",
        "Please fix either the inputs/outputs or the model",
        "optimum-onnx feeds an empty cache of `num_attention_heads` heads unless the model type is on its list of "
        "grouped-query types (`ORTModelForCausalLM`, optimum/onnxruntime/modeling_decoder.py), and this model has "
        "fewer key/value heads (as Mixtral-8x7B or OLMoE have)",
    ),
    (
        "transformers.js",
        "Missing the following inputs: past_key_values",
        "transformers.js feeds a config with `multi_query: true` (GPT-BigCode, Falcon) one fused "
        "`past_key_values.N.key_value` cache per layer, the layout of optimum's older GPT-BigCode exports "
        "(src/configs.js, `getCacheNames`), not the `key`/`value` pair every other decoder takes",
    ),
    (
        "transformers.js",
        "Unsupported model type",
        "transformers.js has no model class for this model type (src/models/registry.js)",
    ),
    (
        "OpenVINO GenAI",
        "differs",
        "OpenVINO GenAI's pipeline computes in bfloat16 on a CPU with bfloat16 units (this one has them) whatever the "
        "IR's precision marks say, and its default attention backend rewrites the graph's attention into its own "
        "paged attention; on this random tiny model either one changes tokens: checked by hand, "
        '`LLMPipeline(folder, "CPU", INFERENCE_PRECISION_HINT="f32")` gives eager\'s tokens on gptj, '
        '`ATTENTION_BACKEND="SDPA"` on gemma3_text (sliding-window attention on every layer)',
    ),
]


def explain(consumer: str, reason: str) -> str:
    """A failing cell's reason, with what it means where the cause is known to be on the consumer's side."""
    for who, marker, meaning in CONSUMER_LIMITS:
        if who == consumer and marker in reason:
            return f"{meaning} (consumer's side; it said: {reason})"
    return reason


def table(rows: list[dict[str, Any]]) -> str:
    """The Markdown table (and the failures' reasons under it) of the result rows."""
    import decoders

    consumers = list(decoders.CONSUMERS)
    by_case: dict[str, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_case.setdefault(row["case"], {})[row["consumer"]] = row
    passing = {c: sum(1 for case in by_case.values() if case.get(c, {}).get("ok")) for c in consumers}
    lines = [
        f"{len(by_case)} decoder architectures of the test zoo, each published by `hub-export sync ... --task "
        "text-generation` and run by each runtime's own tools with the lines of this page; ✓: eager's 20 greedy "
        "tokens, ✗: see the reasons below. Generated by `python benchmarks/interop.py`.",
        "",
        "| architecture | family | " + " | ".join(f"{c} ({passing[c]}/{len(by_case)})" for c in consumers) + " |",
        "|---|---|" + "---|" * len(consumers),
    ]
    failures: list[str] = []
    for case in sorted(by_case):
        cells = []
        for consumer in consumers:
            row = by_case[case].get(consumer)
            if row is None:
                cells.append("")
            elif row["ok"]:
                cells.append("✓")
            else:
                cells.append("✗")
                failures.append(f"- {case}, {consumer}: {explain(consumer, row['reason'])}")
        family = next(iter(by_case[case].values()))["family"]
        lines.append(f"| {case} | {family} | " + " | ".join(cells) + " |")
    if failures:
        lines += ["", "Why a cell fails:", "", *failures]
    return "\n".join(lines)


def write_table(results: Path, page: Path) -> None:
    rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    text = page.read_text()
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    page.write_text(f"{head}{START}\n{table(rows)}\n{END}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="*", help="zoo cases (default: every decoder-only one)")
    parser.add_argument("--consumers", nargs="*", help="consumers (default: all of tests/consumers/decoders.py's)")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--page", type=Path, default=PAGE)
    parser.add_argument("--report-only", action="store_true", help="rewrite the table from the results file")
    args = parser.parse_args()
    if not args.report_only:
        port = _free_port()
        endpoint = f"http://127.0.0.1:{port}"
        work = Path(tempfile.mkdtemp(prefix="interop-"))
        os.environ.update(HF_ENDPOINT=endpoint, HF_HUB_DISABLE_XET="1", HF_HUB_CACHE=str(work / "hf-cache"))
        os.environ.pop("HF_TOKEN", None)
        os.environ.pop("HF_HUB_OFFLINE", None)
        from hub_export.embedded_hub.server import HubServer

        print(f"load average {os.getloadavg()}", flush=True)
        import decoders

        cases = args.cases or decoder_cases()
        consumers = args.consumers or list(decoders.CONSUMERS)
        unknown = set(consumers) - set(decoders.CONSUMERS)
        if unknown:
            parser.error(f"unknown consumers {sorted(unknown)}; known: {', '.join(decoders.CONSUMERS)}")
        rows: list[dict[str, Any]] = []
        with HubServer(work / "hub", port=port):
            for case in cases:
                rows += run_case(case, work, consumers)
        ran = {(row["case"], row["consumer"]) for row in rows}
        kept = []
        if args.results.is_file():
            kept = [json.loads(line) for line in args.results.read_text().splitlines() if line.strip()]
            kept = [row for row in kept if (row["case"], row["consumer"]) not in ran]
        args.results.write_text("".join(json.dumps(row) + "\n" for row in kept + rows))
    write_table(args.results, args.page)


if __name__ == "__main__":
    main()
