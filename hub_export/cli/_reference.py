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
    finally:
        if columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = columns
    return "\n".join(sections)


if __name__ == "__main__":
    print(reference_markdown(), end="")
