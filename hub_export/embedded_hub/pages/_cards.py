"""A model card (``README.md``) as safe HTML: Markdown rendered by markdown-it-py, then sanitized by nh3.

Cards are untrusted. The HTML that leaves here has no script, no event attribute, no ``style``, no ``javascript:``
or ``data:`` URL and nothing that loads from elsewhere: an image shows only when it is a file of the repo itself
(a relative path, served from ``/resolve``); an image pointing at any other URL, internal or not, loses its source.
Links to other sites are kept (``rel="noopener noreferrer nofollow"``), relative links point at the repo's files.
The pages' Content-Security-Policy (no script at all, images from the hub only) is the second wall.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any
from urllib.parse import quote, urlsplit

__all__ = ["MAX_CARD_BYTES", "render_card", "strip_front_matter"]

#: A card longer than this is shown as "too large" rather than rendered.
MAX_CARD_BYTES = 512 * 1024

_TAGS = {
    "a", "abbr", "b", "blockquote", "br", "code", "dd", "del", "details", "div", "dl", "dt", "em", "h1", "h2", "h3",
    "h4", "h5", "h6", "hr", "i", "img", "kbd", "li", "ol", "p", "pre", "s", "span", "strong", "sub", "summary", "sup",
    "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul",
}  # fmt: skip
_ATTRIBUTES = {
    "a": {"href", "title"},
    "img": {"src", "alt", "title", "width", "height"},
    "td": {"align"},
    "th": {"align"},
    "code": {"class"},
    "ol": {"start"},
}
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n.*?\r?\n---[ \t]*(\r?\n|\Z)", re.S)


def strip_front_matter(text: str) -> str:
    """The card without its YAML metadata block."""
    return _FRONT_MATTER.sub("", text, count=1)


def _inside(path: str) -> str | None:
    """``path`` relative to the repo's root, or None when it leaves the repo or is not a plain path."""
    if not path or "\\" in path or "\x00" in path:
        return None
    normal = posixpath.normpath(path)
    if normal.startswith(("../", "/")) or normal in ("..", "."):
        return None
    return normal


def render_card(text: str, *, files_url: str, resolve_url: str) -> str:
    """The card's Markdown as sanitized HTML.

    Args:
        text: The card (``README.md``), front matter included.
        files_url: Where a relative link points (``/{repo}/blob/{sha}``).
        resolve_url: Where a relative image is served from (``/{repo}/resolve/{sha}``).
    """
    import nh3
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark", {"html": True}).enable("table").enable("strikethrough")
    rendered = html.render(strip_front_matter(text))

    def attribute(tag: str, name: str, value: str) -> str | None:
        if tag == "img" and name == "src":
            parts = urlsplit(value)
            if parts.scheme or parts.netloc or value.startswith("/") or parts.query:
                return None  # not a file of this repo: nothing is fetched from elsewhere
            inside = _inside(parts.path)
            return f"{resolve_url}/{quote(inside)}" if inside else None
        if tag == "a" and name == "href":
            parts = urlsplit(value)
            if parts.scheme in ("http", "https", "mailto") or value.startswith("#"):
                return value
            if parts.scheme or parts.netloc or value.startswith("/"):
                return None
            inside = _inside(parts.path)
            return (
                f"{files_url}/{quote(inside)}" + (f"#{quote(parts.fragment)}" if parts.fragment else "")
                if inside
                else None
            )
        if tag == "code" and name == "class":
            return value if re.fullmatch(r"language-[\w+-]{1,32}", value) else None
        return value

    cleaned: Any = nh3.clean(
        rendered,
        tags=_TAGS,
        attributes=_ATTRIBUTES,
        attribute_filter=attribute,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
        strip_comments=True,
    )
    return str(cleaned)
