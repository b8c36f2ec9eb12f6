"""``hub-export`` entry point: dispatches to one module per command.

Each command module defines ``register(subparsers)`` (adds its parser, sets ``func``) and a ``run(args) -> int``.
Errors from the package end the process with exit code 1 and a one-line message; bad usage exits with 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

__all__ = ["main", "COMMANDS"]

#: command module names under hub_export.cli, in help order
COMMANDS = ("export", "push", "pull", "validate", "publish", "sync", "hub")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available command."""
    parser = argparse.ArgumentParser(
        prog="hub-export",
        description="Export Transformers models to torch.export, ONNX, ExecuTorch and OpenVINO and manage them on the Hub.",
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"hub-export {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f".{name}", __package__)
        except ModuleNotFoundError as exc:
            if exc.name == f"{__package__}.{name}":
                continue  # command not built yet
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    from ..errors import HubExportError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except HubExportError as exc:
        print(f"hub-export {args.command}: error: {exc}".splitlines()[0], file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("hub-export: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
