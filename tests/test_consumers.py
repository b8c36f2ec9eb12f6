"""The runtimes' own tools run the exports as ``sync`` publishes them, with nothing but the repo id and a subfolder:
transformers.js (in Node and in headless Chromium, over HTTP from the embedded hub), optimum-onnx, onnxruntime-genai,
optimum-intel, OpenVINO GenAI, ExecuTorch's LLM runner, optimum-executorch, a plain ``openvino.Core().compile_model``
and a plain ``torch.export.load``.

A tiny Llama with a byte-level BPE tokenizer (the kind of Llama 3, GPT-2, Qwen) and a tiny BERT classifier are put on
the embedded hub as model repos (``hf upload``'s way) and ``sync`` publishes their exports into the same repos, as
the GitHub Action does. Each consumer runs in the environment its package installs into (``tests/consumers/``: the
optimum packages pin older transformers) and prints what it generated; greedy tokens must be eager's, an encoder's
outputs within 1e-4 of eager's.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import torch
from doc_pages import environment, run_page
from tiny_models import seeded
from tiny_tokenizers import bert_tokenizer, byte_level_tokenizer, save_as_hub_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent / "consumers"))
import decoders  # noqa: E402
import envs  # noqa: E402
from decoders import NEW_TOKENS, download, node, run_json  # noqa: E402

from hub_export.embedded_hub.server import HubServer  # noqa: E402

CONSUMERS = Path(__file__).resolve().parent / "consumers"
# the Llama under the id docs/interop.md uses: the page runs here, on these exports (test_the_interop_page_runs_as_written)
LLAMA, BERT, PLAIN = "me/tiny-llama", "interop/tiny-bert", "interop/tiny-llama-graph"
QUANTIZED = "interop/tiny-llama"
PROMPT = "the cat sat on the mat and"
ATOL = 1e-4


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    """The embedded hub, made the default endpoint of this process and of the consumers it starts."""
    from huggingface_hub import constants

    root = tmp_path_factory.mktemp("consumers")
    with HubServer(root / "hub") as server, pytest.MonkeyPatch.context() as patch:
        cache = root / "hf-cache"
        patch.setenv("HF_ENDPOINT", server.url)
        patch.setenv("HF_HUB_DISABLE_XET", "1")
        patch.setenv("HF_HUB_CACHE", str(cache))
        patch.delenv("HF_TOKEN", raising=False)
        patch.delenv("HF_HUB_OFFLINE", raising=False)
        patch.setattr(constants, "ENDPOINT", server.url)
        patch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", server.url + "/{repo_id}/resolve/{revision}/{filename}")
        patch.setattr(constants, "HF_HUB_DISABLE_XET", True)
        patch.setattr(constants, "HF_HUB_OFFLINE", False)
        patch.setattr(constants, "HF_HUB_CACHE", str(cache))
        yield server


def _llama() -> tuple[Any, Any]:
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = byte_level_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return seeded(LlamaForCausalLM, config), tokenizer


def _bert() -> tuple[Any, Any]:
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=96,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        num_labels=3,
    )
    return seeded(BertForSequenceClassification, config), bert_tokenizer()


def _upload(repo: str, model: Any, tokenizer: Any, folder: Path) -> None:
    from huggingface_hub import HfApi

    model.save_pretrained(folder)
    save_as_hub_tokenizer(tokenizer, folder)
    api = HfApi()
    api.create_repo(repo, exist_ok=True)
    api.upload_folder(repo_id=repo, folder_path=folder, commit_message="Add the model")


@pytest.fixture(scope="module")
def published(hub: HubServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The two models on the hub with their exports published by ``sync``, and eager's answers."""
    from huggingface_hub import HfApi

    from hub_export.hub.sync import sync

    root = tmp_path_factory.mktemp("models")
    llama, llama_tokenizer = _llama()
    bert, tokenizer = _bert()
    _upload(LLAMA, llama, llama_tokenizer, root / "llama")
    _upload(BERT, bert, tokenizer, root / "bert")
    _upload(PLAIN, llama, llama_tokenizer, root / "plain")
    assert sync(LLAMA, ["onnx", "openvino", "dynamo", "executorch"], task="text-generation").updated
    assert sync(BERT, ["onnx", "openvino", "dynamo"], task="text-classification").updated
    assert sync(PLAIN, ["onnx"]).updated  # a graph export of the causal LM: its forward, no cache inputs
    llama_head = HfApi().model_info(LLAMA).sha
    inputs = llama_tokenizer(PROMPT, return_tensors="pt")
    # transformers.js's text-generation pipeline tokenizes the prompt without special tokens (no BOS)
    bare = llama_tokenizer(PROMPT, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        ids = llama.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)
        bare_ids = llama.generate(**bare, max_new_tokens=NEW_TOKENS, do_sample=False)
        encoded = tokenizer(PROMPT, return_tensors="pt")
        logits = bert(**encoded).logits
    prompt = inputs["input_ids"][0].tolist()
    return {
        "ids": ids.tolist(),
        "prompt": prompt,
        "text": llama_tokenizer.decode(ids[0, len(prompt) :], skip_special_tokens=True),
        "text_with_special": llama_tokenizer.decode(ids[0, len(prompt) :]),
        "pipeline_text": llama_tokenizer.decode(bare_ids[0, bare["input_ids"].shape[1] :], skip_special_tokens=True),
        "bert": bert,
        "bert_inputs": encoded,
        "logits": logits,
        "root": root,
        "llama_head": llama_head,
    }


