"""``export.json``: the manifest dataclasses, and reading, writing and validating them.

Every read and every write validates against ``schemas/export.schema.json`` (JSON Schema 2020-12) and then
checks what a schema cannot: the format is registered, output classes are in the allow-list, tensor indices fit
the signature, size expressions parse under :mod:`hub_export.dims`' grammar, and every listed file has the role
the format's layout gives its exact name (:meth:`Manifest.roles`). An invalid manifest raises
:class:`ManifestError` naming the JSON path, before any file of the export is opened.

Schema version 2 lists every file of the folder once, at the top, with its size, sha256 and role; a component
names its files by path (so a weights file shared by several components is listed, hashed and downloaded once).
Version 1 manifests (files listed per component, side configs unlisted) are still read.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from ._allowlist import resolve_output_class
from ._bounded import json_depth
from .dims import parse_size
from .errors import ManifestError, UnknownFormatError
from .formats import backend_for
from .signature import Signature
from .structure import children

__all__ = [
    "MANIFEST_NAME",
    "MAX_MANIFEST_BYTES",
    "SCHEMA_VERSION",
    "SIDE_FILE_ROLES",
    "ComponentEntry",
    "FileEntry",
    "Manifest",
    "Source",
    "schema",
    "schema_path",
    "validate_manifest_data",
]

MANIFEST_NAME = "export.json"
SCHEMA_VERSION = 2
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
_MAX_JSON_DEPTH = 200

#: Files an export folder may hold besides its programs, by exact name, with their role.
SIDE_FILE_ROLES: dict[str, str] = {
    "config.json": "config",
    "generation_config.json": "generation_config",
    "tokenizer.json": "tokenizer",
    "tokenizer_config.json": "tokenizer",
    "special_tokens_map.json": "tokenizer",
    "added_tokens.json": "tokenizer",
    "vocab.json": "tokenizer",
    "vocab.txt": "tokenizer",
    "merges.txt": "tokenizer",
    "tokenizer.model": "tokenizer",
    "spiece.model": "tokenizer",
    "sentencepiece.bpe.model": "tokenizer",
    "chat_template.jinja": "chat_template",
    "chat_template.json": "chat_template",
    "preprocessor_config.json": "processor",
    "processor_config.json": "processor",
    "feature_extractor_config.json": "processor",
    "image_processor_config.json": "processor",
    "video_preprocessor_config.json": "processor",
}


def schema_path() -> Path:
    """Where the manifest schema is: inside the installed wheel, else the repository's ``schemas/``."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "schemas" / "export.schema.json", here.parent / "schemas" / "export.schema.json"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError("export.schema.json not found: reinstall hub-export (the wheel ships it).")


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    """The manifest JSON Schema."""
    return json.loads(schema_path().read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def _validator() -> Any:
    import jsonschema

    return jsonschema.Draft202012Validator(schema())


def _json_path(parts: Any) -> str:
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


@dataclass(frozen=True)
class FileEntry:
    """One file of an export: relative POSIX path, size in bytes, sha256 hex digest and role."""

    path: str
    size: int
    sha256: str
    role: str = ""

    def to_json(self) -> dict[str, Any]:
        """As JSON data."""
        return {"path": self.path, "size": self.size, "sha256": self.sha256, "role": self.role}


@dataclass(frozen=True)
class Source:
    """Where the exported model came from on the Hub.

    Attributes:
        repo_id: Source repo.
        revision: The resolved 40-hex commit that was exported.
        requested_revision: What the user asked for (``main``, a tag, ...).
        endpoint: The Hub endpoint, when not huggingface.co.
    """

    repo_id: str
    revision: str
    requested_revision: str | None = None
    endpoint: str | None = None

    def to_json(self) -> dict[str, Any]:
        """As JSON data."""
        return {
            "repo_id": self.repo_id,
            "revision": self.revision,
            "requested_revision": self.requested_revision,
            "endpoint": self.endpoint,
        }


@dataclass(frozen=True)
class ComponentEntry:
    """What the manifest records about one exported component.

    Attributes:
        files: Its files (entries of the manifest's file list), main file first.
        signature: Its traced :class:`~hub_export.signature.Signature`.
        architecture: The model class it was traced from.
        dtype: The model's dtype.
        device: The device it was traced on.
        parity: ``{max_abs_diff, atol, inputs}`` measured against eager at export time.
        quantization: The quantizer's recipe, or None.
        extra: Backend-specific plain data.
        weights: The traced program's weights by dtype, ``{dtype: {"count": n, "bytes": n}}`` (each storage once),
            or None when not recorded.
    """

    files: tuple[FileEntry, ...]
    signature: Signature
    architecture: str | None
    dtype: str
    device: str
    parity: dict[str, Any] | None = None
    quantization: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    weights: dict[str, dict[str, int]] | None = None

    def over_tolerance(self) -> str | None:
        """Why this component's recorded parity refuses it (``publish``, ``sync``), or None.

        A float export is held to its ``atol``; a quantized one differs from eager by design (its quality is measured
        as docs/quantization.md says), so its parity is recorded, not held to the float tolerance.
        """
        parity = self.parity or {}
        diff, atol = parity.get("max_abs_diff"), parity.get("atol")
        if self.quantization is not None or diff is None or atol is None or diff <= atol:
            return None
        return f"max abs diff vs eager {diff:.3g} is over atol {atol:g}"

    def to_json(self) -> dict[str, Any]:
        """As JSON data (files by path: the manifest lists them once at the top)."""
        return {
            "files": [f.path for f in self.files],
            "architecture": self.architecture,
            "dtype": self.dtype,
            "device": self.device,
            **self.signature.to_json(),
            "parity": self.parity,
            **({"weights": self.weights} if self.weights is not None else {}),
            "quantization": self.quantization,
            "extra": dict(self.extra),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], files: dict[str, FileEntry], where: str) -> ComponentEntry:
        """Build from validated JSON data; ``files`` maps the manifest's paths to their entries."""
        return cls(
            files=tuple(files[p if isinstance(p, str) else p["path"]] for p in data["files"]),
            signature=Signature.from_json(data, where),
            architecture=data["architecture"],
            dtype=data["dtype"],
            device=data["device"],
            parity=data.get("parity"),
            quantization=data.get("quantization"),
            extra=dict(data.get("extra", {})),
            weights=data.get("weights"),
        )


