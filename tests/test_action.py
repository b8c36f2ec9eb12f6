"""The GitHub Action (actions/sync/action.yml) and the example workflows.

* Every file validates against GitHub's published schemas (check-jsonschema's vendored ``vendor.github-actions``
  and ``vendor.github-workflows``; no network needed).
* The composite action's ``run`` steps are executed against the embedded Hub by a small step runner: it
  substitutes ``${{ inputs.* }}``, ``${{ env.* }}``, ``${{ github.action_path }}`` and
  ``${{ steps.X.outputs.Y }}``, skips ``uses:`` steps (actions/setup-python) and the step with id ``install``
  (this environment already has hub-export installed; that step is exercised separately with a ``python`` shim),
  runs each remaining step with bash, its ``env`` and fresh ``GITHUB_OUTPUT`` / ``GITHUB_STEP_SUMMARY`` files,
  and evaluates the action's outputs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from huggingface_hub import HfApi
from test_sync import REPO, upload_source

from hub_export.embedded_hub.server import HubServer

ROOT = Path(__file__).resolve().parent.parent
ACTION = ROOT / "actions" / "sync" / "action.yml"
WORKFLOWS = sorted((ROOT / "actions" / "examples").glob("*.yml"))
SECRET = "hf_action_secret_token_value"
_EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def _check(schema: str, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_action_and_example_workflows_match_githubs_schemas():
    assert [p.name for p in WORKFLOWS] == ["fanout.yml", "sync.yml"]
    done = _check("vendor.github-actions", ACTION)
    assert done.returncode == 0, done.stdout + done.stderr
    for workflow in WORKFLOWS:
        done = _check("vendor.github-workflows", workflow)
        assert done.returncode == 0, f"{workflow.name}: {done.stdout}{done.stderr}"
    # the schema check is not vacuous: a composite step without `shell` is refused
    broken = yaml.safe_load(ACTION.read_text())
    del broken["runs"]["steps"][2]["shell"]
    bad = ROOT / "actions" / "sync" / ".broken-action.yml"
    try:
        bad.write_text(yaml.safe_dump(broken))
        assert _check("vendor.github-actions", bad).returncode != 0
    finally:
        bad.unlink()


def test_workflows_filter_main_and_serialise_per_source():
    for workflow in WORKFLOWS:
        data = yaml.safe_load(workflow.read_text())
        assert "client_payload.repo" in data["concurrency"]["group"]
        first_job = next(iter(data["jobs"].values()))
        assert "client_payload.ref == 'refs/heads/main'" in first_job["if"]
    on = yaml.safe_load((ROOT / "actions" / "examples" / "sync.yml").read_text())[True]  # YAML 1.1: `on` is True
    assert {"schedule", "workflow_dispatch", "repository_dispatch"} <= set(on)
    fanout = yaml.safe_load((ROOT / "actions" / "examples" / "fanout.yml").read_text())["jobs"]
    assert (
        "hub-export publish" in fanout["publish"]["steps"][-1]["run"]
        and fanout["export"]["strategy"]["matrix"]["format"]
    )


# -- the step runner ------------------------------------------------------------------------------------------
class StepRunner:
    """Runs a composite action's ``run`` steps the way the runner does (bash, env, output files)."""

    def __init__(
        self,
        action: Path,
        inputs: dict[str, str],
        workdir: Path,
        env: dict[str, str] | None = None,
        skip_ids: tuple[str, ...] = ("install",),
    ):
        self.action = yaml.safe_load(action.read_text())
        self.path = action.parent
        self.workdir = workdir
        self.skip_ids = skip_ids
        self.base_env = dict(os.environ if env is None else env)
        declared = self.action["inputs"]
        unknown = set(inputs) - set(declared)
        assert not unknown, f"inputs not declared by the action: {unknown}"
        self.inputs = {name: str(spec.get("default", "")) for name, spec in declared.items()}
        self.inputs.update(inputs)
        missing = [n for n, spec in declared.items() if spec.get("required") and not self.inputs.get(n)]
        assert not missing, f"required inputs missing: {missing}"
        self.steps: dict[str, dict[str, str]] = {}
        self.logs: list[str] = []
        self.summary = ""

    def _value(self, expression: str, env: dict[str, str]) -> str:
        head, _, rest = expression.partition(".")
        if head == "inputs":
            return self.inputs[rest]
        if head == "env":
            return env.get(rest, "")
        if expression == "github.action_path":
            return str(self.path)
        match = re.fullmatch(r"steps\.([\w-]+)\.outputs\.([\w-]+)", expression)
        if match:
            return self.steps.get(match[1], {}).get(match[2], "")
        raise AssertionError(f"the step runner does not know the expression {expression!r}")

    def sub(self, text: Any, env: dict[str, str]) -> str:
        return _EXPR.sub(lambda m: self._value(m[1], env), str(text))

    def run(self) -> dict[str, str]:
        """Run every step in order; returns the action's outputs."""
        for i, step in enumerate(self.action["runs"]["steps"]):
            if "uses" in step or step.get("id") in self.skip_ids:
                continue
            assert step.get("shell") == "bash", step
            env = dict(self.base_env)
            env.update({k: self.sub(v, env) for k, v in (step.get("env") or {}).items()})
            out, summary = self.workdir / f"output-{i}", self.workdir / f"summary-{i}"
            out.write_text(""), summary.write_text("")
            env.update(
                GITHUB_OUTPUT=str(out),
                GITHUB_STEP_SUMMARY=str(summary),
                GITHUB_ACTION_PATH=str(self.path),
                PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            )
            script = self.workdir / f"step-{i}.sh"
            script.write_text(self.sub(step["run"], env))
            done = subprocess.run(
                ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                env=env,
                cwd=self.workdir,
                capture_output=True,
                text=True,
                timeout=300,
            )
            self.logs.append(done.stdout + done.stderr)
            if done.returncode != 0:
                raise StepFailed(step.get("name", f"step {i}"), done.returncode, done.stdout + done.stderr)
            self.steps[step.get("id", f"step-{i}")] = _parse_outputs(out.read_text())
            self.summary += summary.read_text()
        return {name: self.sub(spec["value"], self.base_env) for name, spec in self.action["outputs"].items()}


