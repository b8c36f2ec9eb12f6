"""``ExportedComponent`` and ``ExportedModel``: an export in memory, on disk and on the Hub."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

from ._files import atomic_directory, file_entry, replace_directory, verify_file
from ._versions import created_with
from .configs import AutoExportConfig, ExportConfig
from .errors import HubExportError, ManifestError
from .formats import ExportFormat, parse_format
from .manifest import MANIFEST_NAME, ComponentEntry, Manifest, Source

__all__ = ["ExportedComponent", "ExportedModel", "ExportMetadata"]

#: What the exporter recorded about one component (signature, structures, dims, parity, files).
ExportMetadata = ComponentEntry

_SIDE_FILES = ("config.json", "generation_config.json")


def _exporter_class(export_format: ExportFormat) -> Any:
    from .exporters.auto import exporter_class

    return exporter_class(export_format)


class ExportedComponent:
    """One exported graph: the backend's program and the metadata recorded while tracing.

    Attributes:
        name: Component name (``model``, ``decode``, ...).
        export_format: Its format.
        program: The backend's program (``ExportedProgram``, ``onnx_ir.Model``, ...).
        metadata: Its :class:`ExportMetadata`.
    """

    def __init__(
        self,
        name: str,
        export_format: ExportFormat,
        program: Any,
        metadata: ComponentEntry,
        files_dir: Path | None = None,
    ) -> None:
        self.name = name
        self.export_format = parse_format(export_format)
        self.program = program
        self.metadata = metadata
        self._files_dir = files_dir  # set when loaded from disk: saving copies these verified files verbatim

    def __repr__(self) -> str:
        return f"ExportedComponent(name={self.name!r}, format={self.export_format.value!r}, program={type(self.program).__name__})"

    def runner(self, device: str | None = None, **options: Any) -> Any:
        """A runner executing this component on ``device``."""
        return (
            _exporter_class(self.export_format)
            .runner_class()
            .from_program(self.program, self.metadata, device, **options)
        )

    def save(self, directory: Path) -> ComponentEntry:
        """Write this component's files into ``directory``; returns its metadata with the file entries."""
        if self._files_dir is not None and self.metadata.files:
            relative = [f.path for f in self.metadata.files]
            for rel in relative:
                (directory / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(self._files_dir / rel, directory / rel)
        else:
            relative = _exporter_class(self.export_format).save_program(self.program, directory, self.name)
        return dataclasses.replace(self.metadata, files=tuple(file_entry(directory, rel) for rel in relative))


class ExportedModel:
    """An export: named components of one format, runnable with the original model's call.

    Attributes:
        export_format: The format of every component.
        config: The export config used.
        components: Component name -> :class:`ExportedComponent`.
        model_config: The model's ``PretrainedConfig`` (saved as ``config.json``), or None.
        generation_config: The model's ``GenerationConfig``, or None.
        source: Where the model came from on the Hub, or None.
        device: The device runners execute on (None: the backend's default).
    """

    def __init__(
        self,
        export_format: ExportFormat | str,
        config: ExportConfig,
        components: dict[str, ExportedComponent],
        *,
        model_config: Any = None,
        generation_config: Any = None,
        source: Source | None = None,
        device: str | None = None,
        generation: dict[str, Any] | None = None,
        runner_options: dict[str, Any] | None = None,
    ) -> None:
        self.export_format = parse_format(export_format)
        self.config = config
        self.components = dict(components)
        self.model_config = model_config
        self.generation_config = generation_config
        self.source = source
        self.device = device
        self.generation = generation
        self.runner_options = dict(runner_options or {})
        self._runners: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"ExportedModel(format={self.export_format.value!r}, components={list(self.components)}, device={self.device!r})"

    # -- running --------------------------------------------------------------------------------------------
    @property
    def program(self) -> Any:
        """The program of a single-component export."""
        return self._single().program

    @property
    def runners(self) -> dict[str, Any]:
        """Component name -> runner on :attr:`device` (built on first access)."""
        for name, component in self.components.items():
            if name not in self._runners:
                self._runners[name] = component.runner(self.device, **self.runner_options)
        return self._runners

    def to(self, device: str | None) -> ExportedModel:
        """Run on ``device`` from now on (runners are rebuilt lazily); returns self."""
        if device != self.device:
            self.device = device
            self._runners.clear()
        return self

    def __call__(self, **kwargs: Any) -> Any:
        """Run a single-component export with the model's kwargs; returns the model's ModelOutput class."""
        name = self._single().name
        if name not in self._runners:
            self._runners[name] = self.components[name].runner(self.device, **self.runner_options)
        return self._runners[name](**kwargs)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        """Generate token ids with an export made by ``export_for_generation``."""
        if self.generation is None:
            raise HubExportError(
                "generate() needs an export made with exporter.export_for_generation(model, inputs, config=...); "
                f"this one has components {list(self.components)}."
            )
        from .generation.loop import generate

        return generate(self, *args, **kwargs)

    def _single(self) -> ExportedComponent:
        if len(self.components) != 1:
            raise HubExportError(
                f"This export has components {list(self.components)}; use .components[name] or .runners[name]."
            )
        return next(iter(self.components.values()))

    # -- saving ---------------------------------------------------------------------------------------------
    def manifest(self) -> Manifest:
        """The manifest of this export (components without files until saved)."""
        return Manifest(
            export_format=self.export_format.value,
            created_with=created_with(self.export_format.value),
            config=self.config.to_dict(),
            components={name: c.metadata for name, c in self.components.items()},
            source=self.source,
            generation=self.generation,
        )

    def save_pretrained(self, save_directory: str | Path) -> Path:
        """Write every component's files, ``export.json``, ``config.json`` [and ``generation_config.json``].

        The export is written to a temporary folder next to ``save_directory`` and moved into place only when
        complete: a failure leaves a previous export in ``save_directory`` intact and loadable.

        Raises:
            HubExportError: ``save_directory`` is a non-empty folder that is not an export.
        """
        target = Path(save_directory)
        if target.exists() and (
            not target.is_dir() or (any(target.iterdir()) and not (target / MANIFEST_NAME).is_file())
        ):
            raise HubExportError(
                f"{target} exists and is not a hub_export export folder; save into an empty or new folder "
                "(one export per folder, e.g. <model>/onnx)."
            )
        staged = atomic_directory(target)
        try:
            entries = {name: component.save(staged) for name, component in self.components.items()}
            manifest = dataclasses.replace(self.manifest(), components=entries)
            manifest.write(staged)
            if self.model_config is not None:
                self.model_config.to_json_file(str(staged / "config.json"))
            if self.generation_config is not None:
                self.generation_config.to_json_file(str(staged / "generation_config.json"))
            replace_directory(staged, target)
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise
        for name, component in self.components.items():
            component.metadata = entries[name]
            component._files_dir = target.resolve()
        return target

    def push_to_hub(self, repo_id: str, **kwargs: Any) -> Any:
        """Publish this export as one commit in ``repo_id`` (see :func:`hub_export.hub.publish.push_export`)."""
        from .hub.publish import push_export

        return push_export(self, repo_id, **kwargs)

    # -- loading --------------------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(
        cls,
        pretrained_model_name_or_path: str | Path,
        *,
        subfolder: str = "",
        revision: str | None = None,
        components: list[str] | None = None,
        device: str | None = None,
        lazy: bool = False,
        cache_dir: str | Path | None = None,
        token: str | bool | None = None,
        local_files_only: bool = False,
        force_download: bool = False,
        endpoint: str | None = None,
        trust_pickles: bool = False,
        allow_custom_domains: tuple[str, ...] = (),
        **runner_options: Any,
    ) -> ExportedModel:
        """Load an export from a local folder or a Hub repo.

        Reads ``export.json`` first and validates it; only then opens (or downloads) the files it lists for the
        requested components, each checked against its size and sha256.

        Args:
            pretrained_model_name_or_path: A local export folder or a Hub repo id.
            subfolder: Folder of the export inside it (``onnx``, ``openvino``, ...).
            revision: Hub branch, tag or commit sha.
            components: Load only these components (all by default).
            device: Where runners execute (``cpu``, ``cuda``, ``xpu``, ...).
            lazy: Defer each component's download to its first use (Hub only).
            cache_dir, token, local_files_only, force_download: As in huggingface_hub.
            endpoint: Hub endpoint (default ``HF_ENDPOINT``), e.g. the embedded hub's URL.
            trust_pickles: Load ``.pt2`` archives whose pickles reference globals outside the tensor
                allow-list. DANGEROUS: such a file runs arbitrary code when loaded; only for files you made.
            allow_custom_domains: ONNX operator domains to accept besides the standard ones.
            **runner_options: Passed to the backend runner (e.g. ``providers=`` for ONNX Runtime).

        Raises:
            ManifestError: ``export.json`` is missing or invalid.
            IntegrityError: A file does not match the manifest.
            UnsafeExportError: A file would run code or read outside the export when loaded (see
                :mod:`hub_export.safety`).
        """
        safety = {"trust_pickles": trust_pickles, "allow_custom_domains": tuple(allow_custom_domains)}
        local = Path(pretrained_model_name_or_path) / subfolder
        if local.is_dir():
            return load_directory(local, components=components, device=device, runner_options=runner_options, **safety)
        from .hub.download import load_from_hub

        return load_from_hub(
            str(pretrained_model_name_or_path),
            subfolder=subfolder,
            revision=revision,
            components=components,
            device=device,
            lazy=lazy,
            cache_dir=cache_dir,
            token=token,
            local_files_only=local_files_only,
            force_download=force_download,
            endpoint=endpoint,
            runner_options=runner_options,
            **safety,
        )