# -- the decoder --------------------------------------------------------------------------------------------
def test_transformers_js_generates_eagers_tokens_from_the_repo_id(published, tmp_path) -> None:
    answer = decoders.transformers_js(LLAMA, PROMPT, cache=tmp_path)
    assert answer["ids"] == published["ids"]
    assert answer["text"] == published["pipeline_text"]


@pytest.mark.parametrize(
    ("dtype", "recipe", "stem"),
    [("q8", "OnnxRuntimeDynamicConfig", "model_quantized"), ("q4", "OnnxRuntimeWeightOnlyConfig", "model_q4")],
)
def test_transformers_js_loads_a_quantized_export_by_its_dtype(hub, tmp_path, dtype, recipe, stem) -> None:
    """A quantized ONNX generation export pushed to its own folder is saved under the name transformers.js's
    ``dtype`` loads (int8 dynamic: ``model_quantized.onnx`` for ``"q8"``; int4 ``MatMulNBits``: ``model_q4.onnx`` for
    ``"q4"``, what browser apps ship): it generates the tokens our runner generates on the same export (the same
    quantized graph; eager has no quantized reference)."""
    from huggingface_hub import HfApi

    import hub_export
    from hub_export import OnnxConfig, OnnxExporter, OnnxRuntimeQuantizer

    repo, folder = f"{QUANTIZED}-{dtype}", f"onnx-{dtype}"
    llama, tokenizer = _llama()
    _upload(repo, llama, tokenizer, tmp_path / "model")
    inputs = tokenizer(PROMPT, return_tensors="pt")
    config = OnnxConfig(dynamic=True, quantizer=OnnxRuntimeQuantizer(getattr(hub_export, recipe)()))
    exported = OnnxExporter().export_for_generation(llama, inputs, config=config)
    exported.push_to_hub(repo, subfolder=folder)
    files = HfApi().list_repo_files(repo)
    assert f"{folder}/{stem}.onnx" in files
    ours = exported.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False).tolist()
    answer = decoders.transformers_js(repo, PROMPT, cache=tmp_path, dtype=dtype, subfolder=folder)
    assert answer["ids"] == ours
    # it ran the quantized graph: the only one in the folder, fetched from the hub
    assert not any(name.startswith(f"{folder}/model.onnx") for name in files)
    assert any(r.path.endswith(f"/{folder}/{stem}.onnx") and r.status == 200 for r in hub.log)


def test_transformers_js_refuses_a_graph_export_of_a_decoder(published, hub, tmp_path) -> None:
    """A causal LM's plain forward has no cache inputs: transformers.js would feed it one token after the first and
    generate wrong tokens, so it is not published under the name transformers.js loads."""
    result = node("transformers_js.mjs", hub.url, PLAIN, "text-generation", PROMPT, cache=tmp_path)
    assert result.returncode != 0
    assert "onnx/model.onnx" in result.stderr


