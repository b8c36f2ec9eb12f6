"""A small runner for GitHub Actions workflows and composite actions, for the steps that can run offline.

It does what the Actions runner does for ``run`` steps: evaluates ``${{ }}`` expressions (contexts ``github``,
``env``, ``inputs``, ``secrets``, ``matrix``, ``needs``, ``steps``, ``runner``; literals, ``||``, ``&&``,
``==``, ``!=``, ``!``, parentheses), runs each step with bash, its ``env`` and fresh ``GITHUB_OUTPUT`` /
``GITHUB_STEP_SUMMARY`` files, reads the outputs back, evaluates ``if:`` of jobs, follows ``needs`` and
``strategy.matrix``. ``uses:`` steps:

* ``./actions/<name>`` (a composite action of this repository) runs its steps the same way, minus the step with
  ``id: install`` (this environment already has hub-export; the install script is tested on its own);
* ``actions/upload-artifact`` / ``actions/download-artifact`` copy folders through a local artifact store;
* ``actions/checkout``, ``actions/setup-python`` and ``actions/cache`` are skipped (the checkout is this tree).

``hub-export`` on the steps' ``PATH`` runs this tree's code with this interpreter.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
_EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<op>\|\||&&|==|!=|!|\(|\))|(?P<num>\d+(?:\.\d+)?)"
    r"|(?P<path>[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)*))"
)


class StepFailed(AssertionError):
    """A step exited with a non-zero code."""

    def __init__(self, name: str, code: int, log: str):
        super().__init__(f"{name} exited {code}:\n{log}")
        self.code, self.log = code, log


# -- expressions ----------------------------------------------------------------------------------------------
def evaluate(expression: str, contexts: dict[str, Any]) -> Any:
    """The value of one ``${{ }}`` expression (GitHub's semantics for the operators used here)."""
    tokens = []
    position = 0
    text = expression.strip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise AssertionError(f"the runner cannot parse {expression!r} at {text[position:]!r}")
        tokens.append((match.lastgroup, match[match.lastgroup]))
        position = match.end()
        while position < len(text) and text[position].isspace():
            position += 1
    value, rest = _or(tokens, contexts)
    assert not rest, f"trailing tokens in {expression!r}: {rest}"
    return value


def _truthy(value: Any) -> bool:
    return value not in (None, "", False, 0)


def _or(tokens: list, ctx: dict) -> tuple[Any, list]:
    left, tokens = _and(tokens, ctx)
    while tokens and tokens[0] == ("op", "||"):
        right, tokens = _and(tokens[1:], ctx)
        left = left if _truthy(left) else right
    return left, tokens


def _and(tokens: list, ctx: dict) -> tuple[Any, list]:
    left, tokens = _compare(tokens, ctx)
    while tokens and tokens[0] == ("op", "&&"):
        right, tokens = _compare(tokens[1:], ctx)
        left = right if _truthy(left) else left
    return left, tokens


def _compare(tokens: list, ctx: dict) -> tuple[Any, list]:
    left, tokens = _unary(tokens, ctx)
    if tokens and tokens[0] in (("op", "=="), ("op", "!=")):
        op = tokens[0][1]
        right, tokens = _unary(tokens[1:], ctx)
        same = str("" if left is None else left).lower() == str("" if right is None else right).lower()
        return (same if op == "==" else not same), tokens
    return left, tokens


def _unary(tokens: list, ctx: dict) -> tuple[Any, list]:
    kind, text = tokens[0]
    if (kind, text) == ("op", "!"):
        value, rest = _unary(tokens[1:], ctx)
        return not _truthy(value), rest
    if (kind, text) == ("op", "("):
        value, rest = _or(tokens[1:], ctx)
        assert rest and rest[0] == ("op", ")"), tokens
        return value, rest[1:]
    if kind == "str":
        return text[1:-1].replace("''", "'"), tokens[1:]
    if kind == "num":
        return float(text), tokens[1:]
    if text in ("true", "false", "null"):
        return {"true": True, "false": False, "null": None}[text], tokens[1:]
    value: Any = ctx
    for part in text.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value, tokens[1:]


def substitute(text: Any, contexts: dict[str, Any]) -> str:
    """``text`` with every ``${{ }}`` replaced by its value (null as empty)."""

    def value(match: re.Match) -> str:
        result = evaluate(match[1], contexts)
        if isinstance(result, bool):
            return "true" if result else "false"
        return "" if result is None else str(result)

    return _EXPR.sub(value, str(text))


def _condition(text: Any, contexts: dict[str, Any]) -> bool:
    if text is None:
        return True
    inner = _EXPR.fullmatch(str(text).strip())
    return _truthy(evaluate(inner[1] if inner else str(text), contexts))


def parse_outputs(text: str) -> dict[str, str]:
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


# -- running steps --------------------------------------------------------------------------------------------
class _Shell:
    """Runs ``run`` steps with bash in ``workdir``; keeps logs and the job summary."""

    def __init__(self, workdir: Path, base_env: dict[str, str]):
        self.workdir = workdir
        self.base_env = dict(base_env)
        self.logs: list[str] = []
        self.summary = ""
        self._count = 0
        shims = workdir.parent / f"{workdir.name}-bin"
        shims.mkdir(exist_ok=True)
        shim = shims / "hub-export"
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m hub_export.cli.main "$@"\n')
        shim.chmod(0o755)
        path = os.pathsep.join([str(shims), str(Path(sys.executable).parent), self.base_env.get("PATH", "")])
        self.base_env.update(PATH=path, PYTHONPATH=str(ROOT), RUNNER_OS="Linux")

    def run(self, name: str, script: str, env: dict[str, str]) -> dict[str, str]:
        self._count += 1
        out, summary = self.workdir / f".output-{self._count}", self.workdir / f".summary-{self._count}"
        out.write_text(""), summary.write_text("")
        full_env = {**self.base_env, **env, "GITHUB_OUTPUT": str(out), "GITHUB_STEP_SUMMARY": str(summary)}
        path = self.workdir / f".step-{self._count}.sh"
        path.write_text(script)
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(path)],
            env=full_env,
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=600,
        )
        self.logs.append(done.stdout + done.stderr)
        if done.returncode != 0:
            raise StepFailed(name, done.returncode, done.stdout + done.stderr)
        self.summary += summary.read_text()
        return parse_outputs(out.read_text())