class StepFailed(AssertionError):
    def __init__(self, name: str, code: int, log: str):
        super().__init__(f"{name} exited {code}:\n{log}")
        self.code, self.log = code, log


def _parse_outputs(text: str) -> dict[str, str]:
    """``key=value`` lines and ``key<<DELIM`` multi-line values, as the runner reads ``$GITHUB_OUTPUT``."""
    values, lines = {}, iter(text.splitlines())
    for line in lines:
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            key, delimiter = line.split("<<", 1)
            values[key] = "\n".join(iter(lambda: next(lines), delimiter))
        elif line:
            key, value = line.split("=", 1)
            values[key] = value
    return values


def test_the_composite_action_syncs_against_the_embedded_hub(hub_api: HfApi, hub_env: HubServer, tmp_path: Path):
    source = upload_source(hub_api, tmp_path / "model")
    before = [c.commit_id for c in hub_api.list_repo_commits(REPO)]
    env = {k: v for k, v in os.environ.items() if k not in ("HF_ENDPOINT", "HF_TOKEN")}  # the action sets them
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
    # the token reached the Hub client as HF_TOKEN but was never printed
    assert all(SECRET not in log for log in runner.logs) and SECRET not in runner.summary
    # a second run of the action is up to date: no commit, updated=false
    again = StepRunner(ACTION, inputs, work, env).run()
    assert again == {"updated": "false", "source-sha": commits[0], "commit-sha": commits[0], "pr-url": ""}
    assert [c.commit_id for c in hub_api.list_repo_commits(REPO)] == commits
    # generation is refused with a clear message
    with pytest.raises(StepFailed, match="generation exports are not available yet"):
        StepRunner(ACTION, {**inputs, "generation": "true"}, work, env).run()


def test_the_install_step_installs_the_extras_of_the_formats_under_the_constraints(tmp_path: Path):
    shims = tmp_path / "bin"
    shims.mkdir()
    record = tmp_path / "pip-args"
    for name in ("python", "hub-export"):
        (shims / name).write_text(f'#!/bin/sh\necho "{name} $*" >> "{record}"\n')
        (shims / name).chmod(0o755)
    env = {"PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}
    action = yaml.safe_load(ACTION.read_text())
    step = next(s for s in action["runs"]["steps"] if s.get("id") == "install")
    runner = StepRunner(
        ACTION, {"source-repo": REPO, "hf-token": SECRET, "formats": "dynamo, onnx openvino"}, tmp_path, env
    )
    step_env = {**env, **{k: runner.sub(v, env) for k, v in step["env"].items()}}
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
        env=step_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    pip, version = record.read_text().splitlines()
    root = f"{ACTION.parent}/../.."
    assert pip.endswith(f"-c {root}/constraints.txt {root}[onnx,openvino]") and version == "hub-export --version"
    assert (ACTION.parent / "../../constraints.txt").resolve().is_file()
    record.unlink()
    pinned = StepRunner(
        ACTION,
        {"source-repo": REPO, "hf-token": SECRET, "formats": "dynamo", "hub-export-version": "0.1.0"},
        tmp_path,
        env,
    )
    step_env = {**env, **{k: pinned.sub(v, env) for k, v in step["env"].items()}}
    subprocess.run(["bash", "-c", step["run"]], env=step_env, check=True, timeout=60)
    assert record.read_text().splitlines()[0].endswith(" hub-export==0.1.0")
    bad = {**step_env, "FORMATS": "tflite"}
    done = subprocess.run(["bash", "-c", step["run"]], env=bad, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "unknown format 'tflite'" in done.stdout
