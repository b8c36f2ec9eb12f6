"""``hub-export pull REPO``: download one export (only its files), verified against its manifest."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``pull`` command."""
    parser = subparsers.add_parser(
        "pull",
        help="download an export from a Hub repo (only its files, sha256-checked)",
        description="Download export.json, then only the files it lists for the chosen components (plus config.json "
        "and generation_config.json), through the Hugging Face cache; each file is checked against the manifest. "
        "Prints the folder holding the export, or copies it to --output.",
    )
    parser.add_argument("repo_id", help="model repo holding the export")
    parser.add_argument("--subfolder", default="", help="the export's folder in the repo (onnx, pt2, ...)")
    parser.add_argument("--revision", default=None, help="branch, tag, refs/pr/N or commit sha (default: main)")
    parser.add_argument(
        "--component",
        dest="components",
        action="append",
        default=None,
        metavar="NAME",
        help="only this component's files (repeatable; default: all)",
    )
    parser.add_argument("--output", type=Path, default=None, help="copy the export into this folder")
    parser.add_argument("--cache-dir", default=None, help="Hugging Face cache folder")
    parser.add_argument("--token", default=None, help="Hub token")
    parser.add_argument("--endpoint", default=None, help="Hub endpoint (default: HF_ENDPOINT or huggingface.co)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Download and verify; print where the export is."""
    from ..errors import HubExportError
    from ..hub.download import download_export
    from ..manifest import MANIFEST_NAME

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
    print(
        f"{args.repo_id}@{export.commit} {export.subfolder or '.'}/: {export.manifest.export_format} export, "
        f"{len(names)} files, {size} bytes verified"
    )
    if args.output is None:
        print(export.directory)
        return 0
    from .._files import atomic_directory, replace_directory

    target = args.output
    if target.exists() and (not target.is_dir() or (any(target.iterdir()) and not (target / MANIFEST_NAME).is_file())):
        raise HubExportError(f"{target} exists and is not an export folder; pull into an empty or new folder.")
    staged = atomic_directory(target)
    try:
        for name in names:
            (staged / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(export.directory / name, staged / name)  # follows the cache's symlinks
        replace_directory(staged, target)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    print(target)
    return 0