class StepRunner:
    """Runs a composite action's steps (see the module docstring); :meth:`run` returns its outputs."""

    def __init__(
        self,
        action: Path,
        inputs: dict[str, str],
        workdir: Path,
        env: dict[str, str] | None = None,
        skip_ids: tuple[str, ...] = ("install",),
        shell: _Shell | None = None,
    ):
        self.action = yaml.safe_load(action.read_text())
        self.path = action.parent
        self.skip_ids = skip_ids
        self.shell = shell or _Shell(workdir, dict(os.environ if env is None else env))
        self.env = dict(self.shell.base_env) if shell is None or env is None else {**self.shell.base_env, **env}
        declared = self.action["inputs"]
        unknown = set(inputs) - set(declared)
        assert not unknown, f"inputs not declared by the action: {unknown}"
        self.inputs = {name: str(spec.get("default", "")) for name, spec in declared.items()}
        self.inputs.update(inputs)
        missing = [n for n, spec in declared.items() if spec.get("required") and not self.inputs.get(n)]
        assert not missing, f"required inputs missing: {missing}"
        self.steps: dict[str, dict[str, Any]] = {}

    @property
    def logs(self) -> list[str]:
        return self.shell.logs

    @property
    def summary(self) -> str:
        return self.shell.summary

    def contexts(self, env: dict[str, str]) -> dict[str, Any]:
        github = {"action_path": str(self.path), "workspace": str(self.shell.workdir)}
        return {"inputs": self.inputs, "env": env, "github": github, "steps": self.steps, "runner": {"os": "Linux"}}

    def sub(self, text: Any, env: dict[str, str]) -> str:
        return substitute(text, self.contexts(env))

    def run(self) -> dict[str, str]:
        for i, step in enumerate(self.action["runs"]["steps"]):
            if "uses" in step or step.get("id") in self.skip_ids:
                continue
            assert step.get("shell") == "bash", step
            env = dict(self.env)
            env.update({k: self.sub(v, env) for k, v in (step.get("env") or {}).items()})
            outputs = self.shell.run(step.get("name", f"step {i}"), self.sub(step["run"], env), env)
            self.steps[step.get("id", f"step-{i}")] = {"outputs": outputs}
        return {name: self.sub(spec["value"], {}) for name, spec in (self.action.get("outputs") or {}).items()}


