"""Fetch an export from a Hub repo (the Hub side of :mod:`hub_export.loading`): ``export.json`` first, then only
the files it lists, sha256-checked.

Everything goes through huggingface_hub's cache. The manifest is fetched and validated before anything else;
the revision is then pinned to the commit it was served from, so every later file comes from that same commit.
Only the requested components' files and the export's side files (configs, tokenizer) are fetched: model weights
and other subfolders never are. Each file is checked against the manifest's size
and sha256; a file that does not match raises :class:`IntegrityError` and is removed from the cache so that a
retry downloads it again. With a 40-hex revision and a warm cache no request is made at all; with
``HF_HUB_OFFLINE=1`` (or ``local_files_only``) a previously downloaded export loads from the cache. A cached
commit stands for an endpoint only when it was downloaded from that endpoint (:mod:`._origins`): huggingface_hub's
cache does not say which hub a repo came from, and falls back to it when the endpoint cannot be reached.

Transient failures are retried with exponential backoff (:data:`RETRY_DELAYS`, so at most 4 attempts per file)
while the file's retry budget lasts (:data:`RETRY_BUDGET_S` from its first attempt): a 5xx answer, a failed
metadata request, a refused connection or a body shorter than announced ("consistency check failed"). The
retries are ours alone: huggingface_hub 2.4 would retry a failed metadata request (HEAD) 5 more times with up
to 23 s of backoff before reporting it, so that second round is switched off around our calls
(:func:`_single_metadata_attempt`) and an unreachable Hub is reported within seconds, not minutes. It still
resumes a connection cut mid-body itself. huggingface_hub writes to ``blobs/<id>.incomplete`` and only renames
a file whose size matches; a file that then fails its sha256 is evicted and downloaded once more before
:class:`IntegrityError` is raised.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import re
import stat
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._files import verify_file
from .._progress import stage
from ..errors import HubError, IntegrityError, ManifestError
from ..manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES, FileEntry, Manifest
from ..patches._base import patch_attribute
from ._origins import endpoint_url, origins_of, record_origin

__all__ = ["HubFiles", "download_export"]

_SIDE_FILES = ("config.json", "generation_config.json")
_HEX40 = re.compile(r"[0-9a-f]{40}")
#: Seconds to wait before each retry of a download that failed transiently (len + 1 attempts in all).
RETRY_DELAYS: tuple[float, ...] = (0.5, 1.0, 2.0)
#: No retry of a file starts later than this many seconds after its first attempt (an unreachable Hub whose
#: connections time out is reported after one attempt, not after four).
RETRY_BUDGET_S: float = 8.0


@dataclass
class HubFiles:
    """An export in a Hub repo, fetched into the local HF cache on demand (a :class:`hub_export.loading.FileSource`).

    Attributes:
        repo_id: The repo.
        commit: The 40-hex commit every file is taken from.
        subfolder: The export's folder in the repo ('' for the root).
        directory: ``<cache>/snapshots/<commit>/<subfolder>``: where the files are.
        manifest: The validated manifest.
    """

    repo_id: str
    commit: str
    subfolder: str
    directory: Path
    manifest: Manifest
    _options: dict[str, Any] = field(repr=False)

    @property
    def label(self) -> str:
        """``repo@commit/subfolder``, for messages."""
        return f"{self.repo_id}@{self.commit[:12]}/{self.subfolder}"

    def read_manifest(self) -> Manifest:
        """The manifest, its paths checked against the cache snapshot (whose files are symlinks into ``blobs/``)."""
        self.manifest.check_paths(self.directory, symlinks_into=_blobs_of(self.directory, self.subfolder))
        return self.manifest

    def fetch(self, entries: Iterable[FileEntry]) -> None:
        """Make sure these files of the export are in the cache and match the manifest.

        Raises:
            IntegrityError: A file's size or sha256 differs from the manifest (the bad copy is removed).
            HubError: A file cannot be fetched (offline and not cached, network or Hub error).
        """
        for entry in entries:
            path = self._get(entry.path)
            if path is None:
                raise HubError(f"{self._where(entry.path)} is listed in export.json but missing from the repo.")
            try:
                verify_file(path, entry)
            except IntegrityError:
                _evict(path)  # never keep an unverified file in the cache; download it once more
                path = self._get(entry.path)
                try:
                    if path is None:
                        raise IntegrityError(f"{entry.path}: listed in export.json but missing.") from None
                    verify_file(path, entry)
                except IntegrityError as exc:
                    if path is not None:
                        _evict(path)
                    reason = str(exc).split(": ", 1)[-1].removesuffix(" refusing to use it.").rstrip(";. ")
                    raise IntegrityError(
                        f"{self._where(entry.path)}: {reason} (downloaded twice). The bad copy was removed from the "
                        "cache; a retry downloads it again."
                    ) from None

    def unlisted_side_configs(self) -> None:
        """Fetch ``config.json`` / ``generation_config.json`` when a version-1 manifest (which does not list them)
        is read; version 2 lists them and :meth:`fetch` verifies them."""
        for name in _SIDE_FILES:
            self._get(name)

    def _where(self, relative: str) -> str:
        return f"{self.repo_id}@{self.commit[:12]}/{_join(self.subfolder, relative)}"

    def _get(self, relative: str) -> Path | None:
        return _fetch(self.repo_id, _join(self.subfolder, relative), self.commit, **self._options)


def download_export(
    repo_id: str,
    *,
    subfolder: str = "",
    revision: str | None = None,
    components: list[str] | None = None,
    cache_dir: str | Path | None = None,
    token: str | bool | None = None,
    local_files_only: bool = False,
    force_download: bool = False,
    endpoint: str | None = None,
    fetch_components: bool = True,
) -> HubFiles:
    """Download (or find in the cache) ``export.json``, and the components' files unless ``fetch_components=False``.

    Args:
        repo_id: The Hub repo.
        subfolder: The export's folder in the repo.
        revision: Branch, tag, ``refs/pr/N`` or commit sha (default ``main``).
        components: Only these components' files (all by default).
        cache_dir, token, local_files_only, force_download, endpoint: As in huggingface_hub.
        fetch_components: False to fetch only the manifest (lazy loading).

    Raises:
        ManifestError: ``export.json`` is missing or invalid, or a component does not exist.
        IntegrityError: A file does not match the manifest.
        HubError: The repo or revision does not exist, or the files cannot be fetched.
    """
    from huggingface_hub import constants

    subfolder = subfolder.strip("/")
    revision = revision or "main"
    offline = local_files_only or constants.is_offline_mode()
    options = {
        "cache_dir": cache_dir,
        "token": token,
        "offline": offline,
        "force": force_download,
        "endpoint": endpoint,
    }
    manifest_path = _join(subfolder, MANIFEST_NAME)
    before = None if offline else _cached_path(repo_id, manifest_path, revision, cache_dir)
    local = _fetch(repo_id, manifest_path, revision, **options)
    if local is None:
        found = _exports_in(repo_id, revision, options)
        message = f"{repo_id}@{revision} has no {manifest_path}."
        if found and subfolder + "/" not in found:
            listed = ", ".join(found)
            raise ManifestError(
                f"{message} Exports in this repo: {listed} (pass subfolder=...).",
                cli_message=f"{message} Exports in this repo: {listed}; choose one with --subfolder.",
            )
        proposed = _pull_requests_with(repo_id, manifest_path, options)
        if proposed:
            raise ManifestError(
                f"{message} The export is in an open pull request, not merged: pass revision={proposed[0]!r} to "
                "load it, or merge the pull request.",
                cli_message=f"{message} The export is in an open pull request, not merged: pass --revision "
                f"{proposed[0]} to load it, or merge the pull request.",
            )
        if found is not None and not found:
            message += " The repo holds no export (no export.json in any folder)."
        raise ManifestError(message)
    commit = _commit_of(local, manifest_path)
    _check_manifest_size(local)  # before anything reads it, the blob-id check included
    if not offline and not _matches_blob_id(local):
        # huggingface_hub reads the commit and blob id with a HEAD on the branch, then GETs the branch URL again: a
        # commit landing in between files a newer export.json under the older commit. Take it by commit instead.
        _evict(local)
        local = _fetch(repo_id, manifest_path, commit, **options)
        if local is None or not _matches_blob_id(local):
            raise HubError(f"{repo_id}@{commit[:12]}/{manifest_path} changed while it was downloaded; try again.")
    # a snapshot path the cache did not hold before was served by the endpoint now; the one it held may be a
    # copy huggingface_hub fell back to when the endpoint could not be reached
    _confirm_origin(repo_id, manifest_path, commit, options, served=not offline and before != local)
    manifest = _read_cached_manifest(local)
    if components is not None:
        manifest.component_files(components)  # raises ManifestError naming what exists
    export = HubFiles(repo_id, commit, subfolder, local.parent, manifest, options)
    export.read_manifest()
    if manifest.schema_version == 1:
        export.unlisted_side_configs()
    if fetch_components:
        with stage(f"downloading {repo_id}/{subfolder}" if subfolder else f"downloading {repo_id}"):
            # the files only the format's own tools read (genai_config.json, tokenizer IRs) are not loaded here
            side = [entry for entry in manifest.side_files() if entry.role != "runtime"]
            wanted = manifest.loaded_components() if components is None else components
            export.fetch(manifest.component_files(wanted) + side)
    return export


def _cached_path(repo_id: str, path: str, revision: str, cache_dir: Any) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(repo_id, path, cache_dir=cache_dir, revision=revision)
    return Path(cached) if isinstance(cached, str) else None


def _confirm_origin(repo_id: str, path: str, commit: str, options: dict[str, Any], *, served: bool) -> None:
    """Use the cached ``repo_id@commit`` only if it came from the endpoint of this call (see :mod:`._origins`);
    ``served``: the endpoint has just served it (recorded without asking again).

    Raises:
        HubError: Offline, the cached commit came from other endpoints; online, the endpoint cannot confirm it
            (unreachable, or it has no such commit).
    """
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    endpoint = endpoint_url(options["endpoint"])
    known = origins_of(options["cache_dir"], repo_id, commit)
    if endpoint in known:
        return
    if served:
        record_origin(options["cache_dir"], repo_id, commit, endpoint)
        return
    came_from = f"the cached copy of {repo_id}@{commit[:12]} was downloaded from {', '.join(sorted(known))}"
    switch = "set HF_ENDPOINT to that hub to load it"
    if options["offline"]:
        if known:
            raise HubError(
                f"{came_from}, not from {endpoint}: {switch}.",
                cli_message=f"{came_from}, not from {endpoint}: pass --endpoint {sorted(known)[0]} to load it.",
            )
        return  # downloaded by another tool: nothing says where from
    try:
        with _single_metadata_attempt():
            get_hf_file_metadata(hf_hub_url(repo_id, path, revision=commit, endpoint=endpoint), token=options["token"])
    except Exception as exc:  # noqa: BLE001 - whatever the cause, the endpoint did not confirm the cached commit
        reason = _first_line(_transport_error(exc) or exc)
        cached = f"; {came_from}" if known else ""
        raise HubError(
            f"Cannot confirm {repo_id}@{commit[:12]} with {endpoint} ({reason}){cached}; no copy from another hub "
            "is used in its place: retry when it is reachable, or set HF_HUB_OFFLINE=1 to load what it served before."
        ) from None  # the reason is in the message; the command line must not reword it as a plain network failure
    record_origin(options["cache_dir"], repo_id, commit, endpoint)


def _check_manifest_size(local: Path) -> Path:
    """The cached ``export.json``'s blob, refused unless a regular file of at most :data:`MAX_MANIFEST_BYTES`."""
    blob = Path(os.path.realpath(local))
    info = blob.stat()
    if not stat.S_ISREG(info.st_mode):
        raise ManifestError("The cached export.json is not a regular file; refusing to read it.")
    if info.st_size > MAX_MANIFEST_BYTES:
        raise ManifestError(f"export.json is {info.st_size} bytes, over the {MAX_MANIFEST_BYTES} byte limit.")
    return blob


