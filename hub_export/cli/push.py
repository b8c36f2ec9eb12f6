"""``hub-export push DIR REPO``: publish a saved export folder to a Hub repo as one commit."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["register", "run", "print_publish_details"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``push`` command."""
    parser = subparsers.add_parser(
        "push",
        help="publish a saved export folder to a Hub repo (one commit)",
        description="Publish an export folder written by save_pretrained / `hub-export export` to a subfolder of a "
        "Hub repo in one commit, with the README card updated. An unchanged export makes no commit.",
    )
    parser.add_argument("directory", type=Path, help="export folder (holds export.json)")
    parser.add_argument("repo_id", help="target model repo, e.g. me/tiny-llama (created when missing)")
    parser.add_argument("--subfolder", default=None, help="folder in the repo (default: the format's: onnx, pt2, ...)")
    parser.add_argument("--revision", default="main", help="branch to commit to, or base of the PR (default: main)")
    parser.add_argument("--create-pr", action="store_true", help="open a pull request instead of committing")
    parser.add_argument("--tag", default=None, help="tag the new commit (default: source-<12 hex> when known)")
    parser.add_argument("--message", default=None, help="commit message")
    parser.add_argument("--parent-commit", default=None, help="fail unless the branch is still at this commit")
    parser.add_argument("--private", action="store_true", default=None, help="create the repo private")
    parser.add_argument("--token", default=None, help="Hub token (default: the logged-in one / HF_TOKEN)")
    parser.add_argument("--endpoint", default=None, help="Hub endpoint (default: HF_ENDPOINT or huggingface.co)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Publish; print the commit, the PR and the tag."""
    from ..hub.publish import push_export

    result = push_export(
        args.directory,
        args.repo_id,
        subfolder=args.subfolder,
        revision=args.revision,
        create_pr=args.create_pr,
        commit_message=args.message,
        tag=args.tag,
        parent_commit=args.parent_commit,
        private=args.private,
        token=args.token,
        endpoint=args.endpoint,
    )
    if result.changed:
        print(f"committed {result.commit_sha} ({result.uploaded_bytes} bytes uploaded): {result.commit_url}")
    else:
        print(f"unchanged: {args.repo_id}@{result.commit_sha} already holds this export (nothing uploaded)")
    print_publish_details(result)
    return 0


def print_publish_details(result: Any) -> None:
    """Print a publish's pull request, tag and notes (shared by ``push`` and ``publish``)."""
    if result.pr_url:
        print(f"pull request {result.pr_ref}: {result.pr_url}")
    if result.tag:
        print(f"tag: {result.tag}")
    for note in result.notes:
        if not note.startswith("unchanged"):
            print(f"note: {note}")
