"""The documentation as tests: every ``python``, ``bash`` and ``js`` block of the user-facing pages, run in page order.

A page is run as a reader runs it: its blocks in order, in a folder of its own, against an embedded hub of its own
(``HF_ENDPOINT``) on which the models the page names stand in as tiny models of the same architecture
(:data:`STAND_INS`: ``Qwen/Qwen2.5-0.5B`` is a two-layer Qwen2 with random weights and a real tokenizer, uploaded
under that id). The page's ``python`` blocks share one namespace (as in a notebook); ``bash`` blocks run with the
test environment's ``bin`` first on ``PATH`` (``hub-export``, ``hf``, ``python``); ``js`` blocks run with Node
beside transformers.js.

What a block needs says its first line:

* ``# not run by the docs tests: <why>`` (``//`` in JavaScript): the block is shown, not run, and the page says
  why (it installs the package, it is the test command itself, it needs a GPU);
* ``# runs in: <environment>``: a Python block run by the interpreter of that environment
  (``tests/consumers/envs.py``: ``optimum-onnx``, ``optimum-intel``, ``optimum-executorch``), as a separate
  process with the page's folder and hub.

A ``text`` block right after a code block whose first line is ``# prints:`` holds what the block prints (each
line must appear in its output, in order; ``...`` matches anything).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

__all__ = [
    "Block",
    "PAGES",
    "RUN_ELSEWHERE",
    "STAND_INS",
    "blocks",
    "driver_script",
    "environment",
    "run_page",
    "stand_in_repos",
]

ROOT = Path(__file__).resolve().parents[1]
#: The pages whose blocks run, relative to the repository root.
PAGES = (
    "README.md",
    "CONTRIBUTING.md",
    "actions/README.md",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")),
)
#: Pages whose blocks run in another test module, on the hub that module's own checks use (``page -> module``):
#: docs/interop.md runs in tests/test_consumers.py, after the same ``sync`` that the page's first block runs, so the
#: page's sync finds its exports up to date instead of making them a second time.
RUN_ELSEWHERE = {"docs/interop.md": "tests/test_consumers.py"}
#: Repo id -> the tiny stand-in put on a page's hub under it: (architecture family, task it is saved for).
STAND_INS = {
    "Qwen/Qwen2.5-0.5B": "qwen2",
    "HuggingFaceTB/SmolLM2-135M": "llama",
    "me/tiny-llama": "llama",
    "me/my-model": "llama",
    "me/model": "llama",
    "me/tiny-bert": "bert",
}
_FENCE = re.compile(r"^```([A-Za-z]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
_SKIP = re.compile(r"^\s*(#|//)\s*not run by the docs tests:\s*(\S.*)$")
_RUNS_IN = re.compile(r"^\s*#\s*runs in:\s*([\w-]+)\s*$")


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str
    line: int
    language: str  # python, bash or js
    code: str
    skip: str | None = None  # why it is not run
    environment: str | None = None  # the consumer environment a Python block runs in
    prints: tuple[str, ...] = ()  # lines its output must show, in order

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: str) -> list[Block]:
    """The runnable blocks of ``page`` (python, bash, js), in order, with their markers."""
    text = (ROOT / page).read_text(encoding="utf-8")
    found: list[Block] = []
    matches = list(_FENCE.finditer(text))
    for index, match in enumerate(matches):
        language = {"sh": "bash", "shell": "bash", "javascript": "js", "py": "python"}.get(
            match.group(1), match.group(1)
        )
        if language not in ("python", "bash", "js"):
            continue
        code = match.group(2)
        first = code.lstrip("\n").split("\n", 1)[0]
        skip = _SKIP.match(first)
        runs_in = _RUNS_IN.match(first)
        prints: tuple[str, ...] = ()
        following = matches[index + 1] if index + 1 < len(matches) else None
        if following is not None and following.group(1) == "text" and following.start() - match.end() < 3:
            lines = following.group(2).splitlines()
            if lines and lines[0].strip() == "# prints:":
                prints = tuple(line for line in lines[1:] if line.strip())
        found.append(
            Block(
                page,
                text.count("\n", 0, match.start()) + 1,
                language,
                code,
                skip.group(2) if skip else None,
                runs_in.group(1) if runs_in else None,
                prints,
            )
        )
    return found


def stand_in_repos(page: str) -> list[str]:
    """The :data:`STAND_INS` a page names."""
    text = (ROOT / page).read_text(encoding="utf-8")
    return [repo for repo in STAND_INS if repo in text]


def environment(endpoint: str, home: Path) -> dict[str, str]:
    """The environment a page's blocks run in: the test environment's ``bin`` first on ``PATH``, the hub at
    ``endpoint``, caches under ``home``, and none of the caller's ``HF_*`` settings."""
    bin_dir = str(Path(sys.executable).parent)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "HUGGINGFACE_"))}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        HF_ENDPOINT=endpoint,
        HF_HUB_DISABLE_XET="1",
        HF_HOME=str(home / "hf-home"),
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        HUB_EXPORT_CACHE=str(home / "hub-export-cache"),
    )
    return env


