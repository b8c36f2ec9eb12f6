"""``ExportedModel.from_pretrained(model_repo, export="onnx")``: export a model repo on the fly, cached locally.

A repo that already holds an export of the format in the folder asked for (default: the format's folder,
``onnx/``, ``openvino/``, ...) is loaded as any export. Otherwise the model is exported here: its config and
safetensors weights are taken at the commit the revision resolves to (:func:`hub_export.hub.source.load_source`),
the task is read off the config (or given), a generative task is exported with ``export_for_generation`` and the
others with ``export`` on sample inputs built from the config, and the export is saved in the local export
cache, next to the Hugging Face cache::

    <HF_HUB_CACHE>/../hub_export/models--<org>--<name>/
        refs/<revision>                            # the commit the revision resolved to (for offline calls)
        <commit>/<format>-<task>-<digest>/         # one export; digest: the export config and the endpoint
            export.json, config.json, <format files>

The next call with the same arguments loads that folder: online it only resolves the revision (one request);
offline (``HF_HUB_OFFLINE=1`` or ``local_files_only=True``) it reads the commit from ``refs/`` and makes no
request at all. ``force_download=True`` exports again. ``HUB_EXPORT_CACHE`` moves the cache; ``cache_dir=`` (the
Hugging Face cache directory to use) puts it in ``<cache_dir>/hub_export``.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from ._cache import cache_root
from .configs import ExportConfig
from .errors import ConfigError, HubError, HubExportError, ManifestError
from .formats import ExportFormat, backend_for, parse_format
from .hub.download import download_export
from .loading import FileSource, LocalFiles
from .tasks import TASKS, auto_class_name, infer_task

__all__ = ["export_source"]

_HEX40 = re.compile(r"[0-9a-f]{40}")


def _export_config(export: Any, export_config: ExportConfig | None) -> ExportConfig:
    """The export config ``export=`` asks for: a format's default (``dynamic=True``: any batch and length), a
    config object, or ``True`` with ``export_config``."""
    if isinstance(export, ExportConfig):
        if export_config is not None:
            raise ConfigError("Pass the export config as export=<config> or export=True, export_config=<config>.")
        return export
    if export is True:
        if export_config is None:
            raise ConfigError(
                "export=True needs export_config=<OnnxConfig(...), OpenVINOConfig(...), ...> to say which format; "
                "or pass the format: export='onnx'."
            )
        return export_config
    if isinstance(export, (str, ExportFormat)):
        fmt = parse_format(export)
        if export_config is not None:
            if export_config.export_format is not fmt:
                raise ConfigError(f"export={fmt.value!r} with a {type(export_config).__name__}: pick one format.")
            return export_config
        return backend_for(fmt).config_class(dynamic=True)
    raise ConfigError(f"export= takes a format name, an export config or True; got {export!r}.")


def _digest(config: ExportConfig, endpoint: str) -> str:
    text = json.dumps({"config": config.to_dict(), "endpoint": endpoint.rstrip("/")}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _repo_folder(root: Path, repo_id: str) -> Path:
    return root / ("models--" + repo_id.replace("/", "--"))


def _resolve(
    repo_id: str, revision: str, folder: str, *, offline: bool, root: Path, token: Any, endpoint: str | None
) -> tuple[str, bool]:
    """The commit ``revision`` points at, and whether the repo holds ``<folder>/export.json`` there.

    Online: one ``model_info`` request (the file list comes with it). Offline: the commit recorded by an earlier
    call (or the revision itself when it is a commit), and False (the caller looks in its caches).
    """
    if _HEX40.fullmatch(revision) and offline:
        return revision, False
    refs = _repo_folder(root, repo_id) / "refs" / revision
    if offline:
        if not refs.is_file():
            raise HubError(
                f"Offline, and {repo_id}@{revision} was never resolved here: run once online (or pass the commit "
                "sha as revision=) so that the export made on the fly is cached."
            )
        return refs.read_text().strip(), False
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    try:
        info = HfApi(endpoint=endpoint, token=token).model_info(repo_id, revision=revision)
    except HfHubHTTPError as exc:
        raise HubError(f"Cannot resolve {repo_id}@{revision}: {(str(exc).splitlines() or [''])[0]}") from exc
    sha = info.sha or ""
    if not _HEX40.fullmatch(sha):
        raise HubError(f"The Hub answered {sha!r} for {repo_id}@{revision}, not a 40-hex commit sha.")
    if not _HEX40.fullmatch(revision):
        refs.parent.mkdir(parents=True, exist_ok=True)
        refs.write_text(sha)
    manifest = f"{folder}/export.json" if folder else "export.json"
    return sha, any(s.rfilename == manifest for s in info.siblings or ())


def _sample_inputs(model: Any, generative: bool) -> dict[str, Any]:
    """Sample inputs built from the model's config: a forward call's, or a prompt for ``generate``."""
    from .sample_inputs import dummy_inputs

    inputs = dummy_inputs(model)
    if generative:  # generate() builds the decoder side itself
        inputs = {k: v for k, v in inputs.items() if not k.startswith("decoder_")}
    return inputs


def _make_export(
    repo_id: str, sha: str, task: str | None, config: ExportConfig, target: Path, **hub: Any
) -> tuple[Path, str]:
    """Export the model of ``repo_id@sha`` for ``task`` into ``target``; returns the folder and the task."""
    import transformers
    from huggingface_hub import hf_hub_download

    from .hub.source import load_source

    config_path = hf_hub_download(
        repo_id, "config.json", revision=sha, token=hub["token"], endpoint=hub["endpoint"], cache_dir=hub["cache_dir"]
    )
    model_config = transformers.AutoConfig.from_pretrained(config_path, trust_remote_code=False)
    task = task or infer_task(model_config)
    auto, generative = auto_class_name(task, model_config)
    model = load_source(
        repo_id,
        revision=sha,
        model_class=getattr(transformers, auto),
        token=hub["token"],
        endpoint=hub["endpoint"],
        cache_dir=hub["cache_dir"],
    )
    exporter = backend_for(config.export_format).exporter_class()  # through the registry: no backend import
    inputs = _sample_inputs(model, generative)
    if generative:
        exported = exporter.export_for_generation(model, inputs, config=config)
    else:
        exported = exporter.export(model, inputs, config=config)
    exported.save_pretrained(target)
    return target, task


def export_source(
    repo_id: str,
    *,
    export: Any,
    export_config: ExportConfig | None = None,
    task: str | None = None,
    subfolder: str = "",
    revision: str | None = None,
    components: list[str] | None = None,
    cache_dir: str | Path | None = None,
    token: str | bool | None = None,
    local_files_only: bool = False,
    force_download: bool = False,
    endpoint: str | None = None,
) -> FileSource:
    """Where the export ``ExportedModel.from_pretrained(repo_id, export=...)`` loads is: the repo's own export of
    that format, or one made now (or earlier) in the local export cache. See the module docstring.

    Raises:
        ConfigError: ``export=`` names no format, or the task is unknown or cannot be inferred.
        HubError: The revision does not resolve, or offline with nothing cached for it.
        HubExportError: The repo's export in that folder is of another format.
    """
    from huggingface_hub import constants

    config = _export_config(export, export_config)
    fmt = config.export_format
    if task is not None and task not in TASKS:
        raise ConfigError(f"Unknown task {task!r}; known tasks: {', '.join(TASKS)}.")
    folder = (subfolder or backend_for(fmt).layout.subfolder).strip("/")
    local = Path(repo_id)
    if local.is_dir():  # a model folder on disk: an export of it in <folder>/, else one made now (not cached)
        if (local / folder / "export.json").is_file():
            return _same_format(LocalFiles(local / folder), fmt)
        raise HubExportError(
            f"{local} is a local folder without {folder}/export.json; export it with an exporter "
            "(export=... works with Hub model repos)."
        )
    offline = local_files_only or constants.is_offline_mode()
    root = cache_root(cache_dir)
    revision = revision or "main"
    used_endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
    sha, in_repo = _resolve(repo_id, revision, folder, offline=offline, root=root, token=token, endpoint=endpoint)
    hub: dict[str, Any] = {"token": token, "endpoint": endpoint, "cache_dir": cache_dir}
    repo_export: dict[str, Any] = {
        "subfolder": folder,
        "revision": sha,
        "components": components,
        "fetch_components": False,
        **hub,
    }
    if in_repo:
        return _same_format(
            download_export(repo_id, local_files_only=offline, force_download=force_download, **repo_export), fmt
        )
    key = f"{fmt.value}-{task or 'auto'}-{_digest(config, used_endpoint)}"
    target = _repo_folder(root, repo_id) / sha / key
    if (target / "export.json").is_file() and not force_download:
        return LocalFiles(target)
    if offline:
        try:  # the repo's own export, downloaded by an earlier online call
            return _same_format(download_export(repo_id, local_files_only=True, **repo_export), fmt)
        except (ManifestError, HubError):
            raise HubError(
                f"Offline, and no export of {repo_id}@{sha[:12]} for {fmt.value} is cached in {target.parent}: "
                "run once online to export it."
            ) from None
    _make_export(repo_id, sha, task, config, target, **hub)
    return LocalFiles(target)


def _same_format(source: Any, fmt: ExportFormat) -> FileSource:
    found = source.read_manifest().export_format
    if found != fmt.value:
        raise HubExportError(
            f"{source.label} holds a {found} export, not {fmt.value}; pass subfolder= naming a folder for the "
            f"{fmt.value} export (or none: the default is {backend_for(fmt).layout.subfolder}/)."
        )
    return source
