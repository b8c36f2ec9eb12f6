"""``hub-export`` entry point: dispatches to one module per command.

Each command module defines ``register(subparsers)`` (adds its parser with :func:`._args.add_command`, sets
``func``) and ``run(args, console) -> int``. Exit codes: 0 done, 1 failed (one line on stderr saying what to do),
2 bad usage (the subcommand's usage, then one line), 130 interrupted. ``--verbose`` or ``HUB_EXPORT_DEBUG=1`` adds
the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

from ._console import Console, debug_requested
from ._errors import UsageError, describe, endpoint_of

__all__ = ["main", "build_parser", "COMMANDS"]

#: command module names under hub_export.cli, in help order
COMMANDS = ("export", "push", "pull", "validate", "publish", "sync", "hub")

_DESCRIPTION = (
    "Export Transformers models to torch.export, ONNX, ExecuTorch and OpenVINO, and manage the exports on the "
    "Hugging Face Hub."
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available command."""
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="hub-export",
        description=_DESCRIPTION,
        epilog="Run `hub-export COMMAND --help` for a command's options and an example.",
    )
    parser.add_argument("--version", action="version", version=f"hub-export {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f".{name}", __package__).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        command_parser = getattr(args, "_parser", parser)
        if extra:  # the subcommand's usage, not the top-level one
            command_parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # --help, --version, or a usage error argparse has printed
        return exc.code if isinstance(exc.code, int) else 2
    verbose = bool(getattr(args, "verbose", False)) or debug_requested()
    console = Console(
        quiet=bool(getattr(args, "quiet", False)), verbose=verbose, as_json=bool(getattr(args, "json", False))
    )
    prog = command_parser.prog
    try:
        with console.session():
            return int(args.func(args, console) or 0)
    except UsageError as exc:
        command_parser.print_usage(sys.stderr)
        console.error(prog, str(exc), 2)
        return 2
    except KeyboardInterrupt:
        console.error(prog, "interrupted", 130)
        return 130
    except Exception as exc:  # noqa: BLE001 - every failure ends in one line; --verbose shows the traceback
        if verbose:
            traceback.print_exc()
        message, expected = describe(exc, endpoint=endpoint_of(args), token=getattr(args, "token", None))
        if not expected:
            message += " (unexpected: run again with --verbose for the traceback, and report it)"
        console.error(prog, message)
        return 1


if __name__ == "__main__":
    sys.exit(main())
