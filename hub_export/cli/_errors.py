"""One line for every failure a user can cause: what happened and what to do, in command-line terms.

:func:`describe` reads the whole chain of causes: a network failure or a refusal by the Hub is described the same
way whichever library call hit it (huggingface_hub's own wording names Python arguments and spans many lines).
Otherwise hub_export's own message is used, in its command-line wording (``HubExportError.cli_message``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote, urlsplit

__all__ = ["UsageError", "describe", "endpoint_of"]

_TOKEN_ADVICE = "pass --token or set HF_TOKEN (or run `hf auth login`)"
_REVISION_URL = re.compile(r"/api/models/([^/]+/[^/]+)/revision/(.+)$|^/([^/]+/[^/]+)/resolve/([^/]+)/")
_REPO_URL = re.compile(r"^/api/(?:models|datasets|spaces)/([^/]+/[^/]+)|^/(?:datasets/|spaces/)?([^/]+/[^/]+)/resolve/")


class UsageError(Exception):
    """The command line itself is wrong (arguments in the wrong order, a path that cannot exist): exit code 2."""


def endpoint_of(args: Any) -> str:
    """The Hub endpoint a command talks to: ``--endpoint``, else ``HF_ENDPOINT``, else huggingface.co."""
    explicit = getattr(args, "endpoint", None)
    if explicit:
        return str(explicit).rstrip("/")
    from huggingface_hub import constants

    return str(constants.ENDPOINT).rstrip("/")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        # as a traceback shows it: ``raise ... from None`` ends the chain
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0].strip()


def describe(exc: BaseException, *, endpoint: str, token: str | None = None) -> tuple[str, bool]:
    """The one line for ``exc``, and whether it is an expected (user-caused) failure.

    Args:
        exc: The exception that ended the command.
        endpoint: The Hub endpoint the command used (named when it cannot be reached).
        token: The ``--token`` the command got (None: the token, if any, came from the environment).
    """
    from huggingface_hub.errors import HFValidationError

    from ..errors import HubExportError

    chain = list(_chain(exc))
    network = _network_failure(chain, endpoint)
    if network is not None:
        return network, True
    refusal = _hub_refusal(chain, endpoint, token)
    if refusal is not None:
        return refusal, True
    if isinstance(exc, HubExportError):
        return _clean(exc.cli_message or _first_line(exc)), True
    if isinstance(exc, HFValidationError):
        return f"{_first_line(exc)} A Hub repo id looks like owner/name; a local folder must exist.", True
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}", True
    return f"{type(exc).__name__}: {_first_line(exc)}", False


def _clean(message: str) -> str:
    """hub_export messages about the manifest's root start with the JSON path ``$:``; a person needs no ``$``."""
    return message[3:] if message.startswith("$: ") else message


def _network_failure(chain: list[BaseException], endpoint: str) -> str | None:
    try:
        import httpx2 as httpx
    except ImportError:  # pragma: no cover - older huggingface_hub
        import httpx  # type: ignore[no-redef, import-not-found, unused-ignore]
    for item in chain:
        if isinstance(item, httpx.TransportError):
            if isinstance(item, httpx.TimeoutException):
                reason = "timed out"
            elif isinstance(item, httpx.ConnectError):
                text = _first_line(item).lower()
                reason = "connection refused" if "refused" in text else _first_line(item)
            else:
                reason = _first_line(item)
            return (
                f"cannot reach the Hub at {endpoint} ({reason}). Check HF_ENDPOINT (or --endpoint) and the network; "
                "with HF_HUB_OFFLINE=1 only the local cache is used."
            )
    return None


def _hub_refusal(chain: list[BaseException], endpoint: str, token: str | None) -> str | None:
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    for item in chain:
        if not isinstance(item, HfHubHTTPError):
            continue
        response = getattr(item, "response", None)
        status = getattr(response, "status_code", None)
        repo_id = getattr(item, "repo_id", None) or _repo_in_url(response) or "the repo"
        source = "the --token given" if token else _environment_token()
        if isinstance(item, GatedRepoError):
            return f"{repo_id} is gated: accept its conditions on the Hub, then {_TOKEN_ADVICE}."
        if isinstance(item, RevisionNotFoundError):
            return _missing_revision(item, endpoint, token)
        if isinstance(item, RepositoryNotFoundError):
            return (
                f"repository {repo_id} not found at {endpoint}. Check the name; if it is private, {_TOKEN_ADVICE} "
                "with a token that can read it."
            )
        if status == 401:
            return f"the Hub at {endpoint} refused {source} (401 Unauthorized): {_TOKEN_ADVICE} with a valid token."
        if status == 403:
            return (
                f"the Hub at {endpoint} refused {source} for {repo_id} (403 Forbidden): it lacks the permission "
                f"needed (write access to publish); {_TOKEN_ADVICE} with one that has it."
            )
    return None


def _repo_in_url(response: Any) -> str | None:
    """The repo id in a Hub API or file URL (huggingface_hub names it only on some errors)."""
    request = getattr(response, "request", None)
    url = getattr(request, "url", None) or getattr(response, "url", None)
    match = _REPO_URL.search(urlsplit(str(url or "")).path)
    return unquote(match[1] or match[2]) if match else None


def _environment_token() -> str:
    """How to name the token a request sent when --token was not given."""
    import os

    if os.environ.get("HF_TOKEN"):
        return "the token in HF_TOKEN"
    from huggingface_hub import get_token

    return "the token saved by `hf auth login`" if get_token() else "the request (no token is set)"


def _missing_revision(exc: Any, endpoint: str, token: str | None) -> str:
    """'REPO has no revision R' with the branches and tags that exist (one request, best effort)."""
    url = str(getattr(getattr(exc, "response", None), "url", "") or "")
    match = _REVISION_URL.search(urlsplit(url).path)
    repo_id = getattr(exc, "repo_id", None) or (match and (match[1] or match[3]))
    revision = unquote(match[2] or match[4]) if match else None
    head = f"{repo_id or 'the repo'} has no revision {revision!r}" if revision else f"{repo_id} has no such revision"
    if not repo_id:
        return head + "."
    try:
        from huggingface_hub import HfApi

        refs = HfApi(endpoint=endpoint, token=token).list_repo_refs(repo_id)
    except Exception:  # noqa: BLE001 - a hint must never hide the real error
        return head + " (use a branch, tag, refs/pr/N or commit sha)."
    branches = ", ".join(sorted(b.name for b in refs.branches)) or "none"
    tags = ", ".join(sorted(t.name for t in refs.tags)) or "none"
    return f"{head}. Branches: {branches}; tags: {tags} (or pass a commit sha)."
