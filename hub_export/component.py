"""``ExportedComponent``: one exported graph in memory (its backend's program and its manifest entry)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._files import copy_file, file_entry, sha256_file
from .errors import ExportError
from .formats import ExportFormat, backend_for, parse_format
from .manifest import ComponentEntry

__all__ = ["ExportMetadata", "ExportedComponent", "ProgramLoader"]

#: What the exporter recorded about one component (signature, files, parity).
ExportMetadata = ComponentEntry

#: ``load() -> (program, folder of its verified files)``: how a component loaded from disk or the Hub gets its program.
ProgramLoader = Callable[[], "tuple[Any, Path]"]


class ExportedComponent:
    """One exported graph: the backend's program and the metadata recorded while tracing.

    A component loaded from a folder or a repo may be lazy: its program is fetched, verified, checked and loaded the
    first time :attr:`program` is read (see :mod:`hub_export.loading`).

    Attributes:
        name: Component name (``model``, ``decode``, ...).
        export_format: Its format.
        metadata: Its :class:`ExportMetadata`.
    """

    def __init__(
        self,
        name: str,
        export_format: ExportFormat | str,
        program: Any,
        metadata: ComponentEntry,
        *,
        files_dir: Path | None = None,
        loader: ProgramLoader | None = None,
    ) -> None:
        self.name = name
        self.export_format = parse_format(export_format)
        self.metadata = metadata
        self._program = program
        self._files_dir = files_dir  # set when loaded from disk: saving copies these verified files verbatim
        self._loader = loader
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        state = type(self._program).__name__ if self._program is not None else "not loaded"
        return f"ExportedComponent(name={self.name!r}, format={self.export_format.value!r}, program={state})"

    @property
    def program(self) -> Any:
        """The backend's program (``ExportedProgram``, ``onnx_ir.Model``, ...); loaded on first access when lazy."""
        if self._program is None and self._loader is not None:
            with self._lock:
                if self._program is None:
                    self._program, self._files_dir = self._loader()
        return self._program

    @program.setter
    def program(self, value: Any) -> None:
        self._program = value

    @property
    def loaded(self) -> bool:
        """Whether the program is in memory."""
        return self._program is not None

    def runner(self, device: str | None = None, **options: Any) -> Any:
        """A runner executing this component on ``device`` (its backend's ``ModelRunner``)."""
        runner_class = backend_for(self.export_format).runner_class
        return runner_class.from_program(self.program, self.metadata, device, **options)

    @property
    def on_disk(self) -> bool:
        """Whether the program comes from verified files (saving copies them) rather than from this process."""
        return self._files_dir is not None and bool(self.metadata.files)

    def save(self, directory: Path, written: list[str] | None = None, stem: str | None = None) -> ComponentEntry:
        """Write this component's files into ``directory``; returns its metadata with the file entries.

        A component loaded from disk copies its verified files verbatim (an edit of a loaded program in memory is
        not saved); one exported in this process is written by its backend, its files named after ``stem`` (default:
        the component's name; see ``Backend.file_stem``), unless ``written`` names the files its backend already
        wrote for it together with the other components (``Backend.save_programs``).
        """
        program = self.program  # a lazy component fetches and verifies its files first
        backend = backend_for(self.export_format)
        if self.on_disk:
            relative = [f.path for f in self.metadata.files]
            for listed in self.metadata.files:
                target = directory / listed.path
                target.parent.mkdir(parents=True, exist_ok=True)
                if not target.exists():
                    copy_file(self._files_dir / listed.path, target)  # type: ignore[operator]
                elif sha256_file(target) != listed.sha256:  # not the file shared with a component saved before
                    raise ExportError(
                        f"Component {self.name!r} reads {listed.path} of the folder it was loaded from, but another "
                        "component of this export comes with a different file of that name; save components "
                        "loaded from different exports into separate folders."
                    )
        elif written is not None:
            relative = list(written)
        else:
            relative = backend.save_program(program, directory, stem or self.name)
        layout = backend.layout
        roles = layout.readable_files(stem or layout.stem_of(self.name, relative)) | dict(layout.shared)
        files = tuple(file_entry(directory, rel, roles.get(rel, "")) for rel in relative)
        return dataclasses.replace(self.metadata, files=files)
