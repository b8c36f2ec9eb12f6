"""Cross-origin access, as the Hub answers it: a page on another origin (a web app loading a model with
transformers.js) may read what the hub serves it.

Every response carries ``Access-Control-Allow-Origin: *`` and exposes the headers a client reads (the file's size
and commit, a ranged download's ``Content-Range``, the Hub's error headers); a preflight (``OPTIONS``) answers which
methods and request headers are allowed (``Authorization`` for a token, ``Range`` for a resumed or chunked
download). Credentials (cookies) are never allowed across origins: a page elsewhere reads what its own token, or no
token, may read.
"""

from __future__ import annotations

from ._protocol import Response

__all__ = ["CORS_HEADERS", "preflight"]

#: Headers of every response.
CORS_HEADERS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Expose-Headers": ", ".join(
        (
            "Accept-Ranges",
            "Content-Length",
            "Content-Range",
            "Content-Type",
            "ETag",
            "Location",
            "X-Error-Code",
            "X-Error-Message",
            "X-Linked-ETag",
            "X-Linked-Size",
            "X-Repo-Commit",
        )
    ),
}
_METHODS = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"
_HEADERS = "Authorization, Content-Type, Range, If-None-Match, X-Requested-With, User-Agent"


def preflight() -> Response:
    """The answer to a CORS preflight request (``OPTIONS``), the same for every origin: 204 with the allowed
    methods and headers."""
    return Response(
        204,
        {
            "Access-Control-Allow-Methods": _METHODS,
            "Access-Control-Allow-Headers": _HEADERS,
            "Access-Control-Max-Age": "86400",
        },
    )
