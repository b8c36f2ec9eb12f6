"""``hub-export sync SOURCE --format F [...]``: re-export a Hub model's stale formats and publish them in one commit."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..formats import ExportFormat

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``sync`` command."""
    parser = subparsers.add_parser(
        "sync",
        help="export the formats of a Hub model that are missing or stale and publish them in one commit",
        description="Resolve SOURCE's revision to a commit, compare it (and the export config) with what the target's "
        "export.json files record, and when any format is stale: load the model at that commit, export every stale "
        "format, validate, and publish them all in one commit tagged source-<12 hex>. Up to date: exits 0 without "
        "downloading weights. A format that fails to export publishes nothing.",
    )
    parser.add_argument("source", help="source model repo, e.g. me/tiny-llama")
    parser.add_argument("--target", default=None, help="repo receiving the exports (default: SOURCE)")
    parser.add_argument(
        "--format",
        "-f",
        dest="formats",
        action="append",
        required=True,
        choices=[f.value for f in ExportFormat],
        help="format to keep up to date (repeatable)",
    )
    parser.add_argument("--revision", default="main", help="source revision to follow (default: main)")
    parser.add_argument("--target-revision", default="main", help="target branch (default: main)")
    parser.add_argument("--create-pr", action="store_true", help="open a pull request instead of committing")
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="JSON or YAML file {format: {config fields}} (schemas/sync-config.schema.json)",
    )
    parser.add_argument("--generation", action="store_true", help="export for generation (not available yet)")
    parser.add_argument("--message", default=None, help="commit message")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    parser.add_argument("--endpoint", default=None, help="Hub endpoint (default: HF_ENDPOINT or huggingface.co)")
    parser.add_argument("--token", default=None, help="Hub token (default: HF_TOKEN / the logged-in one)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Plan, then (unless up to date or ``--dry-run``) export and publish; print what happened."""
    from ..errors import HubExportError
    from ..hub.sync import load_sync_config, plan_sync, sync
    from ._actions import summary_markdown, write_outputs, write_summary

    if args.generation:
        raise HubExportError("generation exports are not available yet; run sync without --generation.")
    configs = load_sync_config(args.config) if args.config else None
    common = dict(
        target=args.target,
        revision=args.revision,
        target_revision=args.target_revision,
        configs=configs,
        token=args.token,
        endpoint=args.endpoint,
    )
    if args.dry_run:
        plan = plan_sync(args.source, args.formats, **common)
        print(
            f"plan for {plan.target_repo}@{plan.target_revision} from {plan.source_repo}@{plan.source_sha} (dry run):"
        )
        for line in plan.describe():
            print(f"  {line}")
        print(
            "up to date"
            if plan.up_to_date
            else f"would export and publish: {', '.join(f.export_format.value for f in plan.stale)}"
        )
        write_outputs(
            {
                "updated": False,
                "source-sha": plan.source_sha,
                "stale": not plan.up_to_date,
                "commit-sha": "",
                "pr-url": "",
            }
        )
        return 0
    result = sync(args.source, args.formats, create_pr=args.create_pr, commit_message=args.message, **common)
    plan = result.plan
    for line in plan.describe():
        print(f"  {line}")
    for note in result.notes:
        print(f"note: {note}")
    if result.updated:
        print(f"published {', '.join(result.exports)} from {plan.source_repo}@{plan.source_sha}: {result.commit_url}")
        if result.pr_url:
            print(f"pull request: {result.pr_url}")
        if result.tag:
            print(f"tag: {result.tag}")
        status = f"Exported {plan.source_repo}@`{plan.source_sha[:12]}` to {plan.target_repo}."
    else:
        print(
            f"up to date: {plan.target_repo}@{plan.target_revision} already holds these exports of "
            f"{plan.source_repo}@{plan.source_sha}"
        )
        status = f"Up to date: {plan.target_repo} already holds exports of {plan.source_repo}@`{plan.source_sha[:12]}`."
    write_outputs(
        {
            "updated": result.updated,
            "source-sha": plan.source_sha,
            "commit-sha": result.commit_sha or "",
            "pr-url": result.pr_url or "",
        }
    )
    rows = []
    for item in plan.formats:
        info = result.exports.get(item.export_format.value, {})
        state = "exported" if info else item.status
        rows.append(
            (item.export_format.value, item.subfolder, state, info.get("parity"), info.get("atol"), info.get("bytes"))
        )
    write_summary(summary_markdown("hub-export sync", status, rows, result.commit_url, result.pr_url, result.tag))
    return 0
