"""The ``hub-export`` command line as people use it: the ``hf`` conventions, ``--json`` and ``--quiet``, complete
``--help``, ``validate`` on a repo, one status line per stage and nothing from other libraries."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from cli_run import STAGE_LINE, outside_actions, run_cli, run_process, save_tiny_export, save_tiny_llama
from huggingface_hub import HfApi

from hub_export.cli._reference import commands
from hub_export.cli.main import build_parser
from hub_export.embedded_hub.server import HubServer
from hub_export.errors import HubExportError

__all__ = ["outside_actions"]  # an autouse fixture, used by importing it

REPO = "me/tiny-cli"
HUB_VERBS = ("export", "push", "pull", "validate", "publish", "sync")


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A saved Dynamo export folder (module-wide; copy it before changing it)."""
    return save_tiny_export(tmp_path_factory.mktemp("saved") / "pt2")


def _options(parser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}


def test_every_command_has_an_example_and_the_hf_flags():
    for name, parser in commands(build_parser()):
        if name == "hub-export":
            continue
        text = parser.format_help()
        assert re.search(rf"example:\n  {re.escape(name)} ", text), name
    parsers = dict(commands(build_parser()))
    for verb in HUB_VERBS:
        options = _options(parsers[f"hub-export {verb}"])
        assert {"--token", "--endpoint", "--revision", "--quiet", "--json", "--verbose"} <= options, verb
    for verb in ("push", "publish", "sync"):
        assert {"--commit-message", "--private"} <= _options(parsers[f"hub-export {verb}"]), verb
    assert "--local-dir" in _options(parsers["hub-export pull"])
    assert "--create-pr" in _options(parsers["hub-export push"]) & _options(parsers["hub-export sync"])
    # REPO first everywhere, as in `hf upload REPO PATH` / `hf download REPO`
    for verb in ("push", "pull", "validate", "publish", "sync", "export"):
        positionals = [a.metavar for a in parsers[f"hub-export {verb}"]._actions if not a.option_strings]
        assert positionals[0] in ("REPO", "DIR_OR_REPO", "SOURCE", "MODEL"), (verb, positionals)


def test_an_unknown_flag_prints_the_subcommands_usage(capsys):
    run = run_cli(capsys, "pull", "me/x", "--bogus")
    assert run.code == 2
    assert run.err.startswith("usage: hub-export pull ")
    assert run.err_lines[-1] == "hub-export pull: error: unrecognized arguments: --bogus"
    run = run_cli(capsys, "hub", "serve", "--root", "x", "--bogus")
    assert run.code == 2 and run.err.startswith("usage: hub-export hub serve ")
    assert run_cli(capsys, "push", "--help").code == 0
    run = run_cli(capsys)
    assert run.code == 2 and run.err.startswith("usage: hub-export ") and "required: COMMAND" in run.err_lines[-1]


def test_push_pull_validate_speak_json_and_quiet(
    saved: Path, hub_api: HfApi, hub_env: HubServer, tmp_path: Path, capsys
):
    run = run_cli(capsys, "push", REPO, saved, "--json", "--commit-message", "first")
    assert run.code == 0, run.err
    pushed = json.loads(run.out)  # exactly one JSON object on stdout
    head = hub_api.list_repo_commits(REPO)[0]
    assert pushed["commit_sha"] == head.commit_id and pushed["changed"] is True and head.title == "first"
    assert pushed["commit_url"].endswith(f"/commit/{head.commit_id}")

    run = run_cli(capsys, "pull", REPO, "--subfolder", "pt2", "--quiet")
    assert run.code == 0 and run.err == ""
    cached = Path(run.out.strip())  # only the path
    assert (cached / "model.pt2").is_file() and cached.parts[-3] == "snapshots"

    target = tmp_path / "pulled"
    run = run_cli(capsys, "pull", REPO, "--subfolder", "pt2", "--local-dir", target, "--json")
    pulled = json.loads(run.out)
    assert run.code == 0 and pulled["path"] == str(target) and pulled["commit"] == head.commit_id
    assert sorted(pulled["files"]) == sorted(p.name for p in target.iterdir())

    run = run_cli(capsys, "validate", target, "--json")
    assert run.code == 0 and json.loads(run.out)["valid"] is True
    run = run_cli(capsys, "push", REPO, saved, "--quiet")  # unchanged: still one line, the commit URL
    assert run.code == 0 and run.out.strip().splitlines() == [pushed["commit_url"]]


