"""Rules and payloads of the Hub's upload protocol, as pure functions over a :class:`GitRepo`.

Upload mode (what ``preupload`` answers; documented for users of the embedded Hub): a file goes through LFS
when it is 10 MiB or larger, when its first 512 bytes contain a NUL byte (binary, git's own heuristic), or
when it matches a ``filter=lfs`` pattern of the ``.gitattributes`` at the target revision. Every repo starts
with the Hub's default ``.gitattributes`` (``*.bin``, ``*.onnx``, ``*.safetensors``...) plus ``*.pt2``,
``*.pte``, ``*.onnx.data`` and ``*.onnx_data``. ``shouldIgnore`` follows the ``.gitignore`` sent by the client, else the
one at the revision.

Commits arrive as NDJSON (``header`` first, then ``file``, ``lfsFile``, ``deletedFile``, ``deletedFolder``
lines); :func:`parse_commit` reads them one line at a time and validates every line before
:func:`apply_operations` touches a ref, so a bad payload is refused whole. The content of each regular file is
written as a git blob as soon as its line is read (objects are content-addressed and immutable; one left
unreferenced by a refused commit is harmless, as in git), so a commit never holds more than one file.

LFS uploads (:func:`lfs_batch`) are single signed ``PUT`` URLs, or for objects of at least
``multipart_threshold`` bytes, when the client lists the ``multipart`` transfer, the Hub's multipart shape
that ``huggingface_hub.lfs`` consumes: ``actions.upload.header`` holds ``chunk_size`` and one signed ``PUT``
URL per part under zero-padded part numbers (``"00001"``...), and ``actions.upload.href`` is the completion
URL the client POSTs ``{"oid", "parts": [{"partNumber", "etag"}]}`` to. Every upload URL carries an HMAC
signature instead of a bearer token, like the presigned S3 URLs the Hub hands out.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
import re
import secrets
import time
from collections.abc import Callable, Iterable
from urllib.parse import urlencode

from hub_export.embedded_hub._gitstore import GitRepo
from hub_export.embedded_hub._names import clean_path, entry_not_found, git_oid, lfs_pointer
from hub_export.errors import StoreError

LFS_THRESHOLD = 10 * 1024 * 1024
#: Objects from this size on are offered multipart uploads. S3, behind the Hub, takes at most 5 GiB in one
#: ``PUT`` (the Hub's docs require ``lfs-enable-largefiles``, its multipart agent, for files above 5 GB).
DEFAULT_MULTIPART_THRESHOLD = 5 * 1024**3
#: Part size of multipart uploads (the Hub does not document its own; any size works with the client).
DEFAULT_CHUNK_SIZE = 64 * 1024**2
#: S3's limit on the number of parts of one upload; the chunk size grows for objects that would need more.
MAX_PARTS = 10_000
#: Lifetime of signed upload URLs: one hour for a single PUT, a day for the parts of a multipart upload.
URL_LIFETIME = 3600
MULTIPART_URL_LIFETIME = 24 * 3600
#: The Hub's default ``.gitattributes`` (first commit of every repo), plus the formats hub_export writes.
GITATTRIBUTES = "".join(
    f"{pattern} filter=lfs diff=lfs merge=lfs -text\n"
    for pattern in (
        "*.7z *.arrow *.bin *.bz2 *.ckpt *.ftz *.gz *.h5 *.joblib *.lfs.* *.mlmodel *.model *.msgpack *.npy "
        "*.npz *.onnx *.ot *.parquet *.pb *.pickle *.pkl *.pt *.pth *.rar *.safetensors saved_model/**/* "
        "*.tar.* *.tar *.tflite *.tgz *.wasm *.xz *.zip *.zst *tfevents* *.pt2 *.pte *.onnx.data *.onnx_data"
    ).split()
)


def _glob_regex(pattern: str) -> re.Pattern:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        else:
            out += {"*": "[^/]*", "?": "[^/]"}.get(pattern[i], re.escape(pattern[i]))
            i += 1
    return re.compile(out)


def _matches(pattern: str, path: str) -> bool:
    """gitattributes/gitignore matching: slash-less patterns match the basename, others the full path."""
    anchored = "/" in pattern
    target = path if anchored else path.rsplit("/", 1)[-1]
    return _glob_regex(pattern.lstrip("/")).fullmatch(target) is not None


def is_lfs_path(gitattributes: str, path: str) -> bool:
    """Whether the last ``.gitattributes`` line matching ``path`` sets ``filter=lfs``."""
    verdict = False
    for line in gitattributes.splitlines():
        parts = line.split()
        if parts and not parts[0].startswith("#") and _matches(parts[0], path):
            if "filter=lfs" in parts[1:]:
                verdict = True
            elif "-filter" in parts[1:] or "!filter" in parts[1:]:
                verdict = False
    return verdict


def is_ignored(gitignore: str, path: str) -> bool:
    """Whether ``path`` (or one of its folders) is ignored by ``.gitignore`` rules (last match wins)."""
    segments = path.split("/")
    candidates = ["/".join(segments[: i + 1]) for i in range(len(segments))]
    verdict = False
    for line in gitignore.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate, pattern = line.startswith("!"), line.lstrip("!").rstrip("/")
        if any(_matches(pattern, c) for c in candidates):
            verdict = not negate
    return verdict


def parse_commit(lines: Iterable[bytes], store_blob: Callable[[bytes], str]) -> tuple[dict, list[tuple]]:
    """Parse and fully validate an NDJSON commit payload, one line at a time.

    Args:
        lines: The payload's lines (see :func:`~hub_export.embedded_hub._protocol.iter_lines`).
        store_blob: Writes a regular file's content as a git blob and returns its oid; called as each
            ``file`` line is read, so the content is dropped before the next line.

    Returns:
        The header value and a list of operations: ``("file", path, oid)``, ``("lfsFile", path, oid, size)``,
        ``("deletedFile", path)``, ``("deletedFolder", path)``.

    Raises:
        StoreError: 400 with a message naming the offending line.
    """
    header: dict | None = None
    ops: list[tuple] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            del line
            key, value = item["key"], item["value"]
            if not isinstance(value, dict):
                raise TypeError("value must be an object")
            if key == "header":
                if header is not None or ops:
                    raise ValueError("the header must come first, once")
                if not isinstance(value.get("summary"), str) or not value["summary"].strip():
                    raise ValueError("summary must be a non-empty string")
                parent = value.get("parentCommit")
                if parent is not None and not re.fullmatch(r"[0-9a-fA-F]{5,40}", str(parent)):
                    raise ValueError("parentCommit must be a commit sha")
                header = value
            elif key == "file":
                encoding = value.get("encoding", "utf-8")
                content, path = value.pop("content"), clean_path(value["path"])
                if encoding == "base64":
                    data = base64.b64decode(content, validate=True)
                elif encoding in ("utf-8", "utf8"):
                    data = content.encode("utf-8")
                else:
                    raise ValueError(f"unknown encoding {encoding!r}")
                del content, item, value
                ops.append(("file", path, store_blob(data)))
                del data
            elif key == "lfsFile":
                oid, size = value["oid"], value.get("size")
                if value.get("algo", "sha256") != "sha256" or not re.fullmatch(r"[0-9a-f]{64}", str(oid)):
                    raise ValueError("lfsFile needs a sha256 oid")
                if size is not None and (not isinstance(size, int) or size < 0):
                    raise ValueError("size must be a non-negative integer")
                ops.append(("lfsFile", clean_path(value["path"]), oid, size))
            elif key in ("deletedFile", "deletedFolder"):
                ops.append((key, clean_path(value["path"], folder=key == "deletedFolder")))
            else:
                raise ValueError(f"unknown key {key!r}")
        except StoreError as exc:
            if exc.status != 400:
                raise
            raise StoreError(f"Line {number}: {exc}") from None
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
            raise StoreError(f"Malformed commit payload, line {number}: {exc!s}") from None
    if header is None:
        raise StoreError("Malformed commit payload: missing header line")
    return header, ops


def apply_operations(repo: GitRepo, files: dict[str, str], ops: list[tuple]) -> tuple[dict[str, str], dict[str, bytes]]:
    """Apply parsed operations to a flat ``{path: oid}`` tree in memory (nothing is written).

    Returns:
        The new flat tree and the blobs (``{oid: data}``, LFS pointers) the caller must write before the tree;
        regular files were written by :func:`parse_commit` already.

    Raises:
        StoreError: 400 for an LFS object that was not uploaded, 404 ``EntryNotFound`` for a missing file or
            folder to delete, 409 when a file and a folder would share a path.
    """
    files, blobs = dict(files), {}
    for op in ops:
        kind, path = op[0], op[1]
        if kind == "file":
            files[path] = op[2]
        elif kind == "lfsFile":
            stored = repo.lfs_size(op[2])
            if stored is None or (op[3] is not None and op[3] != stored):
                raise StoreError(f"LFS object {op[2]} for {path!r} was not uploaded (or has another size)")
            data = lfs_pointer(op[2], stored)
            oid = git_oid("blob", data)
            blobs[oid], files[path] = data, oid
        elif kind == "deletedFile":
            if files.pop(path, None) is None:
                raise entry_not_found(f"{path} (A file with this name doesn't exist)")
        else:
            doomed = [p for p in files if p.startswith(path + "/")]
            if not doomed:
                raise entry_not_found(f"{path}/ (A folder with this name doesn't exist)")
            for p in doomed:
                del files[p]
    for path in files:
        parts = path.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in files:
                raise StoreError(f"{path!r} conflicts with the file {'/'.join(parts[:i])!r}", 409)
    return files, blobs


def upload_mode(path: str, size: int, sample: bytes, gitattributes: str) -> str:
    """``"lfs"`` or ``"regular"`` for a file about to be uploaded (see the module docstring)."""
    lfs = size >= LFS_THRESHOLD or b"\0" in sample or is_lfs_path(gitattributes, path)
    return "lfs" if lfs else "regular"


def sign_upload(secret: bytes, repo: GitRepo, oid: str, size: int, expires: int, *extra: object) -> str:
    """HMAC that authorises one LFS upload URL (the client PUTs there without its token, as to S3).

    ``extra`` binds more of the URL: the upload id, chunk size and part number of a multipart upload.
    """
    fields = [repo.repo_type, repo.repo_id, oid, size, expires, *extra]
    return hmac.new(secret, "|".join(map(str, fields)).encode(), hashlib.sha256).hexdigest()


def part_size(size: int, chunk_size: int) -> int:
    """The chunk size a multipart upload of ``size`` bytes uses: ``chunk_size``, grown to stay within
    :data:`MAX_PARTS` parts."""
    return max(chunk_size, math.ceil(size / MAX_PARTS))


def _multipart_action(repo: GitRepo, oid: str, size: int, base: str, secret: bytes, chunk_size: int) -> dict:
    chunk = part_size(size, chunk_size)
    upload_id, expires = secrets.token_hex(16), int(time.time()) + MULTIPART_URL_LIFETIME
    count = math.ceil(size / chunk)
    width = max(5, len(str(count)))

    def url(*tail: object) -> str:
        sig = sign_upload(secret, repo, oid, size, expires, upload_id, chunk, *tail)
        query = urlencode({"size": size, "chunk": chunk, "exp": expires, "sig": sig})
        return f"{base}/{oid}/multipart/{upload_id}{''.join(f'/{t}' for t in tail)}?{query}"

    header = {"chunk_size": str(chunk), **{str(n).zfill(width): url(n) for n in range(1, count + 1)}}
    return {"href": url(), "header": header, "expires_in": MULTIPART_URL_LIFETIME}


def lfs_batch(
    repo: GitRepo,
    body: dict,
    upload: bool,
    base: str,
    secret: bytes,
    multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> dict:
    """Answer a git-lfs batch request: objects already stored get no action, others signed upload URLs.

    Args:
        repo: Target repository.
        body: The request (``{"operation", "transfers", "objects": [{"oid", "size"}]}``).
        upload: Whether this is an upload batch (else download).
        base: URL of ``<repo>.git/info/lfs/objects``.
        secret: Key for :func:`sign_upload`.
        multipart_threshold: Objects of at least this size get a multipart upload when the client lists
            the ``multipart`` transfer (see the module docstring); smaller ones a single ``PUT``.
        chunk_size: Part size of multipart uploads (see :func:`part_size`).

    Raises:
        StoreError: 422 when ``objects`` is not a list.
    """
    objects = body.get("objects")
    if not isinstance(objects, list):
        raise StoreError("Malformed LFS batch request: 'objects' must be a list", 422)
    transfers = body.get("transfers")
    multipart_ok = isinstance(transfers, list) and "multipart" in transfers
    out, transfer = [], "basic"
    for obj in objects:
        oid, size = (obj.get("oid"), obj.get("size")) if isinstance(obj, dict) else (None, None)
        if not isinstance(oid, str) or not re.fullmatch(r"[0-9a-f]{64}", oid) or not isinstance(size, int) or size < 0:
            out.append({"oid": str(oid), "size": 0, "error": {"code": 422, "message": "Invalid oid or size"}})
            continue
        entry: dict = {"oid": oid, "size": size, "authenticated": True}
        stored = repo.lfs_size(oid)
        if upload and stored != size:
            if multipart_ok and size > 0 and size >= multipart_threshold:
                upload_action, transfer = _multipart_action(repo, oid, size, base, secret, chunk_size), "multipart"
            else:
                expires = int(time.time()) + URL_LIFETIME
                query = urlencode({"size": size, "exp": expires, "sig": sign_upload(secret, repo, oid, size, expires)})
                upload_action = {"href": f"{base}/{oid}?{query}", "expires_in": URL_LIFETIME}
            entry["actions"] = {"upload": upload_action, "verify": {"href": f"{base}/{oid}/verify", "header": {}}}
        elif not upload and stored is None:
            entry["error"] = {"code": 404, "message": "Object does not exist"}
        elif not upload and stored is not None:  # signed, as the Hub's CDN links: git-lfs sends no credentials there
            expires = int(time.time()) + URL_LIFETIME
            signature = sign_upload(secret, repo, oid, stored, expires, "download")
            query = urlencode({"exp": expires, "sig": signature})
            entry["actions"] = {"download": {"href": f"{base}/{oid}?{query}", "header": {}, "expires_in": URL_LIFETIME}}
        out.append(entry)
    return {"transfer": transfer, "objects": out, "hash_algo": "sha256"}