def _read_cached_manifest(local: Path) -> Manifest:
    """The cached ``export.json`` (a symlink into ``blobs/``), size-checked before it is read."""
    blob = _check_manifest_size(local)
    with open(blob, "rb") as handle:
        return Manifest.loads(handle.read(MAX_MANIFEST_BYTES + 1))


def _blobs_of(directory: Path, subfolder: str) -> Path:
    """``<cache>/models--x--y/blobs`` of a snapshot folder ``<cache>/models--x--y/snapshots/<commit>/<subfolder>``."""
    snapshot = directory
    for _ in [p for p in subfolder.split("/") if p]:
        snapshot = snapshot.parent
    return snapshot.parent.parent / "blobs"


# -- cache and HTTP -------------------------------------------------------------------------------------------
def _join(subfolder: str, relative: str) -> str:
    return f"{subfolder}/{relative}" if subfolder else relative


def _commit_of(local: Path, repo_path: str) -> str:
    snapshot = local
    for _ in repo_path.split("/"):
        snapshot = snapshot.parent
    if not _HEX40.fullmatch(snapshot.name):
        raise HubError(f"Unexpected cache layout for {local}: cannot tell which commit it came from.")
    return snapshot.name


def _fetch(repo_id: str, path: str, revision: str, **options: Any) -> Path | None:
    """:func:`_fetch_once`, retried with backoff while it fails transiently (see :data:`RETRY_DELAYS` and
    :data:`RETRY_BUDGET_S`)."""
    start = time.monotonic()
    for attempt, delay in enumerate((*RETRY_DELAYS, None), start=1):
        try:
            return _fetch_once(repo_id, path, revision, **options)
        except _Transient as exc:
            pause = None if delay is None else delay * random.uniform(1.0, 1.25)
            if pause is None or time.monotonic() - start + pause > RETRY_BUDGET_S:
                times = f"{attempt} times" if attempt > 1 else "once"
                raise HubError(
                    f"Downloading {repo_id}@{revision}/{path} failed {times}: {exc.reason}"
                ) from exc.__cause__
            time.sleep(pause)
    raise AssertionError("unreachable")


