"""Publish exports to a Hub repo: every file of one or several exports in ONE commit (a revision).

Each export lives in its own subfolder (``onnx/``, ``openvino/``, ``executorch/``, ``pt2/`` by default). One
``create_commit`` carries every changed file, ``export.json`` (+ ``config.json``, ``generation_config.json``),
the deletions of files an older export left in those subfolders and the README card; other subfolders and the
model's own files are never touched. The commit is made with ``parent_commit`` set to the head it was planned
against, so concurrent publishers never overwrite each other: a publisher that loses the race re-plans and
retries (bounded), unless the caller pinned ``parent_commit`` (then a moved head raises :class:`HubError`).
An export identical to what the target revision holds (same paths, sizes and hashes, same card) makes no commit
and uploads nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import re
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import _progress
from .._files import sha256_file, verify_file
from .._quiet import quietly
from ..errors import HubError, ManifestError
from ..formats import backend_for
from ..manifest import MANIFEST_NAME, Manifest, Source
from ..preprocessing import PREPROCESSING_FILES
from .card import CardExport, render_card

__all__ = ["PublishResult", "publish", "push_export"]

_SIDE_FILES = ("config.json", "generation_config.json")
_MAX_ATTEMPTS = 12
_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]*")


@dataclass(frozen=True)
class PublishResult:
    """What a publish did.

    Attributes:
        commit_sha: The new commit (or, when nothing changed, the head that already holds the export).
        commit_url: Its URL.
        pr_url: The pull request's URL (``create_pr=True``).
        pr_ref: The pull request's ref, ``refs/pr/N`` (loadable as a revision).
        changed: False when the target revision already held exactly these files: no commit was made.
        uploaded_bytes: Bytes of the files the commit added or changed (0 when unchanged).
        tag: The tag that now points at ``commit_sha``, if one was asked for or derived from the source.
        notes: Things the caller should know (a tag left in place, ...).
    """

    commit_sha: str
    commit_url: str | None
    pr_url: str | None
    pr_ref: str | None
    changed: bool
    uploaded_bytes: int
    tag: str | None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Local:
    subfolder: str
    manifest: Manifest
    files: dict[str, Path]  # path inside the export folder -> local file
    sha256: dict[str, str]  # known sha256 of component files (from the manifest)


class _Conflict(Exception):
    """The branch moved between planning and committing."""


def push_export(exported: Any, repo_id: str, *, subfolder: str | None = None, **kwargs: Any) -> PublishResult:
    """Publish one export (an ``ExportedModel`` or a saved export folder) as one commit.

    Args:
        exported: The export, or the path of a folder written by ``save_pretrained``.
        repo_id: Target model repo (created when missing).
        subfolder: Folder in the repo; defaults to the format's (``onnx``, ``openvino``, ``executorch``, ``pt2``).
        **kwargs: As :func:`publish`.

    Returns:
        A :class:`PublishResult`.
    """
    if subfolder is None:
        subfolder = backend_for(_format_of(exported)).layout.subfolder
    return publish(repo_id, {subfolder: exported}, **kwargs)


@quietly
def publish(
    repo_id: str,
    exports: Mapping[str, Any],
    *,
    revision: str = "main",
    create_pr: bool = False,
    commit_message: str | None = None,
    tag: str | None = None,
    parent_commit: str | None = None,
    private: bool | None = None,
    token: str | bool | None = None,
    endpoint: str | None = None,
) -> PublishResult:
    """Publish several exports in one atomic commit.

    Args:
        repo_id: Target model repo (created when missing).
        exports: Subfolder -> ``ExportedModel`` or path of a saved export folder.
        revision: Branch to commit to (created from ``main`` when missing), or the base of the pull request.
        create_pr: Open a pull request (``refs/pr/N``) instead of committing to ``revision``.
        commit_message: Commit title (a default names the subfolders).
        tag: Tag to put on the commit. When None and the exports record a source commit, the tag
            ``source-<first 12 hex of that commit>`` is created (not for pull requests).
        parent_commit: Commit the branch must still point at; otherwise nothing is changed and HubError is raised.
            When None, a concurrent commit makes this publish re-plan and retry.
        private: Visibility of the repo when it has to be created.
        token: Hub token.
        endpoint: Hub endpoint (defaults to ``HF_ENDPOINT``).

    Raises:
        HubError: The Hub refused the publish, the branch moved past ``parent_commit``, or retries ran out.
        ManifestError, IntegrityError: A saved export folder is invalid.
    """
    from huggingface_hub import HfApi

    if not exports:
        raise HubError("Nothing to publish: pass at least one export.")
    api = HfApi(endpoint=endpoint, token=token)
    with tempfile.TemporaryDirectory(prefix="hub-export-publish-") as tmp:
        local = _stage(exports, Path(tmp))
        new_repo = not _exists(api, repo_id)
        try:
            for attempt in range(1, _MAX_ATTEMPTS + 1):
                try:
                    with _progress.stage(f"uploading to {repo_id}"):
                        return _publish_once(
                            api, repo_id, local, revision, create_pr, commit_message, tag, parent_commit, private
                        )
                except _Conflict:
                    if parent_commit is not None:
                        raise HubError(
                            f"{repo_id}@{revision} moved past parent_commit {parent_commit} while publishing; nothing "
                            "was changed. Re-read the head and publish again."
                        ) from None
                    time.sleep(random.uniform(0.0, 0.05 * attempt))  # back off; the other publisher's commit won
            raise HubError(
                f"Gave up publishing to {repo_id}@{revision} after {_MAX_ATTEMPTS} concurrent-commit conflicts."
            )
        except BaseException:
            if new_repo:  # a failed first publish leaves no empty repo behind
                _delete_if_empty(api, repo_id)
            raise


# -- staging --------------------------------------------------------------------------------------------------
def _format_of(exported: Any) -> str:
    if isinstance(exported, (str, Path)):
        return Manifest.read(exported).export_format
    return exported.export_format


def _clean_subfolder(subfolder: str) -> str:
    cleaned = str(subfolder).strip("/")
    if not cleaned or any(_SEGMENT.fullmatch(s) is None for s in cleaned.split("/")):
        raise HubError(
            f"Invalid subfolder {subfolder!r}: use a relative folder such as 'onnx' or 'onnx-int8' (letters, digits, "
            "'.', '_', '-', '+'; no '..', no leading dot; exports never go to the repo root)."
        )
    return cleaned


def _stage(exports: Mapping[str, Any], tmp: Path) -> list[_Local]:
    staged: list[_Local] = []
    for i, (subfolder, exported) in enumerate(exports.items()):
        sub = _clean_subfolder(subfolder)
        if isinstance(exported, (str, Path)):
            directory = Path(exported)
            manifest = Manifest.read(directory)
            for entry in manifest.all_listed():
                verify_file(directory / entry.path, entry)
        else:
            directory = _save(exported, tmp / f"export-{i}")
            manifest = Manifest.read(directory)
        files = {MANIFEST_NAME: directory / MANIFEST_NAME}
        files.update({name: directory / name for name in _SIDE_FILES if (directory / name).is_file()})
        files.update({entry.path: directory / entry.path for entry in manifest.all_listed()})
        staged.append(_Local(sub, manifest, files, {e.path: e.sha256 for e in manifest.all_listed()}))
    subs = sorted(s.subfolder for s in staged)
    for a, b in zip(subs, subs[1:]):
        if a == b or b.startswith(a + "/"):
            raise HubError(f"Subfolders {a!r} and {b!r} overlap; publish each export to its own folder.")
    return staged


def _save(exported: Any, directory: Path) -> Path:
    """``save_pretrained`` into a scratch folder without changing what the components point at."""
    state = {name: (c.metadata, c._files_dir) for name, c in exported.components.items()}
    try:
        return Path(exported.save_pretrained(directory))
    finally:
        for name, component in exported.components.items():
            component.metadata, component._files_dir = state[name]


# -- one attempt ----------------------------------------------------------------------------------------------
def _publish_once(
    api: Any,
    repo_id: str,
    local: list[_Local],
    revision: str,
    create_pr: bool,
    message: str | None,
    tag: str | None,
    parent_commit: str | None,
    private: bool | None,
) -> PublishResult:
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete
    from huggingface_hub.errors import HfHubHTTPError

    head, remote = _remote_state(api, repo_id, revision, create_pr, private)
    if parent_commit is not None and not head.startswith(parent_commit.lower()):
        raise HubError(
            f"{repo_id}@{revision} is at {head}, not at parent_commit {parent_commit}; nothing was changed. "
            "Publish again against the current head (or without parent_commit)."
        )
    ops: list[Any] = []
    uploaded = 0
    export_dirs = {p.rsplit("/", 1)[0] for p in remote if p.endswith("/" + MANIFEST_NAME)}
    for exp in local:
        for rel, path in exp.files.items():
            target = f"{exp.subfolder}/{rel}"
            if not _same(remote.get(target), path, exp.sha256.get(rel)):
                ops.append(CommitOperationAdd(path_in_repo=target, path_or_fileobj=str(path)))
                uploaded += path.stat().st_size
        prefix = exp.subfolder + "/"
        nested = [d + "/" for d in export_dirs if d.startswith(prefix)]
        for path in sorted(remote):
            if path.startswith(prefix) and path[len(prefix) :] not in exp.files and not path.startswith(tuple(nested)):
                ops.append(CommitOperationDelete(path_in_repo=path))
    for name, data in _root_files(api, repo_id, head, remote, local).items():
        ops.append(CommitOperationAdd(path_in_repo=name, path_or_fileobj=data))
        uploaded += len(data)
    readme = _readme(api, repo_id, head, remote, local)
    if readme is not None:
        ops.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=readme))
        uploaded += len(readme)
    sources = sorted(
        {e.manifest.source.revision: e.manifest.source for e in local if e.manifest.source}.values(),
        key=lambda s: s.revision,
    )
    if not ops:
        url = f"{api.endpoint}/{repo_id}/commit/{head}"
        tagged, notes = _tags(api, repo_id, head, tag, sources, create_pr=False)
        notes = ["unchanged: the revision already holds this export", *notes]
        return PublishResult(head, url, None, None, False, 0, tagged, tuple(notes))
    try:
        with _lfs_where_xet_is_missing(api, repo_id, revision):
            info = api.create_commit(
                repo_id,
                ops,
                commit_message=message or _default_message(local),
                commit_description=_description(local),
                revision=revision,
                create_pr=create_pr,
                parent_commit=head,
            )
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status in (409, 412):
            raise _Conflict() from exc
        raise HubError(f"Publishing to {repo_id}@{revision} failed: {_first_line(exc)}") from exc
    except (ValueError, RuntimeError) as exc:  # huggingface_hub wraps a failed LFS upload in RuntimeError
        cause = f" ({_first_line(exc.__cause__)})" if exc.__cause__ is not None else ""
        raise HubError(
            f"Publishing to {repo_id}@{revision} failed: {_first_line(exc)}{cause} Nothing was committed; publishing "
            "again uploads only the files the Hub does not have yet."
        ) from exc
    tagged, notes = _tags(api, repo_id, info.oid, tag, sources, create_pr=create_pr)
    return PublishResult(info.oid, info.commit_url, info.pr_url, info.pr_revision, True, uploaded, tagged, tuple(notes))


def _exists(api: Any, repo_id: str) -> bool:
    try:
        return bool(api.repo_exists(repo_id))
    except Exception:  # noqa: BLE001 - unknown: never delete what may have been there
        return True


def _delete_if_empty(api: Any, repo_id: str) -> None:
    """Delete a repo this publish created when it holds no more than the Hub's first commit (best effort)."""
    try:
        if len(api.list_repo_commits(repo_id)) <= 1:
            api.delete_repo(repo_id)
    except Exception:  # noqa: BLE001 - the publish's own error is the one to report
        pass