def test_optimum_onnx_generates_eagers_tokens(published) -> None:
    assert decoders.optimum_onnx(LLAMA, PROMPT)["ids"] == published["ids"]


def test_onnxruntime_genai_generates_eagers_tokens(published) -> None:
    assert (download(LLAMA, "onnx") / "genai_config.json").is_file()
    answer = decoders.onnxruntime_genai(LLAMA, published["prompt"])
    assert answer["ids"] == published["ids"]
    assert answer["text"] == published["text"]


def test_optimum_intel_generates_eagers_tokens(published) -> None:
    assert decoders.optimum_intel(LLAMA, PROMPT)["ids"] == published["ids"]


def test_openvino_genai_generates_eagers_text(published) -> None:
    assert decoders.openvino_genai(LLAMA, PROMPT)["text"] == published["text"]


def test_torch_export_load_runs_the_generation_graph_with_the_models_arguments(published) -> None:
    from transformers import AutoConfig

    folder = download(LLAMA, "pt2")
    config = AutoConfig.from_pretrained(folder)
    program = torch.export.load(str(folder / "model.pt2"))
    ids = torch.tensor([published["prompt"]])
    heads, dim = config.num_key_value_heads, config.hidden_size // config.num_attention_heads
    empty = tuple(
        (torch.zeros(1, heads, 0, dim), torch.zeros(1, heads, 0, dim)) for _ in range(config.num_hidden_layers)
    )
    out = program.module()(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        position_ids=torch.arange(ids.shape[1])[None],
        past_key_values=empty,
    )
    assert set(out) == {"logits", "past_key_values"}
    assert int(out["logits"][0, -1].argmax()) == published["ids"][0][ids.shape[1]]  # eager's first new token
    assert out["past_key_values"][0][0].shape[2] == ids.shape[1]


def test_executorch_llm_runner_generates_eagers_text(published) -> None:
    """ExecuTorch's own LLM runner (the C++ runner of its Android and iOS apps, here through its Python binding) on
    the program and the tokenizer file as published; ``num_bos=1``: this tokenizer starts a prompt with BOS."""
    assert decoders.executorch_runner(LLAMA, PROMPT, num_bos=1)["text"] == published["text_with_special"]


def test_optimum_executorch_generates_eagers_tokens(published) -> None:
    assert decoders.optimum_executorch(LLAMA, published["prompt"])["ids"] == published["ids"]


def test_every_export_folder_loads_the_tokenizer_as_the_repo_root(published) -> None:
    """``AutoTokenizer.from_pretrained(repo, subfolder=<format folder>)`` on what ``sync`` published: each folder holds
    the tokenizer files the root has, and they tokenize alike."""
    from transformers import AutoTokenizer

    expected = AutoTokenizer.from_pretrained(LLAMA)(PROMPT).input_ids
    for subfolder in ("onnx", "openvino", "executorch", "pt2"):
        assert AutoTokenizer.from_pretrained(LLAMA, subfolder=subfolder)(PROMPT).input_ids == expected, subfolder


