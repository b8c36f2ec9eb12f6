"""Provenance: load a source model from the Hub pinned to one commit, and remember which.

:func:`load_source` resolves the requested revision to its 40-hex commit *before* downloading, downloads the
config, generation config, safetensors weights and preprocessing files (tokenizer, chat template, processor
configs) of exactly that commit (never pickled weights, never remote code), loads the model from that snapshot
and attaches a :class:`~hub_export.manifest.Source` to it. Exporters copy it into the export, so ``export.json``
records the commit the export was made from. :func:`source_of` also recognises a model loaded with transformers'
own ``from_pretrained(repo_id)`` (the commit its cache resolved), and :func:`preprocessing_of` finds the
preprocessing files of the folder or commit a model was loaded from.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .._progress import stage
from ..errors import HubError
from ..manifest import Source
from ..preprocessing import PREPROCESSING_FILES, read_preprocessing

__all__ = [
    "SOURCE_ATTRIBUTE",
    "SOURCE_PATTERNS",
    "load_model_folder",
    "load_source",
    "model_identity",
    "preprocessing_of",
    "resolve_revision",
    "source_of",
]

#: Attribute of a loaded model holding its :class:`Source` (read by ``HfExporter.export``).
SOURCE_ATTRIBUTE = "_hub_export_source"
#: What is downloaded from the source repo: configs, safetensors weights and preprocessing files (data only).
SOURCE_PATTERNS = (
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "model.safetensors.index.json",
    *PREPROCESSING_FILES,
)
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")

_HEX40 = re.compile(r"[0-9a-f]{40}")
_AUTO_CLASSES = (
    "AutoModelForCausalLM",
    "AutoModelForSeq2SeqLM",
    "AutoModelForSpeechSeq2Seq",
    "AutoModelForSequenceClassification",
    "AutoModelForTokenClassification",
    "AutoModelForQuestionAnswering",
    "AutoModelForMaskedLM",
    "AutoModelForImageClassification",
    "AutoModelForImageTextToText",
    "AutoModelForAudioClassification",
    "AutoModelForCTC",
    "AutoModel",
)
_DEFAULT_ENDPOINT = "https://huggingface.co"


def resolve_revision(
    repo_id: str, revision: str = "main", *, token: str | bool | None = None, endpoint: str | None = None
) -> str:
    """The 40-hex commit ``revision`` (branch, tag, ``refs/pr/N`` or sha) points at now.

    Raises:
        HubError: The repo or revision does not exist.
    """
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    try:
        sha = HfApi(endpoint=endpoint, token=token).model_info(repo_id, revision=revision).sha
    except HfHubHTTPError as exc:
        raise HubError(f"Cannot resolve {repo_id}@{revision}: {(str(exc).splitlines() or [''])[0]}") from exc
    if not sha or not _HEX40.fullmatch(sha):
        raise HubError(f"The Hub answered {sha!r} for {repo_id}@{revision}, not a 40-hex commit sha.")
    return sha


def load_source(
    repo_id: str,
    *,
    revision: str = "main",
    model_class: Any = None,
    token: str | bool | None = None,
    endpoint: str | None = None,
    **from_pretrained_kwargs: Any,
) -> Any:
    """Load ``repo_id`` at the commit ``revision`` resolves to, recording that commit on the model.

    Args:
        repo_id: The source model repo.
        revision: Branch, tag, ``refs/pr/N`` or commit sha.
        model_class: The class to load with (default: the ``AutoModel*`` class matching ``config.architectures``).
        token: Hub token.
        endpoint: Hub endpoint (defaults to ``HF_ENDPOINT``).
        **from_pretrained_kwargs: Passed to ``from_pretrained`` (``torch_dtype``, ``cache_dir``, ...);
            ``trust_remote_code`` is refused.

    Returns:
        The model (in eval mode), with ``model._hub_export_source`` set.

    Raises:
        HubError: The revision does not resolve, or it has no safetensors weights.
    """
    from huggingface_hub import constants, snapshot_download

    if from_pretrained_kwargs.pop("trust_remote_code", False):
        raise HubError(
            "load_source never runs code from the Hub: drop trust_remote_code (exports need in-library models)."
        )
    sha = resolve_revision(repo_id, revision, token=token, endpoint=endpoint)
    cache_dir = from_pretrained_kwargs.pop("cache_dir", None)
    with stage(f"downloading {repo_id}@{sha[:12]}"):
        snapshot = Path(
            snapshot_download(
                repo_id,
                revision=sha,
                allow_patterns=list(SOURCE_PATTERNS),
                cache_dir=cache_dir,
                token=token,
                endpoint=endpoint,
            )
        )
    if not (snapshot / "config.json").is_file():
        raise HubError(f"{repo_id}@{sha[:12]} has no config.json; it is not a transformers model repo.")
    if not any(snapshot.glob("*.safetensors")):
        raise HubError(
            f"{repo_id}@{sha[:12]} has no *.safetensors weights; hub_export does not load pickled (.bin) weights. "
            "Convert the repo to safetensors first."
        )
    with stage(f"loading {repo_id}"):
        model = load_model_folder(snapshot, model_class, repo_id, **from_pretrained_kwargs)
    used = endpoint or constants.ENDPOINT
    source = Source(repo_id, sha, revision, None if used.rstrip("/") == _DEFAULT_ENDPOINT else used.rstrip("/"))
    setattr(model, SOURCE_ATTRIBUTE, source)
    return model


def model_identity(api: Any, repo_id: str, sha: str) -> frozenset[tuple[str, str]] | None:
    """What makes two commits of ``repo_id`` the same source model: ``(path, blob id)`` of the root files
    :func:`load_source` reads (:data:`SOURCE_PATTERNS`), ``config.json`` by its content less the keys that a
    publish adds for the formats' own tools (``Backend.root_config_keys``: a repo that receives its own exports gets
    them). None when the commit cannot be read (history rewritten, another endpoint): never the same as another.

    ``sync`` and ``publish`` take exports made from commits of equal identity as made from the same source.
    """
    import fnmatch
    import hashlib
    import json

    from huggingface_hub.errors import HfHubHTTPError

    from ..formats import backends

    try:
        info = api.model_info(repo_id, revision=sha, files_metadata=True)
        files = {
            s.rfilename: s.blob_id
            for s in info.siblings or []
            if "/" not in s.rfilename and any(fnmatch.fnmatch(s.rfilename, p) for p in SOURCE_PATTERNS)
        }
        if "config.json" in files:
            config = json.loads(Path(api.hf_hub_download(repo_id, "config.json", revision=sha)).read_bytes())
            added = {key for backend in backends().values() for key in backend.root_config_keys}
            if isinstance(config, dict):
                config = {key: value for key, value in config.items() if key not in added}
            files["config.json"] = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
    except (HfHubHTTPError, OSError, ValueError):
        return None
    return frozenset(files.items())


def load_model_folder(folder: Path, model_class: Any = None, name: str | None = None, **kwargs: Any) -> Any:
    """``model_class`` (default: the auto class of the config's architecture) loaded from a model folder, in eval
    mode; a model transformers cannot load as asked becomes one line saying what to do.

    Raises:
        ExportError: The model needs custom code (never run), or ``model_class`` has no head for it (the message
            names the tasks it has).
    """
    from ..errors import ExportError

    name = name or str(folder)
    config = _read_config(folder)
    remote = config.get("auto_map")
    if remote:
        code = ", ".join(sorted({str(v if isinstance(v, str) else v[0]) for v in remote.values()}))[:200]
        raise ExportError(
            f"{name} needs code of its own ({code}, named by auto_map in config.json), which hub_export never runs: "
            "load the model yourself with transformers (trust_remote_code=True, after reading that code) and export "
            "it from Python with an exporter."
        )
    try:
        cls = model_class or _model_class(folder)
        return cls.from_pretrained(str(folder), **kwargs).eval()
    except ValueError as exc:
        text = str(exc)
        if "does not recognize this architecture" in text or "Unrecognized model" in text:
            raise ExportError(
                f"{name} is a {config.get('model_type')!r} model, which this transformers does not know: upgrade "
                "transformers, or export a model of a type it ships."
            ) from exc
        if "Unrecognized configuration class" in text and model_class is not None:
            from ..tasks import tasks_for

            kinds = ", ".join(tasks_for(folder)) or "none of hub_export's tasks"
            raise ExportError(
                f"{name} ({config.get('model_type')}) has no {model_class.__name__.removeprefix('AutoModelFor')} "
                f"head for this task; its config has: {kinds}.",
                cli_message=f"{name} ({config.get('model_type')}) has no head for this --task; pass one it has: "
                f"{kinds}.",
            ) from exc
        raise


def _read_config(folder: Path) -> dict[str, Any]:
    import json

    try:
        data = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _model_class(snapshot: Path) -> Any:
    """The ``AutoModel*`` class whose mapping gives the config's first architecture."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(str(snapshot), trust_remote_code=False)
    architectures = list(getattr(config, "architectures", None) or [])
    if not architectures:
        return transformers.AutoModel
    wanted = architectures[0]
    for name in _AUTO_CLASSES:
        auto = getattr(transformers, name, None)
        mapping = getattr(auto, "_model_mapping", None)
        if mapping is None:
            continue
        try:
            found = mapping[type(config)]
        except KeyError:
            continue
        for candidate in found if isinstance(found, (tuple, list)) else (found,):
            if getattr(candidate, "__name__", None) == wanted:
                return auto
    direct = getattr(transformers, wanted, None)
    if isinstance(direct, type) and issubclass(direct, transformers.PreTrainedModel):
        return direct
    raise HubError(f"No transformers model class for architecture {wanted!r}; pass model_class=.")


def _endpoint_field(endpoint: str | None) -> str | None:
    from huggingface_hub import constants

    used = (endpoint or constants.ENDPOINT).rstrip("/")
    return None if used == _DEFAULT_ENDPOINT else used


def source_of(model: Any) -> Source | None:
    """Where ``model`` came from on the Hub: the :class:`Source` :func:`load_source` recorded, else, for a model
    loaded with transformers' ``from_pretrained(repo_id)``, the commit the huggingface_hub cache resolved ``main``
    to (None for a local folder or a model built in memory)."""
    recorded = getattr(model, SOURCE_ATTRIBUTE, None)
    if recorded is not None:
        return recorded
    name = str(getattr(getattr(model, "config", None), "_name_or_path", "") or "")
    if not _REPO_ID.fullmatch(name) or Path(name).exists():
        return None
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(name, "config.json", revision="main")
    if not isinstance(cached, str) or not _HEX40.fullmatch(Path(cached).parent.name):
        return None
    return Source(name, Path(cached).parent.name, "main", _endpoint_field(None))


def preprocessing_of(model: Any, source: Source | None = None) -> dict[str, bytes]:
    """The preprocessing files (tokenizer, chat template, processor configs) of the folder or Hub commit ``model``
    was loaded from, by name, each read bounded and checked as data; empty for a model built in memory.

    A Hub source's files are taken from the huggingface_hub cache, downloaded (small files only) when missing.

    Raises:
        UnsafeExportError: A file names remote code, is not valid data or is a symlink out of its folder.
    """
    name = str(getattr(getattr(model, "config", None), "_name_or_path", "") or "")
    if name and Path(name).is_dir():
        return read_preprocessing(name)
    source = source or source_of(model)
    if source is None:
        return {}
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    endpoint = source.endpoint
    for local_only in (False, True):
        try:
            folder = snapshot_download(
                source.repo_id,
                revision=source.revision,
                allow_patterns=list(PREPROCESSING_FILES),
                endpoint=endpoint,
                local_files_only=local_only,
            )
        except (HfHubHTTPError, LocalEntryNotFoundError, OSError):
            continue
        return read_preprocessing(folder)
    return {}