@dataclass(frozen=True)
class Manifest:
    """The whole ``export.json``.

    Attributes:
        export_format: The format's name.
        created_with: ``{package: version}`` of what made the export.
        config: The export config (``ExportConfig.to_dict()``).
        components: Component name -> :class:`ComponentEntry`.
        files: Every file of the folder but ``export.json``, once (programs, weights, configs, tokenizer files).
        source: Where the model came from on the Hub.
        generation: The generation loop's plan (``export_for_generation``), or None.
        task: The pipeline task the export serves, or None.
        schema_version: The version it was read as (written as :data:`SCHEMA_VERSION`).
    """

    export_format: str
    created_with: dict[str, str]
    config: dict[str, Any]
    components: dict[str, ComponentEntry]
    files: tuple[FileEntry, ...] = ()
    source: Source | None = None
    generation: dict[str, Any] | None = None
    task: str | None = None
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        """As JSON data (validated by :meth:`dumps`)."""
        data = {
            "schema_version": SCHEMA_VERSION,
            "export_format": self.export_format,
            "task": self.task,
            "created_with": dict(self.created_with),
            "source": self.source.to_json() if self.source else None,
            "config": self.config,
            "files": [f.to_json() for f in self.all_listed()],
            "components": {name: c.to_json() for name, c in self.components.items()},
        }
        if self.generation is not None:
            data["generation"] = self.generation
        return data

    def all_listed(self) -> list[FileEntry]:
        """Every file the manifest lists: :attr:`files`, plus component files missing from it (one entry a path)."""
        seen = {f.path: f for f in self.files}
        for component in self.components.values():
            for entry in component.files:
                seen.setdefault(entry.path, entry)
        return list(seen.values())

    def dumps(self) -> str:
        """Validated JSON text.

        Raises:
            ManifestError: The manifest does not satisfy the schema.
        """
        data = self.to_json()
        validate_manifest_data(data)
        return json.dumps(data, indent=2, sort_keys=False) + "\n"

    def write(self, directory: str | Path) -> Path:
        """Validate and write ``export.json`` into ``directory``."""
        path = Path(directory) / MANIFEST_NAME
        path.write_text(self.dumps(), encoding="utf-8")
        return path

    @classmethod
    def loads(cls, text: str | bytes) -> Manifest:
        """Parse and validate manifest text.

        Raises:
            ManifestError: Invalid JSON, schema violation, an unknown format or file, a class outside the allow-list.
        """
        if len(text) > MAX_MANIFEST_BYTES:
            raise ManifestError(f"export.json is {len(text)} bytes, over the {MAX_MANIFEST_BYTES} byte limit.")
        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, and integers past the digit limit
            raise ManifestError(f"export.json is not valid JSON ({str(exc)[:200]}).") from None
        except RecursionError:
            raise ManifestError("export.json is nested too deeply.") from None
        validate_manifest_data(data)
        return cls._from_data(data)

    @classmethod
    def _from_data(cls, data: dict[str, Any]) -> Manifest:
        version = data["schema_version"]
        if version == 1:
            files = _v1_files(data)
        else:
            files = {f["path"]: FileEntry(**f) for f in data["files"]}
        source = data["source"]
        components = {
            name: ComponentEntry.from_json(c, files, f"$.components.{name}") for name, c in data["components"].items()
        }
        return cls(
            export_format=data["export_format"],
            created_with=dict(data["created_with"]),
            config=data["config"],
            components=components,
            files=tuple(files.values()),
            source=Source(**source) if source else None,
            generation=data.get("generation"),
            task=data.get("task"),
            schema_version=version,
        )

    @classmethod
    def read(cls, directory: str | Path) -> Manifest:
        """Read and validate ``directory/export.json``, and check every listed file is a plain file inside the folder.

        The manifest is stat-checked (a regular file, not a symlink, at most :data:`MAX_MANIFEST_BYTES`) before a
        byte of it is read.

        Raises:
            ManifestError: The manifest is missing, invalid, too large, a symlink, or a listed path leaves the folder.
        """
        directory = Path(directory)
        path = directory / MANIFEST_NAME
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            raise ManifestError(f"no {MANIFEST_NAME} in {directory}; is this a hub_export export folder?") from None
        if not stat.S_ISREG(info.st_mode):
            raise ManifestError(f"{path} is not a regular file (a symlink or a device); refusing to read it.")
        if info.st_size > MAX_MANIFEST_BYTES:
            raise ManifestError(f"export.json is {info.st_size} bytes, over the {MAX_MANIFEST_BYTES} byte limit.")
        with open(path, "rb") as handle:
            manifest = cls.loads(handle.read(MAX_MANIFEST_BYTES + 1))
        manifest.check_paths(directory)
        return manifest

    def check_paths(self, directory: str | Path, *, symlinks_into: str | Path | None = None) -> None:
        """Refuse listed files that are, or pass through, a symlink, or resolve outside ``directory``.

        Args:
            directory: The export folder.
            symlinks_into: A folder symlinks may point into (the huggingface_hub cache's ``blobs/``, whose snapshot
                files are symlinks); None: no symlink is accepted.

        Raises:
            ManifestError: A path escapes the folder or passes through a symlink.
        """
        root = Path(directory)
        real_root = root.resolve()
        blobs = Path(symlinks_into).resolve() if symlinks_into is not None else None
        for i, entry in enumerate(self.all_listed()):
            where = f"$.files[{i}].path: {entry.path!r}"
            current = root
            parts = entry.path.split("/")
            for depth, part in enumerate(parts):
                current = current / part
                if not os.path.islink(current):
                    continue
                target = Path(os.path.realpath(current))
                last = depth == len(parts) - 1
                if not (last and blobs is not None and (target == blobs or blobs in target.parents)):
                    raise ManifestError(f"{where} is or passes through a symlink; an export folder holds plain files.")
            target = Path(os.path.realpath(root / entry.path))
            inside = target == real_root or real_root in target.parents
            if not inside and not (blobs is not None and blobs in target.parents):
                raise ManifestError(f"{where} resolves outside the export folder.")

    def loaded_components(self) -> list[str]:
        """The components a load takes unless asked for others: all but those the generation plan lists for other
        runtimes only (its ``runtimes``: ExecuTorch's LLM runner program, which hub_export's ``generate()`` never
        runs)."""
        runtimes = (self.generation or {}).get("runtimes") or {}
        others = {name for name in runtimes.values() if isinstance(name, str)}
        return [name for name in self.components if name not in others]

    def component_files(self, components: list[str] | None = None) -> list[FileEntry]:
        """The files of the given components (all by default), each once.

        Raises:
            ManifestError: A component does not exist (the message lists those that do).
        """
        names = list(self.components) if components is None else components
        seen: dict[str, FileEntry] = {}
        for name in names:
            if name not in self.components:
                raise ManifestError(f"No component {name!r} in this export; it has {sorted(self.components)}.")
            for entry in self.components[name].files:
                seen.setdefault(entry.path, entry)
        return list(seen.values())

    def side_files(self, role: str | None = None) -> list[FileEntry]:
        """The listed files that belong to no component (configs, tokenizer and processor files), by role."""
        own = {entry.path for c in self.components.values() for entry in c.files}
        return [f for f in self.all_listed() if f.path not in own and (role is None or f.role == role)]

    def roles(self) -> dict[str, str]:
        """``{path: role}`` of every listed file, from the format's layout and the side-file names.

        This is the one role map: loaders and safety checks find files through it, by exact name as the exporter
        wrote it; the role a manifest records must agree with it.

        Raises:
            ManifestError: A file is unknown to the layout, or its recorded role differs.
        """
        try:
            layout = backend_for(self.export_format).layout
        except UnknownFormatError as exc:
            raise ManifestError(f"$.export_format: {exc}") from None
        shared = dict(layout.shared)
        expected: dict[str, str] = {**SIDE_FILE_ROLES, **dict(layout.extras), **shared}
        own: dict[str, dict[str, str]] = {}
        owner: dict[str, str] = {}
        for name, component in self.components.items():
            listed = [entry.path for entry in component.files]
            if not listed:
                continue
            try:
                own[name] = layout.readable_files(layout.stem_of(name, listed))
            except ManifestError:  # no (or an ambiguous) program file: its files are unknown, refused below
                own[name] = {}
            for path in listed:
                if path in own[name] and owner.setdefault(path, name) != name:
                    raise ManifestError(
                        f"$.components.{name}.files: {path!r} is a file of component {owner[path]!r} too."
                    )
            expected.update(own[name])
        roles: dict[str, str] = {}
        for i, entry in enumerate(self.all_listed()):
            role = expected.get(entry.path)
            if role is None:
                raise ManifestError(
                    f"$.files[{i}].path: {entry.path!r} is not a file a {self.export_format} export has; "
                    "refusing an export with unknown files."
                )
            if entry.role and entry.role != role:
                raise ManifestError(f"$.files[{i}].role: {entry.path!r} is a {role} file, not {entry.role!r}.")
            roles[entry.path] = role
        for name, component in self.components.items():
            for entry in component.files:
                if entry.path not in own.get(name, {}) and entry.path not in shared:
                    raise ManifestError(
                        f"$.components.{name}.files: {entry.path!r} is not a file of component {name!r}."
                    )
        return roles

    def with_files(self, files: list[FileEntry]) -> Manifest:
        """A copy whose file list is ``files`` (components' entries updated to the same paths)."""
        by_path = {f.path: f for f in files}
        components = {
            name: replace(c, files=tuple(by_path.get(f.path, f) for f in c.files))
            for name, c in self.components.items()
        }
        return replace(self, files=tuple(files), components=components)


