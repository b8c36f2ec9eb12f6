"""Every documented block runs as written (tests/doc_pages.py): each page in order, in a folder and on an embedded
hub of its own, with tiny stand-ins for the Hub models it names."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from doc_pages import PAGES, RUN_ELSEWHERE, STAND_INS, blocks, environment, run_page, stand_in_repos
from tiny_models import seeded
from tiny_tokenizers import bert_tokenizer, byte_level_tokenizer, save_as_hub_tokenizer

from hub_export.embedded_hub.server import HubServer

sys.path.insert(0, str(Path(__file__).resolve().parent / "consumers"))
import envs  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RUN = [page for page in PAGES if page not in RUN_ELSEWHERE and any(b.skip is None for b in blocks(page))]


def _model(family: str) -> tuple[Any, Any]:
    """A tiny model of ``family`` and its tokenizer (random weights, real tokenizer)."""
    import transformers

    if family == "bert":
        config = transformers.BertConfig(
            vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
        )
        return seeded(transformers.BertForSequenceClassification, config), bert_tokenizer()
    config_class, model_class = {
        "llama": ("LlamaConfig", "LlamaForCausalLM"),
        "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    }[family]
    config = getattr(transformers, config_class)(
        vocab_size=96,
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
    return seeded(getattr(transformers, model_class), config), byte_level_tokenizer()


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each stand-in family saved once: ``{family: folder}``."""
    root = tmp_path_factory.mktemp("stand-ins")
    folders = {}
    for family in sorted(set(STAND_INS.values())):
        model, tokenizer = _model(family)
        model.save_pretrained(root / family)
        save_as_hub_tokenizer(tokenizer, root / family)
        folders[family] = root / family
    return folders


@pytest.mark.parametrize("page", RUN)
def test_the_page_runs_as_written(page: str, stand_ins: dict[str, Path], tmp_path: Path) -> None:
    from huggingface_hub import HfApi

    runnable = [b for b in blocks(page) if b.skip is None]
    interpreters = {b.environment: str(envs.python(b.environment)) for b in runnable if b.environment}
    node = str(envs.node_modules()) if any(b.language == "js" for b in runnable) else None
    if any("git lfs" in b.code for b in runnable):
        envs.git_lfs()
    work = tmp_path / "work"
    work.mkdir()
    with HubServer(work / "hub-data") as hub:  # a page's `--root ./hub-data` is the hub it talks to
        api = HfApi(endpoint=hub.url)
        for repo in stand_in_repos(page):
            api.create_repo(repo, exist_ok=True)
            api.upload_folder(repo_id=repo, folder_path=stand_ins[STAND_INS[repo]], commit_message="Stand-in")
        run_page(page, work, environment(hub.url, tmp_path), interpreters, node)


def test_pages_run_elsewhere_are_run_there() -> None:
    """A page left out of :data:`RUN` runs whole in the module :data:`doc_pages.RUN_ELSEWHERE` names."""
    root = Path(__file__).resolve().parents[1]
    for page, module in RUN_ELSEWHERE.items():
        assert page in PAGES and f'run_page("{page}"' in (root / module).read_text(), (page, module)


def test_the_interop_table_is_generated_from_its_results() -> None:
    """docs/interop.md's compatibility table is what ``benchmarks/interop.py`` writes from docs/interop-results.jsonl
    (run it again after changing either)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("interop_bench", ROOT / "benchmarks" / "interop.py")
    assert spec is not None and spec.loader is not None
    interop = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(interop)
    rows = [json.loads(line) for line in (ROOT / "docs" / "interop-results.jsonl").read_text().splitlines() if line]
    assert {row["case"] for row in rows} == set(interop.decoder_cases())  # every decoder of the zoo was run
    page = (ROOT / "docs" / "interop.md").read_text()
    section = page.split(interop.START, 1)[1].split(interop.END, 1)[0]
    assert section.strip() == interop.table(rows).strip()
