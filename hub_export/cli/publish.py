"""``hub-export publish REPO DIR1 DIR2 ...``: commit several saved export folders to a repo together.

The split mode of ``sync`` (a CI matrix exports one format per job; one job publishes them all): every folder
must hold a valid export (``export.json`` and files matching their sha256), all of them exported from the same
source commit; they go to ``<format folder>/`` (or ``--subfolder-of DIR=NAME``) in ONE commit tagged
``source-<12 hex>``. Nothing is committed when any check fails.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ._args import add_command, add_hub_options, add_output_options, add_publish_options, check_repo_first

__all__ = ["register", "run"]


USAGE = "hub-export publish REPO DIR [DIR ...] (the repo first, as in `hf upload`)"


def register(subparsers: Any) -> None:
    """Add the ``publish`` command."""
    parser = add_command(
        subparsers,
        "publish",
        help="publish several saved export folders to a Hub repo in one commit",
        description="Commit several export folders (written by `hub-export export` or save_pretrained) to REPO "
        "together, each in its format's folder, tagged source-<12 hex>. All exports must come from the same source "
        "commit; each is checked against its export.json and its parity tolerance first, and nothing is committed "
        "when any check fails.",
        example="hub-export publish me/tiny-llama exports/onnx exports/openvino --create-pr",
    )
    parser.add_argument("repo_id", metavar="REPO", help="target model repo (created when missing)")
    parser.add_argument(
        "directories", metavar="DIR", nargs="+", type=Path, help="export folders (each holds export.json)"
    )
    parser.add_argument(
        "--subfolder-of",
        action="append",
        default=[],
        metavar="DIR=NAME",
        help="put the export in DIR into the repo folder NAME (default: its format's folder)",
    )
    parser.add_argument("--tag", default=None, help="tag the commit (default: source-<12 hex>)")
    add_publish_options(parser)
    add_hub_options(
        parser,
        revision_help="branch to commit to, or base of the pull request (default: main)",
        revision_default="main",
    )
    add_output_options(parser)
    parser.set_defaults(func=run)


def _subfolders(args: argparse.Namespace) -> dict[str, Path]:
    from ..errors import HubExportError
    from ..formats import backend_for
    from ..manifest import Manifest

    named: dict[Path, str] = {}
    for item in args.subfolder_of:
        directory, sep, name = item.rpartition("=")
        if not sep or not directory or not name:
            raise HubExportError(f"--subfolder-of takes DIR=NAME, got {item!r}.")
        named[Path(directory).resolve()] = name
    exports: dict[str, Path] = {}
    for directory in args.directories:
        manifest = Manifest.read(directory)
        sub = named.pop(directory.resolve(), None) or backend_for(manifest.export_format).layout.subfolder
        if sub in exports:
            raise HubExportError(
                f"{exports[sub]} and {directory} both go to {sub}/; give one of them --subfolder-of {directory}=NAME."
            )
        exports[sub] = directory
    if named:
        raise HubExportError(f"--subfolder-of names folders that are not published: {', '.join(map(str, named))}.")
    return exports


def _same_model(sources: dict[str, Any], endpoint: str | None, token: str | None) -> bool:
    """Whether exports recorded from different commits of one repo were made from the same model: the commits'
    model files are identical (``hub.source.model_identity``, the notion ``sync`` uses), as when an export was
    made before and another after a publish to the source repo itself."""
    from huggingface_hub import HfApi

    from ..hub.source import model_identity

    if any(s is None for s in sources.values()) or len({s.repo_id for s in sources.values()}) != 1:
        return False
    api = HfApi(endpoint=endpoint, token=token)
    identities = {model_identity(api, s.repo_id, s.revision) for s in sources.values()}
    return len(identities) == 1 and None not in identities


def _check(exports: dict[str, Path], endpoint: str | None = None, token: str | None = None) -> tuple[Any, list[tuple]]:
    """All exports valid, within their parity tolerance and from one source commit; returns it and summary rows."""
    from ..errors import HubExportError
    from ..loading import LocalFiles, verify_export
    from ..manifest import Manifest

    sources, rows = {}, []
    for sub, directory in exports.items():
        verify_export(LocalFiles(directory))
        manifest = Manifest.read(directory)
        sources[sub] = manifest.source
        for component in manifest.components.values():
            if (refused := component.over_tolerance()) is not None:
                raise HubExportError(f"{directory}: {refused}; not publishing.")
        parity = next(iter(manifest.components.values())).parity or {}
        diff, atol = parity.get("max_abs_diff"), parity.get("atol")
        rows.append((manifest.export_format, sub, "published", diff, atol, sum(e.size for e in manifest.all_listed())))
    distinct = {(s.repo_id, s.revision) if s else None for s in sources.values()}
    if len(distinct) > 1 and not _same_model(sources, endpoint, token):
        listed = ", ".join(
            f"{sub}/: {f'{s.repo_id}@{s.revision[:12]}' if s else 'no source'}" for sub, s in sources.items()
        )
        raise HubExportError(
            f"The exports come from different models ({listed}); export them all from one commit of the model."
        )
    return next(iter(sources.values())), rows


def run(args: argparse.Namespace, console: Any) -> int:
    """Check, publish in one commit, print and report the outputs."""
    from ..hub.publish import publish
    from ._actions import summary_markdown, write_outputs, write_summary
    from .push import print_publish_details, publish_data

    for directory in args.directories:
        check_repo_first(args, args.repo_id, directory, USAGE)
    exports = _subfolders(args)
    source, rows = _check(exports, args.endpoint, args.token)
    result = publish(
        args.repo_id,
        exports,
        revision=args.revision,
        create_pr=args.create_pr,
        commit_message=args.commit_message,
        tag=args.tag,
        private=args.private,
        token=args.token,
        endpoint=args.endpoint,
    )
    if result.changed:
        console.line(f"committed {', '.join(f'{s}/' for s in exports)} as {result.commit_sha}: {result.commit_url}")
    else:
        console.line(f"unchanged: {args.repo_id}@{result.commit_sha} already holds these exports")
    print_publish_details(result, console)
    write_outputs(
        {
            "updated": result.changed,
            "source-sha": source.revision if source else "",
            "commit-sha": result.commit_sha,
            "pr-url": result.pr_url or "",
        }
    )
    origin = f" from {source.repo_id}@`{source.revision[:12]}`" if source else ""
    status = f"Published {len(exports)} export(s){origin} to {args.repo_id}." if result.changed else "Unchanged."
    write_summary(summary_markdown("hub-export publish", status, rows, result.commit_url, result.pr_url, result.tag))
    data = {
        **publish_data(args.repo_id, result),
        "subfolders": list(exports),
        "source_sha": source.revision if source else None,
    }
    console.result(data, essential=[result.pr_url or result.commit_url])
    return 0
