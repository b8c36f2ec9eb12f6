"""Loading an export, from a local folder or a Hub repo alike: manifest first, then only the files it lists.

One loader serves both places through a :class:`FileSource`: :class:`LocalFiles` for a folder, and
:class:`hub_export.hub.download.HubFiles` for a repo (downloads through huggingface_hub's cache). The order is
the same for both and is what makes a hostile export harmless:

1. ``export.json`` is read (stat-checked and size-bounded first) and validated (:class:`~hub_export.manifest.Manifest`),
   its paths checked (no symlink, nothing outside the folder) and every file mapped to its role
   (:meth:`~hub_export.manifest.Manifest.roles`: a file the format does not know is refused);
2. a component's files are fetched and each checked against its size and sha256;
3. the format's safety check runs on them (``Backend.check_files``);
4. only then does the backend parse them (``Backend.load_program``).

With ``lazy=True`` steps 2-4 run the first time a component's program is needed.
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ._bounded import loads_bounded_json, read_bounded
from ._files import verify_file
from .component import ExportedComponent
from .errors import ManifestError
from .formats import SafetyOptions, backend_for
from .manifest import ComponentEntry, FileEntry, Manifest
from .preprocessing import listed_preprocessing

__all__ = ["FileSource", "LoadedExport", "LocalFiles", "load_export", "verify_export"]

#: Side configs of schema-version-1 manifests (which do not list them) are read only up to this size.
_MAX_UNLISTED_CONFIG_BYTES = 4 * 1024 * 1024
_SIDE_CONFIGS = ("config.json", "generation_config.json")


class FileSource(Protocol):
    """Where an export's files are, and how to make them present and verified.

    Attributes:
        directory: The folder holding the export's files once fetched.
        label: How errors name the export (a folder, or ``repo@commit/subfolder``).
    """

    directory: Path
    label: str

    def read_manifest(self) -> Manifest:
        """The validated manifest, its paths checked against :attr:`directory`."""

    def fetch(self, entries: Iterable[FileEntry]) -> None:
        """Make these files present in :attr:`directory` and check each against its size and sha256."""


class LocalFiles:
    """An export folder on disk."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.label = str(self.directory)

    def read_manifest(self) -> Manifest:
        """``export.json`` of the folder (see :meth:`Manifest.read`)."""
        return Manifest.read(self.directory)

    def fetch(self, entries: Iterable[FileEntry]) -> None:
        """Check each file against its manifest entry (the files are already here).

        Raises:
            IntegrityError: A file is missing or its size or sha256 differs.
        """
        for entry in entries:
            verify_file(self.directory / entry.path, entry)


@dataclass
class LoadedExport:
    """What :func:`load_export` read: the manifest, the components and the model's configs.

    Attributes:
        manifest: The validated manifest.
        components: Component name -> :class:`~hub_export.component.ExportedComponent` (lazy or loaded).
        model_config: The model's ``PretrainedConfig`` (``config.json``), or None.
        generation_config: The model's ``GenerationConfig`` (``generation_config.json``), or None.
        source: Where the files are.
    """

    manifest: Manifest
    components: dict[str, ExportedComponent]
    model_config: Any
    generation_config: Any
    source: FileSource


def load_export(
    source: FileSource,
    *,
    components: list[str] | None = None,
    lazy: bool = False,
    options: SafetyOptions | None = None,
) -> LoadedExport:
    """Load an export from ``source`` (see the module docstring for the order of the checks).

    Args:
        source: :class:`LocalFiles` or :class:`hub_export.hub.download.HubFiles`.
        components: Load only these components (by default all but the programs only other runtimes run:
            :meth:`~hub_export.manifest.Manifest.loaded_components`).
        lazy: Defer each component's files until its program is first needed.
        options: What the user trusts (:class:`~hub_export.formats.SafetyOptions`).

    Raises:
        ManifestError: ``export.json`` is missing or invalid, lists an unknown file, or a component does not exist.
        IntegrityError: A file does not match the manifest.
        UnsafeExportError: A file would run code or read outside the export when loaded.
    """
    options = options or SafetyOptions()
    manifest = source.read_manifest()
    manifest.roles()  # every listed file is one the format writes, under its exact name
    names = manifest.loaded_components() if components is None else list(components)
    missing = [n for n in names if n not in manifest.components]
    if missing:
        raise ManifestError(f"No component(s) {missing} in this export; it has {sorted(manifest.components)}.")
    model_config, generation_config = _side_configs(manifest, source)
    loaded = {}
    for name in names:
        entry = manifest.components[name]
        loader = functools.partial(_load_program, source, manifest.export_format, name, entry, options)
        component = ExportedComponent(name, manifest.export_format, None, entry, loader=loader)
        if not lazy:
            component.program  # noqa: B018 - fetch, verify, check and load now
        loaded[name] = component
    return LoadedExport(manifest, loaded, model_config, generation_config, source)