def run_page(page: str, work: Path, env: dict[str, str], interpreters: dict[str, str], node: str | None) -> None:
    """Run the page's blocks in ``work`` (a driver script beside it) and check what they print.

    Raises:
        AssertionError: naming the block that failed, or the printed line a block's output lacks.
    """
    runnable = [b for b in blocks(page) if b.skip is None]
    script = work.parent / "driver.py"
    script.write_text(driver_script(page, runnable, interpreters, node))
    result = subprocess.run(
        [sys.executable, str(script)], cwd=work, env=env, capture_output=True, text=True, timeout=900
    )
    outputs = result.stdout.split("@@block ")[1:]
    if result.returncode != 0:
        failed = len(outputs) - 1
        block = runnable[failed] if 0 <= failed < len(runnable) else None
        where = block.where if block else page
        raise AssertionError(f"{where} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    for block, output in zip(runnable, outputs):
        position = 0
        for line in block.prints:
            pattern = ".*".join(re.escape(piece.strip()) for piece in line.split("..."))
            match = re.compile(pattern).search(output, position)
            assert match is not None, f"{block.where}: its output lacks {line!r}:\n{output[-2000:]}"
            position = match.end()


def driver_script(page: str, runnable: list[Block], interpreters: dict[str, str], node_modules: str | None) -> str:
    """A Python script running ``runnable`` in order (see the module docstring); it prints a marker line before each
    block, so the test can cut its output into the blocks' outputs."""
    steps = [dataclasses.asdict(block) for block in runnable]
    return _DRIVER.format(
        steps=json.dumps(steps), interpreters=json.dumps(interpreters), node_modules=json.dumps(node_modules)
    )


_DRIVER = """
import json, os, subprocess, sys, traceback
steps = json.loads({steps!r})
interpreters = json.loads({interpreters!r})
node_modules = json.loads({node_modules!r})
namespace = {{"__name__": "__main__"}}
for number, step in enumerate(steps):
    print(f"@@block {{number}}", flush=True)
    code = step["code"]
    try:
        if step["language"] == "python" and step["environment"] is None:
            exec(compile(code, step["page"] + ":" + str(step["line"]), "exec"), namespace)
        elif step["language"] == "python":
            subprocess.run([interpreters[step["environment"]], "-c", code], check=True)
        elif step["language"] == "bash":
            subprocess.run(["bash", "-euo", "pipefail", "-c", code], check=True)
        else:
            if not os.path.exists("node_modules"):
                os.symlink(node_modules, "node_modules")
            with open("block.mjs", "w") as handle:
                handle.write(code)
            subprocess.run(["node", "block.mjs"], check=True)
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException as exc:
        traceback.print_exc()
        print(f"@@failed {{number}}", flush=True)
        sys.exit(1)
print("@@done", flush=True)
"""
