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


def exported_model_class(generation: dict[str, Any] | None) -> type[ExportedModel]:
    """The class of an export with this generation plan: :class:`ExportedModel` without one, else the
    ``GenerationMixin`` class of its kind (see :func:`hub_export.tasks.class_for_plan`)."""
    if not generation:
        return ExportedModel
    from .tasks import class_for_plan

    return class_for_plan(generation)


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

    It answers what transformers code asks of a model (pipelines, ``GenerationMixin``): ``config``,
    ``generation_config``, ``device``, ``dtype``, ``main_input_name``, ``can_generate()``, ``forward`` and a
    positional first input. An export made by ``export_for_generation`` is an
    :class:`~hub_export.generation.mixin.ExportedModelForCausalLM` (or ``...ForSeq2SeqLM``), whose ``generate()``
    is transformers' own.

    Attributes:
        export_format: The format of every component.
        export_config: The export config used.
        components: Component name -> :class:`ExportedComponent`.
        config: The source model's ``PretrainedConfig`` (saved as ``config.json``), or None.
        generation_config: The model's ``GenerationConfig``, or None.
        source: Where the model came from on the Hub, or None.
        generation: The generation plan of an ``export_for_generation`` export (``export.json``), or None.
    """

    #: What transformers reads of a model class (``PreTrainedModel`` has the same attribute).
    base_model_prefix = ""

    def __init__(
        self,
        export_format: ExportFormat | str,
        export_config: ExportConfig,
        components: dict[str, ExportedComponent],
        *,
        config: Any = None,
        generation_config: Any = None,
        source: Source | None = None,
        device: str | None = None,
        generation: dict[str, Any] | None = None,
        runner_options: dict[str, Any] | None = None,
    ) -> None:
        self.export_format = parse_format(export_format)
        self.export_config = export_config
        self.components = dict(components)
        self.config = config
        self.generation_config = generation_config
        self.source = source
        self._device = _device_name(device)
        self.generation = generation
        self.runner_options = dict(runner_options or {})
        self._runners: dict[str, Any] = {}

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(format={self.export_format.value!r}, components={list(self.components)}, "
            f"device={self._device!r})"
        )

    # -- what transformers asks of a model ------------------------------------------------------------------
    @property
    def model_config(self) -> Any:
        """Deprecated name of :attr:`config` (the source model's ``PretrainedConfig``)."""
        return self.config

    @property
    def device(self) -> Any:
        """The ``torch.device`` of the tensors the export returns: the device asked for (``cpu`` by default);
        always ``cpu`` for OpenVINO, whose runner hands back host tensors whatever device it runs on."""
        import torch

        if self._device is None or self.export_format is ExportFormat.OPENVINO:
            return torch.device("cpu")
        return torch.device(self._device)

    @property
    def dtype(self) -> Any:
        """The ``torch.dtype`` the export was traced at (its first component's)."""
        from .signature import torch_dtype

        return torch_dtype(next(iter(self.components.values())).metadata.dtype)

    @property
    def main_input_name(self) -> str:
        """The input a positional argument goes to: ``input_ids``, ``pixel_values``, ``input_features``, ..."""
        names = [name for name, _ in self._entry_component().metadata.input_structure]
        return next((n for n in _MAIN_INPUTS if n in names), names[0] if names else "input_ids")

    @property
    def input_modalities(self) -> tuple[str, ...]:
        """The kinds of input the export takes (``text``, ``image``, ``audio``), as ``PreTrainedModel`` says."""
        names = {name for c in self.components.values() for name, _ in c.metadata.input_structure}
        found = tuple(kind for kind, inputs in _MODALITIES.items() if names & inputs)
        return found or ("text",)

    def can_generate(self) -> bool:
        """Whether ``generate()`` works: only for exports made by ``export_for_generation``."""
        return False

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run a single-component export with the model's inputs (the main one may be positional); returns the
        model's ModelOutput class. ``token_type_ids`` that the export traced but the call omits are zeros, as the
        model itself takes them."""
        component = self._single()
        kwargs = _with_positional(self, args, kwargs)
        runner = self.runners[component.name]
        return runner(**_default_token_types(runner, kwargs))

    def _entry_component(self) -> ExportedComponent:
        """The component a call starts with: the single one, the encoder, the prefill or the language model."""
        if len(self.components) == 1 or not self.generation:
            return next(iter(self.components.values()))
        stages = self.generation.get("stages", {})
        for stage in ("encoder", "embed_tokens", "prefill", "language_model"):
            if stages.get(stage) in self.components:
                return self.components[stages[stage]]
        return next(iter(self.components.values()))

    # -- running --------------------------------------------------------------------------------------------
    @property
    def program(self) -> Any:
        """The program of a single-component export."""
        return self._single().program

    @property
    def runners(self) -> dict[str, Any]:
        """Component name -> runner on the device asked for (built on first access)."""
        for name, component in self.components.items():
            if name not in self._runners:
                self._runners[name] = component.runner(self._device, **self.runner_options)
        return self._runners

    def to(self, device: Any) -> ExportedModel:
        """Run on ``device`` (a name such as ``cpu``/``cuda:0``, a ``torch.device``, or None for the backend's
        default) from now on; runners are rebuilt lazily. Returns self."""
        device = _device_name(device)
        if device != self._device:
            self._device = device
            self._runners.clear()
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``forward``: run with the model's inputs, the main one positional or by name."""
        return self.forward(*args, **kwargs)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        """Generation needs an export made by ``export_for_generation`` (an ``ExportedModelForCausalLM`` or
        ``ExportedModelForSeq2SeqLM``, whose ``generate()`` is transformers' own).

        Raises:
            HubExportError: Always, naming the components this export has.
        """
        raise HubExportError(
            "generate() needs an export made with exporter.export_for_generation(model, inputs, config=...); "
            f"this one has components {list(self.components)}."
        )

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
            config=self.export_config.to_dict(),
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
            if self.config is not None:
                self.config.to_json_file(str(staged / "config.json"))
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
        export: bool | str | ExportFormat | ExportConfig | None = None,
        export_config: ExportConfig | None = None,
        task: str | None = None,
        **runner_options: Any,
    ) -> ExportedModel:
        """Load an export from a local folder or a Hub repo, or export a model repo on the fly.

        Reads ``export.json`` first and validates it; only then opens (or downloads) the files it lists for the
        requested components, each checked against its size and sha256.

        With ``export=`` (``"onnx"``, an ``OnnxConfig(...)``, or ``True`` with ``export_config=``), a repo that
        holds no export of that format in ``subfolder`` (default: the format's folder, ``onnx/``, ...) is
        exported here: the model is loaded from the repo's safetensors at the commit ``revision`` resolves to,
        exported for ``task`` (inferred from ``config.json`` when omitted; generative tasks get
        ``export_for_generation``), and cached next to the Hugging Face cache, keyed by repo, commit, format, task
        and config (see :mod:`hub_export.hub.on_the_fly`). The next call loads the cached export, offline too.

        Example::

            model = ExportedModel.from_pretrained("HuggingFaceTB/SmolLM2-135M", export="onnx")
            ids = model.generate(**tokenizer("Hello", return_tensors="pt"), max_new_tokens=20)

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
            export: Export a model repo that has no such export: a format name, an export config, or True
                (with ``export_config``).
            export_config: The export config of ``export=True``.
            task: The task to export for (``text-generation``, ``text-classification``, ...; see
                :data:`hub_export.tasks.TASKS`); inferred from the model's config when omitted.
            **runner_options: The backend runner's options: ``providers`` and ``session_options`` for ONNX Runtime,
                ``config`` (compile properties) for OpenVINO.

        Raises:
            TypeError: An argument that neither this method nor the export's runner takes.
            ManifestError: ``export.json`` is missing or invalid.
            IntegrityError: A file does not match the manifest.
            UnsafeExportError: A file would run code or read outside the export when loaded (see
                :mod:`hub_export.safety`).
        """
        check_runner_options(None, runner_options)
        safety = {"trust_pickles": trust_pickles, "allow_custom_domains": tuple(allow_custom_domains)}
        if export is not None and export is not False:
            from .hub.on_the_fly import from_model_repo

            loaded = from_model_repo(
                str(pretrained_model_name_or_path),
                export=export,
                export_config=export_config,
                task=task,
                subfolder=subfolder,
                revision=revision,
                components=components,
                device=device,
                cache_dir=cache_dir,
                token=token,
                local_files_only=local_files_only,
                force_download=force_download,
                endpoint=endpoint,
                runner_options=runner_options,
                **safety,
            )
            return _check_class(cls, loaded)
        if export_config is not None or task is not None:
            raise TypeError("export_config= and task= choose what export=... makes; pass export= too.")
        local = Path(pretrained_model_name_or_path) / subfolder
        if local.is_dir():
            loaded = load_directory(
                local, components=components, device=device, runner_options=runner_options, **safety
            )
            return _check_class(cls, loaded)
        from .hub.download import load_from_hub

        loaded = load_from_hub(
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
        return _check_class(cls, loaded)


#: The options each format's runner takes (``ExportedModel.from_pretrained(..., **runner_options)``).
RUNNER_OPTIONS: dict[ExportFormat, tuple[str, ...]] = {
    ExportFormat.DYNAMO: (),
    ExportFormat.ONNX: ("providers", "session_options"),
    ExportFormat.EXECUTORCH: (),
    ExportFormat.OPENVINO: ("config",),
}


def check_runner_options(export_format: ExportFormat | None, options: dict[str, Any]) -> None:
    """Refuse options no runner takes (``export_format`` None) or that this format's runner does not take.

    Raises:
        TypeError: Naming the unknown options and what is accepted.
    """
    accepted = (
        sorted({o for names in RUNNER_OPTIONS.values() for o in names})
        if export_format is None
        else list(RUNNER_OPTIONS[export_format])
    )
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        where = "any runner" if export_format is None else f"the {export_format.value} runner"
        raise TypeError(
            f"ExportedModel.from_pretrained() got unexpected keyword argument(s) {unknown}: neither it nor {where} "
            f"takes them (runner options accepted: {accepted or 'none'})."
        )


def _check_class(cls: type, loaded: ExportedModel) -> ExportedModel:
    """``loaded`` when it is a ``cls`` (``ExportedModel.from_pretrained`` takes whatever class the export needs)."""
    if not isinstance(loaded, cls):
        raise HubExportError(
            f"{cls.__name__}.from_pretrained loaded a {type(loaded).__name__} (components {list(loaded.components)}); "
            "load it with ExportedModel.from_pretrained, which picks the class the export needs."
        )
    return loaded


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
    fmt = parse_format(manifest.export_format)
    check_runner_options(fmt, dict(runner_options or {}))
    model_config, generation_config = _load_side_configs(directory)
    return exported_model_class(manifest.generation)(
        fmt,
        AutoExportConfig.from_dict(_config_without_quantizer(manifest.config)),
        components,
        config=model_config,
        generation_config=generation_config,
        source=manifest.source,
        device=device,
        generation=manifest.generation,
        runner_options=runner_options,
    )


def _config_without_quantizer(config: dict[str, Any]) -> dict[str, Any]:
    # a quantizer is recorded as its recipe (plain data); the loaded export does not re-run it
    return {**config, "quantizer": None}


#: The inputs a positional argument may stand for, in the order they are looked for among the traced inputs.
_MAIN_INPUTS = ("input_ids", "input_features", "input_values", "pixel_values", "inputs_embeds", "decoder_input_ids")
_MODALITIES = {
    "text": {"input_ids", "inputs_embeds", "decoder_input_ids"},
    "image": {"pixel_values", "pixel_values_videos"},
    "audio": {"input_features", "input_values", "input_audio_embeds"},
}


def _device_name(device: Any) -> str | None:
    """A runner device name from a name, a ``torch.device`` or None."""
    return None if device is None else str(device)


def _with_positional(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the one positional argument a model takes (its main input) named.

    Raises:
        TypeError: More than one positional argument, or the main input given both ways.
    """
    if not args:
        return kwargs
    name = model.main_input_name
    if len(args) > 1:
        raise TypeError(
            f"{type(model).__name__} takes its main input ({name}) positionally and the others by keyword; "
            f"got {len(args)} positional arguments."
        )
    if name in kwargs:
        raise TypeError(f"{type(model).__name__} got multiple values for {name!r} (positional and keyword).")
    return {name: args[0], **kwargs}


def _default_token_types(runner: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with all-zero ``token_type_ids`` when the runner traced them and the call gives none: a model
    takes missing token types as zeros (segment A), so an export traced with them runs without them too."""
    if kwargs.get("token_type_ids") is not None or "token_type_ids" not in dict(runner.metadata.input_structure):
        return kwargs
    reference = kwargs.get("input_ids")
    if reference is None:
        return kwargs
    import torch

    return {**kwargs, "token_type_ids": torch.zeros_like(torch.as_tensor(reference))}
