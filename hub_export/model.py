"""``ExportedModel``: an export in memory, on disk and on the Hub, answering what transformers asks of a model.

An export made by ``export_for_generation`` is an ``ExportedModelForCausalLM`` or ``ExportedModelForSeq2SeqLM``:
an ``ExportedModel`` whose ``forward`` is one step on the exported graphs and whose ``generate()`` is transformers'
``GenerationMixin`` (:mod:`hub_export.generation.mixin`). Both classes are built the first time they are asked for
(``hub_export.ExportedModelForCausalLM``, or loading such an export), so that importing this module imports no
third-party package.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ._files import atomic_directory, check_export_folder, file_entry, replace_directory, spelled_as_path
from ._quiet import quietly
from ._versions import created_with
from .component import ExportedComponent
from .configs import AutoExportConfig, ExportConfig
from .errors import ConfigError, HubExportError
from .formats import ExportFormat, SafetyOptions, backend_for, backends, parse_format
from .hub.download import download_export
from .hub.publish import push_export
from .loading import LoadedExport, LocalFiles, load_export
from .manifest import SIDE_FILE_ROLES, Manifest, Source
from .preprocessing import listed_preprocessing, write_preprocessing
from .sample_inputs import default_inputs
from .tasks import TASKS, plan_class_name

# ExportedModelForCausalLM and ExportedModelForSeq2SeqLM are built on first use (module ``__getattr__`` below).
__all__ = ["ExportedModel", "exported_model_class"]

#: The classes of generation exports -> the ``GenerationMixin`` steps class of :mod:`hub_export.generation.mixin`.
_GENERATIVE = {"ExportedModelForCausalLM": "CausalLMSteps", "ExportedModelForSeq2SeqLM": "Seq2SeqLMSteps"}


class ExportedModel:
    """An export: named components of one format, runnable with the original model's call.

    It answers what transformers code asks of a model (pipelines, ``GenerationMixin``): ``config``,
    ``generation_config``, ``device``, ``dtype``, ``main_input_name``, ``can_generate()``, ``forward`` and a
    positional first input. An export made by ``export_for_generation`` is an ``ExportedModelForCausalLM`` (or
    ``...ForSeq2SeqLM``), whose ``generate()`` is transformers' own.

    Attributes:
        export_format: The format of every component.
        export_config: The export config used.
        components: Component name -> :class:`ExportedComponent`.
        config: The source model's ``PretrainedConfig`` (saved as ``config.json``), or None.
        generation_config: The model's ``GenerationConfig``, or None.
        source: Where the model came from on the Hub, or None.
        generation: The generation plan of an ``export_for_generation`` export (``export.json``), or None.
        task: The pipeline task the export serves (recorded in ``export.json``), or None.
        preprocessing: The source's tokenizer and processor files saved with the export, by name, or None.
    """

    #: What transformers reads of a model class (``PreTrainedModel`` has the same attribute).
    base_model_prefix = ""
    task: str | None = None
    preprocessing: dict[str, bytes] | None = None

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
        """Former name of :attr:`config` (the source model's ``PretrainedConfig``)."""
        return self.config

    @property
    def device(self) -> Any:
        """The ``torch.device`` of the tensors the export returns: the device asked for (``cpu`` by default);
        always ``cpu`` for OpenVINO, whose runner hands back host tensors whatever device it runs on."""
        import torch

        if self._device is None or self.export_format.value == "openvino":
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
        names = [name for name, _ in self._entry_component().metadata.signature.input_structure]
        return next((n for n in _MAIN_INPUTS if n in names), names[0] if names else "input_ids")

    @property
    def input_modalities(self) -> tuple[str, ...]:
        """The kinds of input the export takes (``text``, ``image``, ``audio``), as ``PreTrainedModel`` says."""
        names = {name for c in self.components.values() for name, _ in c.metadata.signature.input_structure}
        found = tuple(kind for kind, inputs in _MODALITIES.items() if names & inputs)
        return found or ("text",)

    def can_generate(self) -> bool:
        """Whether ``generate()`` works: only for exports made by ``export_for_generation``."""
        return False

    @quietly
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run a single-component export with the model's inputs (the main one may be positional); returns the
        model's ModelOutput class. ``token_type_ids`` that the export traced but the call omits are zeros, as the
        model itself takes them."""
        component = self._single()
        runner = self.runners[component.name]
        return runner(**default_inputs(runner.signature, self._named_inputs(args, kwargs)))

    def _named_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """``kwargs`` with the one positional argument a model takes (its main input) named.

        Raises:
            TypeError: More than one positional argument, or the main input given both ways.
        """
        if not args:
            return kwargs
        name = self.main_input_name
        if len(args) > 1:
            raise TypeError(
                f"{type(self).__name__} takes its main input ({name}) positionally and the others by keyword; "
                f"got {len(args)} positional arguments."
            )
        if name in kwargs:
            raise TypeError(f"{type(self).__name__} got multiple values for {name!r} (positional and keyword).")
        return {name: args[0], **kwargs}

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
    def runners(self) -> Mapping[str, Any]:
        """Component name -> runner on the device asked for, built on first access; a component only other
        runtimes run (the generation plan's ``runtimes``: ExecuTorch's ``llm``) only when asked for by name."""
        others = set(((self.generation or {}).get("runtimes") or {}).values())
        runners = _Runners(self)
        for name in self.components:
            if name not in others:
                runners[name]  # noqa: B018 - build it now: an invalid option raises here, not mid-generation
        return runners

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
            f"This export is one graph ({', '.join(self.components)}) and cannot generate; export for generation: "
            f"`hub-export export MODEL --task {self._generative_task()}` (or `sync --task`), or "
            "exporter.export_for_generation(model, inputs, config=...) in Python."
        )

    def _generative_task(self) -> str:
        from .tasks import TASKS, infer_task

        try:
            task = infer_task(self.config)
        except (ConfigError, TypeError, AttributeError):
            return "text-generation"
        return task if TASKS[task].generative else "text-generation"

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
            config=self.export_config.to_dict(),
            components={name: c.metadata for name, c in self.components.items()},
            source=self.source,
            generation=self.generation,
            task=self.task,
        )

    @quietly
    def save_pretrained(self, save_directory: str | Path) -> Path:
        """Write every component's files, ``export.json``, ``config.json`` [and ``generation_config.json``].

        The export is written to a temporary folder next to ``save_directory`` and moved into place only when
        complete: a failure leaves a previous export in ``save_directory`` intact and loadable.

        Raises:
            HubExportError: ``save_directory`` is a non-empty folder that is not an export.
        """
        target = Path(save_directory)
        check_export_folder(target)
        staged = atomic_directory(target)
        try:
            backend = backend_for(self.export_format)
            programs = {name: c.program for name, c in self.components.items()}  # lazy ones fetch their files
            # each fresh component's files are named as the format's own tools load them (Backend.file_stem)
            stems = {
                name: backend.stem(name, c.metadata, self.generation)
                for name, c in self.components.items()
                if not c.on_disk
            }
            fresh = {stems[name]: programs[name] for name in stems}
            save_programs = backend.save_programs if _may_share(self, backend) else None
            by_stem = save_programs(fresh, staged) if fresh and save_programs is not None else {}
            entries = {
                name: c.save(staged, by_stem.get(stems.get(name, name)), stems.get(name))
                for name, c in self.components.items()
            }
            if self.config is not None:
                self.config.to_json_file(str(staged / "config.json"))
            if self.generation_config is not None:
                self.generation_config.to_json_file(str(staged / "generation_config.json"))
            write_preprocessing(self.preprocessing or {}, staged)
            manifest = dataclasses.replace(self.manifest(), components=entries)
            manifest = manifest.with_files([*manifest.all_listed(), *_side_entries(staged, backend)])
            if backend.runtime_files is not None and backend.runtime_files(staged, manifest):
                manifest = manifest.with_files([*manifest.component_files(), *_side_entries(staged, backend)])
            manifest.write(staged)
            replace_directory(staged, target)
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise
        for name, component in self.components.items():
            component.metadata = entries[name]
            component._files_dir = target.resolve()
        return target

    @quietly
    def push_to_hub(self, repo_id: str, **kwargs: Any) -> Any:
        """Publish this export as one commit in ``repo_id`` (see :func:`hub_export.hub.publish.push_export`)."""
        return push_export(self, repo_id, **kwargs)

    # -- loading --------------------------------------------------------------------------------------------
    @classmethod
    @quietly
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
        export: bool | str | ExportFormat | ExportConfig | None = None,
        export_config: ExportConfig | None = None,
        task: str | None = None,
        **runner_options: Any,
    ) -> ExportedModel:
        """Load an export from a local folder or a Hub repo, or export a model repo on the fly.

        Reads ``export.json`` first and validates it; only then opens (or downloads) the files it lists for the
        requested components, each checked against its size and sha256. The class of the result follows the
        export: an ``export_for_generation`` export is an ``ExportedModelForCausalLM`` / ``...ForSeq2SeqLM``.

        With ``export=`` (``"onnx"``, an ``OnnxConfig(...)``, or ``True`` with ``export_config=``), a repo that
        holds no export of that format in ``subfolder`` (default: the format's folder, ``onnx/``, ...) is
        exported here: the model is loaded from the repo's safetensors at the commit ``revision`` resolves to,
        exported for ``task`` (inferred from ``config.json`` when omitted; generative tasks get
        ``export_for_generation``), and cached next to the Hugging Face cache, keyed by repo, commit, format, task
        and config (see :mod:`hub_export.on_the_fly`). The next call loads the cached export, offline too.

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
            trust_native_code: Load native code in an export (the AOTInductor package of a compiled ``.pt2``), which
                runs when loaded. Only for exports whose publisher you trust.
            export: Export a model repo that has no such export: a format name, an export config, or True
                (with ``export_config``).
            export_config: The export config of ``export=True``.
            task: The task to export for (``text-generation``, ``text-classification``, ...; see
                :data:`hub_export.tasks.TASKS`); inferred from the model's config when omitted.
            **runner_options: The backend runner's options (``providers=`` for ONNX Runtime, ``config=`` for
                OpenVINO, ...).

        Raises:
            TypeError: An argument that neither this method nor any runner takes.
            ConfigError: A runner option the export's format does not take.
            ManifestError: ``export.json`` is missing or invalid.
            IntegrityError: A file does not match the manifest.
            UnsafeExportError: A file would run code or read outside the export when loaded (see
                the format's safety check, see docs/security.md).
        """
        _check_option_names(runner_options)
        options = SafetyOptions(
            trust_pickles=trust_pickles,
            allow_custom_domains=frozenset(allow_custom_domains),
            trust_native_code=bool(trust_native_code),
        )
        hub: dict[str, Any] = {
            "revision": revision,
            "cache_dir": cache_dir,
            "token": token,
            "local_files_only": local_files_only,
            "force_download": force_download,
            "endpoint": endpoint,
        }
        if export is not None and export is not False:
            from .on_the_fly import export_source

            source: Any = export_source(
                str(pretrained_model_name_or_path),
                export=export,
                export_config=export_config,
                task=task,
                subfolder=subfolder,
                components=components,
                **hub,
            )
        elif export_config is not None or task is not None:
            raise TypeError("export_config= and task= choose what export=... makes; pass export= too.")
        elif (Path(pretrained_model_name_or_path) / subfolder).is_dir():
            source = LocalFiles(Path(pretrained_model_name_or_path) / subfolder)
        elif spelled_as_path(str(pretrained_model_name_or_path)) or Path(pretrained_model_name_or_path).exists():
            where = f"{pretrained_model_name_or_path}" + (f" (subfolder {subfolder!r})" if subfolder else "")
            raise HubExportError(
                f"no export folder {where}: pretrained_model_name_or_path is a folder written by save_pretrained (or "
                "hub-export export), or a Hub repo id (owner/name)."
            )
        else:
            source = download_export(
                str(pretrained_model_name_or_path),
                subfolder=subfolder,
                components=components,
                fetch_components=False,
                **hub,
            )
        loaded = load_export(source, components=components, lazy=lazy, options=options)
        return cls._from_loaded(loaded, device=device, runner_options=runner_options)

    @classmethod
    def _from_loaded(
        cls, loaded: LoadedExport, *, device: str | None = None, runner_options: dict[str, Any] | None = None
    ) -> ExportedModel:
        """The export of ``loaded``, as the class its generation plan needs (refused when that is no ``cls``)."""
        manifest = loaded.manifest
        runner_class: Any = backend_for(manifest.export_format).runner_class
        runner_class.check_options(dict(runner_options or {}))
        klass = exported_model_class(manifest.generation)
        if not issubclass(klass, cls):
            raise HubExportError(
                f"{cls.__name__}.from_pretrained loaded a {klass.__name__} export (components "
                f"{list(loaded.components)}); load it with ExportedModel.from_pretrained, which picks the class the "
                "export needs."
            )
        exported = klass(
            parse_format(manifest.export_format),
            AutoExportConfig.from_dict({**manifest.config, "quantizer": None}),  # the recipe is recorded, not re-run
            loaded.components,
            config=loaded.model_config,
            generation_config=loaded.generation_config,
            source=manifest.source,
            device=device,
            generation=manifest.generation,
            runner_options=runner_options,
        )
        exported.task = manifest.task
        exported.preprocessing = listed_preprocessing(loaded.source.directory, manifest)
        return exported


class _Runners(Mapping[str, Any]):
    """:attr:`ExportedModel.runners`: a component's runner is built on first access and kept by the model."""

    def __init__(self, model: ExportedModel) -> None:
        self._model = model

    def __getitem__(self, name: str) -> Any:
        model = self._model
        if name not in model._runners:
            component = model.components[name]  # KeyError for an unknown component, as a dict
            model._runners[name] = component.runner(model._device, **model.runner_options)
        return model._runners[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._model.components)

    def __len__(self) -> int:
        return len(self._model.components)


def _side_entries(folder: Path, backend: Any) -> list[Any]:
    """The entries of the side files written in ``folder``: configs, preprocessing files and the files the format's
    own tools read (``layout.extras``)."""
    roles = {**SIDE_FILE_ROLES, **dict(backend.layout.extras)}
    return [file_entry(folder, name, role) for name, role in roles.items() if (folder / name).is_file()]


def _may_share(model: ExportedModel, backend: Any) -> bool:
    """Whether the components written in this process go to the backend's ``save_programs`` together (sharing
    weights in its ``shared`` files): not where a component copied from disk lists one of those files, which
    names the weights it reads there: the fresh components are then written each on its own (their weights in
    their own files), so that the copied file stays the one its references were written for."""
    shared = {name for name, _ in backend.layout.shared}
    return not any(f.path in shared for c in model.components.values() if c.on_disk for f in c.metadata.files)


def exported_model_class(generation: dict[str, Any] | None = None, *, task: str | None = None) -> type[ExportedModel]:
    """The class running an export: from its generation plan (``export.json``'s ``generation``), or from the task
    it is made for (:data:`hub_export.tasks.TASKS`); :class:`ExportedModel` for an export that does not generate.

    Raises:
        ConfigError: An unknown task or plan kind.
    """
    if task is not None:
        if task not in TASKS:
            raise ConfigError(f"Unknown task {task!r}; known tasks: {', '.join(TASKS)}.")
        name = TASKS[task].exported_class
    else:
        name = plan_class_name(generation) if generation else "ExportedModel"
    return ExportedModel if name == "ExportedModel" else _generative_class(name)


@functools.cache
def _generative_class(name: str) -> type[ExportedModel]:
    """``ExportedModelForCausalLM`` / ``...ForSeq2SeqLM``: the ``GenerationMixin`` steps of
    :mod:`hub_export.generation.mixin` over :class:`ExportedModel` (built once, on first use)."""
    from .generation import mixin

    steps = getattr(mixin, _GENERATIVE[name])
    return type(name, (steps, ExportedModel), {"__module__": __name__, "__qualname__": name, "__doc__": steps.__doc__})


def __getattr__(name: str) -> Any:
    if name in _GENERATIVE:
        return _generative_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _check_option_names(options: dict[str, Any]) -> None:
    """Refuse keyword arguments that no registered format's runner takes, as Python refuses an unknown argument.

    Raises:
        TypeError: Naming them and the runner options that exist.
    """
    if not options:
        return  # without this, every registered format's package would be imported to list their options
    runner_classes: list[Any] = [backend.runner_class for backend in backends().values()]
    known = sorted({name for runner_class in runner_classes for name in runner_class.options})
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(
            f"ExportedModel.from_pretrained() got unexpected keyword argument(s) {unknown}: neither it nor any "
            f"format's runner takes them (runner options: {', '.join(known)})."
        )


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
