"""Discussions and pull requests of the embedded Hub, stored beside each repo (``discussions.json``).

A pull request is a discussion with a ref, ``refs/pr/N``, where its commits go; discussions and pull requests share
one numbering, as on the Hub. The shapes are those huggingface_hub 2.4 reads (``get_repo_discussions``,
``get_discussion_details``, ``deserialize_event``): events of type ``comment``, ``status-change``, ``commit`` and
``title-change``; statuses ``draft`` (a pull request opened without commits), ``open``, ``closed``, ``merged``.

Merging applies the pull request's changes (its files against the ``main`` commit it was opened from) to ``main`` as
one commit. Where ``main`` has changed since, the files both sides changed differently are conflicts: the merge is
refused (409) and the details list them, as the Hub does.
"""

from __future__ import annotations

import difflib
import json
import os
import secrets
import time
from datetime import UTC, datetime
from typing import Any

from hub_export.embedded_hub._gitstore import GitRepo
from hub_export.errors import StoreError

__all__ = ["Discussions", "PAGE_SIZE"]

PAGE_SIZE = 50
_FILE = "discussions.json"
_MAX_TEXT = 64 * 1024
_MAX_TITLE = 200
_DIFF_LIMIT = 256 * 1024


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _text(value: Any, what: str, limit: int = _MAX_TEXT) -> str:
    if not isinstance(value, str):
        raise StoreError(f"Missing or invalid {what}")
    if len(value) > limit:
        raise StoreError(f"The {what} is longer than {limit} characters")
    return value


