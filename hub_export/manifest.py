"""``export.json``: the manifest dataclasses, and reading, writing and validating them.

Every read and every write validates against ``schemas/export.schema.json`` (JSON Schema 2020-12) and then
checks what a schema cannot: output classes against the allow-list, tensor indices against the signature, and
(on disk) that no listed file leaves the export folder. An invalid manifest raises :class:`ManifestError`
naming the JSON path, before any file of the export is opened.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ._allowlist import resolve_output_class
from .errors import ManifestError
from .signature import TensorSpec

__all__ = [
    "MANIFEST_NAME",
    "SCHEMA_VERSION",
    "FileEntry",
    "Source",
    "ComponentEntry",
    "Manifest",
    "schema",
    "schema_path",
    "validate_manifest_data",
]

MANIFEST_NAME = "export.json"
SCHEMA_VERSION = 1
_MAX_MANIFEST_BYTES = 16 * 1024 * 1024


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
    """One file of a component: relative POSIX path, size in bytes, sha256 hex digest."""

    path: str
    size: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        """As JSON data."""
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


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
    """What the manifest records about one exported component."""

    files: tuple[FileEntry, ...]
    architecture: str | None
    dtype: str
    device: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    input_structure: tuple[tuple[str, dict[str, Any]], ...]
    output_structure: dict[str, Any]
    constants: dict[str, Any] = field(default_factory=dict)
    dims: dict[str, dict[str, int | None]] = field(default_factory=dict)
    parity: dict[str, Any] | None = None
    quantization: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """As JSON data."""
        return {
            "files": [f.to_json() for f in self.files],
            "architecture": self.architecture,
            "dtype": self.dtype,
            "device": self.device,
            "inputs": [s.to_json() for s in self.inputs],
            "outputs": [s.to_json() for s in self.outputs],
            "input_structure": [[name, node] for name, node in self.input_structure],
            "output_structure": self.output_structure,
            "constants": dict(self.constants),
            "dims": {k: dict(v) for k, v in self.dims.items()},
            "parity": self.parity,
            "quantization": self.quantization,
            "extra": dict(self.extra),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ComponentEntry:
        """Build from validated JSON data."""
        return cls(
            files=tuple(FileEntry(**f) for f in data["files"]),
            architecture=data["architecture"],
            dtype=data["dtype"],
            device=data["device"],
            inputs=tuple(TensorSpec.from_json(s) for s in data["inputs"]),
            outputs=tuple(TensorSpec.from_json(s) for s in data["outputs"]),
            input_structure=tuple((name, node) for name, node in data["input_structure"]),
            output_structure=data["output_structure"],
            constants=dict(data["constants"]),
            dims={k: dict(v) for k, v in data["dims"].items()},
            parity=data.get("parity"),
            quantization=data.get("quantization"),
            extra=dict(data.get("extra", {})),
        )


@dataclass(frozen=True)
class Manifest:
    """The whole ``export.json``."""

    export_format: str
    created_with: dict[str, str]
    config: dict[str, Any]
    components: dict[str, ComponentEntry]
    source: Source | None = None
    generation: dict[str, Any] | None = None
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        """As JSON data (validated by :meth:`dumps`)."""
        data = {
            "schema_version": self.schema_version,
            "export_format": self.export_format,
            "created_with": dict(self.created_with),
            "source": self.source.to_json() if self.source else None,
            "config": self.config,
            "components": {name: c.to_json() for name, c in self.components.items()},
        }
        if self.generation is not None:
            data["generation"] = self.generation
        return data

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
            ManifestError: Invalid JSON, schema violation or a class outside the allow-list.
        """
        if len(text) > _MAX_MANIFEST_BYTES:
            raise ManifestError(f"$: export.json is {len(text)} bytes, over the {_MAX_MANIFEST_BYTES} byte limit.")
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ManifestError(f"$: export.json is not valid JSON ({exc}).") from None
        validate_manifest_data(data)
        source = data["source"]
        return cls(
            export_format=data["export_format"],
            created_with=dict(data["created_with"]),
            config=data["config"],
            components={name: ComponentEntry.from_json(c) for name, c in data["components"].items()},
            source=Source(**source) if source else None,
            generation=data.get("generation"),
            schema_version=data["schema_version"],
        )

    @classmethod
    def read(cls, directory: str | Path) -> Manifest:
        """Read and validate ``directory/export.json``, and check its file paths stay inside ``directory``.

        Raises:
            ManifestError: The manifest is missing, invalid, or a listed path leaves the folder.
        """
        directory = Path(directory)
        path = directory / MANIFEST_NAME
        if not path.is_file():
            raise ManifestError(f"$: no {MANIFEST_NAME} in {directory}; is this a hub_export export folder?")
        manifest = cls.loads(path.read_bytes())
        manifest.check_paths(directory)
        return manifest

    def check_paths(self, directory: str | Path) -> None:
        """Refuse listed files that resolve outside ``directory`` (through a symlink, say).

        Raises:
            ManifestError: A path escapes the folder.
        """
        root = Path(directory).resolve()
        for name, component in self.components.items():
            for i, entry in enumerate(component.files):
                target = (root / entry.path).resolve()
                if target != root and root not in target.parents:
                    raise ManifestError(
                        f"$.components.{name}.files[{i}].path: {entry.path!r} resolves outside the export folder."
                    )

    def all_files(self, components: list[str] | None = None) -> list[FileEntry]:
        """The files of the given components (all by default), without duplicates."""
        names = list(self.components) if components is None else components
        seen: dict[str, FileEntry] = {}
        for name in names:
            if name not in self.components:
                raise ManifestError(f"No component {name!r} in this export; it has {sorted(self.components)}.")
            for entry in self.components[name].files:
                seen.setdefault(entry.path, entry)
        return list(seen.values())


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
    errors = sorted(
        _validator().iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path)))
    )
    if errors:
        best = _best_error(errors)
        raise ManifestError(f"{_json_path(best.absolute_path)}: {best.message}")
    for name, component in data["components"].items():
        _check_component(name, component)