class WorkflowRunner:
    """Runs a workflow's jobs for one event (see the module docstring).

    Args:
        workflow: The workflow file.
        event_name: ``github.event_name``.
        event: ``github.event`` (``client_payload``, ``inputs``).
        secrets: ``secrets``.
        workdir: The workspace (each job starts from it; artifacts are kept beside it).
        env: The runner's environment.
        matrix: Job -> {axis: values}, replacing the workflow's values (to run a part of a matrix).
    """

    def __init__(
        self,
        workflow: Path,
        event_name: str,
        event: dict[str, Any],
        secrets: dict[str, str],
        workdir: Path,
        env: dict[str, str] | None = None,
        matrix: dict[str, dict[str, list]] | None = None,
    ):
        self.workflow = yaml.safe_load(workflow.read_text())
        self.name = self.workflow.get("name", workflow.stem)
        self.event_name, self.event, self.secrets = event_name, event, secrets
        self.workdir = workdir
        self.matrix = matrix or {}
        self.shell = _Shell(workdir, dict(os.environ if env is None else env))
        self.artifacts = workdir.parent / f"{workdir.name}-artifacts"
        self.jobs: dict[str, dict[str, Any]] = {}  # job -> {"result": ..., "outputs": ...}
        self.step_outputs: dict[str, dict[str, dict[str, Any]]] = {}

    def _github(self) -> dict[str, Any]:
        return {
            "event_name": self.event_name,
            "event": self.event,
            "workflow": self.name,
            "workspace": str(self.workdir),
            "ref": "refs/heads/main",
        }

    def run(self) -> dict[str, dict[str, Any]]:
        """Run every job in order of ``needs``; returns job -> {"result", "outputs"}."""
        pending = dict(self.workflow["jobs"])
        while pending:
            ready = [
                n
                for n, j in pending.items()
                if all(d in self.jobs for d in _list(j.get("needs")))  # dependencies done
            ]
            assert ready, f"jobs waiting on each other: {list(pending)}"
            for name in ready:
                self._job(name, pending.pop(name))
        return self.jobs

    def _job(self, name: str, job: dict[str, Any]) -> None:
        needs = {
            d: {"outputs": self.jobs[d]["outputs"], "result": self.jobs[d]["result"]} for d in _list(job.get("needs"))
        }
        base = {"github": self._github(), "needs": needs, "secrets": self.secrets, "runner": {"os": "Linux"}}
        if any(n["result"] != "success" for n in needs.values()) or not _condition(job.get("if"), base):
            self.jobs[name] = {"result": "skipped", "outputs": {}}
            return
        axes = dict((job.get("strategy") or {}).get("matrix") or {})
        axes.update(self.matrix.get(name, {}))
        combos = [{}]
        for axis, values in axes.items():
            combos = [{**c, axis: v} for c in combos for v in values]
        outputs: dict[str, str] = {}
        for combo in combos:
            steps: dict[str, dict[str, Any]] = {}
            contexts = {**base, "matrix": combo, "steps": steps}
            for i, step in enumerate(job["steps"]):
                env = dict(self.shell.base_env)
                for scope in (self.workflow.get("env"), job.get("env"), step.get("env")):
                    env.update({k: substitute(v, {**contexts, "env": env}) for k, v in (scope or {}).items()})
                contexts["env"] = env
                if not _condition(step.get("if"), contexts):
                    continue
                label = step.get("name") or step.get("uses") or f"step {i}"
                if "uses" in step:
                    result = self._uses(step, contexts, env)
                else:
                    result = self.shell.run(label, substitute(step["run"], contexts), env)
                if step.get("id"):
                    steps[step["id"]] = {"outputs": result}
            for key, value in (job.get("outputs") or {}).items():
                outputs[key] = substitute(value, contexts)
            self.step_outputs[f"{name}{combo or ''}"] = steps
        self.jobs[name] = {"result": "success", "outputs": outputs}

    def _uses(self, step: dict[str, Any], contexts: dict[str, Any], env: dict[str, str]) -> dict[str, str]:
        uses = step["uses"]
        given = {k: substitute(v, contexts) for k, v in (step.get("with") or {}).items()}
        if uses.startswith("./"):
            action = ROOT / uses[2:] / "action.yml"
            return StepRunner(action, given, self.workdir, env, shell=self.shell).run()
        repo = uses.split("@", 1)[0]
        if repo in ("actions/checkout", "actions/setup-python", "actions/cache"):
            return {}
        if repo == "actions/upload-artifact":
            source = self.workdir / given["path"]
            if not (source.is_dir() and any(source.iterdir())):
                assert given.get("if-no-files-found") in ("ignore", "warn"), (
                    f"upload-artifact: nothing at {given['path']}"
                )
                return {}
            shutil.copytree(source, self.artifacts / given["name"])
            return {}
        if repo == "actions/download-artifact":
            merge = str(given.get("merge-multiple", "false")).lower() == "true"
            for stored in sorted(self.artifacts.iterdir()) if self.artifacts.is_dir() else []:
                if fnmatch.fnmatch(stored.name, given.get("pattern", "*")):
                    target = self.workdir / given.get("path", ".")
                    shutil.copytree(stored, target if merge else target / stored.name, dirs_exist_ok=merge)
            return {}
        raise AssertionError(f"the runner does not know the action {uses}")


def _list(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)
