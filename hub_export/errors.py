"""Every error hub_export raises.

One hierarchy rooted at :class:`HubExportError`; each error also inherits the builtin it resembles so that
callers catching ``ValueError`` or ``ImportError`` keep working. Messages say what happened and how to fix it.
"""

from __future__ import annotations

__all__ = [
    "HubExportError",
    "ConfigError",
    "UnknownFormatError",
    "BackendUnavailableError",
    "DeviceUnavailableError",
    "ExportError",
    "InputError",
    "InputBoundsError",
    "ManifestError",
    "IntegrityError",
    "UnsafeExportError",
    "HubError",
    "PatchTargetMissing",
    "ParityError",
    "StoreError",
]


class HubExportError(Exception):
    """Base class of every error raised by hub_export.

    Args:
        *args: The message (as for ``Exception``).
        cli_message: The same message worded for the command line (``--subfolder`` where the message says
            ``subfolder=``); the ``hub-export`` command prints it instead of the message. None: the message fits both.
    """

    #: The message as the command line words it, or None (see the class docstring).
    cli_message: str | None = None

    def __init__(self, *args: object, cli_message: str | None = None) -> None:
        super().__init__(*args)
        if cli_message is not None:
            self.cli_message = cli_message


class ConfigError(HubExportError, ValueError):
    """An export config is malformed: unknown field, wrong type or an unsupported value."""


class UnknownFormatError(HubExportError, ValueError):
    """An export format name that no backend is registered for."""


class BackendUnavailableError(HubExportError, ImportError):
    """A backend's optional dependency is not installed; the message names the pip extra to install."""


class DeviceUnavailableError(HubExportError, RuntimeError):
    """The requested device or execution provider is not available in this runtime."""


class ExportError(HubExportError, RuntimeError):
    """Tracing or lowering the model failed, or the inputs cannot be exported."""


class InputError(HubExportError, ValueError):
    """Inputs given to an exported model do not match its traced signature."""


class InputBoundsError(InputError):
    """An input dimension lies outside the bounds the export was planned for."""


class ManifestError(HubExportError, ValueError):
    """``export.json`` is invalid; the message names the JSON path and what was expected."""


class IntegrityError(HubExportError, OSError):
    """A file's size or sha256 does not match what the manifest records."""


class UnsafeExportError(HubExportError, ValueError):
    """An export file would run code or reach outside its folder when loaded."""


class HubError(HubExportError, RuntimeError):
    """A Hub operation (publish, download, sync) failed."""


class PatchTargetMissing(HubExportError, AttributeError):
    """A patch's target no longer exists upstream: the workaround must be reviewed (maybe it is fixed)."""


class ParityError(ExportError):
    """An exported program returned outputs of another number or shape than the eager model on the same inputs."""


class StoreError(HubError):
    """The embedded Hub server refused a request (bad input, missing repo or file, conflict, failed check).

    Raised inside :mod:`hub_export.embedded_hub` and answered as the Hub's error shape: the HTTP ``status``,
    an ``X-Error-Code`` header when the Hub sends one for the case (``RepoNotFound``, ``RevisionNotFound``,
    ``EntryNotFound``) and ``{"error": message}`` as the body. A client of the server never sees this class,
    only the HTTP error; code that drives the store directly catches it.

    Args:
        message: What went wrong, for the ``error`` field of the JSON body.
        status: HTTP status code to answer with.
        code: Value of the ``X-Error-Code`` header, if the Hub sends one for this case.
        headers: Extra response headers (e.g. ``X-Repo-Commit`` on a missing entry).
    """

    def __init__(self, message: str, status: int = 400, code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.code, self.headers = status, code, dict(headers or {})
