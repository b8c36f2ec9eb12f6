"""Each runtime's own generation loop on a decoder repo as ``sync`` publishes it, one function per consumer.

Used by tests/test_consumers.py (a tiny Llama, checked against eager) and by benchmarks/interop.py (every generative
architecture of the zoo, the compatibility table of docs/interop.md). Every function takes the repo id as users pass
it (the hub is ``HF_ENDPOINT``) and returns what the consumer generated, greedily, ``NEW_TOKENS`` new tokens:
``ids`` (the prompt's and the new ones, one row) and, where the consumer decodes, ``text`` (the new tokens' text).
A consumer that fails raises :class:`ConsumerFailed` with the last line it printed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import envs

HERE = Path(__file__).resolve().parent
NEW_TOKENS = 20

__all__ = [
    "CONSUMERS",
    "NEW_TOKENS",
    "ConsumerFailed",
    "download",
    "folder_of",
    "executorch_runner",
    "node",
    "onnxruntime_genai",
    "openvino_genai",
    "optimum_executorch",
    "optimum_intel",
    "optimum_onnx",
    "run_json",
    "transformers_js",
]


class ConsumerFailed(RuntimeError):
    """A consumer exited with an error; the message is its last line of output."""


def _last_line(text: str) -> str:
    """The error a consumer ended on: from the last line naming an exception to the end (runtimes' messages span
    lines), else its last line; at most 300 characters."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return "(no output)"
    named = [i for i, line in enumerate(lines) if re.match(r"^(?:\w+\.)*[A-Z]\w*: ", line)]
    message = " ".join(lines[named[-1] :]) if named else lines[-1]
    return message if len(message) <= 300 else message[:297] + "..."


def run_json(command: list[str], timeout: int = 600, **kwargs: Any) -> dict[str, Any]:
    """Run a consumer script; its last stdout line is its JSON answer."""
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)
    if result.returncode != 0:
        raise ConsumerFailed(_last_line(result.stderr or result.stdout))
    return json.loads(result.stdout.strip().splitlines()[-1])


def node(script: str, *args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    """Run a transformers.js script of ``tests/consumers`` with Node, from a folder beside its ``node_modules``."""
    folder = cache / "node-app"
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "node_modules"
    if not link.exists():
        link.symlink_to(envs.node_modules())
    (folder / script).write_text((HERE / script).read_text())
    env = {**os.environ, "TRANSFORMERS_JS_CACHE": str(cache / "transformers-js")}
    return subprocess.run(["node", script, *args], cwd=folder, capture_output=True, text=True, timeout=600, env=env)


def download(repo: str, subfolder: str) -> Path:
    """The repo's ``subfolder`` on disk, as ``hf download`` leaves it (for the runtimes that read a folder)."""
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo, allow_patterns=[f"{subfolder}/*"])) / subfolder


def transformers_js(repo: str, prompt: str, cache: Path, dtype: str = "", subfolder: str = "") -> dict[str, Any]:
    """``pipeline('text-generation', repo, {dtype, subfolder})`` in Node: ``ids`` from ``generator.model.generate`` on
    the tokenized prompt, ``text`` from the pipeline itself (which tokenizes without special tokens)."""
    endpoint = os.environ["HF_ENDPOINT"]
    result = node("transformers_js.mjs", endpoint, repo, "text-generation", prompt, dtype, subfolder, cache=cache)
    if result.returncode != 0:
        raise ConsumerFailed(_last_line(result.stderr or result.stdout))
    return json.loads(result.stdout.strip().splitlines()[-1])


def optimum_onnx(repo: str, prompt: str) -> dict[str, Any]:
    """``ORTModelForCausalLM.from_pretrained(repo, subfolder="onnx").generate`` in optimum-onnx's environment."""
    python = str(envs.python("optimum-onnx"))
    return run_json([python, str(HERE / "optimum_run.py"), "onnx", "causal-lm", repo, "onnx", prompt])


def optimum_intel(repo: str, prompt: str) -> dict[str, Any]:
    """``OVModelForCausalLM.from_pretrained(repo, subfolder="openvino").generate`` in optimum-intel's environment."""
    python = str(envs.python("optimum-intel"))
    return run_json([python, str(HERE / "optimum_run.py"), "openvino", "causal-lm", repo, "openvino", prompt])


def onnxruntime_genai(repo: str, prompt_ids: list[int]) -> dict[str, Any]:
    """``og.Model`` on the downloaded ``onnx/`` folder, the prompt's ids appended, then its greedy loop."""
    folder = download(repo, "onnx")
    answer = run_json([sys.executable, str(HERE / "genai_run.py"), str(folder), json.dumps(prompt_ids)])
    return {"ids": [answer["ids"]], "text": answer["text"]}


def openvino_genai(repo: str, prompt: str) -> dict[str, Any]:
    """``LLMPipeline`` on the downloaded ``openvino/`` folder, text in and text out (its tokenizer IRs)."""
    import openvino_genai as ov_genai

    folder = download(repo, "openvino")
    try:
        pipe = ov_genai.LLMPipeline(str(folder), "CPU")
        config = ov_genai.GenerationConfig()
        config.max_new_tokens, config.do_sample = NEW_TOKENS, False
        return {"text": pipe.generate(prompt, config)}
    except RuntimeError as error:
        raise ConsumerFailed(_last_line(str(error))) from None


def executorch_runner(repo: str, prompt: str, num_bos: int) -> dict[str, Any]:
    """ExecuTorch's ``TextLLMRunner`` (the C++ runner of its Android and iOS apps) on ``executorch/model.pte`` and the
    ``tokenizer.json`` beside it; ``text`` is what its token callback received, special tokens included."""
    from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner

    folder = download(repo, "executorch")
    pieces: list[str] = []
    try:
        runner = TextLLMRunner(str(folder / "model.pte"), str(folder / "tokenizer.json"))
        config = GenerationConfig(echo=False, max_new_tokens=NEW_TOKENS, temperature=0.0, num_bos=num_bos)
        runner.generate(prompt, config, token_callback=pieces.append)
    except RuntimeError as error:
        raise ConsumerFailed(_last_line(str(error))) from None
    return {"text": "".join(pieces)}


def optimum_executorch(repo: str, prompt_ids: list[int]) -> dict[str, Any]:
    """``ExecuTorchModelForCausalLM.from_pretrained(repo, subfolder="executorch").generate`` in its environment."""
    python = str(envs.python("optimum-executorch"))
    script = str(HERE / "optimum_executorch_run.py")
    answer = run_json([python, script, repo, "executorch", json.dumps(prompt_ids), str(NEW_TOKENS)])
    return {"ids": [answer["ids"]]}


#: consumer -> the file it loads, in the export folder of its format (a folder without it is not one it reads)
CONSUMERS = {
    "transformers.js": "onnx/model.onnx",
    "optimum-onnx": "onnx/model.onnx",
    "onnxruntime-genai": "onnx/genai_config.json",
    "optimum-intel": "openvino/openvino_model.xml",
    "OpenVINO GenAI": "openvino/openvino_model.xml",
    "ExecuTorch LLM runner": "executorch/model.pte",
    "optimum-executorch": "executorch/model.pte",
}


def folder_of(consumer: str) -> str:
    """The export folder (the format's) ``consumer`` reads."""
    return CONSUMERS[consumer].split("/", 1)[0]
