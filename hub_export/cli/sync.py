"""``hub-export sync SOURCE --format F [...]``: re-export a Hub model's stale formats and publish them in one commit."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ._args import (
    add_command,
    add_format_option,
    add_hub_options,
    add_output_options,
    add_publish_options,
    add_task_option,
    check_task,
)

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``sync`` command."""
    parser = add_command(
        subparsers,
        "sync",
        help="export the formats of a Hub model that are missing or stale and publish them in one commit",
        description="Resolve SOURCE's revision to a commit, compare it (and the export config) with what the target's "
        "export.json files record, and when any format is stale: load the model at that commit, export every stale "
        "format, validate, and publish them all in one commit tagged source-<12 hex>. Up to date: exits 0 without "
        "downloading weights. A format that fails to export publishes nothing. Every other export the target holds "
        "from SOURCE (made by the CLI, the Action or Python) is re-exported too, with the task, config and kind "
        "its export.json records; tokenizer and processor files are copied into each export.",
        example="hub-export sync me/tiny-llama --task text-generation --format onnx --format openvino",
    )
    parser.add_argument("source", metavar="SOURCE", help="source model repo, e.g. me/tiny-llama")
    add_format_option(parser, help="format to keep up to date")
    parser.add_argument("--target", default=None, metavar="REPO", help="repo receiving the exports (default: SOURCE)")
    parser.add_argument("--target-revision", default="main", help="target branch (default: main)")
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        default=None,
        help="JSON or YAML file {format: {config fields}} (schemas/sync-config.schema.json)",
    )
    parser.add_argument(
        "--generation",
        action="store_true",
        help="make generate() exports (export_for_generation) of the task the config names; same as a generative --task",
    )
    add_task_option(parser)
    parser.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        metavar="DIR",
        help="export what the plan says is stale into DIR/<subfolder> and publish nothing (a fan-out workflow's "
        "export jobs; hub-export publish commits the folders)",
    )
    parser.add_argument(
        "--relayout",
        action="store_true",
        help="export again the exports an earlier version made in another layout (file names the runtimes' own "
        "tools do not load); without it they count as up to date and the plan says so",
    )
    add_publish_options(parser)
    add_hub_options(parser, revision_help="source revision to follow (default: main)", revision_default="main")
    add_output_options(parser)
    parser.set_defaults(func=run)


def _plan_data(plan: Any, result: Any = None) -> dict[str, Any]:
    exported = result.exports if result is not None else {}  # by subfolder
    return {
        "source_repo": plan.source_repo,
        "source_sha": plan.source_sha,
        "target_repo": plan.target_repo,
        "target_revision": plan.target_revision,
        "formats": [
            {
                "format": f.export_format.value,
                "subfolder": f.subfolder,
                "task": f.task,
                "generation": f.generation,
                "status": f.status,
                "reason": f.reason,
                "exported": f.subfolder in exported,
                "max_abs_diff": exported.get(f.subfolder, {}).get("parity"),
                "bytes": exported.get(f.subfolder, {}).get("bytes"),
            }
            for f in plan.formats
        ],
    }


def run(args: argparse.Namespace, console: Any) -> int:
    """Plan, then (unless up to date or ``--dry-run``) export and publish; print what happened."""
    from ..hub.sync import load_sync_config, plan_sync, sync
    from ._actions import summary_markdown, write_outputs, write_summary

    check_task(args)
    configs = load_sync_config(args.config) if args.config else None
    common = dict(
        target=args.target,
        revision=args.revision,
        target_revision=args.target_revision,
        configs=configs,
        task=args.task,
        generation=args.generation,
        token=args.token,
        endpoint=args.endpoint,
        relayout=args.relayout,
    )
    if args.dry_run:
        plan = plan_sync(args.source, args.formats, **common)
        console.line(
            f"plan for {plan.target_repo}@{plan.target_revision} from {plan.source_repo}@{plan.source_sha} (dry run):"
        )
        for line in plan.describe():
            console.line(f"  {line}")
        stale = ", ".join(f.export_format.value for f in plan.stale)
        verdict = "up to date" if plan.up_to_date else f"would export and publish: {stale}"
        console.line(verdict)
        write_outputs(
            {
                "updated": False,
                "source-sha": plan.source_sha,
                "stale": not plan.up_to_date,
                "commit-sha": "",
                "pr-url": "",
            }
        )
        data = {**_plan_data(plan), "dry_run": True, "stale": not plan.up_to_date, "updated": False}
        console.result(data, essential=[verdict])
        return 0

    def show(plan: Any) -> None:  # before the work: what will be exported, and why
        console.line(f"plan for {plan.target_repo}@{plan.target_revision} from {plan.source_repo}@{plan.source_sha}:")
        for line in plan.describe():
            console.line(f"  {line}")

    result = sync(
        args.source,
        args.formats,
        create_pr=args.create_pr,
        commit_message=args.commit_message,
        private=args.private,
        on_plan=show,
        output=args.output,
        **common,
    )
    plan = result.plan
    if args.output is not None:
        for sub, info in result.exports.items():
            console.line(
                f"exported {sub}/ to {info['path']} (max abs diff vs eager {info['parity']:.2e}), not published"
            )
        if not result.exports:
            console.line("up to date: nothing to export")
        write_outputs({"stale": bool(result.exports), "source-sha": plan.source_sha})
        data = {**_plan_data(plan, result), "dry_run": False, "updated": False, "output": str(args.output)}
        console.result(data, essential=[str(info["path"]) for info in result.exports.values()])
        return 0
    for note in result.notes:
        console.line(f"note: {note}")
    if result.updated:
        console.line(
            f"published {', '.join(f'{sub}/' for sub in result.exports)} from {plan.source_repo}@{plan.source_sha}: {result.commit_url}"
        )
        if result.pr_url:
            console.line(f"pull request: {result.pr_url}")
        if result.tag:
            console.line(f"tag: {result.tag}")
        status = f"Exported {plan.source_repo}@`{plan.source_sha[:12]}` to {plan.target_repo}."
    else:
        console.line(
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
        info = result.exports.get(item.subfolder, {})
        state = "exported" if info else item.status
        rows.append(
            (item.export_format.value, item.subfolder, state, info.get("parity"), info.get("atol"), info.get("bytes"))
        )
    write_summary(summary_markdown("hub-export sync", status, rows, result.commit_url, result.pr_url, result.tag))
    data = {
        **_plan_data(plan, result),
        "dry_run": False,
        "updated": result.updated,
        "commit_sha": result.commit_sha,
        "commit_url": result.commit_url,
        "pr_url": result.pr_url,
        "tag": result.tag,
        "notes": list(result.notes),
    }
    essential = [result.pr_url or result.commit_url] if result.updated else ["up to date"]
    console.result(data, essential=[e for e in essential if e])
    return 0