def _v1_files(data: dict[str, Any]) -> dict[str, FileEntry]:
    files: dict[str, FileEntry] = {}
    for component in data["components"].values():
        for entry in component["files"]:
            if not isinstance(entry, dict):
                raise ManifestError("$.components: schema_version 1 lists file objects, not paths.")
            files.setdefault(entry["path"], FileEntry(entry["path"], entry["size"], entry["sha256"]))
    return files


def validate_manifest_data(data: Any) -> None:
    """Validate manifest JSON data against the schema and the semantic rules.

    Raises:
        ManifestError: Naming the JSON path of the first problem and what was expected.
    """
    if (
        isinstance(data, dict)
        and isinstance(data.get("schema_version"), int)
        and data["schema_version"] > SCHEMA_VERSION
    ):
        raise ManifestError(
            f"$.schema_version: {data['schema_version']} is newer than this hub_export understands ({SCHEMA_VERSION}); "
            "upgrade hub-export."
        )
    if json_depth(data, _MAX_JSON_DEPTH) >= _MAX_JSON_DEPTH:
        raise ManifestError(f"export.json is nested deeper than {_MAX_JSON_DEPTH} levels.")
    if _written_by_transformers_exporters(data):
        raise ManifestError(
            "this export.json was written by transformers.exporters, whose exports hub_export does not load (they "
            "record no file hashes or parity): re-export the model with hub_export (the same calls, imported from "
            "hub_export), or load this one with transformers.exporters."
        )
    try:
        errors = sorted(
            _validator().iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path)))
        )
    except RecursionError:
        raise ManifestError("export.json is nested too deeply.") from None
    if errors:
        best = _best_error(errors)
        where = _json_path(best.absolute_path)
        raise ManifestError(f"{'export.json' if where == '$' else where}: {best.message}")
    try:
        backend_for(data["export_format"])
    except UnknownFormatError as exc:
        raise ManifestError(f"$.export_format: {exc}") from None
    version = data["schema_version"]
    if version >= 2 and "files" not in data:
        raise ManifestError("$.files: schema_version 2 lists every file of the export at the top.")
    listed = {f["path"] for f in data.get("files", [])}
    if version >= 2 and len(listed) != len(data["files"]):
        raise ManifestError("$.files: duplicate paths.")
    for name, component in data["components"].items():
        _check_component(name, component, version, listed)