def _best_error(errors: list[Any]) -> Any:
    import jsonschema

    return jsonschema.exceptions.best_match(errors) or errors[0]


def _check_component(name: str, component: dict[str, Any]) -> None:
    where = f"$.components.{name}"
    n_in, n_out = len(component["inputs"]), len(component["outputs"])
    for key, node in component["input_structure"]:
        _check_node(node, n_in, f"{where}.input_structure.{key}", None)
    _check_node(component["output_structure"], n_out, f"{where}.output_structure", component["architecture"])
    names = [s["name"] for s in component["inputs"]] + [s["name"] for s in component["outputs"]]
    if len(set(names)) != len(names):
        raise ManifestError(f"{where}: tensor names must be unique across inputs and outputs.")
    paths = [f["path"] for f in component["files"]]
    if len(set(paths)) != len(paths):
        raise ManifestError(f"{where}.files: duplicate paths.")


def _check_node(node: dict[str, Any], count: int, where: str, architecture: str | None) -> None:
    kind = node["type"]
    if kind == "tensor" and node["index"] >= count:
        raise ManifestError(f"{where}.index: {node['index']} is past the {count} tensors of the signature.")
    if kind == "model_output":
        resolve_output_class(node["class"], architecture, where=f"{where}.class")
    children: list[tuple[str, dict[str, Any]]] = []
    if kind in ("tuple", "list"):
        children = [(f"items[{i}]", n) for i, n in enumerate(node["items"])]
    elif kind in ("dict", "model_output"):
        children = [(k, n) for k, n in node.get("items", node.get("fields", []))]
    elif kind == "cache":
        for i, layer in enumerate(node["layers"]):
            for part, kv in layer.items() if "decoder" in layer else [("", layer)]:
                for key in ("conv", "recurrent") if "conv" in kv else ("key", "value"):
                    children.append((f"layers[{i}]{'.' + part if part else ''}.{key}", kv[key]))
    for key, child in children:
        _check_node(child, count, f"{where}.{key}", architecture)
