"""The format registry: every export format is one :class:`Backend` record, registered once.

A backend is a package (the built-in ones are ``hub_export/backends/<name>/``) that defines its config, exporter,
runner, program I/O, safety check, file layout, required packages and Hub tags, and registers one record with
:func:`register_backend`. Nothing outside that package names the format: the rest of hub_export asks the registry.

Built-in backends are the sub-packages of :mod:`hub_export.backends`; they are imported the first time the registry
is asked about formats (each imports its optional runtime, such as ``onnxruntime``, only when it exports or loads):
a format asked for by name (:func:`backend_for`, ``ExportFormat("onnx")``: loading an export) imports its own
package only, listing the formats imports them all.
A third-party format calls :func:`register_backend` itself (see ``docs/extending.md``).

:class:`ExportFormat` is the name of a registered format: ``ExportFormat("onnx")``, ``ExportFormat.ONNX`` and
``list(ExportFormat)`` all come from the registry, so a registered third-party format is an ``ExportFormat`` too.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ConfigError, ManifestError, UnknownFormatError

if TYPE_CHECKING:
    from .manifest import ComponentEntry, Manifest
    from .runner import ModelRunner

__all__ = [
    "Backend",
    "ExportFormat",
    "FileLayout",
    "SafetyOptions",
    "backend_for",
    "backends",
    "one_graph_stem",
    "parse_format",
    "register_backend",
]

_BACKENDS: dict[str, Backend] = {}
_DISCOVERED = False
_LOCK = threading.RLock()


@dataclass(frozen=True)
class FileLayout:
    """Where one format's files live, and what each file is.

    Attributes:
        subfolder: Default Hub subfolder of this format (``onnx``, ``pt2``, ...).
        files: ``(suffix, role)`` of one component's files, main file first: ``("model.onnx", ...)`` is
            ``prefix + component + suffix``. Roles name what a file is (``program``, ``weights``); the loader and
            the safety checks find files by role, never by suffix.
        prefix: Prefix of a component's file names (OpenVINO uses ``openvino_``).
        shared: ``(file name, role)`` of files that belong to the export rather than one component (a weights file
            every component reads).
        optional: ``(suffix, role)`` of files a component may have besides ``files`` (a compiled ``.pt2``'s native
            code package, an ExecuTorch ``.ptd`` weights file), named like them.
        stems: Other names a component's files may carry instead of the component's name: the names the format's
            own runtimes and tools load (ONNX's ``model`` for transformers.js, ``model_q4`` for its ``dtype="q4"``).
            Which one a component gets is the backend's :attr:`Backend.file_stem`.
        legacy: ``(suffix, role)`` of files that exports made by earlier versions have instead of ``files``
            (ONNX's ``.onnx.data``, now ``.onnx_data``): still loaded, never written.
        extras: ``(file name, role)`` of files an export may carry for the format's own runtimes and tools, which
            hub_export writes (:attr:`Backend.runtime_files`) and never parses (onnxruntime-genai's
            ``genai_config.json``, OpenVINO GenAI's tokenizer IRs).
    """

    subfolder: str
    files: tuple[tuple[str, str], ...]
    prefix: str = ""
    shared: tuple[tuple[str, str], ...] = ()
    optional: tuple[tuple[str, str], ...] = ()
    stems: tuple[str, ...] = ()
    legacy: tuple[tuple[str, str], ...] = ()
    extras: tuple[tuple[str, str], ...] = ()

    def component_files(self, component: str, stem: str | None = None) -> dict[str, str]:
        """``{relative file name: role}`` of a component's files (the optional ones last), main file first, named
        after ``stem`` (default: the component's name)."""
        base = f"{self.prefix}{stem or component}"
        return {f"{base}{suffix}": role for suffix, role in (*self.files, *self.optional)}

    def readable_files(self, stem: str) -> dict[str, str]:
        """``{relative file name: role}`` of the files a component whose files carry ``stem`` may have, the
        :attr:`legacy` names of exports made before a rename included."""
        return {f"{self.prefix}{stem}{suffix}": role for suffix, role in (*self.files, *self.optional, *self.legacy)}

    def stem_of(self, component: str, listed: Iterable[str]) -> str:
        """The stem a component's files carry among ``listed`` (its manifest entry's paths): the component's name,
        or the one of :attr:`stems` whose main file is listed.

        Raises:
            ManifestError: No main file of the component is listed, or several stems are.
        """
        listed = set(listed)
        main = self.files[0][0]
        stems = dict.fromkeys((component, *self.stems))
        found = [stem for stem in stems if f"{self.prefix}{stem}{main}" in listed]
        if len(found) != 1:
            names = ", ".join(f"{self.prefix}{stem}{main}" for stem in stems)
            what = "no" if not found else "more than one"
            raise ManifestError(f"$.components.{component}.files: {what} program file among {names}.")
        return found[0]

    def paths(self, component: str, listed: Iterable[str]) -> dict[str, str]:
        """``{role: relative path}`` of a component's files, found by exact name among ``listed`` (its manifest
        entry's paths): never by suffix or position. Shared files count for every component.

        Raises:
            ManifestError: A file of the layout is not listed.
        """
        listed = set(listed)
        names = self.readable_files(self.stem_of(component, listed))
        found: dict[str, str] = {}
        for name, role in [*names.items(), *self.shared]:
            if name in listed:
                found.setdefault(role, name)
        missing = sorted({role for _, role in self.files} - set(found))
        if missing:
            raise ManifestError(
                f"$.components.{component}.files: no {'/'.join(missing)} file; expected {', '.join(names)}."
            )
        return found


@dataclass(frozen=True)
class SafetyOptions:
    """What the user allowed when loading an untrusted export (see ``docs/security.md``).

    Attributes:
        trust_pickles: Accept pickles referencing globals outside the tensor allow-list (runs arbitrary code).
        allow_custom_domains: Operator domains to accept besides the standard ones.
        trust_native_code: Accept native code in an export (compiled kernels), which runs when loaded.
    """

    trust_pickles: bool = False
    allow_custom_domains: frozenset[str] = frozenset()
    trust_native_code: bool = False


@dataclass(frozen=True)
class Backend:
    """Everything hub_export knows about one export format.

    Attributes:
        name: The format name (``onnx``); also the value recorded as ``export_format`` in ``export.json``.
        config_class: Its ``ExportConfig`` subclass.
        exporter_class: Its ``HfExporter`` subclass.
        runner_class: Its ``ModelRunner`` subclass.
        layout: Its file layout (:class:`FileLayout`).
        save_program: ``save_program(program, directory, component) -> [relative paths]`` (main file first).
        save_programs: Optional ``save_programs({component: program}, directory) -> {component: [relative paths]}``
            writing the components of one export together, so a weight several of them use is stored once (in a
            file of ``layout.shared``); None: each component is written by ``save_program``.
        load_program: ``load_program(directory, component, entry, options) -> program``; the files are verified
            and checked (``options``: the :class:`SafetyOptions` the user gave, for a loader whose reading depends
            on them).
        check_files: ``check_files(directory, component, entry, options)``: refuse files that are unsafe to hand
            to ``load_program`` (raises ``UnsafeExportError``); None when the format has nothing to check.
        packages: Import names the backend needs; a missing one raises ``BackendUnavailableError``.
        distributions: Distributions whose versions an export records (``created_with``).
        extra: The pip extra that installs the packages (``pip install "hub-export[<extra>]"``).
        file_stem: ``file_stem(component, entry, generation) -> stem``: the name a component's files get when saved
            (one of ``layout.stems``, or the component's name), from its metadata and the export's generation plan
            (None for a graph export): the names the format's own tools load. None: the component's name.
        runtime_files: ``runtime_files(directory, manifest) -> [names]``: writes, into an export folder whose
            programs and side files are written (``manifest`` lists them), what the format's own runtimes and tools
            read besides them (files of ``layout.extras``, keys they read in ``config.json``); returns the names
            of the files it wrote or changed. None: nothing.
        root_config_keys: Keys of ``config.json`` that the format's own tools read at the root of a Hub repo
            (transformers.js's ``transformers.js_config``): a publish copies them from the export's ``config.json``
            into the repo's, where it lacks them.
        outdated_layout: ``outdated_layout(manifest) -> why or None``: what an export made by an earlier version
            lacks that this one writes, beyond file names (which :meth:`outdated` compares itself): ExecuTorch's
            LLM runner program.
        card_tags: The Hub tags of the format, on the model card.
        quantization_stage: The program type a quantizer sees after lowering (``"onnx"``, ``"openvino"``) or None
            when the backend's quantization happens on the traced program only.
        weight_quantizer: ``weight_quantizer(bits) -> quantizer``: the weight-only quantizer of 4- or 8-bit weights
            that ``hub-export export --quantize int4|int8`` gives this format (the layout its runtimes load); None:
            the format has none.
        description: One line for listings (``hub-export --help``, docs).
    """

    name: str
    config_class: type
    exporter_class: type
    runner_class: type[ModelRunner]
    layout: FileLayout
    save_program: Callable[[Any, Path, str], list[str]]
    load_program: Callable[[Path, str, ComponentEntry, SafetyOptions], Any]
    check_files: Callable[[Path, str, ComponentEntry, SafetyOptions], None] | None = None
    save_programs: Callable[[dict[str, Any], Path], dict[str, list[str]]] | None = None
    file_stem: Callable[[str, ComponentEntry, Mapping[str, Any] | None], str] | None = None
    runtime_files: Callable[[Path, Manifest], list[str]] | None = None
    root_config_keys: tuple[str, ...] = ()
    outdated_layout: Callable[[Manifest], str | None] | None = None
    packages: tuple[str, ...] = ()
    distributions: tuple[str, ...] = ()
    extra: str = ""
    card_tags: tuple[str, ...] = ()
    quantization_stage: str | None = None
    weight_quantizer: Callable[[int], Any] | None = None
    description: str = ""

    def stem(self, component: str, entry: ComponentEntry, generation: Mapping[str, Any] | None) -> str:
        """The name ``component``'s files get when saved (:attr:`file_stem`)."""
        if self.file_stem is None:
            return component
        stem = self.file_stem(component, entry, generation)
        if stem != component and stem not in self.layout.stems:
            raise ConfigError(
                f"The {self.name} backend names component {component!r} {stem!r}, not a stem of its layout."
            )
        return stem

    def outdated(self, manifest: Manifest) -> str | None:
        """Why ``manifest``'s export is not in the layout this version writes (its files named otherwise, or what
        :attr:`outdated_layout` finds), or None. Such an export still loads; ``sync --relayout`` exports it again."""
        shared = {name for name, _ in self.layout.shared}
        for name, entry in manifest.components.items():
            listed = {f.path for f in entry.files} - shared
            current = set(self.layout.component_files(name, self.stem(name, entry, manifest.generation)))
            if listed and not listed <= current:
                return f"component {name!r} has {', '.join(sorted(listed - current))}, now {', '.join(sorted(current))}"
        return self.outdated_layout(manifest) if self.outdated_layout is not None else None

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("-", "_").isidentifier() or self.name != self.name.lower():
            raise ConfigError(
                f"Backend name {self.name!r} must be a lower-case identifier such as 'onnx' or 'tensorrt'."
            )


def one_graph_stem(component: str, entry: ComponentEntry, generation: Mapping[str, Any] | None) -> str:
    """A :attr:`Backend.file_stem`: ``model`` for the one graph of a decoder-only generation export (its ``decode``
    component serving the prompt and every step: ``openvino_model.xml``, ``model.pte``, the names the formats' own
    generation tools load), else the component's name. Layouts using it list ``"model"`` in their ``stems``."""
    return "model" if generation and generation.get("one_graph") is True and component == "decode" else component


def register_backend(backend: Backend) -> Backend:
    """Register a format. Every config, exporter, loader and Hub helper of hub_export then knows it.

    Raises:
        ConfigError: A backend of that name is already registered, or the record is inconsistent.
    """
    if not isinstance(backend, Backend):
        raise ConfigError(f"register_backend takes a hub_export.Backend record, got {type(backend).__name__}.")
    config_format = getattr(backend.config_class, "export_format", None)
    if config_format is not None and str(config_format) != backend.name:
        raise ConfigError(
            f"{backend.config_class.__name__}.export_format is {str(config_format)!r}, but the backend is named "
            f"{backend.name!r}; set export_format = ExportFormat({backend.name!r}) on the config class."
        )
    with _LOCK:
        existing = _BACKENDS.get(backend.name)
        if existing is not None and existing != backend:
            raise ConfigError(f"A backend named {backend.name!r} is already registered ({existing.description}).")
        _BACKENDS[backend.name] = backend
    return backend


@functools.cache
def _builtin_packages() -> tuple[str, ...]:
    """The names of the built-in backend packages (listed once, not imported)."""
    package = importlib.import_module(f"{__package__}.backends")
    found = [i.name for i in pkgutil.iter_modules(package.__path__) if i.ispkg and not i.name.startswith("_")]
    return tuple(sorted(found))


def _discover(name: str | None = None) -> None:
    """Import the built-in backend packages once (each registers itself on import); with ``name``, only the
    built-in package of that name, if there is one: loading an export needs its own format only."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    with _LOCK:
        if _DISCOVERED:
            return
        for package in _builtin_packages():
            if name is None or package == name:
                importlib.import_module(f"{__package__}.backends.{package}")
        if name is None:
            _DISCOVERED = True


def backends() -> dict[str, Backend]:
    """Every registered backend, by name (built-in ones first, in name order)."""
    _discover()
    return _ordered()


def _ordered() -> dict[str, Backend]:
    """The registered backends, built-in ones first, each group in name order (registration order depends on what
    was imported first)."""
    builtin = set(_builtin_packages())
    return {name: _BACKENDS[name] for name in sorted(_BACKENDS, key=lambda name: (name not in builtin, name))}


def backend_for(export_format: ExportFormat | str) -> Backend:
    """The backend record of a format.

    Raises:
        UnknownFormatError: No backend of that name; the message lists the registered ones.
    """
    name = str(export_format).lower()
    backend = _BACKENDS.get(name)
    if backend is None:
        _discover(name)
        backend = _BACKENDS.get(name)
    if backend is None:
        _discover()
        backend = _BACKENDS.get(name)
    if backend is None:
        known = ", ".join(_ordered())
        raise UnknownFormatError(
            f"Unknown export format {str(export_format)!r}; known formats: {known}. A format of another package is "
            "available once that package registers it with hub_export.register_backend(...)."
        )
    return backend


class _ExportFormatType(type):
    """``ExportFormat.ONNX``, ``iter(ExportFormat)`` and ``"onnx" in ExportFormat`` read the registry."""

    def __getattr__(cls, name: str) -> ExportFormat:
        if name.startswith("_") or not name.isupper():
            raise AttributeError(name)
        try:
            return cls(name.lower())
        except UnknownFormatError as exc:
            raise AttributeError(str(exc)) from None

    def __iter__(cls) -> Iterator[ExportFormat]:
        return iter([cls(name) for name in backends()])

    def __len__(cls) -> int:
        return len(backends())

    def __contains__(cls, value: object) -> bool:
        return isinstance(value, str) and value.lower() in backends()


class ExportFormat(str, metaclass=_ExportFormatType):
    """The name of a registered export format (a ``str``): ``ExportFormat("onnx") == "onnx"``.

    One instance per name, so ``is`` comparisons hold. Construction validates the name against the registry.

    Raises:
        UnknownFormatError: No backend of that name is registered.
    """

    __slots__ = ()
    _instances: dict[str, ExportFormat] = {}

    def __new__(cls, value: str) -> ExportFormat:
        if isinstance(value, ExportFormat):
            return value
        name = str(value).lower()
        instance = cls._instances.get(name)
        if instance is None or name not in _BACKENDS:
            backend_for(name)  # raises UnknownFormatError listing the known formats
            instance = cls.declare(name)
        return instance

    @classmethod
    def declare(cls, name: str) -> ExportFormat:
        """The format name a backend package uses before its record is registered (no registry check)."""
        return cls._instances.setdefault(name, str.__new__(cls, name))

    @property
    def value(self) -> str:
        """The format name (as on an ``Enum`` member)."""
        return str.__str__(self)

    @property
    def backend(self) -> Backend:
        """The format's :class:`Backend` record."""
        return backend_for(self)

    def __repr__(self) -> str:
        return f"ExportFormat({str.__str__(self)!r})"

    def __str__(self) -> str:
        return str.__str__(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (ExportFormat, (str.__str__(self),))


def parse_format(value: ExportFormat | str) -> ExportFormat:
    """Turn a format name into an :class:`ExportFormat`.

    Raises:
        UnknownFormatError: The name is not a registered format; the message lists the known ones.
    """
    return ExportFormat(value)