def _written_by_transformers_exporters(data: Any) -> bool:
    """Whether ``data`` is the manifest ``transformers.exporters`` writes: no ``created_with``, and components as
    ``{"file": ..., "metadata": ...}``."""
    components = data.get("components") if isinstance(data, dict) else None
    return (
        isinstance(components, dict)
        and "created_with" not in data
        and bool(components)
        and all(isinstance(c, dict) and {"file", "metadata"} <= set(c) for c in components.values())
    )


def _best_error(errors: list[Any]) -> Any:
    import jsonschema

    return jsonschema.exceptions.best_match(errors) or errors[0]


def _check_component(name: str, component: dict[str, Any], version: int, listed: set[str]) -> None:
    where = f"$.components.{name}"
    n_in, n_out = len(component["inputs"]), len(component["outputs"])
    for key, node in component["input_structure"]:
        _check_node(node, n_in, f"{where}.input_structure.{key}", None)
    _check_node(component["output_structure"], n_out, f"{where}.output_structure", component["architecture"])
    names = [s["name"] for s in component["inputs"]] + [s["name"] for s in component["outputs"]]
    if len(set(names)) != len(names):
        raise ManifestError(f"{where}: tensor names must be unique across inputs and outputs.")
    paths = [f if isinstance(f, str) else f["path"] for f in component["files"]]
    if len(set(paths)) != len(paths):
        raise ManifestError(f"{where}.files: duplicate paths.")
    for i, entry in enumerate(component["files"]):
        if version >= 2 and (not isinstance(entry, str) or entry not in listed):
            raise ManifestError(f"{where}.files[{i}]: {entry!r} must be a path listed in $.files.")
        if version == 1 and isinstance(entry, str):
            raise ManifestError(f"{where}.files[{i}]: schema_version 1 lists file objects.")
    dims = set(component["dims"])
    for side in ("inputs", "outputs"):
        for i, spec in enumerate(component[side]):
            for axis, dim in enumerate(spec["shape"]):
                if isinstance(dim, str):
                    try:
                        parse_size(dim, dims if side == "inputs" else None)
                    except ValueError as exc:
                        raise ManifestError(
                            f"{where}.{side}[{i}].shape[{axis}]: {dim!r} is not a size expression ({exc})."
                        ) from None
    for dim_name, bounds in component["dims"].items():
        if bounds.get("max") is not None and bounds["max"] < bounds["min"]:
            raise ManifestError(f"{where}.dims.{dim_name}: max {bounds['max']} is below min {bounds['min']}.")


def _check_node(node: dict[str, Any], count: int, where: str, architecture: str | None) -> None:
    stack = [(node, where)]
    while stack:
        current, path = stack.pop()
        kind = current["type"]
        if kind == "tensor" and current["index"] >= count:
            raise ManifestError(f"{path}.index: {current['index']} is past the {count} tensors of the signature.")
        if kind == "model_output":
            resolve_output_class(current["class"], architecture, where=f"{path}.class")
        stack.extend((child, f"{path}.{key}") for key, child in children(current))
