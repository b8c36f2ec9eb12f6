"""``ExportedComponent`` and ``ExportedModel``: an export in memory, on disk and on the Hub."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

from ._files import atomic_directory, file_entry, replace_directory
from ._versions import created_with
from .component import ExportedComponent
from .configs import AutoExportConfig, ExportConfig
from .errors import HubExportError
from .formats import ExportFormat, SafetyOptions, backend_for, parse_format
from .generation.loop import generate
from .hub.download import download_export
from .hub.publish import push_export
from .loading import LoadedExport, LocalFiles, load_export
from .manifest import MANIFEST_NAME, SIDE_FILE_ROLES, Manifest, Source

__all__ = ["ExportedModel"]


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
        backend = backend_for(self.export_format)
        return Manifest(
            export_format=self.export_format.value,
            created_with=created_with(backend.distributions),
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
            if self.model_config is not None:
                self.model_config.to_json_file(str(staged / "config.json"))
            if self.generation_config is not None:
                self.generation_config.to_json_file(str(staged / "generation_config.json"))
            side = [
                file_entry(staged, name, role) for name, role in SIDE_FILE_ROLES.items() if (staged / name).is_file()
            ]
            manifest = dataclasses.replace(self.manifest(), components=entries)
            manifest = manifest.with_files([*manifest.all_listed(), *side])
            manifest.write(staged)
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
        trust_native_code: bool = False,
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
            trust_native_code: Load native code in an export (the AOTInductor package of a compiled ``.pt2``), which
                runs when loaded. Only for exports whose publisher you trust.
            **runner_options: Passed to the backend runner (e.g. ``providers=`` for ONNX Runtime).

        Raises:
            ManifestError: ``export.json`` is missing or invalid.
            IntegrityError: A file does not match the manifest.
            UnsafeExportError: A file would run code or read outside the export when loaded (see
                the format's safety check, see docs/security.md).
        """
        options = SafetyOptions(
            trust_pickles=trust_pickles,
            allow_custom_domains=frozenset(allow_custom_domains),
            trust_native_code=bool(trust_native_code),
        )
        local = Path(pretrained_model_name_or_path) / subfolder
        if local.is_dir():
            source: Any = LocalFiles(local)
        else:
            source = download_export(
                str(pretrained_model_name_or_path),
                subfolder=subfolder,
                revision=revision,
                components=components,
                cache_dir=cache_dir,
                token=token,
                local_files_only=local_files_only,
                force_download=force_download,
                endpoint=endpoint,
                fetch_components=False,
            )
        loaded = load_export(source, components=components, lazy=lazy, options=options)
        return cls._from_loaded(loaded, device=device, runner_options=runner_options)

    @classmethod
    def _from_loaded(
        cls, loaded: LoadedExport, *, device: str | None = None, runner_options: dict[str, Any] | None = None
    ) -> ExportedModel:
        manifest = loaded.manifest
        return cls(
            parse_format(manifest.export_format),
            AutoExportConfig.from_dict({**manifest.config, "quantizer": None}),  # the recipe is recorded, not re-run
            loaded.components,
            model_config=loaded.model_config,
            generation_config=loaded.generation_config,
            source=manifest.source,
            device=device,
            generation=manifest.generation,
            runner_options=runner_options,
        )