@contextlib.contextmanager
def _single_metadata_attempt() -> Iterator[None]:
    """Make huggingface_hub report a failed metadata request (HEAD) at once instead of retrying it.

    huggingface_hub 2.4's ``hf_hub_download``, when its HEAD fails on a network error or a 5xx and the file is not
    cached, sends it again with ``http_backoff`` (5 retries, 1 + 2 + 4 + 8 + 8 s of sleep). :func:`_fetch` retries
    on top of that, so an unreachable Hub took 98 s to report. The second round is decided by
    ``file_download._DEFAULT_RETRY_ON_EXCEPTIONS`` / ``_DEFAULT_RETRY_ON_STATUS_CODES``; emptying them for the
    duration of our call leaves the retries (and their budget) to :func:`_fetch`. The file GET keeps its own
    retries and resume.
    """
    from huggingface_hub import file_download

    reason = "huggingface_hub retrying a failed HEAD 5 times before hub_export's own bounded retries"
    with (
        patch_attribute(file_download, "_DEFAULT_RETRY_ON_EXCEPTIONS", (), reason=reason),
        patch_attribute(file_download, "_DEFAULT_RETRY_ON_STATUS_CODES", (), reason=reason),
    ):
        yield


class _Transient(Exception):
    """A download failure worth retrying (5xx, connection error, short body)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _fetch_once(
    repo_id: str, path: str, revision: str, *, cache_dir: Any, token: Any, offline: bool, force: bool, endpoint: Any
) -> Path | None:
    """The cached copy of ``path`` at ``revision`` (downloaded when needed); None when the repo has no such file."""
    from huggingface_hub import hf_hub_download, try_to_load_from_cache
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if not force and _HEX40.fullmatch(revision):
        cached = try_to_load_from_cache(repo_id, path, cache_dir=cache_dir, revision=revision)
        if isinstance(cached, str):
            return Path(cached)
        if cached is not None:  # the cache knows the file does not exist at this commit
            return None
    try:
        with _single_metadata_attempt():
            return Path(
                hf_hub_download(
                    repo_id,
                    path,
                    revision=revision,
                    cache_dir=cache_dir,
                    token=token,
                    local_files_only=offline,
                    force_download=force,
                    endpoint=endpoint,
                )
            )
    except LocalEntryNotFoundError as exc:
        if not offline:  # online, huggingface_hub reports a failed metadata request (5xx, connection) this way
            transport = _transport_error(exc)
            if transport is not None:
                raise _Transient(f"{type(transport).__name__}: {_first_line(transport)}") from transport
            raise _Transient(_first_line(exc.__cause__ or exc)) from exc
        raise HubError(
            f"{repo_id}@{revision}/{path} is not in the local cache and downloads are disabled "
            "(HF_HUB_OFFLINE or local_files_only): download it once while online."
            if offline
            else f"Cannot download {repo_id}@{revision}/{path}: {_first_line(exc)}"
        ) from exc
    except EntryNotFoundError:
        return None
    except RevisionNotFoundError as exc:
        raise HubError(f"{repo_id} has no revision {revision!r} (branch, tag, refs/pr/N or commit sha).") from exc
    except RepositoryNotFoundError as exc:
        raise HubError(f"Repository {repo_id} not found (or private and no valid token given).") from exc
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status is None or status >= 500 or status in (408, 429):
            raise _Transient(_first_line(exc)) from exc
        raise HubError(f"Downloading {repo_id}@{revision}/{path} failed: {_first_line(exc)}") from exc
    except Exception as exc:
        transport = _transport_error(exc)
        if transport is not None:  # refused/cut connection, timeout (force_download wraps it in a ValueError)
            raise _Transient(f"{type(transport).__name__}: {_first_line(transport)}") from transport
        if isinstance(exc, OSError):  # short body
            raise _Transient(f"{type(exc).__name__}: {_first_line(exc)}") from exc
        raise


def _transport_error(exc: BaseException | None) -> BaseException | None:
    """The network-level error (refused, reset, timeout) in ``exc``'s chain of causes, if any."""
    try:
        import httpx2 as httpx
    except ImportError:  # pragma: no cover - older huggingface_hub
        import httpx  # type: ignore[no-redef, import-not-found, unused-ignore]
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, httpx.TransportError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _exports_in(repo_id: str, revision: str, options: dict[str, Any]) -> list[str] | None:
    """The folders of the repo holding an ``export.json`` (one listing request, online only); None: unknown."""
    if options["offline"]:
        return None
    try:
        from huggingface_hub import HfApi

        files = HfApi(endpoint=options["endpoint"], token=options["token"]).list_repo_files(repo_id, revision=revision)
    except Exception:  # noqa: BLE001 - a hint must never hide the real error
        return None
    return sorted(f.rsplit("/", 1)[0] + "/" for f in files if f.endswith("/" + MANIFEST_NAME))


