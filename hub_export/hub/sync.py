"""Keep a repo's exports in step with a source model: plan, export what is stale, publish it in ONE commit.

:func:`plan_sync` resolves the source revision to its commit and reads the target's ``export.json`` files (one
per format subfolder); it downloads no weights. A format is up to date when its manifest records the same
source commit (or a commit whose model files, ``config.json``, ``generation_config.json`` and ``*.safetensors``,
are identical: this is what stops a repo that receives its own exports from re-exporting forever) and the same
export config. :func:`sync` loads the model at the planned commit, exports and validates every stale format
(all or nothing), and publishes them together with ``parent_commit`` set to the target head read while
planning. When the target moved meanwhile it re-plans against the new head, keeping the same source commit, so
that two syncs of one source commit never make two commits: the loser finds the exports already there.

Besides the requested formats, every export the target holds that was made from the same source (whatever made it:
``sync``, ``hub-export export``/``push``, or Python, ``export_for_generation`` included) is kept in step in its own
subfolder, re-exported with the task, config and kind (graph or generation) its ``export.json`` records. A task
(``task=``, ``--task``) picks the model class that loads the source and, for generative tasks
(``text-generation``, ``text2text-generation``, ...), makes ``export_for_generation`` exports.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._progress import stage
from .._quiet import quietly
from ..errors import ConfigError, ExportError, HubError, ManifestError
from ..formats import ExportFormat, backend_for
from ..manifest import MANIFEST_NAME, Manifest
from .source import model_identity, resolve_revision
from .wanted import (
    Wanted,
    config_of,
    export_model,
    load_for_task,
    missing_packages,
    rebuild_quantizer,
    recorded,
    wanted_configs,
)

__all__ = [
    "FormatPlan",
    "SyncPlan",
    "SyncResult",
    "export_model",
    "load_sync_config",
    "plan_sync",
    "sync",
    "sync_config_schema",
]

MISSING, OLDER_SOURCE, CONFIG_CHANGED, UP_TO_DATE = "missing", "older source sha", "config changed", "up to date"
OLD_LAYOUT = "old layout"
KEPT = "kept"
_MAX_REPLANS = 3


@dataclass(frozen=True)
class FormatPlan:
    """What the plan found for one format.

    Attributes:
        export_format: The format.
        subfolder: Its folder in the target repo.
        config: The export config it must have (``ExportConfig.to_dict()``).
        status: ``up to date``, ``missing``, ``older source sha``, ``config changed``, ``old layout`` (made by an
            earlier version in another layout, exported again because ``relayout`` asked for it), or ``kept`` (an
            export that cannot be made again from its record, e.g. a calibrated quantization: left as it is).
        reason: One human line (which sha, which config fields).
        task: The task to export for (None: inferred from the source's config).
        generation: Made by ``export_for_generation`` (``generate()`` works on it).
        multi_token_decode: The generation export's decode takes several query tokens.
    """

    export_format: ExportFormat
    subfolder: str
    config: dict[str, Any]
    status: str
    reason: str
    task: str | None = None
    generation: bool = False
    multi_token_decode: bool = False

    @property
    def stale(self) -> bool:
        """Whether this format has to be exported again."""
        return self.status not in (UP_TO_DATE, KEPT)


@dataclass(frozen=True)
class SyncPlan:
    """The state of a target against a source commit.

    Attributes:
        source_repo: The source model repo.
        source_sha: The 40-hex commit the source revision resolved to.
        target_repo: The repo the exports go to.
        target_revision: Its branch.
        target_head: The branch head the plan was read at (None: the repo or branch does not exist yet).
        formats: One :class:`FormatPlan` per requested format.
    """

    source_repo: str
    source_sha: str
    target_repo: str
    target_revision: str
    target_head: str | None
    formats: tuple[FormatPlan, ...]

    @property
    def stale(self) -> tuple[FormatPlan, ...]:
        """The formats to export."""
        return tuple(f for f in self.formats if f.stale)

    @property
    def up_to_date(self) -> bool:
        """Whether nothing has to be exported."""
        return not self.stale

    def describe(self) -> list[str]:
        """One line per format."""
        return [
            f"{f.export_format.value} ({f.subfolder}/{', ' + f.task if f.task else ''}): {f.status}"
            + (f" - {f.reason}" if f.reason else "")
            for f in self.formats
        ]


@dataclass(frozen=True)
class SyncResult:
    """What a sync did.

    Attributes:
        plan: The (last) plan.
        updated: Whether a commit was made.
        commit_sha: The new commit, or the target head that already holds the exports.
        commit_url: Its URL (when a commit was made).
        pr_url: The pull request (``create_pr``).
        tag: The ``source-<12 hex>`` tag on the commit, if any.
        exports: Format -> {"subfolder", "parity", "atol", "bytes"} of what was exported.
        notes: Things to know (re-plans after a concurrent commit, ...).
    """

    plan: SyncPlan
    updated: bool
    commit_sha: str | None
    commit_url: str | None = None
    pr_url: str | None = None
    tag: str | None = None
    exports: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


# -- config ---------------------------------------------------------------------------------------------------
def _schema_path() -> Path:
    here = Path(__file__).resolve().parent.parent
    for candidate in (
        here / "schemas" / "sync-config.schema.json",
        here.parent / "schemas" / "sync-config.schema.json",
    ):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError("sync-config.schema.json not found: reinstall hub-export (the wheel ships it).")


def sync_config_schema() -> dict[str, Any]:
    """The JSON Schema of a sync config file."""
    return json.loads(_schema_path().read_text(encoding="utf-8"))


def load_sync_config(path: str | Path) -> dict[str, dict[str, Any]]:
    """Read a ``{format: {config fields}}`` file (JSON, or YAML for ``.yml``/``.yaml``) and validate it.

    Raises:
        ConfigError: The file cannot be parsed or does not satisfy ``schemas/sync-config.schema.json``.
    """
    import jsonschema

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"Cannot read sync config {path}: {exc}") from None
    try:
        if path.suffix.lower() in (".yml", ".yaml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as exc:  # noqa: BLE001 - json.JSONDecodeError or yaml.YAMLError
        raise ConfigError(f"Cannot parse sync config {path}: {(str(exc).splitlines() or [''])[0]}") from None
    data = {} if data is None else data
    errors = sorted(jsonschema.Draft202012Validator(sync_config_schema()).iter_errors(data), key=lambda e: list(e.path))
    if errors:
        where = "$" + "".join(f".{p}" for p in errors[0].absolute_path)
        raise ConfigError(f"{path}: {where}: {errors[0].message} (see schemas/sync-config.schema.json).")
    return data


# -- planning -------------------------------------------------------------------------------------------------
def _head(api: Any, repo_id: str, revision: str) -> tuple[str | None, set[str]]:
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        info = api.model_info(repo_id, revision=revision)
    except (RepositoryNotFoundError, RevisionNotFoundError):
        return None, set()
    except HfHubHTTPError as exc:
        raise HubError(f"Reading {repo_id}@{revision} failed: {(str(exc).splitlines() or [''])[0]}") from exc
    return info.sha, {s.rfilename for s in info.siblings or []}


def _config_changes(requested: dict[str, Any], recorded: dict[str, Any]) -> list[str]:
    """The config fields whose requested value differs from the export's record. A field left unset (None, or not
    given) asks for the backend's default, which the exporter resolves when it exports (ExecuTorch's generation
    export records ``external_data: True`` for None): any recorded value of it is that default, not a change."""
    return sorted(
        k
        for k in set(requested) | set(recorded)
        if requested.get(k) is not None and requested.get(k) != recorded.get(k)
    )


def _model_files(api: Any, repo_id: str, sha: str, cache: dict[str, Any]) -> Any:
    """:func:`~hub_export.hub.source.model_identity` of ``sha``, each commit read once per plan."""
    if sha not in cache:
        cache[sha] = model_identity(api, repo_id, sha)
    return cache[sha]


def _read_manifest(api: Any, repo_id: str, path: str, head: str) -> Manifest | None:
    from huggingface_hub.errors import HfHubHTTPError

    try:
        text = Path(api.hf_hub_download(repo_id, path, revision=head)).read_bytes()
        return Manifest.loads(text)
    except (HfHubHTTPError, ManifestError):
        return None


def _plan(
    api: Any,
    source: str,
    sha: str,
    target: str,
    target_revision: str,
    requested: dict[str, Wanted],
    relayout: bool = False,
) -> SyncPlan:
    head, files = _head(api, target, target_revision)
    same_files: dict[str, Any] = {}
    manifests: dict[str, Manifest | None] = {}
    for path in sorted(files):
        if head and path.endswith("/" + MANIFEST_NAME):
            manifests[path[: -len(MANIFEST_NAME) - 1]] = _read_manifest(api, target, path, head)
    wanted = dict(requested)
    for sub, found in manifests.items():
        if sub in wanted or found is None or found.source is None or found.source.repo_id != source:
            continue
        again = recorded(found)
        if again is not None:
            wanted[sub] = again
    plans = []
    for sub, want in wanted.items():
        fmt, config = want.export_format, want.config
        path = f"{sub}/{MANIFEST_NAME}"
        manifest = manifests.get(sub)
        generation = want.generation
        if generation is None:
            generation = manifest is not None and manifest.generation is not None
        task = want.task or (manifest.task if manifest is not None else None)

        def planned(status: str, reason: str) -> FormatPlan:
            return FormatPlan(fmt, sub, config, status, reason, task, generation, want.multi_token_decode)  # noqa: B023

        recipe = config.get("quantizer")
        missing = missing_packages(fmt)
        if want.recorded and missing:
            extra_name = backend_for(fmt).extra
            reason = f"{', '.join(missing)} not installed here; install hub-export[{extra_name}] to keep it in step"
            plans.append(planned(KEPT, reason))
            continue
        if want.recorded and recipe is not None and (not isinstance(recipe, dict) or rebuild_quantizer(recipe) is None):
            name = recipe.get("quantizer", "a quantizer") if isinstance(recipe, dict) else "a quantizer"
            reason = f"made with {name} on calibration data its record cannot rebuild; re-export it from Python"
            plans.append(planned(KEPT, reason))
            continue
        if manifest is None:
            status, reason = MISSING, f"no valid {path} in {target}@{target_revision}"
        elif manifest.export_format != fmt.value:
            status, reason = MISSING, f"{path} holds a {manifest.export_format} export"
        elif manifest.source is None or manifest.source.repo_id != source:
            status, reason = OLDER_SOURCE, f"{path} was not exported from {source}"
        elif manifest.source.revision != sha and (
            _model_files(api, source, sha, same_files) is None
            or _model_files(api, source, sha, same_files)
            != _model_files(api, source, manifest.source.revision, same_files)
        ):
            status, reason = OLDER_SOURCE, f"exported from {manifest.source.revision[:12]}, source is at {sha[:12]}"
        elif changed := _config_changes(config, manifest.config):
            status, reason = (
                CONFIG_CHANGED,
                "fields " + ", ".join(f"{k}: {manifest.config.get(k)!r} -> {config.get(k)!r}" for k in changed),
            )
        elif want.task is not None and manifest.task != want.task:
            status, reason = CONFIG_CHANGED, f"task: {manifest.task!r} -> {want.task!r}"
        elif generation != (manifest.generation is not None):
            made = "a generation export" if manifest.generation is not None else "a graph export"
            status, reason = CONFIG_CHANGED, f"{path} is {made}; task {task!r} needs the other kind"
        elif (outdated := backend_for(fmt).outdated(manifest)) is not None and relayout:
            status, reason = OLD_LAYOUT, f"made by an earlier version: {outdated}"
        else:
            status = UP_TO_DATE
            reason = (
                ""
                if manifest.source.revision == sha
                else (f"exported from {manifest.source.revision[:12]}, whose model files are identical")
            )
            if outdated is not None:
                reason = "; ".join(
                    filter(None, [reason, f"in an earlier layout ({outdated}): --relayout exports it again"])
                )
        plans.append(planned(status, reason))
    return SyncPlan(source, sha, target, target_revision, head, tuple(plans))


def plan_sync(
    source: str,
    formats: Sequence[str],
    *,
    target: str | None = None,
    revision: str = "main",
    target_revision: str = "main",
    configs: Mapping[str, Mapping[str, Any]] | None = None,
    source_sha: str | None = None,
    task: str | None = None,
    generation: bool = False,
    token: str | bool | None = None,
    endpoint: str | None = None,
    relayout: bool = False,
) -> SyncPlan:
    """Which formats of ``target`` are stale against ``source@revision`` (downloads manifests only).

    Args:
        source: Source model repo.
        formats: Formats to keep (``dynamo``, ``onnx``, ``executorch``, ``openvino``).
        target: Repo holding the exports (default: ``source``).
        revision: Source revision to follow.
        target_revision: Branch of the target holding the exports.
        configs: Per-format config overrides ``{format: {field: value}}`` (``dynamic`` defaults to True).
        source_sha: Use this source commit instead of resolving ``revision``.
        task: The task of the requested formats (see :data:`hub_export.tasks.TASKS`); None: as recorded by an
            existing export, else inferred from the source's config (a graph export).
        generation: The requested formats are ``export_for_generation`` exports.
        token: Hub token.
        endpoint: Hub endpoint.
        relayout: Export again the exports made by an earlier version in another layout (:meth:`Backend.outdated`:
            file names the runtimes' own tools do not load); without it they are up to date, and the plan says so.
    """
    from huggingface_hub import HfApi

    wanted = wanted_configs(formats, configs, task, generation)
    sha = source_sha or resolve_revision(source, revision, token=token, endpoint=endpoint)
    api = HfApi(endpoint=endpoint, token=token)
    return _plan(api, source, sha, target or source, target_revision, wanted, relayout)


# -- syncing --------------------------------------------------------------------------------------------------
def _worst_parity(manifest: Manifest) -> tuple[float | None, float | None]:
    worst: tuple[float | None, float | None] = (None, None)
    for name, component in manifest.components.items():
        parity = component.parity or {}
        diff, atol = parity.get("max_abs_diff"), parity.get("atol")
        if (refused := component.over_tolerance()) is not None:
            what = "" if name == "model" else f" of {name}"
            raise ExportError(f"parity check{what} failed: {refused}")
        if diff is not None and (worst[0] is None or diff > worst[0]):
            worst = (diff, atol)
    return worst


def _export_all(models: Any, plan: SyncPlan, directory: Path) -> dict[str, dict[str, Any]]:
    """Export, save and validate every stale subfolder; the first failure raises and nothing is kept.

    ``models(task)`` returns the source model loaded for a task (loaded once per model class)."""
    from .._files import verify_file

    done: dict[str, dict[str, Any]] = {}
    for item in plan.stale:
        fmt = item.export_format.value
        try:
            config = config_of(item.config)
            exported = export_model(
                models(item.task),
                item.export_format,
                config,
                task=item.task,
                generation=item.generation,
                multi_token_decode=item.multi_token_decode,
            )
            with stage(f"saving {item.subfolder}/"):
                folder = exported.save_pretrained(directory / item.subfolder)
                manifest = Manifest.read(folder)
                for entry in manifest.all_listed():
                    verify_file(folder / entry.path, entry)
            diff, atol = _worst_parity(manifest)
        except Exception as exc:  # noqa: BLE001 - any failure of one format stops the whole sync
            message = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            where = (
                "" if item.subfolder == backend_for(item.export_format).layout.subfolder else f" ({item.subfolder}/)"
            )
            raise ExportError(
                f"Exporting {fmt}{where} failed: {message} Nothing was published (a sync publishes all formats or none)."
            ) from exc
        done[item.subfolder] = {
            "format": fmt,
            "subfolder": item.subfolder,
            "task": manifest.task,
            "generation": manifest.generation is not None,
            "path": folder,
            "parity": diff,
            "atol": atol,
            "bytes": sum(e.size for e in manifest.all_listed()),
        }
    return done


@quietly
def sync(
    source: str,
    formats: Sequence[str],
    *,
    target: str | None = None,
    revision: str = "main",
    target_revision: str = "main",
    configs: Mapping[str, Mapping[str, Any]] | None = None,
    create_pr: bool = False,
    task: str | None = None,
    generation: bool = False,
    commit_message: str | None = None,
    private: bool | None = None,
    token: str | bool | None = None,
    endpoint: str | None = None,
    on_plan: Callable[[SyncPlan], None] | None = None,
    relayout: bool = False,
    output: str | Path | None = None,
) -> SyncResult:
    """Export the stale formats of ``target`` from ``source@revision`` and publish them in one commit.

    Args:
        source: Source model repo.
        formats: Formats to keep up to date.
        target: Repo receiving the exports (default: ``source``; its own export commits are recognised).
        revision: Source revision to follow (resolved once to a commit).
        target_revision: Branch of the target (the base of the pull request with ``create_pr``).
        configs: Per-format config overrides (see :func:`load_sync_config`).
        create_pr: Open a pull request instead of committing to ``target_revision``.
        task: The task of the requested formats (``text-generation`` makes ``export_for_generation`` exports; see
            :data:`hub_export.tasks.TASKS`); None: as an existing export records, else inferred from the config.
        generation: Make the requested formats ``export_for_generation`` exports (of the task inferred from the
            config when ``task`` is None).
        commit_message: Commit title.
        private: Visibility of the target repo when it has to be created.
        token: Hub token.
        endpoint: Hub endpoint.
        on_plan: Called with the plan before anything is downloaded or exported (the CLI prints it).
        relayout: As :func:`plan_sync`'s.
        output: Export the stale formats into ``output/<subfolder>`` and publish nothing (the export jobs of a
            fan-out workflow: the same plan, each job one format, one ``hub-export publish`` of them all).

    Returns:
        A :class:`SyncResult` (``updated=False`` when everything was up to date, nothing downloaded); its
        ``exports`` are keyed by subfolder.

    Raises:
        ExportError: A format failed to export or validate; nothing was published.
        HubError: The Hub refused, or the target kept moving after several re-plans.
    """
    from huggingface_hub import HfApi

    from .publish import publish

    api = HfApi(endpoint=endpoint, token=token)
    wanted = wanted_configs(formats, configs, task, generation)
    sha = resolve_revision(source, revision, token=token, endpoint=endpoint)
    target = target or source
    plan = _plan(api, source, sha, target, target_revision, wanted, relayout)
    if on_plan is not None:
        on_plan(plan)
    if plan.up_to_date:
        return SyncResult(plan, False, plan.target_head)
    loaded: dict[str | None, Any] = {}

    def models(wanted_task: str | None) -> Any:
        key = None
        if wanted_task is not None:
            from ..tasks import auto_class_name

            key = auto_class_name(wanted_task)[0]
        if key not in loaded:
            loaded[key] = load_for_task(source, sha, wanted_task, token=token, endpoint=endpoint)
        return loaded[key]

    notes: list[str] = []
    if output is not None:
        from .._files import check_export_folder

        for item in plan.stale:  # before the work, not after it
            check_export_folder(Path(output) / item.subfolder)
        exports = _export_all(models, plan, Path(output))
        return SyncResult(plan, False, plan.target_head, exports=exports)
    with tempfile.TemporaryDirectory(prefix="hub-export-sync-") as tmp:
        exports = _export_all(models, plan, Path(tmp))
        for attempt in range(1, _MAX_REPLANS + 1):
            todo = {f.subfolder: exports[f.subfolder]["path"] for f in plan.stale}
            message = commit_message or (
                f"Sync {', '.join(f'{f.subfolder}/' for f in plan.stale)} exports from {source}@{sha[:12]}"
            )
            try:
                result = publish(
                    target,
                    todo,
                    revision=target_revision,
                    create_pr=create_pr,
                    commit_message=message,
                    parent_commit=plan.target_head,
                    private=private,
                    token=token,
                    endpoint=endpoint,
                )
            except HubError:
                head, _ = _head(api, target, target_revision)
                if head == plan.target_head or attempt == _MAX_REPLANS:
                    raise
                notes.append(
                    f"{target}@{target_revision} moved to {head[:12] if head else None} while exporting: re-planned"
                )
                plan = _plan(api, source, sha, target, target_revision, wanted, relayout)  # same source commit
                if plan.up_to_date:
                    notes.append(f"another sync already published {source}@{sha[:12]}; nothing to commit")
                    return SyncResult(plan, False, plan.target_head, notes=tuple(notes))
                continue
            published = {
                sub: {k: v for k, v in info.items() if k != "path"}
                for sub, info in exports.items()
                if any(f.subfolder == sub for f in plan.stale)
            }
            return SyncResult(
                plan,
                result.changed,
                result.commit_sha,
                result.commit_url if result.changed else None,
                result.pr_url,
                result.tag,
                published,
                tuple(notes) + result.notes,
            )
    raise HubError(f"Gave up syncing {target}@{target_revision}: it kept moving.")  # pragma: no cover
