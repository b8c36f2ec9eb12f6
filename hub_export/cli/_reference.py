"""``docs/cli.md``, written from the real ``--help`` texts: ``python -m hub_export.cli._reference > docs/cli.md``.

``tests/test_cli_reference.py`` checks that the page lists every command, every option and every example.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator

__all__ = ["commands", "reference_markdown"]

_INTRO = """# Command line reference

`hub-export` exports Transformers models and manages the exports on the Hugging Face Hub. It follows the `hf`
command line's conventions: the repo comes first (`hub-export push REPO DIR`, like `hf upload REPO PATH`),
`--revision`, `--token`, `--local-dir`, `--commit-message`, `--private` and `--quiet` mean what they mean there,
and `--json` prints one JSON object for scripts.

What it prints:

- the result on stdout (`--quiet`: only the essential line, a path or a URL; `--json`: one JSON object);
- one status line per long stage on stderr, with its duration (`tracing ... 2.1 s`, `uploading to me/tiny ... 4.0 s`),
  and huggingface_hub's progress bars for transfers (`HF_HUB_DISABLE_PROGRESS_BARS=1` turns the bars off);
- on failure, one line saying what to do (exit code 1; 2 for a usage error). Warnings and logs of other libraries
  are hidden; `--verbose` (or `HUB_EXPORT_DEBUG=1`) shows them and the traceback of an error.

The Hub token comes from `--token`, else `HF_TOKEN`, else the one `hf auth login` saved; the endpoint from
`--endpoint`, else `HF_ENDPOINT`.

This page is generated from the `--help` texts (`python -m hub_export.cli._reference > docs/cli.md`).
"""


_ERRORS = """## Errors and what to do

Every failure a user can cause ends in one line on stderr, `hub-export COMMAND: error: ...`, that says what to do
(exit code 1; 2 for a usage error, after the command's usage). The lines, by what causes them:

| cause | the line says |
|---|---|
| the Hub cannot be reached | `cannot reach the Hub at URL (connection refused). Check HF_ENDPOINT (or --endpoint) and the network; with HF_HUB_OFFLINE=1 only the local cache is used.` |
| a token the Hub refuses | `the Hub at URL refused the --token given (401 Unauthorized) ... pass --token or set HF_TOKEN`; without write access, `... (403 Forbidden)` and which token needs write access |
| a repo, revision or subfolder that does not exist | the name, then what exists: the branches and tags, or `Exports in this repo: onnx/, pt2/; choose one with --subfolder.` |
| an export that is only in an open pull request | `The export is in an open pull request, not merged: pass --revision refs/pr/N to load it, or merge the pull request.` |
| a cached copy downloaded from another hub | `Cannot confirm REPO@COMMIT with URL (...); the cached copy of REPO@COMMIT was downloaded from OTHER; no copy from another hub is used in its place`; offline: `... was downloaded from OTHER, not from URL: pass --endpoint OTHER to load it.` |
| a local path that does not exist | `no folder ./typo: MODEL is an existing model folder (config.json + *.safetensors) or a Hub repo id ...` |
| a folder that is not a model (no `config.json`) or not an export (no `export.json`) | `DIR has no config.json, so it is not a transformers model folder ...` / `... has no export.json, so it is not an export folder` |
| `export -o DIR` where DIR holds other files | `--output DIR is a folder holding other files than an export; pass an empty or new folder (or one holding an earlier export, which is replaced).` (checked before any work) |
| a model that needs its own code (`auto_map`) | `MODEL needs code of its own (...), which hub_export never runs: load the model yourself with transformers (trust_remote_code=True, after reading that code) and export it from Python with an exporter.` |
| a `--task` the model has no head for | `MODEL (TYPE) has no head for this --task; pass one it has: text-generation, ...` |
| an unknown `--task` or `--format` | the known names (`--format` takes one name per flag or several separated by commas) |
| a model torch.export cannot trace with dynamic shapes | `torch.export could not trace MODEL with dynamic shapes (...); export with --static (the sample's sizes), or from Python with explicit dynamic_shapes` |
| a conversion OpenVINO cannot make with dynamic shapes | `OpenVINO could not convert MODEL (...): export with --static (the sample's sizes), or to another --format.` |
| an export written by `transformers.exporters` | `this export.json was written by transformers.exporters, whose exports hub_export does not load ... re-export ... with hub_export` |
| `publish` of exports made from different models | `The exports come from different models (...); export them all from one commit of the model.` |
| `hub serve` on a port in use | `port PORT on HOST is already in use (...): pass another --port, or --port 0 to take a free one (the banner prints it).` |
| anything else | `TYPE: MESSAGE (unexpected: run again with --verbose for the traceback, and report it)` |

A causal LM exported without `--task` is one graph of its forward: `export` warns
`one graph of the model's forward (no generate()); add --task text-generation to export for generation`, and the
export records no task.
"""


def commands(
    parser: argparse.ArgumentParser, prefix: str = "hub-export"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """``(full command name, parser)`` for the top level and every subcommand, depth first, in help order."""
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, f"{prefix} {name}")


def reference_markdown() -> str:
    """The page: an introduction, then each command's ``--help`` in a code block."""
    from .main import build_parser

    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # the same wrapping whatever the terminal
    try:
        sections = [_INTRO]
        for name, parser in commands(build_parser()):
            if name != "hub-export":
                sections.append(f"## `{name}`\n\n```text\n{parser.format_help().rstrip()}\n```\n")
        sections.append(_ERRORS)
    finally:
        if columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = columns
    return "\n".join(sections)


if __name__ == "__main__":
    print(reference_markdown(), end="")