def _pull_requests_with(repo_id: str, path: str, options: dict[str, Any]) -> list[str]:
    """The refs (``refs/pr/N``, newest first) of the repo's open pull requests holding ``path`` (online only; a
    few requests: the hint of an error)."""
    if options["offline"]:
        return []
    try:
        from huggingface_hub import HfApi

        api = HfApi(endpoint=options["endpoint"], token=options["token"])
        refs = api.list_repo_refs(repo_id, include_pull_requests=True).pull_requests or []
        found = []
        for ref in sorted(refs, key=lambda r: int(r.ref.rsplit("/", 1)[-1]), reverse=True)[:5]:
            if api.file_exists(repo_id, path, revision=ref.ref):
                found.append(ref.ref)
        return found
    except Exception:  # noqa: BLE001 - a hint must never hide the real error
        return []


def _matches_blob_id(path: Path) -> bool:
    """Whether a cached regular file's bytes hash to the git blob id the cache filed them under."""
    blob = Path(os.path.realpath(path))
    if not _HEX40.fullmatch(blob.name):
        return True  # not filed under a git blob id (LFS sha256, or not a symlinked cache): the sha256 check decides
    digest = hashlib.sha1(b"blob %d\0" % blob.stat().st_size)
    with open(blob, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest() == blob.name


def _evict(path: Path) -> None:
    """Remove a cached file: the snapshot entry and the blob it links to."""
    blob = Path(os.path.realpath(path))
    for victim in {path, blob}:
        try:
            victim.unlink()
        except FileNotFoundError:
            pass
