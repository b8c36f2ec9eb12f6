"""``hub-export push REPO DIR``: publish a saved export folder to a Hub repo as one commit (``hf upload`` order)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ._args import add_command, add_hub_options, add_output_options, add_publish_options, check_repo_first

__all__ = ["register", "run", "print_publish_details", "publish_data"]

USAGE = "hub-export push REPO DIR (the repo first, as in `hf upload`)"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``push`` command."""
    parser = add_command(
        subparsers,
        "push",
        help="publish a saved export folder to a Hub repo (one commit)",
        description="Publish DIR, an export folder written by `hub-export export` or save_pretrained, to a subfolder "
        "of REPO in one commit, with the README card updated; the files are checked against export.json first. "
        "An unchanged export makes no commit.",
        example="hub-export push me/tiny-llama ./exports/onnx --commit-message 'ONNX export'",
    )
    parser.add_argument("repo_id", metavar="REPO", help="target model repo, e.g. me/tiny-llama (created when missing)")
    parser.add_argument("directory", metavar="DIR", type=Path, help="export folder (holds export.json)")
    parser.add_argument("--subfolder", default=None, help="folder in the repo (default: the format's: onnx, pt2, ...)")
    parser.add_argument("--tag", default=None, help="tag the new commit (default: source-<12 hex> when known)")
    parser.add_argument("--parent-commit", default=None, help="fail unless the branch is still at this commit")
    add_publish_options(parser)
    add_hub_options(
        parser,
        revision_help="branch to commit to, or base of the pull request (default: main)",
        revision_default="main",
    )
    add_output_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, console: Any) -> int:
    """Publish; print the commit, the PR and the tag."""
    from ..hub.publish import push_export

    check_repo_first(args, args.repo_id, args.directory, USAGE)
    _check_folder(args.directory)
    result = push_export(
        args.directory,
        args.repo_id,
        subfolder=args.subfolder,
        revision=args.revision,
        create_pr=args.create_pr,
        commit_message=args.commit_message,
        tag=args.tag,
        parent_commit=args.parent_commit,
        private=args.private,
        token=args.token,
        endpoint=args.endpoint,
    )
    if result.changed:
        console.line(f"committed {result.commit_sha} ({result.uploaded_bytes} bytes uploaded): {result.commit_url}")
    else:
        console.line(f"unchanged: {args.repo_id}@{result.commit_sha} already holds this export (nothing uploaded)")
    print_publish_details(result, console)
    console.result(publish_data(args.repo_id, result), essential=[result.pr_url or result.commit_url])
    return 0


def _check_folder(directory: Path) -> None:
    from ..errors import HubExportError
    from ..manifest import MANIFEST_NAME

    if not directory.is_dir():
        raise HubExportError(f"no folder {directory}: DIR is an export folder written by `hub-export export`.")
    if not (directory / MANIFEST_NAME).is_file():
        raise HubExportError(
            f"{directory} has no {MANIFEST_NAME}, so it is not an export folder; write one with `hub-export export`."
        )


def print_publish_details(result: Any, console: Any) -> None:
    """Print a publish's pull request, tag and notes (shared by ``push`` and ``publish``)."""
    if result.pr_url:
        console.line(f"pull request {result.pr_ref}: {result.pr_url}")
    if result.tag:
        console.line(f"tag: {result.tag}")
    for note in result.notes:
        if not note.startswith("unchanged"):
            console.line(f"note: {note}")


def publish_data(repo_id: str, result: Any) -> dict[str, Any]:
    """A publish's result as JSON data."""
    return {
        "repo_id": repo_id,
        "changed": result.changed,
        "commit_sha": result.commit_sha,
        "commit_url": result.commit_url,
        "pr_url": result.pr_url,
        "pr_ref": result.pr_ref,
        "tag": result.tag,
        "uploaded_bytes": result.uploaded_bytes,
        "notes": list(result.notes),
    }
