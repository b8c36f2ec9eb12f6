"""``hub-export validate DIR_OR_REPO [--subfolder]``: schema and checksums of an export."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["register", "run", "validate_directory"]


def register(subparsers: Any) -> None:
    """Add the ``validate`` command."""
    parser = subparsers.add_parser(
        "validate", help="validate export.json against the schema and check every file's sha256"
    )
    parser.add_argument("target", help="export folder or Hub repo id")
    parser.add_argument("--subfolder", default="", help="export folder inside the repo or folder")
    parser.add_argument("--revision", default=None, help="Hub revision")
    parser.add_argument("--endpoint", default=None, help="Hub endpoint")
    parser.set_defaults(func=run)


def validate_directory(directory: Path) -> list[str]:
    """Validate an export folder; returns one line per verified file.

    Raises:
        ManifestError: The manifest is invalid.
        IntegrityError: A file does not match.
    """
    from .._files import verify_file
    from ..manifest import Manifest

    manifest = Manifest.read(directory)
    lines = []
    for entry in manifest.all_listed():
        verify_file(directory / entry.path, entry)
        lines.append(f"ok {entry.path} {entry.size} bytes sha256 {entry.sha256[:12]}")
    return lines


def run(args: argparse.Namespace) -> int:
    """Validate a local folder, or download (only) the export's files from the Hub and validate them."""
    local = Path(args.target) / args.subfolder
    if not local.is_dir():
        from ..hub.download import download_export

        local = download_export(
            args.target, subfolder=args.subfolder, revision=args.revision, endpoint=args.endpoint
        ).directory
    for line in validate_directory(local):
        print(line)
    print(f"valid: {local}")
    return 0
