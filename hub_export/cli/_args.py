"""Arguments shared by the commands, spelled as the ``hf`` command line spells them.

Positional REPO first; ``--revision``, ``--token``, ``--endpoint``; ``--local-dir`` for where files land;
``--commit-message`` and ``--private`` for what a publish creates; ``--quiet``, ``--json`` and ``--verbose`` for
what is printed. Every command has one example in its ``--help``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from .._files import spelled_as_path
from ._errors import UsageError

__all__ = [
    "add_command",
    "add_format_option",
    "add_hub_options",
    "add_output_options",
    "add_publish_options",
    "add_task_option",
    "check_repo_first",
    "check_task",
    "is_local_path",
    "spelled_as_path",
]


class _Formatter(argparse.HelpFormatter):
    """Wraps at 100 columns (or the terminal's width), keeping the example's line breaks."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32, width=min(100, _columns()))

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("example:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _columns() -> int:
    try:
        return int(os.environ.get("COLUMNS", "")) or os.get_terminal_size().columns
    except (ValueError, OSError):
        return 100


def add_command(subparsers: Any, name: str, *, help: str, description: str, example: str) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` ends with its example (``example``: one or more command lines)."""
    lines = "\n".join(f"  {line}" for line in example.strip().splitlines())
    parser = subparsers.add_parser(
        name,
        help=help,
        description=description,
        epilog=f"example:\n{lines}",
        formatter_class=_Formatter,
    )
    parser.set_defaults(_parser=parser)
    return parser


class _Formats(argparse.Action):
    """``--format`` repeated, or several formats in one value (``onnx,openvino``, as the Action's ``formats`` input
    takes them): each checked against the registered formats."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        from ..formats import ExportFormat

        known = [f.value for f in ExportFormat]
        names = [name for name in str(values).replace(",", " ").split() if name]
        unknown = [name for name in names if name not in known]
        if unknown or not names:
            parser.error(
                f"argument {option_string}: invalid choice {', '.join(unknown) or repr(values)} (choose from "
                f"{', '.join(known)}; repeat --format for several, or separate them with commas)"
            )
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest, None) or []), *names])


def add_format_option(parser: argparse.ArgumentParser, *, help: str) -> None:
    """``-f/--format``, repeatable and comma-separated (``--format onnx --format openvino``, ``--format onnx,openvino``)."""
    from ..formats import ExportFormat

    parser.add_argument(
        "-f",
        "--format",
        dest="formats",
        action=_Formats,
        required=True,
        metavar="FORMAT",
        help=f"{help}: {', '.join(f.value for f in ExportFormat)}; repeatable, or several separated by commas",
    )


def add_output_options(parser: argparse.ArgumentParser) -> None:
    """``--quiet``, ``--json`` and ``--verbose``."""
    group = parser.add_argument_group("output")
    group.add_argument(
        "-q", "--quiet", action="store_true", help="print only the result (a path, a URL); no status lines or bars"
    )
    group.add_argument("--json", action="store_true", help="print the result as one JSON object on stdout")
    group.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show third-party warnings and logs, and the traceback of an error (also: HUB_EXPORT_DEBUG=1)",
    )


def add_hub_options(
    parser: argparse.ArgumentParser, *, revision_help: str | None, revision_default: Any = None
) -> None:
    """``--revision`` (when ``revision_help``), ``--token`` and ``--endpoint``."""
    group = parser.add_argument_group("Hub")
    if revision_help is not None:
        group.add_argument("--revision", metavar="REV", default=revision_default, help=revision_help)
    group.add_argument("--token", default=None, help="Hub token (default: HF_TOKEN, or the one `hf auth login` saved)")
    group.add_argument(
        "--endpoint", metavar="URL", default=None, help="Hub endpoint (default: HF_ENDPOINT, or https://huggingface.co)"
    )


def add_publish_options(parser: argparse.ArgumentParser, *, create_pr: bool = True) -> None:
    """``--commit-message``, ``--private`` and ``--create-pr``: what a publish creates on the Hub."""
    group = parser.add_argument_group("commit")
    group.add_argument(
        "--commit-message",
        "--message",
        dest="commit_message",
        metavar="TEXT",
        default=None,
        help="commit title (default: generated)",
    )
    group.add_argument(
        "--private", action="store_true", default=None, help="create the repo private when it does not exist yet"
    )
    if create_pr:
        group.add_argument("--create-pr", action="store_true", help="open a pull request instead of committing")


def add_task_option(parser: argparse.ArgumentParser) -> None:
    """``--task``: the pipeline task to export for (``hub_export.tasks.TASKS``)."""
    from ..tasks import TASKS

    parser.add_argument(
        "--task",
        default=None,
        metavar="TASK",
        help="the task to export for, as in transformers pipelines: "
        f"{', '.join(TASKS)}; generative tasks ({', '.join(t.name for t in TASKS.values() if t.generative)}) "
        "make generate() exports (export_for_generation). Default: inferred from the model's config (a graph export)",
    )


def check_task(args: argparse.Namespace) -> None:
    """Refuse an unknown ``--task`` before anything is downloaded.

    Raises:
        ConfigError: The task is not one of ``hub_export.tasks.TASKS``.
    """
    task = getattr(args, "task", None)
    if task:
        from ..errors import ConfigError
        from ..tasks import TASKS

        if task not in TASKS:
            raise ConfigError(f"--task {task} is not a task hub-export knows; use one of: {', '.join(TASKS)}.")


def is_local_path(text: str) -> bool:
    """Whether ``text`` names a local path rather than a Hub repo id: it exists, or it is spelled as a path."""
    return Path(text).expanduser().exists() or spelled_as_path(text)


def check_repo_first(args: argparse.Namespace, repo: str, directory: Path, usage: str) -> None:
    """Refuse the folder-first order (``push DIR REPO``) with the right usage: REPO comes first, as in ``hf upload``.

    Raises:
        UsageError: REPO is an existing local folder and DIR is not one.
    """
    if Path(repo).expanduser().is_dir() and not directory.expanduser().is_dir():
        raise UsageError(
            f"REPO {repo!r} looks like a local folder and DIR {str(directory)!r} is not one; usage is {usage}"
        )