@contextlib.contextmanager
def _lfs_where_xet_is_missing(api: Any, repo_id: str, revision: str) -> Iterator[None]:
    """Upload with Git LFS where the endpoint has no Xet storage (the embedded hub, other self-hosted hubs):
    huggingface_hub uploads with Xet whenever ``hf_xet`` is installed and ``HF_HUB_DISABLE_XET`` is unset, and a hub
    without it answers its token request 404, failing the upload. Asked once per commit; the Hub itself is asked
    too and answers a token, so nothing changes there."""
    from urllib.parse import quote

    from huggingface_hub import constants, get_session
    from huggingface_hub.utils import build_hf_headers
    from huggingface_hub.utils._runtime import is_xet_available

    if not is_xet_available():
        yield
        return
    url = f"{api.endpoint}/api/models/{repo_id}/xet-write-token/{quote(revision, safe='')}"
    try:
        missing = get_session().get(url, headers=build_hf_headers(token=api.token), timeout=10).status_code == 404
    except Exception:  # noqa: BLE001 - undecided: leave the client's choice
        missing = False
    if not missing:
        yield
        return
    before = constants.HF_HUB_DISABLE_XET
    constants.HF_HUB_DISABLE_XET = True
    try:
        yield
    finally:
        constants.HF_HUB_DISABLE_XET = before


