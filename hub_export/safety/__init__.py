"""Checks run on an export's files before a backend parses them (the files are already sha256-verified).

A sha256 in ``export.json`` only proves that the files are the ones the publisher listed; it says nothing about
whether the publisher can be trusted. These checks refuse files that would run code, read outside the export
folder or index past the end of their weights when loaded:

* ``dynamo`` (``.pt2``): every pickle in the archive may reference only allow-listed globals (tensor rebuild
  functions, storages, ``OrderedDict``, dtypes); ``trust_pickles=True`` skips this (dangerous: full pickle).
* ``onnx``: external data stays inside the folder, names a manifest file and fits in it; only standard
  operator domains unless ``allow_custom_domains`` lists more.
* ``openvino``: no DTD/entities in the XML, the ``.bin`` covers every ``Const``, only standard opsets.
* ``executorch``: the ``.pte`` headers are consistent (the runtime then verifies the program fully).

Each check raises :class:`~hub_export.errors.UnsafeExportError` naming the file and what it refused.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from pathlib import Path

from ..formats import ExportFormat, parse_format
from ..manifest import ComponentEntry

__all__ = ["check_component", "STANDARD_ONNX_DOMAINS"]

#: ONNX operator domains loaded without ``allow_custom_domains``.
STANDARD_ONNX_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft"})

_CHECKS = {
    ExportFormat.DYNAMO: "pt2",
    ExportFormat.ONNX: "onnx",
    ExportFormat.OPENVINO: "openvino",
    ExportFormat.EXECUTORCH: "executorch",
}


def check_component(
    export_format: ExportFormat | str,
    directory: str | Path,
    entry: ComponentEntry,
    *,
    trust_pickles: bool = False,
    allow_custom_domains: Iterable[str] = (),
) -> None:
    """Refuse a component whose files are unsafe to hand to its backend's loader.

    Args:
        export_format: The export's format.
        directory: The export folder.
        entry: The component's manifest entry (its files were verified against it).
        trust_pickles: Skip the pickle allow-list of ``.pt2`` archives. DANGEROUS: a crafted archive then
            runs arbitrary code when loaded; only for files you produced yourself.
        allow_custom_domains: Extra ONNX operator domains to accept (their kernels come from libraries you
            register with ONNX Runtime yourself).

    Raises:
        UnsafeExportError: A file would run code, read outside the folder or past its data when loaded.
    """
    module = _CHECKS.get(parse_format(export_format))
    if module is None:
        return
    check = importlib.import_module(f"{__name__}.{module}").check
    check(Path(directory), entry, trust_pickles=trust_pickles, allow_custom_domains=frozenset(allow_custom_domains))
