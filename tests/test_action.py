"""The GitHub Actions (actions/sync, actions/setup) and the example workflows.

* Every file validates against GitHub's published schemas (check-jsonschema's vendored ``vendor.github-actions``
  and ``vendor.github-workflows``; no network needed).
* The composite action and both example workflows run against the embedded Hub with the step runner of
  ``tests/action_runner.py``, as far as they can offline: everything but ``actions/checkout``,
  ``actions/setup-python``, ``actions/cache`` and the pip install (``actions/install.sh`` is exercised with a
  ``python`` shim that records its arguments).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from action_runner import ROOT, StepFailed, StepRunner, WorkflowRunner
from huggingface_hub import HfApi
from test_sync import REPO, upload_source

from hub_export import ExportedModel
from hub_export.embedded_hub.server import HubServer

ACTION = ROOT / "actions" / "sync" / "action.yml"
SETUP = ROOT / "actions" / "setup" / "action.yml"
INSTALL = ROOT / "actions" / "install.sh"
EXAMPLES = ROOT / "actions" / "examples"
WORKFLOWS = sorted(EXAMPLES.glob("*.yml"))
SECRET = "hf_action_secret_token_value"


def _check(schema: str, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _env() -> dict[str, str]:
    """The runner's environment: the embedded Hub's endpoint, no token (the workflow passes its secret)."""
    return {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "GITHUB_ACTIONS")}


def test_actions_and_example_workflows_match_githubs_schemas(tmp_path: Path):
    assert [p.name for p in WORKFLOWS] == ["fanout.yml", "sync.yml"]
    for action in (ACTION, SETUP):
        done = _check("vendor.github-actions", action)
        assert done.returncode == 0, done.stdout + done.stderr
    for workflow in WORKFLOWS:
        done = _check("vendor.github-workflows", workflow)
        assert done.returncode == 0, f"{workflow.name}: {done.stdout}{done.stderr}"
    # the schema check is not vacuous: a composite step without `shell` is refused
    broken = yaml.safe_load(ACTION.read_text())
    del broken["runs"]["steps"][-1]["shell"]
    bad = tmp_path / "action.yml"
    bad.write_text(yaml.safe_dump(broken))
    assert _check("vendor.github-actions", bad).returncode != 0


def test_both_actions_install_the_same_way():
    sync_steps = yaml.safe_load(ACTION.read_text())["runs"]["steps"]
    setup_steps = yaml.safe_load(SETUP.read_text())["runs"]["steps"]
    assert sync_steps[: len(setup_steps)] == setup_steps
    uses = {s["uses"].split("@")[0]: s.get("with", {}) for s in setup_steps if "uses" in s}
    assert uses["actions/cache"]["key"] == "${{ steps.pip-cache.outputs.key }}"  # pip downloads are cached
    assert "install.sh" in setup_steps[-1]["run"] and setup_steps[-1]["id"] == "install"
    inputs = yaml.safe_load(ACTION.read_text())["inputs"]
    assert {"task", "private", "create-pr", "hf-token", "formats"} <= set(inputs)
    assert "hub-export-version" not in inputs  # it installed from the package index, where hub-export is not


def test_workflows_filter_main_and_serialise_per_source():
    for workflow in WORKFLOWS:
        data = yaml.safe_load(workflow.read_text())
        assert "client_payload.repo" in data["concurrency"]["group"]
        first_job = next(iter(data["jobs"].values()))
        assert "client_payload.ref == 'refs/heads/main'" in first_job["if"]
        text = workflow.read_text()
        assert "hub-export==" not in text and "pip install" not in text  # installed by the action from its tree
    on = yaml.safe_load((EXAMPLES / "sync.yml").read_text())[True]  # YAML 1.1: `on` is True
    assert {"schedule", "workflow_dispatch", "repository_dispatch"} <= set(on)


def test_the_install_script_installs_this_tree_with_the_pins_and_cpu_torch(tmp_path: Path):
    shims = tmp_path / "bin"
    shims.mkdir()
    record = tmp_path / "calls"
    for name in ("python", "hub-export"):
        (shims / name).write_text(f'#!/bin/sh\necho "{name} $*" >> "{record}"\n')
        (shims / name).chmod(0o755)
    env = {"PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", str(INSTALL), "dynamo, onnx openvino"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    pip, version = record.read_text().splitlines()
    assert pip.startswith("python -m pip install ") and version == "hub-export --version"
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in pip
    assert pip.endswith(f"-c {ROOT}/constraints.txt {ROOT}[onnx,openvino]")  # this tree, never the package index
    assert done.stdout.startswith("::group::Install hub-export[onnx,openvino]") and "::endgroup::" in done.stdout
    bad = subprocess.run(["bash", str(INSTALL), "tflite"], env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "unknown format 'tflite'" in bad.stdout


def test_the_composite_action_syncs_against_the_embedded_hub(hub_api: HfApi, hub_env: HubServer, tmp_path: Path):
    source = upload_source(hub_api, tmp_path / "model")
    before = [c.commit_id for c in hub_api.list_repo_commits(REPO)]
    env = {k: v for k, v in _env().items() if k != "HF_ENDPOINT"}  # the action sets it from hub-endpoint
    inputs = {"source-repo": REPO, "formats": "dynamo", "hf-token": SECRET, "hub-endpoint": hub_env.url}
    work = tmp_path / "work"
    work.mkdir()
    runner = StepRunner(ACTION, inputs, work, env)
    outputs = runner.run()
    commits = [c.commit_id for c in hub_api.list_repo_commits(REPO)]
    assert commits[1:] == before
    assert outputs == {"updated": "true", "source-sha": source, "commit-sha": commits[0], "pr-url": ""}
    tags = {t.name: t.target_commit for t in hub_api.list_repo_refs(REPO).tags}
    assert tags == {f"source-{source[:12]}": commits[0]}
    assert "pt2/model.pt2" in hub_api.list_repo_files(REPO)
    assert "| dynamo | `pt2/` | exported |" in runner.summary and f"/commit/{commits[0]}" in runner.summary
    key = runner.steps["pip-cache"]["outputs"]
    assert re.fullmatch(r"hub-export-pip-Linux-py-[0-9a-f]{16}-dynamo", key["key"]) and key["dir"]
    log = runner.logs[-1]
    assert log.startswith(f"::group::hub-export sync {REPO} (dynamo)\n") and "::endgroup::" in log
    assert "tracing ... " in log and f"commit-sha={commits[0]}" in log.split("::endgroup::")[1]
    # the token reached the Hub client as HF_TOKEN but was never printed
    assert all(SECRET not in log for log in runner.logs) and SECRET not in runner.summary
    # a second run of the action is up to date: no commit, updated=false
    again = StepRunner(ACTION, inputs, work, env).run()
    assert again == {"updated": "false", "source-sha": commits[0], "commit-sha": commits[0], "pr-url": ""}
    assert [c.commit_id for c in hub_api.list_repo_commits(REPO)] == commits
    # the task input: text-generation turns the graph export into a generation export (export.json records both)
    third = StepRunner(ACTION, {**inputs, "task": "text-generation"}, work, env).run()
    assert third["updated"] == "true" and third["commit-sha"] != commits[0]
    manifest = json.loads(
        Path(hub_api.hf_hub_download(REPO, "pt2/export.json", revision=third["commit-sha"])).read_text()
    )
    assert manifest["task"] == "text-generation" and manifest["generation"]["kind"] == "decoder_only"
    assert "decode" in manifest["components"]  # and "prefill", unless the decode graph serves the prompt too
    # an unknown task is refused with a clear message, as an annotation in Actions
    with pytest.raises(StepFailed, match=r"::error title=hub-export sync::--task summarize is not a task hub-export"):
        StepRunner(ACTION, {**inputs, "task": "summarize"}, work, {**env, "GITHUB_ACTIONS": "true"}).run()


def test_the_sync_example_runs_as_written(hub_api: HfApi, hub_env: HubServer, tmp_path: Path):
    """examples/sync.yml, unchanged: a push to main of the source syncs it; a pull request ref does not."""
    source = upload_source(hub_api, tmp_path / "model")
    work = tmp_path / "work"
    work.mkdir()
    secrets = {"HF_TOKEN": SECRET}
    pr = {"client_payload": {"repo": REPO, "ref": "refs/pr/1"}}
    skipped = WorkflowRunner(EXAMPLES / "sync.yml", "repository_dispatch", pr, secrets, work, _env()).run()
    assert skipped["sync"]["result"] == "skipped" and hub_api.list_repo_commits(REPO)[0].commit_id == source

    push = {"client_payload": {"repo": REPO, "ref": "refs/heads/main"}}
    runner = WorkflowRunner(EXAMPLES / "sync.yml", "repository_dispatch", push, secrets, work, _env())
    assert runner.run()["sync"]["result"] == "success"
    head = hub_api.list_repo_commits(REPO)[0].commit_id
    assert {"onnx/model.onnx", "openvino/openvino_model.xml"} <= set(hub_api.list_repo_files(REPO))
    assert f"updated=true source={source} commit={head}" in runner.shell.logs[-1]
    assert "| onnx | `onnx/` | exported |" in runner.shell.summary


def test_the_fanout_example_runs_as_written(hub_api: HfApi, hub_env: HubServer, tmp_path: Path):
    """examples/fanout.yml, unchanged but for its matrix (ONNX only, to keep the test short): plan, one export job
    per format with its artifact, one publish of every artifact."""
    source = upload_source(hub_api, tmp_path / "model")
    work = tmp_path / "work"
    work.mkdir()
    runner = WorkflowRunner(
        EXAMPLES / "fanout.yml",
        "workflow_dispatch",
        {"inputs": {}},
        {"HF_TOKEN": SECRET},
        work,
        _env(),
        matrix={"export": {"format": ["onnx"]}},
    )
    jobs = runner.run()
    assert {name: job["result"] for name, job in jobs.items()} == {
        "plan": "success",
        "export": "success",
        "publish": "success",
    }
    assert jobs["plan"]["outputs"] == {"stale": "true", "source-sha": source}
    head = hub_api.list_repo_commits(REPO)[0]
    assert "onnx/model.onnx" in hub_api.list_repo_files(REPO) and head.commit_id != source
    tags = {t.name: t.target_commit for t in hub_api.list_repo_refs(REPO).tags}
    assert tags == {f"source-{source[:12]}": head.commit_id}
    # the repo sync gets: the task's generation export, which sync then finds up to date (no silent downgrade)
    from hub_export.hub.sync import plan_sync

    assert ExportedModel.from_pretrained(REPO, subfolder="onnx").can_generate()
    assert plan_sync(REPO, ["onnx"], task="text-generation").up_to_date