def verify_export(source: FileSource, components: list[str] | None = None) -> list[FileEntry]:
    """Fetch and verify every file of an export (or of some components, with the side files); returns the entries.

    Raises:
        ManifestError, IntegrityError: As :func:`load_export`.
        UnsafeExportError: A tokenizer or processor file names remote code or is not valid data.
    """
    manifest = source.read_manifest()
    manifest.roles()
    entries = manifest.component_files(components) + manifest.side_files()
    source.fetch(entries)
    listed_preprocessing(source.directory, manifest)  # tokenizer and processor files are checked as data
    return entries


def _load_program(
    source: FileSource, export_format: str, name: str, entry: ComponentEntry, options: SafetyOptions
) -> tuple[Any, Path]:
    source.fetch(entry.files)
    backend = backend_for(export_format)
    if backend.check_files is not None:
        backend.check_files(source.directory, name, entry, options)
    return backend.load_program(source.directory, name, entry, options), source.directory.resolve()


def _side_configs(manifest: Manifest, source: FileSource) -> tuple[Any, Any]:
    """The model's configs: listed (and so verified) ones, or, for a version-1 manifest, plain files of bounded size.

    Each is read with a byte budget and parsed as bounded JSON (an object) before transformers reads it, and
    whatever transformers raises on it becomes a :class:`ManifestError` naming the file.
    """
    listed = {f.path: f for f in manifest.side_files()}
    present = []
    for name in _SIDE_CONFIGS:
        if name in listed:
            source.fetch([listed[name]])
            present.append(name)
        elif manifest.schema_version == 1 and _plain_file(source.directory / name):
            present.append(name)
    for name in present:
        data = read_bounded(source.directory / name, _MAX_UNLISTED_CONFIG_BYTES, name, error=ManifestError)
        if not isinstance(
            loads_bounded_json(data, name, max_containers=100_000, max_depth=64, error=ManifestError), dict
        ):
            raise ManifestError(f"{name}: not a JSON object.")
    model_config = generation_config = None
    try:
        if "config.json" in present:
            from transformers import AutoConfig

            model_config = AutoConfig.from_pretrained(str(source.directory), trust_remote_code=False)
        if "generation_config.json" in present:
            from transformers import GenerationConfig

            generation_config = GenerationConfig.from_pretrained(str(source.directory))
    except Exception as exc:  # noqa: BLE001 - transformers raises ValueError, KeyError, OSError... on a bad config
        name = "generation_config.json" if model_config is not None or "config.json" not in present else "config.json"
        raise ManifestError(f"{name}: transformers cannot read it ({type(exc).__name__}: {str(exc)[:200]}).") from None
    return model_config, generation_config


def _plain_file(path: Path) -> bool:
    """A regular file of bounded size; a symlink counts only as a huggingface_hub cache snapshot's link into the
    ``blobs/`` folder of the same cached repo (``<repo>/snapshots/<commit>/...`` -> ``<repo>/blobs/<id>``)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(info.st_mode):
        target = Path(os.path.realpath(path))
        snapshots = next((p for p in path.absolute().parents if p.name == "snapshots"), None)
        if snapshots is None or target.parent != snapshots.parent.resolve() / "blobs":
            raise ManifestError(f"$: {path.name} is a symlink out of the export folder; refusing to read it.")
        info = os.stat(target)
    if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_UNLISTED_CONFIG_BYTES:
        raise ManifestError(f"$: {path.name} is not a regular file of at most {_MAX_UNLISTED_CONFIG_BYTES} bytes.")
    return True
