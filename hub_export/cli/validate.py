"""``hub-export validate DIR_OR_REPO [--subfolder]``: schema, file list and checksums of an export."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ._args import add_command, add_hub_options, add_output_options, spelled_as_path

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``validate`` command."""
    parser = add_command(
        subparsers,
        "validate",
        help="check an export (local folder or Hub repo): export.json's schema and every file's sha256",
        description="Validate export.json against its schema, check that every file it lists is one its format "
        "writes, and check each file's size and sha256. A Hub repo's files are downloaded again (into the Hugging "
        "Face cache), so what the Hub serves now is checked; a file that does not match is named and removed from "
        "the cache. With HF_HUB_OFFLINE=1 the cached copy is checked.",
        example="hub-export validate me/tiny-llama --subfolder onnx\nhub-export validate ./exports/onnx",
    )
    parser.add_argument("target", metavar="DIR_OR_REPO", help="export folder, or Hub repo id (owner/name)")
    parser.add_argument("--subfolder", default="", help="the export's folder inside the repo or folder")
    parser.add_argument("--cache-dir", default=None, help="Hugging Face cache folder (default: HF_HUB_CACHE)")
    add_hub_options(parser, revision_help="Hub revision: branch, tag, refs/pr/N or commit sha (default: main)")
    add_output_options(parser)
    parser.set_defaults(func=run)


def _source(args: argparse.Namespace) -> Any:
    """The export to check: a local folder, or the repo's files downloaded afresh."""
    from ..errors import HubExportError
    from ..loading import LocalFiles

    local = Path(args.target).expanduser()
    if local.is_dir():
        folder = local / args.subfolder
        if not folder.is_dir():
            raise HubExportError(f"no folder {folder}: --subfolder names a folder inside {args.target}.")
        return LocalFiles(folder)
    if local.exists() or spelled_as_path(args.target):
        raise HubExportError(f"no folder {args.target}: give an export folder, or a Hub repo id (owner/name).")
    from huggingface_hub import constants

    from ..hub.download import download_export

    return download_export(
        args.target,
        subfolder=args.subfolder,
        revision=args.revision,
        cache_dir=args.cache_dir,
        token=args.token,
        endpoint=args.endpoint,
        # what the Hub serves now, not an earlier copy in the cache (offline: the cached copy is what is checked)
        force_download=not constants.is_offline_mode(),
        fetch_components=False,
    )


def run(args: argparse.Namespace, console: Any) -> int:
    """Validate; one line per verified file, then the verdict."""
    from .._progress import stage
    from ..loading import verify_export

    source = _source(args)
    with stage(f"checking {source.label}"):
        entries = verify_export(source)
    for entry in entries:
        console.line(f"ok {entry.path} {entry.size} bytes sha256 {entry.sha256[:12]}")
    manifest = source.read_manifest()
    console.line(f"valid: {source.label} ({manifest.export_format} export, {len(entries)} files)")
    console.result(
        {
            "valid": True,
            "target": args.target,
            "location": source.label,
            "commit": getattr(source, "commit", None),
            "format": manifest.export_format,
            "files": [{"path": e.path, "size": e.size, "sha256": e.sha256} for e in entries],
        },
        essential=[f"valid: {source.label}"],
    )
    return 0