def _remote_state(api: Any, repo_id: str, revision: str, create_pr: bool, private: bool | None) -> tuple[str, dict]:
    """The head commit of ``revision`` and its files (path -> RepoSibling with size, blob id, LFS sha256)."""
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    for _ in range(3):
        try:
            info = api.model_info(repo_id, revision=revision, files_metadata=True)
            return info.sha, {s.rfilename: s for s in info.siblings or []}
        except RevisionNotFoundError as exc:
            if create_pr or re.fullmatch(r"[0-9a-f]{40}", revision):
                raise HubError(f"{repo_id} has no branch {revision!r} to open a pull request against.") from exc
            _call(api.create_branch, repo_id, branch=revision, exist_ok=True)
        except RepositoryNotFoundError:
            _call(api.create_repo, repo_id, private=private, exist_ok=True)
        except HfHubHTTPError as exc:
            raise HubError(f"Reading {repo_id}@{revision} failed: {_first_line(exc)}") from exc
    raise HubError(f"Could not create or read {repo_id}@{revision}.")


def _call(function: Any, *args: Any, **kwargs: Any) -> Any:
    from huggingface_hub.errors import HfHubHTTPError

    try:
        return function(*args, **kwargs)
    except HfHubHTTPError as exc:
        raise HubError(f"{function.__name__} failed: {_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _same(remote: Any, path: Path, sha256: str | None) -> bool:
    """Whether a remote file already has this content (LFS: sha256, regular: git blob id)."""
    if remote is None or remote.size is None:
        return False
    size = path.stat().st_size
    if remote.size != size:
        return False
    if remote.lfs is not None:
        return remote.lfs.sha256 == (sha256 or sha256_file(path))
    digest = hashlib.sha1(b"blob %d\0" % size)
    with open(path, "rb") as handle:  # in chunks: never a whole file in memory
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return remote.blob_id == digest.hexdigest()


# -- the repo root --------------------------------------------------------------------------------------------
def _root_files(api: Any, repo_id: str, head: str, remote: dict, local: list[_Local]) -> dict[str, bytes]:
    """The files the repo root needs so that the formats' own tools load an export by the repo id alone (they read
    the model's ``config.json`` and tokenizer at the root and the export in its subfolder: transformers.js,
    optimum, OpenVINO GenAI): in a repo without a ``config.json`` at its root (a repo of exports only), the source's
    ``config.json``, ``generation_config.json`` and tokenizer and processor files, from the export; in any repo, the
    keys of ``config.json`` a format's tools read at the root (``Backend.root_config_keys``) where it lacks them.
    Nothing else of a root file is ever changed."""
    with_config = [exp for exp in local if "config.json" in exp.files]
    if not with_config:
        return {}
    keys = {key for exp in local for key in backend_for(exp.manifest.export_format).root_config_keys}
    wanted: dict[str, Any] = {}
    for exp in with_config:
        config = json.loads(exp.files["config.json"].read_bytes())
        wanted.update({key: config[key] for key in sorted(keys) if key in config and key not in wanted})
    if "config.json" in remote:
        current = json.loads(_download_text(api, repo_id, "config.json", head))
        missing = {key: value for key, value in wanted.items() if key not in current}
        if not isinstance(current, dict) or not missing:
            return {}
        return {"config.json": _json_bytes({**current, **missing})}
    first = with_config[0]
    config = json.loads(first.files["config.json"].read_bytes())
    files = {"config.json": _json_bytes({**config, **{k: v for k, v in wanted.items() if k not in config}})}
    for name in ("generation_config.json", *PREPROCESSING_FILES):
        if name in first.files and name not in remote:
            files[name] = first.files[name].read_bytes()
    return files


def _json_bytes(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


# -- README card ----------------------------------------------------------------------------------------------
def _readme(api: Any, repo_id: str, head: str, remote: dict, local: list[_Local]) -> bytes | None:
    """The new README.md bytes, or None when the current one is already up to date."""
    exports: dict[str, CardExport] = {}
    for path in remote:
        if path.endswith("/" + MANIFEST_NAME):
            sub = path.rsplit("/", 1)[0]
            try:
                exports[sub] = CardExport(sub, Manifest.loads(_download_text(api, repo_id, path, head)))
            except ManifestError as exc:
                exports[sub] = CardExport(sub, None, _first_line(exc))
    exports.update({e.subfolder: CardExport(e.subfolder, e.manifest) for e in local})
    current = _download_text(api, repo_id, "README.md", head) if "README.md" in remote else None
    has_model = "config.json" in remote
    sources = {
        e.manifest.source.repo_id: e.manifest.source for e in exports.values() if e.manifest and e.manifest.source
    }
    card = render_card(
        current,
        exports,
        repo_id,
        default_library="transformers" if has_model else "hub-export",
        source_meta=_source_license(api, [s for name, s in sorted(sources.items()) if name != repo_id]),
    )
    return None if card == current else card.encode("utf-8")


def _source_license(api: Any, sources: list[Source]) -> dict[str, Any]:
    """The license fields of the (single) source repo's card at the exported commit; empty when there are several
    sources or the card is missing or unreadable."""
    from huggingface_hub.errors import HfHubHTTPError

    from .card import LICENSE_KEYS, card_metadata

    if len(sources) != 1:
        return {}
    try:
        path = api.hf_hub_download(sources[0].repo_id, "README.md", revision=sources[0].revision)
        with open(path, "rb") as handle:
            text = handle.read(1024 * 1024).decode("utf-8", errors="replace")
    except (HfHubHTTPError, OSError, ValueError):
        return {}
    meta = card_metadata(text)
    return {k: meta[k] for k in LICENSE_KEYS if isinstance(meta.get(k), str) and meta[k]}


def _download_text(api: Any, repo_id: str, path: str, commit: str) -> str:
    from huggingface_hub.errors import HfHubHTTPError

    try:
        return Path(api.hf_hub_download(repo_id, path, revision=commit)).read_text(encoding="utf-8")
    except HfHubHTTPError as exc:
        raise HubError(f"Reading {repo_id}@{commit[:12]}/{path} failed: {_first_line(exc)}") from exc


def _default_message(local: list[_Local]) -> str:
    if len(local) == 1:
        return f"Publish {local[0].manifest.export_format} export to {local[0].subfolder}/"
    return "Publish exports: " + ", ".join(f"{e.subfolder}/" for e in local)


def _description(local: list[_Local]) -> str:
    """The commit's (and a pull request's) description: one row per export, what a reviewer checks."""
    lines = [
        "| folder | format | task | max abs diff vs eager (atol) | size | source | hub-export |",
        "|---|---|---|---|---|---|---|",
    ]
    for exp in local:
        manifest = exp.manifest
        source = manifest.source
        origin = f"{source.repo_id}@{source.revision[:12]}" if source else "-"
        measured = [c.parity for c in manifest.components.values() if c.parity]
        worst = max(measured, key=lambda p: p.get("max_abs_diff", 0.0)) if measured else None
        parity = f"{worst['max_abs_diff']:.2e} ({worst['atol']:g})" if worst else "-"
        size = sum(entry.size for entry in manifest.files)
        version = manifest.created_with.get("hub_export", "?")
        row = [f"{exp.subfolder}/", manifest.export_format, manifest.task or "-", parity, _size(size), origin, version]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _size(nbytes: int) -> str:
    value = float(nbytes)
    for unit in ("B", "KB", "MB"):
        if value < 1000:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


# -- tags -----------------------------------------------------------------------------------------------------
def _tags(
    api: Any, repo_id: str, commit: str, tag: str | None, sources: list[Source], *, create_pr: bool
) -> tuple[str | None, list[str]]:
    """Create the requested tag, or ``source-<12 hex>`` tags; returns the tag on ``commit`` and notes."""
    wanted = [tag] if tag else [f"source-{s.revision[:12]}" for s in sources]
    notes: list[str] = []
    if not tag and wanted and create_pr:
        return None, [f"no {wanted[0]} tag on a pull request commit; it is tagged when published to a branch"]
    placed: list[str] = []
    for name in wanted:
        target = _tag_target(api, repo_id, name)
        if target is None:
            from huggingface_hub.errors import HfHubHTTPError

            try:
                api.create_tag(repo_id, tag=name, revision=commit)
                placed.append(name)
                continue
            except HfHubHTTPError as exc:
                if exc.response is None or exc.response.status_code != 409:
                    raise HubError(f"Tagging {commit[:12]} as {name!r} failed: {_first_line(exc)}") from exc
                target = _tag_target(api, repo_id, name)  # another publisher created it meanwhile
        if target == commit:
            placed.append(name)
        else:
            notes.append(f"tag {name!r} already points at {target}; left it in place")
    return (placed[0] if placed else None), notes


def _tag_target(api: Any, repo_id: str, name: str) -> str | None:
    refs = _call(api.list_repo_refs, repo_id)
    return next((t.target_commit for t in refs.tags if t.name == name), None)
