"""``.pt2`` archives are code unless proven otherwise: the archive is checked as data before torch sees it.

``torch.export.load`` runs more than pickles: it passes symbolic sizes of ``models/model.json`` to
``sympy.sympify`` (which evaluates Python), pastes ``guards_code`` into Python that ``ExportedProgram.module()``
executes, resolves node targets as attributes of ``torch``, ``dlopen``s AOTInductor libraries it finds in the
archive, reads a legacy ``data/weights/model.pt`` whenever it exists, unpickles entries with full pickle, and falls
back to older layouts when its reader fails. So the check (:func:`check`, the same code the loader runs before it
builds anything) requires:

* the zip to be as torch writes it (stored entries, one root folder, no ``..``, absolute, duplicate or overlapping
  entries; sizes from the central directory within the file's listed size) and its entry list to be exactly what
  ``torch.export.save`` writes for one program: no AOTInductor entries (unless ``trust_native_code``), no legacy
  weights, no extra files, no payload file that no config names;
* ``models/model.json`` and the weights/constants configs to match torch's serialization schema strictly, every
  symbolic expression to parse under a small grammar, every guard to be an integer comparison over input sizes,
  node targets to be ATen/prims/quantization operators or the symbolic-size functions, names to be identifiers;
* every pickle (the sample inputs, pickled payloads), of any protocol, to import only allow-listed tensor globals
  (:data:`ALLOWED_GLOBALS`), walked in one linear, size-bounded pass; pickled Python/TorchBind objects are refused.

The loader (:func:`hub_export.backends.dynamo.io.load_program`) then rebuilds the program from the checked bytes
(raw weights by itself, pickles with ``weights_only=True``) and never calls ``torch.export.load``.
``trust_pickles=True`` lets pickles import anything and loads them with full pickle: only for files you made.

A compiled component's AOTInductor package (role ``native``, ``<component>.aoti.pt2``) is a shared library: loading
it runs its code, which no check can vet. It is refused unless the user passed ``trust_native_code=True``; its
portable ``.pt2`` is checked as above either way.
"""

from __future__ import annotations

from pathlib import Path

from ..._pickle import walk_pickle
from ...errors import UnsafeExportError
from ...formats import SafetyOptions
from ...manifest import ComponentEntry
from ._pt2 import ALLOWED_GLOBALS, MAX_PICKLE, read_pt2
from ._shared import open_shared
from .config import LAYOUT

__all__ = ["ALLOWED_GLOBALS", "check", "refuse_untrusted_native", "scan_pickle"]


def check(directory: Path, component: str, entry: ComponentEntry, options: SafetyOptions) -> None:
    """Refuse a ``.pt2`` that is not plain data as ``torch.export.save`` writes it, and native code unless trusted
    (see the module docstring).

    Raises:
        UnsafeExportError: Naming the file, the archive entry and the rule it breaks (or the native package and how
            to opt in).
    """
    paths = LAYOUT.paths(component, [f.path for f in entry.files])
    if "native" in paths:
        refuse_untrusted_native(paths["native"], component, options)
    name = paths["program"]
    size = next(f.size for f in entry.files if f.path == name)
    shared = open_shared(directory, paths, entry)
    try:
        read_pt2(Path(directory) / name, name, options=options, expected_size=size, shared=shared)
    finally:
        if shared is not None:
            shared.close()


def refuse_untrusted_native(native: str, component: str, options: SafetyOptions) -> None:
    """Refuse a compiled component's AOTInductor package unless the user trusts native code.

    Raises:
        UnsafeExportError: Naming the package and how to opt in.
    """
    if not options.trust_native_code:
        raise UnsafeExportError(
            f"{native}: component {component!r} is compiled by AOTInductor into native code (a shared "
            "library), which runs when loaded and cannot be checked. Pass trust_native_code=True to "
            "ExportedModel.from_pretrained only if you trust whoever published this export; or use an export made "
            "without DynamoConfig(compile=...)."
        )


def scan_pickle(data: bytes, where: str) -> None:
    """Walk one pickle (any protocol) and refuse globals outside :data:`ALLOWED_GLOBALS` (nothing is run).

    Persistent ids (``torch.save``'s storages, which ``torch.load`` resolves) are accepted.

    Raises:
        UnsafeExportError: A disallowed or computed global, an extension opcode, a malformed pickle, bytes after its
            end, or a pickle over 1 MiB.
    """
    walk_pickle(data, where, ALLOWED_GLOBALS, max_bytes=MAX_PICKLE, persistent_ids=True)