class Discussions:
    """The discussions of one repo. Callers hold the repo's lock while changing them.

    Args:
        repo: The repo.
    """

    def __init__(self, repo: GitRepo):
        self.repo = repo
        self.path = repo.path / _FILE

    # -- storage -------------------------------------------------------------------------------------------
    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            return json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}

    def _save(self, data: dict[str, dict[str, Any]]) -> None:
        temporary = self.path.with_name(f".{_FILE}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        temporary.write_text(json.dumps(data), encoding="utf-8")
        os.replace(temporary, self.path)

    def get(self, num: int) -> dict[str, Any]:
        """The stored discussion ``num``.

        Raises:
            StoreError: 404 when there is none.
        """
        found = self._load().get(str(num))
        if found is None:
            raise StoreError(f"Discussion #{num} not found", 404)
        return found

    def next_number(self) -> int:
        """The number the next discussion or pull request gets (``refs/pr/N`` made otherwise counted too)."""
        taken = [int(n) for n in self._load()] + [int(n) for n in self.repo.list_refs("refs/pr") if n.isdigit()]
        return 1 + max(taken, default=0)

    # -- events --------------------------------------------------------------------------------------------
    @staticmethod
    def _event(kind: str, author: str, data: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": secrets.token_hex(12),
            "type": kind,
            "createdAt": _iso(time.time()),
            "author": {"name": author, "type": "user"},
            "data": data,
        }

    @classmethod
    def _comment(cls, author: str, text: str) -> dict[str, Any]:
        return cls._event("comment", author, {"edited": False, "hidden": False, "latest": {"raw": text, "html": ""}})

    def create(
        self, title: Any, description: Any, author: str, *, pull_request: bool, status: str | None = None
    ) -> dict[str, Any]:
        """Open a discussion (a pull request with ``pull_request``: ``refs/pr/N`` starts at ``main``'s head).

        Returns:
            The stored discussion.
        """
        title = _text(title, "title", _MAX_TITLE).strip()
        if not title:
            raise StoreError("A discussion needs a title")
        num = self.next_number()
        base = self.repo.resolve("main")[0]
        item = {
            "num": num,
            "title": title,
            "author": author,
            "createdAt": _iso(time.time()),
            "isPullRequest": bool(pull_request),
            "status": status or ("draft" if pull_request else "open"),
            "baseOid": base if pull_request else None,
            "mergeCommitId": None,
            "events": [self._comment(author, _text(description, "description"))],
        }
        data = self._load()
        data[str(num)] = item
        self._save(data)
        if pull_request and self.repo.read_ref(f"refs/pr/{num}") is None:
            self.repo.write_ref(f"refs/pr/{num}", base)
        return item

    def record_commit(self, num: int, oid: str, subject: str, author: str) -> None:
        """A commit landed on ``refs/pr/num``: an event, and a draft becomes open."""
        data = self._load()
        item = data.get(str(num))
        if item is None:
            return
        item["events"].append(self._event("commit", author, {"subject": subject, "oid": oid}))
        if item["status"] == "draft":
            item["status"] = "open"
        self._save(data)

    def comment(self, num: int, author: str, text: Any) -> dict[str, Any]:
        """Add a comment; returns its event."""
        return self._append(num, self._comment(author, _text(text, "comment")))

    def rename(self, num: int, author: str, title: Any) -> dict[str, Any]:
        """Change the title; returns the title-change event."""
        title = _text(title, "title", _MAX_TITLE).strip()
        if not title:
            raise StoreError("A discussion needs a title")
        data = self._load()
        item = self._item(data, num)
        event = self._event("title-change", author, {"from": item["title"], "to": title})
        item["title"] = title
        item["events"].append(event)
        self._save(data)
        return event

    def set_status(self, num: int, author: str, status: str, comment: str | None) -> dict[str, Any]:
        """Open or close; returns the status-change event."""
        if status not in ("open", "closed"):
            raise StoreError("Invalid status: 'open' or 'closed'")
        data = self._load()
        item = self._item(data, num)
        if item["status"] == "merged":
            raise StoreError(f"#{num} is merged: its status cannot change", 409)
        if comment:
            item["events"].append(self._comment(author, _text(comment, "comment")))
        event = self._event("status-change", author, {"status": status})
        item["status"] = status
        item["events"].append(event)
        self._save(data)
        return event

    def change_comment(self, num: int, event_id: str, how: str, content: str, user: str, owner: bool) -> dict[str, Any]:
        """Edit a comment (its author) or hide it (its author or the repo's owner); returns the comment.

        Raises:
            StoreError: 404 for an unknown comment, 403 for someone else's.
        """
        data = self._load()
        item = self._item(data, num)
        event = next((e for e in item["events"] if e["id"] == event_id and e["type"] == "comment"), None)
        if event is None:
            raise StoreError(f"No comment {event_id} in #{num}", 404)
        mine = event["author"]["name"] == user
        if how == "edit":
            if not mine:
                raise StoreError("Only a comment's author may edit it", 403)
            event["data"]["latest"]["raw"] = _text(content, "comment")
            event["data"]["edited"] = True
        else:
            if not (mine or owner):
                raise StoreError("Only a comment's author or the repo's owner may hide it", 403)
            event["data"]["hidden"] = True
        self._save(data)
        return event

    def _append(self, num: int, event: dict[str, Any]) -> dict[str, Any]:
        data = self._load()
        self._item(data, num)["events"].append(event)
        self._save(data)
        return event

    @staticmethod
    def _item(data: dict[str, dict[str, Any]], num: int) -> dict[str, Any]:
        item = data.get(str(num))
        if item is None:
            raise StoreError(f"Discussion #{num} not found", 404)
        return item

    # -- pull requests -------------------------------------------------------------------------------------
    def _changes(self, item: dict[str, Any]) -> tuple[dict[str, str], dict[str, str | None], dict[str, str]]:
        """``(base files, the pull request's changes: path -> blob or None when deleted, main's files)``."""
        repo = self.repo
        base = repo.files(repo.read_commit(item["baseOid"]).tree)
        head = repo.read_ref(f"refs/pr/{item['num']}") or item["baseOid"]
        mine = repo.files(repo.read_commit(head).tree)
        changes: dict[str, str | None] = {p: o for p, o in mine.items() if base.get(p) != o}
        changes.update({p: None for p in base if p not in mine})
        main = repo.files(repo.read_commit(repo.resolve("main")[0]).tree)
        return base, changes, main

    def changes(self, item: dict[str, Any]) -> tuple[dict[str, str], dict[str, str | None]]:
        """``(the base's files, the pull request's changes: path -> blob, or None when deleted)``."""
        base, changes, _ = self._changes(item)
        return base, changes

    def conflicts(self, item: dict[str, Any]) -> list[str]:
        """The files the pull request and ``main`` (since the pull request's base) both changed, differently."""
        if not item["isPullRequest"] or item["status"] == "merged":
            return []
        base, changes, main = self._changes(item)
        return sorted(p for p, oid in changes.items() if main.get(p) != base.get(p) and main.get(p) != oid)

    def merge(self, num: int, author: str, comment: str | None) -> str:
        """Apply pull request ``num`` to ``main`` as one commit; returns it.

        Raises:
            StoreError: 400 for a discussion, 409 when closed, merged or in conflict with ``main``.
        """
        data = self._load()
        item = self._item(data, num)
        if not item["isPullRequest"]:
            raise StoreError(f"#{num} is a discussion, not a pull request")
        if item["status"] in ("closed", "merged"):
            raise StoreError(f"Pull request #{num} is {item['status']}", 409)
        conflicts = self.conflicts(item)
        if conflicts:
            raise StoreError(f"Pull request #{num} conflicts with main on: {', '.join(conflicts)}", 409)
        repo = self.repo
        _, changes, main = self._changes(item)
        files = {**main, **{p: o for p, o in changes.items() if o is not None}}
        for path, oid in changes.items():
            if oid is None:
                files.pop(path, None)
        head = repo.resolve("main")[0]
        description = f"Merged pull request #{num}" + (f"\n\n{comment}" if comment else "")
        merged = repo.create_commit(repo.write_tree(files), [head], item["title"], description, author)
        repo.write_ref("refs/heads/main", merged)
        if comment:
            item["events"].append(self._comment(author, _text(comment, "comment")))
        item["events"].append(self._event("status-change", author, {"status": "merged"}))
        item["status"], item["mergeCommitId"] = "merged", merged
        self._save(data)
        return merged

    def diff(self, item: dict[str, Any]) -> str:
        """The pull request's changes against its base, as ``git diff`` headers with text hunks (bounded)."""
        if not item["isPullRequest"]:
            return ""
        base, changes, _ = self._changes(item)
        out: list[str] = []
        size = 0
        for path in sorted(changes):
            before, after = base.get(path), changes[path]
            out.append(f"diff --git a/{path} b/{path}\n")
            if before is None:
                out.append("new file mode 100644\n")
            elif after is None:
                out.append("deleted file mode 100644\n")
            out.append(f"index {(before or '0' * 40)[:7]}..{(after or '0' * 40)[:7]}\n")
            texts = [self._text_of(oid) for oid in (before, after)]
            if all(t is not None for t in texts):
                lines = difflib.unified_diff(
                    (texts[0] or "").splitlines(True),
                    (texts[1] or "").splitlines(True),
                    f"a/{path}" if before else "/dev/null",
                    f"b/{path}" if after else "/dev/null",
                )
                out.extend(lines)
            else:
                out.append("Binary files differ\n")
            size = sum(len(piece) for piece in out)
            if size > _DIFF_LIMIT:
                out.append("... (diff cut)\n")
                break
        return "".join(out)

    def _text_of(self, oid: str | None) -> str | None:
        """A small UTF-8 blob's text ('' for none); None for a binary, LFS or large file."""
        if oid is None:
            return ""
        info = self.repo.file_info(oid)
        if info.lfs_oid or info.size > 64 * 1024:
            return None
        try:
            return self.repo.read_object(oid)[1].decode("utf-8")
        except UnicodeDecodeError:
            return None

    # -- answers -------------------------------------------------------------------------------------------
    def summary(self, item: dict[str, Any]) -> dict[str, Any]:
        """A discussion as the listing gives it."""
        return {
            "num": item["num"],
            "title": item["title"],
            "status": item["status"],
            "createdAt": item["createdAt"],
            "author": {"name": item["author"], "type": "user"},
            "isPullRequest": item["isPullRequest"],
            "repo": {"name": self.repo.repo_id, "type": self.repo.repo_type},
            "numComments": sum(1 for e in item["events"] if e["type"] == "comment"),
        }

    def details(self, item: dict[str, Any], *, with_diff: bool) -> dict[str, Any]:
        """A discussion with its events (and, for a pull request, its base, conflicts and diff)."""
        out = {**self.summary(item), "events": item["events"]}
        if item["isPullRequest"]:
            out["changes"] = {"base": "refs/heads/main", "mergeCommitId": item["mergeCommitId"]}
            out["filesWithConflicts"] = self.conflicts(item)
            if with_diff:
                out["diff"] = self.diff(item)
        return out

    def listing(
        self, page: int, kind: str | None, status: str | None, author: str | None
    ) -> tuple[list[dict[str, Any]], int]:
        """One page of discussions, newest first, and how many match."""
        items = sorted(self._load().values(), key=lambda d: d["num"], reverse=True)
        if kind in ("discussion", "pull_request"):
            items = [d for d in items if d["isPullRequest"] == (kind == "pull_request")]
        if status and status != "all":  # as the Hub's filter: open takes drafts, closed takes merged ones
            wanted = {"open": {"open", "draft"}, "closed": {"closed", "merged"}}.get(status, {status})
            items = [d for d in items if d["status"] in wanted]
        if author:
            items = [d for d in items if d["author"] == author]
        start = page * PAGE_SIZE
        return [self.summary(d) for d in items[start : start + PAGE_SIZE]], len(items)
