"""Git-compatible, on-disk storage behind the embedded Hub server.

Design:
    Every repository is a *bare git repository* under
    ``<root>/repos/<type>s/<namespace>/<name>.git`` (``HEAD``, ``objects/``, ``refs/heads``, ``refs/tags``,
    ``refs/pr``), so ``git --git-dir=... log`` or ``git fsck`` work on it and ids are the ones git computes:

    * objects are git loose objects (zlib of ``<kind> <len>\\0<data>``, named by their sha1): a regular file
      is a blob whose oid is ``git hash-object``'s, trees and commits use git's exact encoding, so a commit
      id is a genuine 40-hex sha1 that depends on the content, the parent and the time;
    * files that arrive through LFS are stored once, raw, under ``<repo>/lfs/objects/aa/bb/<sha256>``
      (git-lfs's own layout) and the tree holds the git-lfs pointer blob, exactly as on the Hub; uploads
      land in ``lfs/tmp`` (single PUT) or ``lfs/incoming`` (multipart, see
      :mod:`~hub_export.embedded_hub._multipart`) and are renamed into place once their sha256 matches;
    * refs are loose ref files (``refs/heads/main``, ``refs/tags/v1``, ``refs/pr/1``) replaced atomically
      with ``os.replace``: readers never lock, never see a half-written ref, and a crash leaves at worst
      unreferenced objects (harmless, as in git).

    Content passes in pieces of 1 MiB: LFS uploads are hashed while written, blobs are deflated to and
    inflated from their object files piece by piece (:meth:`GitRepo.stream_blob` serves any byte range),
    so memory does not grow with file sizes.

    Objects are immutable, so parsed trees and file sizes are cached by oid. Writers of one repo are
    serialised by :meth:`HubStore.lock` (a thread lock plus ``flock`` on a lock file next to the repo, so
    two processes sharing a root are safe too); repo creation and deletion are atomic renames. Names that
    become filesystem paths (namespaces, repo names, ref names, LFS oids) are validated against strict
    patterns (:mod:`~hub_export.embedded_hub._names`) before any path is built.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from hub_export.embedded_hub._names import (
    HEX40,
    SHA256,
    check_ref_name,
    git_oid,
    repo_not_found,
    revision_not_found,
)
from hub_export.errors import StoreError

try:
    import fcntl
except ImportError:  # Windows: the in-process lock still serialises writers of one server
    fcntl = None  # type: ignore[assignment]

REPO_TYPES = ("model", "dataset", "space")
_NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?")
_POINTER_RE = re.compile(rb"version https://git-lfs\.github\.com/spec/v1\noid sha256:([0-9a-f]{64})\nsize (\d+)\n")
_CACHE_MAX = 512
_PIECE = 1 << 20  # bytes per read, write, deflate or inflate step: bounds memory per transfer


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@dataclass(frozen=True)
class FileInfo:
    """What the Hub reports about a file: git oid, size, and LFS details when it is a pointer."""

    oid: str
    size: int
    lfs_oid: str | None = None
    pointer_size: int | None = None


@dataclass(frozen=True)
class Commit:
    """A parsed git commit."""

    oid: str
    tree: str
    parents: tuple[str, ...]
    author: str
    timestamp: int
    title: str
    message: str


class GitRepo:
    """One bare git repository plus its LFS object store.

    Args:
        path: The ``<name>.git`` directory.
        repo_type: ``model``, ``dataset`` or ``space``.
        repo_id: ``namespace/name``.
    """

    def __init__(self, path: Path, repo_type: str, repo_id: str):
        self.path, self.repo_type, self.repo_id = path, repo_type, repo_id
        self._trees: dict[str, list[tuple[str, str, str]]] = {}
        self._infos: dict[str, FileInfo] = {}

    # -- objects -------------------------------------------------------------------------------------
    def _obj_path(self, oid: str) -> Path:
        return self.path / "objects" / oid[:2] / oid[2:]

    def write_object(self, kind: str, data: bytes) -> str:
        """Store a git object (if absent) and return its oid.

        The object is deflated to its file piece by piece: no second copy of ``data`` is made.
        """
        oid = git_oid(kind, data)
        path = self._obj_path(oid)
        if path.exists():
            return oid
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as out:
                deflate = zlib.compressobj(1)
                out.write(deflate.compress(b"%s %d\0" % (kind.encode(), len(data))))
                view = memoryview(data)
                for start in range(0, len(view), _PIECE):
                    out.write(deflate.compress(view[start : start + _PIECE]))
                out.write(deflate.flush())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return oid

    def read_object(self, oid: str) -> tuple[str, bytes]:
        """Return ``(kind, data)`` of an object.

        Raises:
            StoreError: 404 when the object does not exist.
        """
        if not HEX40.fullmatch(oid):
            raise StoreError(f"Invalid object id: {oid!r}")
        try:
            raw = zlib.decompress(self._obj_path(oid).read_bytes())
        except FileNotFoundError:
            raise StoreError(f"Object not found: {oid}", 404) from None
        header, _, data = raw.partition(b"\0")
        return header.split(b" ")[0].decode(), data

    def stream_blob(self, oid: str, offset: int = 0, length: int | None = None) -> Iterator[bytes]:
        """Yield the content of a blob from ``offset`` on (``length`` bytes, default all), inflating the
        object file piece by piece so that memory stays bounded whatever the blob's size.

        Raises:
            StoreError: 404 when the object does not exist.
        """
        if not HEX40.fullmatch(oid):
            raise StoreError(f"Invalid object id: {oid!r}")
        try:
            fh = open(self._obj_path(oid), "rb")  # noqa: SIM115 - closed in the finally of this generator
        except FileNotFoundError:
            raise StoreError(f"Object not found: {oid}", 404) from None
        remaining = float("inf") if length is None else length
        skip, header_done, inflate = offset, False, zlib.decompressobj()
        try:
            while remaining > 0:
                data = inflate.unconsumed_tail or fh.read(_PIECE)
                out = inflate.decompress(data, _PIECE) if data else inflate.flush()  # flush: output still pending
                if not out and not data:
                    break
                if not header_done:
                    nul = out.find(b"\0")
                    if nul < 0:
                        raise StoreError(f"Corrupt object: {oid}", 500)
                    out, header_done = out[nul + 1 :], True
                if skip:
                    dropped = min(skip, len(out))
                    out, skip = out[dropped:], skip - dropped
                if out:
                    out = out[: int(min(len(out), remaining))]
                    remaining -= len(out)
                    yield out
        finally:
            fh.close()

    def has_commit(self, oid: str) -> bool:
        """Whether ``oid`` names a commit of this repo."""
        try:
            return HEX40.fullmatch(oid) is not None and self.read_object(oid)[0] == "commit"
        except StoreError:
            return False

    # -- refs ----------------------------------------------------------------------------------------
    def _ref_path(self, ref: str) -> Path:
        if not ref.startswith("refs/"):
            raise StoreError(f"Invalid reference: {ref!r}")
        return self.path / check_ref_name(ref)

    def read_ref(self, ref: str) -> str | None:
        """The oid a full ref (``refs/heads/main``) points at, or None."""
        try:
            value = self._ref_path(ref).read_text().strip()
        except (OSError, StoreError):
            return None
        return value if HEX40.fullmatch(value) else None

    def write_ref(self, ref: str, oid: str) -> None:
        """Point a full ref at ``oid`` atomically.

        Raises:
            StoreError: 409 when the name clashes with an existing ref folder or file.
        """
        try:
            _atomic_write(self._ref_path(ref), f"{oid}\n".encode())
        except (NotADirectoryError, IsADirectoryError, FileExistsError):
            raise StoreError(f"Reference {ref!r} conflicts with an existing reference", 409) from None

    def delete_ref(self, ref: str) -> None:
        """Remove a full ref (and empty parent folders)."""
        path = self._ref_path(ref)
        path.unlink()
        for parent in path.parents:  # prune folders of nested names, keep refs/heads, refs/tags...
            if parent.parent == self.path / "refs" or not parent.is_relative_to(self.path / "refs"):
                break
            with contextlib.suppress(OSError):
                parent.rmdir()

    def list_refs(self, prefix: str) -> dict[str, str]:
        """All refs under ``prefix`` (``refs/heads``...), as ``{short name: oid}``, sorted."""
        base = self.path / prefix
        out = {}
        for file in sorted(base.rglob("*")) if base.is_dir() else []:
            if file.is_file() and not file.name.startswith(".tmp-"):
                oid = file.read_text().strip()
                if HEX40.fullmatch(oid):
                    out[file.relative_to(base).as_posix()] = oid
        return out

    def resolve(self, rev: str) -> tuple[str, str | None]:
        """Resolve a revision to ``(commit oid, full ref or None)``.

        Accepts a full or abbreviated (7+ hex) commit sha, a branch, a tag, or a full ref (``refs/pr/1``).

        Raises:
            StoreError: 400 for a malformed name, 404 ``RevisionNotFound`` when nothing matches.
        """
        if HEX40.fullmatch(rev):
            if self.has_commit(rev):
                return rev, None
            raise revision_not_found(rev)
        check_ref_name(rev)
        candidates = [rev] if rev.startswith("refs/") else [f"refs/heads/{rev}", f"refs/tags/{rev}"]
        for ref in candidates:
            oid = self.read_ref(ref)
            if oid is not None:
                return oid, ref
        if re.fullmatch(r"[0-9a-f]{7,39}", rev):  # an abbreviated commit sha, as git takes it
            folder = self.path / "objects" / rev[:2]
            names = [f.name for f in folder.iterdir()] if folder.is_dir() else []
            found = [
                rev[:2] + n for n in names if len(n) == 38 and n.startswith(rev[2:]) and self.has_commit(rev[:2] + n)
            ]
            if len(found) > 1:
                raise StoreError(f"Ambiguous revision {rev!r}: pass more of the commit sha", 400)
            if found:
                return found[0], None
        raise revision_not_found(rev)

    # -- commits and trees ---------------------------------------------------------------------------
    def read_commit(self, oid: str) -> Commit:
        """Parse a commit object."""
        kind, data = self.read_object(oid)
        if kind != "commit":
            raise StoreError(f"{oid} is not a commit", 404)
        head, _, message = data.decode("utf-8", "replace").partition("\n\n")
        tree, parents, author, ts = "", [], "", 0
        for line in head.splitlines():
            key, _, value = line.partition(" ")
            if key == "tree":
                tree = value
            elif key == "parent":
                parents.append(value)
            elif key == "author":
                author = value.split(" <")[0]
                ts = int(value.rsplit(" ", 2)[1])
        title, _, body = message.partition("\n")
        return Commit(oid, tree, tuple(parents), author, ts, title, body.strip("\n"))

    def create_commit(self, tree: str, parents: list[str], title: str, description: str, author: str) -> str:
        """Write a commit object (not moving any ref) and return its oid."""
        stamp = f"{author} <{author}@users.noreply.huggingface.co> {int(time.time())} +0000"
        lines = [f"tree {tree}", *(f"parent {p}" for p in parents), f"author {stamp}", f"committer {stamp}"]
        message = title.strip() + ("\n\n" + description.strip() if description.strip() else "") + "\n"
        return self.write_object("commit", ("\n".join(lines) + "\n\n" + message).encode())

    def _tree_entries(self, oid: str) -> list[tuple[str, str, str]]:
        if oid not in self._trees:
            kind, data = self.read_object(oid)
            if kind != "tree":
                raise StoreError(f"{oid} is not a tree", 500)
            entries, i = [], 0
            while i < len(data):
                sp, nul = data.index(b" ", i), data.index(b"\0", i)
                entries.append((data[i:sp].decode(), data[sp + 1 : nul].decode(), data[nul + 1 : nul + 21].hex()))
                i = nul + 21
            if len(self._trees) > _CACHE_MAX:
                self._trees.clear()
            self._trees[oid] = entries
            return entries
        return self._trees[oid]

    def walk(self, tree: str, prefix: str = "") -> Iterator[tuple[str, bool, str]]:
        """Yield ``(path, is_dir, oid)`` for everything under a tree, parents before children."""
        for mode, name, oid in sorted(self._tree_entries(tree), key=lambda e: e[1]):
            path = f"{prefix}{name}"
            is_dir = mode == "40000"
            yield path, is_dir, oid
            if is_dir:
                yield from self.walk(oid, path + "/")

    def entries(self, tree: str) -> list[tuple[str, bool, str]]:
        """The entries of one tree: ``(name, is_dir, oid)``, folders first, by name."""
        found = [(name, mode == "40000", oid) for mode, name, oid in self._tree_entries(tree)]
        return sorted(found, key=lambda e: (not e[1], e[0]))

    def files(self, tree: str) -> dict[str, str]:
        """Flatten a tree into ``{path: blob oid}``."""
        return {path: oid for path, is_dir, oid in self.walk(tree) if not is_dir}

    def lookup(self, tree: str, path: str) -> tuple[bool, str] | None:
        """Find ``path`` in a tree: ``(is_dir, oid)`` or None. The empty path is the root tree."""
        is_dir, oid = True, tree
        for seg in path.split("/") if path else []:
            if not is_dir:
                return None
            match = [e for e in self._tree_entries(oid) if e[1] == seg]
            if not match:
                return None
            is_dir, oid = match[0][0] == "40000", match[0][2]
        return is_dir, oid

    def write_tree(self, files: dict[str, str]) -> str:
        """Write the trees for ``{path: blob oid}`` bottom-up and return the root tree oid."""
        root: dict = {}
        for path, oid in files.items():
            node = root
            *dirs, name = path.split("/")
            for d in dirs:
                node = node.setdefault(d, {})
            node[name] = oid

        def _write(node: dict) -> str:
            entries = []
            for name, child in node.items():
                if isinstance(child, dict):
                    entries.append((name + "/", b"40000 %s\0" % name.encode() + bytes.fromhex(_write(child))))
                else:
                    entries.append((name, b"100644 %s\0" % name.encode() + bytes.fromhex(child)))
            return self.write_object("tree", b"".join(e for _, e in sorted(entries)))

        return _write(root)

    def _object_size(self, oid: str) -> int:
        """Size of an object from its header, without inflating the whole object."""
        try:
            with open(self._obj_path(oid), "rb") as fh:
                header = zlib.decompressobj().decompress(fh.read(4096), 64)
        except OSError:
            raise StoreError(f"Object not found: {oid}", 404) from None
        return int(header.partition(b"\0")[0].split(b" ")[1])

    def file_info(self, oid: str) -> FileInfo:
        """Size and LFS details of a blob (cached: objects are immutable)."""
        info = self._infos.get(oid)
        if info is None:
            size = self._object_size(oid)
            match = _POINTER_RE.fullmatch(self.read_object(oid)[1]) if size < 256 else None
            info = FileInfo(oid, int(match[2]), match[1].decode(), size) if match else FileInfo(oid, size)
            if len(self._infos) > _CACHE_MAX * 8:
                self._infos.clear()
            self._infos[oid] = info
        return info

    def history(self, oid: str, limit: int = 10_000) -> Iterator[Commit]:
        """First-parent history from ``oid``, newest first."""
        current: str | None = oid
        for _ in range(limit):
            if current is None:
                return
            commit = self.read_commit(current)
            yield commit
            current = commit.parents[0] if commit.parents else None

    # -- LFS -----------------------------------------------------------------------------------------
    def lfs_path(self, oid: str) -> Path:
        """Where the LFS object ``oid`` (sha256 hex) lives.

        Raises:
            StoreError: 400 when ``oid`` is not 64 lowercase hex digits.
        """
        if not isinstance(oid, str) or not SHA256.fullmatch(oid):
            raise StoreError(f"Invalid LFS oid: {oid!r}")
        return self.path / "lfs" / "objects" / oid[:2] / oid[2:4] / oid

    def lfs_size(self, oid: str) -> int | None:
        """Size of a stored LFS object, or None when absent."""
        try:
            return self.lfs_path(oid).stat().st_size
        except OSError:
            return None

    def lfs_store(self, oid: str, size: int, chunks: Iterable[bytes]) -> None:
        """Stream an upload into the LFS store, hashing it as it is written; publish it only when its sha256
        and size match.

        Args:
            oid: Expected sha256 (hex).
            size: Expected size in bytes.
            chunks: The content, in pieces.

        Raises:
            StoreError: 400 when the content does not match ``oid``/``size`` (checked as soon as it exceeds
                ``size``, so an oversized upload stops early).
        """
        target = self.lfs_path(oid)
        tmp_dir = self.path / "lfs" / "tmp"
        tmp_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=tmp_dir)
        mismatch = StoreError(f"Uploaded content does not match oid {oid} / size {size}", 400)
        try:
            sha, written = hashlib.sha256(), 0
            with os.fdopen(fd, "wb") as out:
                for chunk in chunks:
                    written += len(chunk)
                    if written > size:
                        raise mismatch
                    sha.update(chunk)
                    out.write(chunk)
            if written != size or sha.hexdigest() != oid:
                raise mismatch
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def lfs_publish(self, oid: str, file: Path) -> None:
        """Move a complete, verified file into the LFS store as object ``oid`` (an atomic rename)."""
        target = self.lfs_path(oid)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(file, target)


class HubStore:
    """All repositories under one root directory.

    Args:
        root: Storage directory (created if missing).
        default_namespace: Namespace given to repo ids without one (``name`` means ``<namespace>/name``).
    """

    def __init__(self, root: str | os.PathLike, default_namespace: str = "user"):
        self.root = Path(root).resolve()
        self.default_namespace = default_namespace
        (self.root / "repos").mkdir(parents=True, exist_ok=True)
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._repos: dict[str, GitRepo] = {}

    def canonical_id(self, repo_id: str) -> str:
        """Validate a repo id and add the default namespace when it has none.

        Raises:
            StoreError: 400 for ids that are not ``name`` or ``namespace/name`` with safe characters.
        """
        parts = repo_id.split("/") if isinstance(repo_id, str) else []
        if len(parts) == 1:
            parts = [self.default_namespace, *parts]
        ok = len(parts) == 2 and all(
            _NAME_RE.fullmatch(p) and ".." not in p and "--" not in p and not p.endswith(".git") for p in parts
        )
        if not ok:
            raise StoreError(f"Invalid repo id: {repo_id!r}")
        return "/".join(parts)

    def path_of(self, repo_type: str, repo_id: str) -> Path:
        """The folder of a repo (validated id; it may not exist)."""
        if repo_type not in REPO_TYPES:
            raise StoreError(f"Invalid repo type: {repo_type!r}")
        ns, name = self.canonical_id(repo_id).split("/")
        path = self.root / "repos" / f"{repo_type}s" / ns / f"{name}.git"
        if not path.resolve().is_relative_to(self.root):
            raise StoreError("Invalid repo path")
        return path

    def exists(self, repo_type: str, repo_id: str) -> bool:
        """Whether the repository exists."""
        return (self.path_of(repo_type, repo_id) / "hub.json").is_file()

    def get(self, repo_type: str, repo_id: str) -> GitRepo:
        """Open a repository.

        Raises:
            StoreError: 404 ``RepoNotFound`` when it does not exist.
        """
        path = self.path_of(repo_type, repo_id)
        if not (path / "hub.json").is_file():
            raise repo_not_found(repo_id)
        key = str(path)
        with self._guard:
            if key not in self._repos:
                self._repos[key] = GitRepo(path, repo_type, self.canonical_id(repo_id))
            return self._repos[key]

    def meta(self, repo: GitRepo) -> dict:
        """The repo's ``hub.json`` (creation time, visibility)."""
        return json.loads((repo.path / "hub.json").read_text())

    @contextlib.contextmanager
    def lock(self, repo_type: str, repo_id: str) -> Iterator[None]:
        """Serialise writers of one repository (threads and processes)."""
        path = self.path_of(repo_type, repo_id)
        with self._guard:
            lock = self._locks.setdefault(str(path), threading.Lock())
        with lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path.parent / f".{path.name}.lock", "a+b") as fh:
                if fcntl is not None:
                    fcntl.flock(fh, fcntl.LOCK_EX)
                yield

    def create(self, repo_type: str, repo_id: str, initial: dict[str, bytes], private: bool = False) -> GitRepo:
        """Create a repository whose ``main`` starts with one ``initial commit`` holding ``initial`` files.

        Raises:
            StoreError: 409 when it already exists.
        """
        path = self.path_of(repo_type, repo_id)
        with self.lock(repo_type, repo_id):
            if (path / "hub.json").is_file():
                raise StoreError("You already created this model repo", 409)
            staging = path.parent / f".new-{uuid.uuid4().hex}"
            try:
                for sub in ("objects", "refs/heads", "refs/tags", "refs/pr", "lfs/objects"):
                    (staging / sub).mkdir(parents=True)
                (staging / "HEAD").write_text("ref: refs/heads/main\n")
                (staging / "config").write_text("[core]\n\trepositoryformatversion = 0\n\tbare = true\n")
                repo = GitRepo(staging, repo_type, self.canonical_id(repo_id))
                tree = repo.write_tree({name: repo.write_object("blob", data) for name, data in initial.items()})
                repo.write_ref("refs/heads/main", repo.create_commit(tree, [], "initial commit", "", "system"))
                meta = {"createdAt": time.time(), "private": bool(private), "id": repo.repo_id, "type": repo_type}
                (staging / "hub.json").write_text(json.dumps(meta))
                shutil.rmtree(path, ignore_errors=True)  # leftovers of an interrupted delete
                os.replace(staging, path)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        return self.get(repo_type, repo_id)

    def delete(self, repo_type: str, repo_id: str, *, locked: bool = False) -> None:
        """Delete a repository and its LFS objects (``locked``: the caller holds the repo's lock).

        Raises:
            StoreError: 404 ``RepoNotFound`` when it does not exist.
        """
        path = self.path_of(repo_type, repo_id)
        with contextlib.nullcontext() if locked else self.lock(repo_type, repo_id):
            if not (path / "hub.json").is_file():
                raise repo_not_found(repo_id)
            trash = self.root / "trash" / uuid.uuid4().hex
            trash.parent.mkdir(exist_ok=True)
            os.replace(path, trash)
            with self._guard:
                self._repos.pop(str(path), None)
        shutil.rmtree(trash, ignore_errors=True)
