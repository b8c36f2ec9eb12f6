"""``hub-export pull REPO``: download one export (only its files), verified against its manifest."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

from ._args import add_command, add_hub_options, add_output_options, spelled_as_path

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``pull`` command."""
    parser = add_command(
        subparsers,
        "pull",
        help="download an export from a Hub repo (only its files, sha256-checked)",
        description="Download export.json, then only the files it lists for the chosen components (plus config.json "
        "and generation_config.json), through the Hugging Face cache; each file is checked against the manifest. "
        "Prints the folder holding the export, or copies it to --local-dir.",
        example="hub-export pull me/tiny-llama --subfolder onnx --local-dir ./tiny-llama-onnx",
    )
    parser.add_argument("repo_id", metavar="REPO", help="model repo holding the export")
    parser.add_argument("--subfolder", default="", help="the export's folder in the repo (onnx, pt2, ...)")
    parser.add_argument(
        "--component",
        dest="components",
        action="append",
        default=None,
        metavar="NAME",
        help="only this component's files (repeatable; default: all)",
    )
    parser.add_argument(
        "--local-dir", "--output", dest="local_dir", type=Path, default=None, help="copy the export into this folder"
    )
    parser.add_argument("--cache-dir", default=None, help="Hugging Face cache folder (default: HF_HUB_CACHE)")
    add_hub_options(parser, revision_help="branch, tag, refs/pr/N or commit sha (default: main)")
    add_output_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, console: Any) -> int:
    """Download and verify; print where the export is."""
    from ..errors import HubExportError
    from ..hub.download import download_export
    from ..manifest import MANIFEST_NAME

    if spelled_as_path(args.repo_id):
        raise HubExportError(
            f"{args.repo_id} is a local path; pull downloads from a Hub repo (owner/name). "
            "`hub-export validate DIR` checks a local export."
        )
    export = download_export(
        args.repo_id,
        subfolder=args.subfolder,
        revision=args.revision,
        components=args.components,
        cache_dir=args.cache_dir,
        token=args.token,
        endpoint=args.endpoint,
    )
    files = export.manifest.component_files(args.components) + export.manifest.side_files()
    names = [MANIFEST_NAME, *(f.path for f in files)]
    size = sum((export.directory / n).stat().st_size for n in names)
    console.line(
        f"{args.repo_id}@{export.commit} {export.subfolder or '.'}/: {export.manifest.export_format} export, "
        f"{len(names)} files, {size} bytes verified"
    )
    target = export.directory if args.local_dir is None else args.local_dir
    if args.local_dir is not None:
        _copy(export.directory, names, args.local_dir)
    console.line(str(target))
    console.result(
        {
            "repo_id": args.repo_id,
            "commit": export.commit,
            "subfolder": export.subfolder,
            "format": export.manifest.export_format,
            "files": names,
            "bytes": size,
            "path": str(target),
        },
        essential=[str(target)],
    )
    return 0


def _copy(source: Path, names: list[str], target: Path) -> None:
    """Copy the export's files out of the cache (following its symlinks) into ``target``, atomically."""
    from .._files import atomic_directory, replace_directory
    from ..errors import HubExportError
    from ..manifest import MANIFEST_NAME

    if target.exists() and (not target.is_dir() or (any(target.iterdir()) and not (target / MANIFEST_NAME).is_file())):
        raise HubExportError(f"{target} exists and is not an export folder; pull into an empty or new folder.")
    staged = atomic_directory(target)
    try:
        for name in names:
            (staged / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / name, staged / name)  # follows the cache's symlinks
        replace_directory(staged, target)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