def _load_side_configs(directory: Path) -> tuple[Any, Any]:
    model_config = generation_config = None
    if (directory / "config.json").is_file():
        from transformers import AutoConfig

        model_config = AutoConfig.from_pretrained(str(directory), trust_remote_code=False)
    if (directory / "generation_config.json").is_file():
        from transformers import GenerationConfig

        generation_config = GenerationConfig.from_pretrained(str(directory))
    return model_config, generation_config


def load_component(
    directory: Path,
    name: str,
    entry: ComponentEntry,
    export_format: ExportFormat,
    *,
    trust_pickles: bool = False,
    allow_custom_domains: tuple[str, ...] = (),
) -> ExportedComponent:
    """Verify a component's files against the manifest, run the format's safety checks, then load its program."""
    from .safety import check_component

    for file in entry.files:
        verify_file(directory / file.path, file)
    check_component(
        export_format, directory, entry, trust_pickles=trust_pickles, allow_custom_domains=allow_custom_domains
    )
    program = _exporter_class(export_format).load_program(directory, name, entry)
    return ExportedComponent(name, export_format, program, entry, files_dir=directory.resolve())


def load_directory(
    directory: Path,
    *,
    components: list[str] | None = None,
    device: str | None = None,
    runner_options: dict[str, Any] | None = None,
    manifest: Manifest | None = None,
    trust_pickles: bool = False,
    allow_custom_domains: tuple[str, ...] = (),
) -> ExportedModel:
    """Load an export folder: manifest first (validated, paths checked), then the listed files."""
    directory = Path(directory)
    manifest = manifest or Manifest.read(directory)
    fmt = parse_format(manifest.export_format)
    names = list(manifest.components) if components is None else list(components)
    missing = [n for n in names if n not in manifest.components]
    if missing:
        raise ManifestError(f"No component(s) {missing} in this export; it has {sorted(manifest.components)}.")
    safety = {"trust_pickles": trust_pickles, "allow_custom_domains": tuple(allow_custom_domains)}
    loaded = {name: load_component(directory, name, manifest.components[name], fmt, **safety) for name in names}
    return assemble_export(manifest, loaded, directory, device=device, runner_options=runner_options)


def assemble_export(
    manifest: Manifest,
    components: dict[str, ExportedComponent],
    directory: Path,
    *,
    device: str | None = None,
    runner_options: dict[str, Any] | None = None,
) -> ExportedModel:
    """The ``ExportedModel`` of loaded (or lazily loading) components, with the side configs of ``directory``."""
    model_config, generation_config = _load_side_configs(directory)
    return ExportedModel(
        parse_format(manifest.export_format),
        AutoExportConfig.from_dict(_config_without_quantizer(manifest.config)),
        components,
        model_config=model_config,
        generation_config=generation_config,
        source=manifest.source,
        device=device,
        generation=manifest.generation,
        runner_options=runner_options,
    )


def _config_without_quantizer(config: dict[str, Any]) -> dict[str, Any]:
    # a quantizer is recorded as its recipe (plain data); the loaded export does not re-run it
    return {**config, "quantizer": None}