# -- the encoder --------------------------------------------------------------------------------------------
def test_transformers_js_classifies_as_eager(published, hub, tmp_path) -> None:
    result = node("transformers_js.mjs", hub.url, BERT, "text-classification", PROMPT, cache=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["input_ids"] == published["bert_inputs"]["input_ids"].tolist()
    assert torch.allclose(torch.tensor(answer["output"]), published["logits"], atol=ATOL)


@pytest.mark.parametrize("runtime", ["onnx", "openvino"])
def test_optimum_classifies_as_eager(published, runtime) -> None:
    python = envs.python("optimum-onnx" if runtime == "onnx" else "optimum-intel")
    script = str(CONSUMERS / "optimum_run.py")
    answer = run_json([str(python), script, runtime, "sequence-classification", BERT, runtime, PROMPT])
    assert torch.allclose(torch.tensor(answer["output"]), published["logits"], atol=ATOL)


def test_a_plain_compile_model_keeps_the_promised_float32(published) -> None:
    """The IR's every operation is marked as OpenVINO marks what must stay precise, so a CPU with bfloat16 units
    still computes the float32 export in float32 when a user compiles it with no properties."""
    import openvino

    folder = download(BERT, "openvino")
    model = openvino.Core().read_model(folder / "openvino_model.xml")
    computed = [op for op in model.get_ops() if op.get_type_name() not in ("Parameter", "Result")]
    assert computed and all("DisablePrecisionConversion_0" in op.get_rt_info() for op in computed)
    compiled = openvino.Core().compile_model(model, "CPU")
    feeds = {name: value.numpy() for name, value in published["bert_inputs"].items()}
    logits = torch.from_numpy(compiled(feeds)[compiled.output(0)])
    assert torch.allclose(logits, published["logits"], atol=ATOL)


def test_torch_export_load_runs_the_graph_with_the_models_arguments(published) -> None:
    folder = download(BERT, "pt2")
    out = torch.export.load(str(folder / "model.pt2")).module()(**published["bert_inputs"])
    assert list(out) == ["logits"]
    assert torch.allclose(out["logits"], published["logits"], atol=ATOL)


# -- a real browser -----------------------------------------------------------------------------------------
def _serve(folder: Path) -> tuple[ThreadingHTTPServer, str]:
    handler = partial(SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *args: None  # type: ignore[method-assign]
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.handle_error = lambda request, address: None  # type: ignore[method-assign] - the browser resets connections
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def _page_folder(folder: Path) -> Path:
    """The page, transformers.js's web build and onnxruntime-web's runtime files, as a web app ships them."""
    modules = envs.node_modules()
    folder.mkdir()
    (folder / "index.html").write_text((CONSUMERS / "browser" / "index.html").read_text())
    dist = modules / "@huggingface" / "transformers" / "dist"
    (folder / "transformers.js").symlink_to(dist / "transformers.js")
    (folder / "ort").symlink_to(modules / "onnxruntime-web" / "dist")
    return folder


def test_transformers_js_in_chromium_generates_eagers_tokens_from_the_hub(published, hub, tmp_path) -> None:
    from urllib.parse import urlencode

    from playwright.sync_api import sync_playwright

    server, origin = _serve(_page_folder(tmp_path / "site"))
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=str(envs.chromium()),
                args=[
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--no-first-run",
                ],
            )
            page = browser.new_page()
            page.goto(f"{origin}/index.html?" + urlencode({"host": hub.url, "repo": LLAMA, "prompt": PROMPT}))
            page.wait_for_function("document.getElementById('result').textContent !== 'running'", timeout=120_000)
            answer = json.loads(page.inner_text("#result"))
            page.screenshot(path=str(tmp_path / "transformers-js.png"))
            browser.close()
    finally:
        server.shutdown()
    assert "error" not in answer, answer.get("error")
    assert answer["ids"] == published["ids"]
    # the model came from the hub, over HTTP, with CORS: the hub served the graph and its weights
    assert any(r.path.endswith("/onnx/model.onnx_data") and r.status in (200, 206) for r in hub.log)


def test_the_interop_page_runs_as_written(published, hub, tmp_path) -> None:
    """docs/interop.md, every block in order, as tests/test_docs.py runs the other pages, on this module's hub: its
    first block's ``sync`` asks for the exports ``published`` made (same formats, same task), finds them up to date and
    makes nothing; then each runtime's block runs them, as the tests above did with their tokens checked."""
    from doc_pages import blocks

    runnable = [b for b in blocks("docs/interop.md") if b.skip is None]
    interpreters = {b.environment: str(envs.python(b.environment)) for b in runnable if b.environment}
    work = tmp_path / "work"
    work.mkdir()
    env = environment(hub.url, tmp_path)
    run_page("docs/interop.md", work, env, interpreters, str(envs.node_modules()))
    from huggingface_hub import HfApi

    assert HfApi(endpoint=hub.url).model_info(LLAMA).sha == published["llama_head"]  # the page's sync made nothing