def test_validate_checks_what_the_repo_serves(saved: Path, hub_api: HfApi, hub_env: HubServer, capsys, monkeypatch):
    assert run_cli(capsys, "push", REPO, saved).code == 0
    run = run_cli(capsys, "validate", REPO, "--subfolder", "pt2")
    assert run.code == 0, run.err
    assert "ok model.pt2 " in run.out and run.out.strip().splitlines()[-1].startswith(f"valid: {REPO}@")
    with monkeypatch.context() as offline:  # offline, the cached copy is what is checked
        from huggingface_hub import constants

        offline.setattr(constants, "HF_HUB_OFFLINE", True)
        hub_env.clear_log()
        assert run_cli(capsys, "validate", REPO, "--subfolder", "pt2").code == 0 and hub_env.log == []
    # bytes changed in the server's storage (same size): validate downloads them again and names the file
    manifest = json.loads((saved / "export.json").read_text())
    sha256 = next(f["sha256"] for f in manifest["files"] if f["path"] == "model.pt2")
    blob = hub_env.store.get("model", REPO).lfs_path(sha256)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    run = run_cli(capsys, "validate", REPO, "--subfolder", "pt2")
    assert run.code == 1
    assert len(run.err_lines) == 1 and run.err_lines[0].startswith("hub-export validate: error: ")
    assert "pt2/model.pt2" in run.err and "sha256" in run.err


def test_export_prints_one_status_line_per_stage(tmp_path: Path, capsys):
    model = save_tiny_llama(tmp_path / "model")
    run = run_cli(capsys, "export", model, "-f", "dynamo", "-o", tmp_path / "out", "--json")
    assert run.code == 0, run.err
    result = json.loads(run.out)
    assert result["exports"][0]["format"] == "dynamo" and result["exports"][0]["path"] == str(tmp_path / "out")
    assert all(re.match(STAGE_LINE, line) for line in run.err_lines[:-1]), run.err
    stages = [line.split(" ...")[0] for line in run.err_lines[:-1]]
    assert stages == [
        f"loading {model}",
        "tracing",
        "lowering to dynamo",
        "checking parity",
        "checking at size 1",  # the symbolic axes go down to 1 where the program still matches eager there
        f"saving {tmp_path / 'out'}",
    ]
    # a causal LM without --task is one graph: it claims no task, and the CLI says how to get one that generates
    assert result["exports"][0]["task"] is None and result["exports"][0]["generation"] is False
    assert run.err_lines[-1] == (
        "warning: one graph of the model's forward (no generate()); add --task text-generation to export for generation"
    )
    manifest = json.loads((tmp_path / "out" / "export.json").read_text())
    assert manifest["task"] is None
    from hub_export import ExportedModel

    with pytest.raises(HubExportError, match="cannot generate; export for generation: `hub-export export MODEL --task"):
        ExportedModel.from_pretrained(tmp_path / "out").generate()
    quiet = run_cli(capsys, "export", model, "-f", "dynamo", "-o", tmp_path / "again", "--quiet")
    assert quiet.code == 0 and quiet.err == "" and quiet.out.strip() == str(tmp_path / "again")


def test_sync_dry_run_json(hub_api: HfApi, hub_env: HubServer, tmp_path: Path, capsys):
    save_tiny_llama(tmp_path / "model")
    hub_api.create_repo(REPO)
    source = hub_api.upload_folder(repo_id=REPO, folder_path=tmp_path / "model").oid
    run = run_cli(capsys, "sync", REPO, "-f", "dynamo", "-f", "onnx", "--dry-run", "--json")
    assert run.code == 0, run.err
    plan = json.loads(run.out)
    assert plan["source_sha"] == source and plan["stale"] is True and plan["updated"] is False
    assert [(f["format"], f["status"]) for f in plan["formats"]] == [("dynamo", "missing"), ("onnx", "missing")]
    run = run_cli(capsys, "sync", REPO, "-f", "dynamo", "--task", "text-generation", "--dry-run", "--json")
    assert run.code == 0, run.err
    planned = json.loads(run.out)["formats"]
    assert [(f["format"], f["task"], f["generation"]) for f in planned] == [("dynamo", "text-generation", True)]


@pytest.mark.parametrize("formats", [("onnx", "executorch")])
def test_a_real_export_prints_nothing_from_other_libraries(formats, tmp_path: Path):
    """As a process: torchao, torch, onnx and ExecuTorch's native lines (27 in all before) are gone; --verbose shows
    other libraries' output again."""
    pytest.importorskip("executorch")
    model = save_tiny_llama(tmp_path / "model")
    flags = [item for fmt in formats for item in ("-f", fmt)]
    env = {"HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    run = run_process("export", model, *flags, "-o", tmp_path / "out", env=env)
    assert run.code == 0, run.err
    others = [line for line in run.err_lines if not re.match(STAGE_LINE, line)]
    ours = [
        "warning: one graph of the model's forward (no generate()); add --task text-generation to export for generation"
    ]
    assert others == ours, run.err  # hub_export's own advice, and not a line from another library
    assert [line.split(":")[0] for line in run.out.strip().splitlines()] == list(formats)
    shutil.rmtree(tmp_path / "out")
    verbose = run_process("export", model, "-f", "dynamo", "-o", tmp_path / "out", "--verbose", env=env)
    assert verbose.code == 0 and [line for line in verbose.err_lines if not re.match(STAGE_LINE, line)]
