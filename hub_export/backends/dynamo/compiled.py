"""Compiled ``.pt2``: the ExportedProgram compiled ahead of time by AOTInductor, and the target it runs on.

``DynamoConfig(compile="aoti")`` compiles each component with ``torch._inductor.aoti_compile_and_package`` (the
program's dynamic shapes are kept) into an AOTInductor package, saved beside the program as
``<component>.aoti.pt2`` (role ``native``): a shared library of generated kernels, with or without the weights
(``DynamoConfig.compiled_weights``, below). It is native code: loading it runs it, so a loader refuses it unless the user passed
``trust_native_code=True`` (see ``docs/security.md``).

The component's manifest ``extra`` records what it was compiled for (:func:`current_target`)::

    {"compile": "aoti", "compiled_weights": "packed",
     "target": {"device": "cpu", "machine": "x86_64", "march": "x86-64-v4", "cpu_features": ["avx512bw", ...],
                "torch": "2.13"}}

and :func:`check_target` refuses another machine, CPU, device or torch version with a ``DeviceUnavailableError``
before the library is loaded. On x86 the kernels are built for a portable micro-architecture level (``x86-64-v4``
when the CPU has AVX-512, else ``x86-64-v3`` or ``x86-64-v2``) instead of inductor's ``-march=native``, so a package
runs on every CPU of that level that also has the vector extensions inductor picked.

``compiled_weights="packed"`` (the default): the package holds its weights; on CPU they are frozen into it, the
linear layers' prepacked in oneDNN's blocked layout for the compiling CPU's instruction set (which the target check
covers), and the package runs by itself.

``compiled_weights="shared"``: the package holds no weights (``aot_inductor.package_constants_in_so=False``,
:func:`inductor_configs`): its constants are the program's own parameters, buffers and tensor constants, by FQN, and
come at load from the component's portable ``.pt2`` and the export's ``shared.safetensors`` (the tensors
:func:`.io.load_program` maps, not copies), handed to the loaded package with ``load_constants(...,
user_managed=True)``: the package reads them where they are, so the components of one export hold each weight they
share once, on disk and in memory. The package records, in its metadata (:data:`CONSTANTS_METADATA`), the dtype,
shape and strides of every constant it was compiled for; :func:`load_compiled` refuses constants that differ, or a
package that asks for one the program lacks, before the package runs (AOTInductor itself checks nothing of a
user-managed constant). A package without that metadata (``"packed"``) loads its own weights.
"""

from __future__ import annotations

import functools
import json
import platform
import tempfile
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..._bounded import MiB, loads_bounded_json
from ...errors import DeviceUnavailableError, ExportError, UnsafeExportError

__all__ = [
    "COMPILERS",
    "CONSTANTS_METADATA",
    "CompiledProgram",
    "check_target",
    "compile_aoti",
    "current_target",
    "inductor_configs",
    "load_compiled",
]

#: The ``DynamoConfig.compile`` values.
COMPILERS = ("aoti",)
#: The package metadata entry listing the constants it was compiled for: JSON ``{fqn: [dtype, shape, strides]}``.
CONSTANTS_METADATA = "hub_export_constants"
MAX_CONSTANTS_METADATA = 64 * MiB
#: Device copies of host constants, alive while a loaded package holds them (see :func:`_on_device`).
_DEVICE_COPIES: weakref.WeakValueDictionary[tuple[Any, ...], Any] = weakref.WeakValueDictionary()

#: x86-64 micro-architecture levels, highest first, with the CPU flags (``/proc/cpuinfo``) each one needs.
_X86_LEVELS = (
    ("x86-64-v4", ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")),
    ("x86-64-v3", ("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe")),
    ("x86-64-v2", ("sse4_1", "sse4_2", "ssse3", "popcnt")),
)
#: compiler ``-m`` flags whose CPU flag is spelled differently
_FLAG_NAMES = {"avx512bf16": "avx512_bf16", "avx512vnni": "avx512_vnni", "avx512fp16": "avx512_fp16"}


@dataclass
class CompiledProgram:
    """An AOTInductor package and the ExportedProgram it was compiled from.

    Attributes:
        package: Path of the ``.pt2`` package (the shared library; the weights are the program's).
        target: What it was compiled for (:func:`current_target`).
        exported: The ExportedProgram it was compiled from (rebuilt from its checked ``.pt2`` when loaded from
            disk): its tensors are the package's constants.
        program_path: The saved ExportedProgram's path when loaded from disk.
    """

    package: Path
    target: dict[str, Any]
    exported: Any = None
    program_path: Path | None = None
    _keepalive: Any = field(default=None, repr=False)  # the temporary folder of a package compiled in memory


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _x86_level(flags: set[str]) -> tuple[str | None, tuple[str, ...]]:
    for level, needed in _X86_LEVELS:
        if set(needed) <= flags:
            return level, needed
    return None, ()


@functools.lru_cache(maxsize=1)
def _vec_isa() -> Any:
    from torch._inductor import cpu_vec_isa

    return cpu_vec_isa.pick_vec_isa()


def current_target(device: str = "cpu") -> dict[str, Any]:
    """What a package compiled here for ``device`` runs on: the device, the machine, the x86 level and CPU features
    the generated kernels use (CPU), the compute capability (CUDA), and torch's major.minor version.

    Raises:
        DeviceUnavailableError: ``device`` is CUDA and torch sees none.
    """
    import torch

    version = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    kind = str(device).split(":")[0]
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise DeviceUnavailableError("compile='aoti' for CUDA needs a CUDA device; none is visible to torch.")
        major, minor = torch.cuda.get_device_capability(torch.device(device))
        return {"device": "cuda", "capability": f"sm_{major}{minor}", "torch": version}
    if kind != "cpu":
        raise DeviceUnavailableError(f"compile='aoti' compiles for 'cpu' or 'cuda', not {device!r}.")
    machine = platform.machine().lower()
    flags = _cpu_flags()
    level, needed = _x86_level(flags) if machine in ("x86_64", "amd64") else (None, ())
    isa = _vec_isa()
    isa_flags = [_FLAG_NAMES.get(f, f.replace("-", "_")) for f in _isa_compiler_flags(isa)]
    features = sorted({*needed, *(f for f in isa_flags if f in flags)})
    return {
        "device": "cpu",
        "machine": machine,
        "march": level,
        "vec_isa": str(isa) or None,
        "cpu_features": features,
        "torch": version,
    }


def _isa_compiler_flags(isa: Any) -> list[str]:
    """The ``-m<feature>`` flags inductor compiles its vectorized kernels with (``-mavx512f`` -> ``avx512f``)."""
    try:
        text = isa.build_arch_flags() if isa else ""
    except Exception:  # noqa: BLE001 - an ISA object without flags
        text = ""
    return [f[2:] for f in str(text).split() if f.startswith("-m") and not f.startswith(("-march", "-mtune"))]


def check_target(target: dict[str, Any], device: str | None, where: str) -> None:
    """Refuse to load a package compiled for another device, machine, CPU or torch version.

    Raises:
        DeviceUnavailableError: Naming what differs and how to get a package that runs here.
    """
    import torch

    fix = (
        "Re-export it here with DynamoConfig(compile='aoti'), or export without compile= for a portable .pt2 "
        "that runs anywhere torch does."
    )
    compiled_for = str(target.get("device"))
    wanted = str(device or compiled_for).split(":")[0]
    if wanted != compiled_for:
        raise DeviceUnavailableError(
            f"{where} was compiled by AOTInductor for {compiled_for!r} and cannot run on {wanted!r}; load it with "
            f"device={compiled_for!r}. {fix}"
        )
    version = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    if target.get("torch") != version:
        raise DeviceUnavailableError(
            f"{where} was compiled with torch {target.get('torch')}, this is torch {version}: AOTInductor packages "
            f"run only on the torch version that compiled them. {fix}"
        )
    if compiled_for == "cuda":
        if not torch.cuda.is_available():
            raise DeviceUnavailableError(f"{where} was compiled for CUDA and torch sees no CUDA device here. {fix}")
        major, minor = torch.cuda.get_device_capability(torch.device(device or "cuda"))
        if target.get("capability") != f"sm_{major}{minor}":
            raise DeviceUnavailableError(
                f"{where} was compiled for a CUDA device of compute capability {target.get('capability')}, this one "
                f"is sm_{major}{minor}. {fix}"
            )
        return
    machine = platform.machine().lower()
    if target.get("machine") != machine:
        raise DeviceUnavailableError(
            f"{where} was compiled for {target.get('machine')} CPUs, this machine is {machine}. {fix}"
        )
    missing = sorted(set(target.get("cpu_features") or ()) - _cpu_flags())
    if missing:
        raise DeviceUnavailableError(
            f"{where} was compiled for {target.get('march') or 'a CPU'} with {target.get('vec_isa')} kernels; this "
            f"CPU lacks {', '.join(missing)}. {fix}"
        )


def inductor_configs(target: dict[str, Any], weights: str = "packed") -> dict[str, Any]:
    """The inductor settings a package for ``target`` is compiled with (``weights``: ``DynamoConfig.compiled_weights``).

    ``"packed"``, on CPU:

    * ``freezing``: the weights become constants, so inductor folds what depends on them only and prepacks each
      linear layer's weight into oneDNN's blocked layout; the matrix products run as oneDNN ``linear`` kernels
      instead of ``mm`` over row-major weights (see ``docs/benchmarks.md`` for the gain). Inductor applies it only
      to an inference graph, hence :func:`compile_aoti` compiles under ``torch.no_grad()``.

    ``"shared"``:

    * ``aot_inductor.package_constants_in_so=False``: the package holds no weights; they come at load from the
      export's files (see the module docstring). Inductor's ``freezing`` stays off: it would fold and prepack the
      weights into new constants (``_frozen_param<N>``, the linear layers' in oneDNN's blocked layout) that no longer
      are the program's tensors, so each package would carry its own copy again; it is set off explicitly, whatever
      ``TORCHINDUCTOR_FREEZING`` says.

    On CPU, both:

    * ``cpp.dynamic_threads``: the generated kernels ask OpenMP for the thread count when they run (what
      ``torch.set_num_threads`` set) instead of the count of the compiling process, written into the library: a
      package compiled on a 64-core machine would otherwise start 64 threads per kernel on a 2-core one.
    * ``cpp.march``: a portable x86 level instead of ``-march=native`` (see the module docstring).
    """
    configs: dict[str, Any] = {}
    if weights == "shared":
        configs.update({"aot_inductor.package_constants_in_so": False, "freezing": False})
    if target["device"] == "cpu":
        if weights == "packed":
            configs["freezing"] = True
        configs["cpp.dynamic_threads"] = True
        if target.get("march"):
            configs["cpp.march"] = target["march"]
    return configs


def compile_aoti(program: Any, device: str = "cpu", weights: str = "packed") -> CompiledProgram:
    """Compile an ExportedProgram with AOTInductor into a package in a temporary folder (kept with the result);
    ``weights`` is ``DynamoConfig.compiled_weights`` (see :func:`inductor_configs`).

    Raises:
        ExportError: AOTInductor failed (a C++ compiler is needed: ``g++`` on Linux).
    """
    import torch

    target = current_target(device)
    folder = tempfile.TemporaryDirectory(prefix="hub_export_aoti_")
    path = Path(folder.name) / "model.aoti.pt2"
    configs = inductor_configs(target, weights)
    if weights == "shared":
        configs["aot_inductor.metadata"] = {CONSTANTS_METADATA: json.dumps(_constants_table(program))}
    try:
        # Inductor freezes only an inference graph: under grad mode it would skip ``freezing`` silently.
        with torch.no_grad():
            torch._inductor.aoti_compile_and_package(program, package_path=str(path), inductor_configs=configs)
    except Exception as exc:  # inductor and the C++ compiler raise many types
        raise ExportError(
            f"AOTInductor could not compile the program: {type(exc).__name__}: {str(exc)[:1500]}\n"
            "It needs a C++ compiler (g++ or clang++ on PATH, or CXX); export without compile= to skip compiling."
        ) from exc
    return CompiledProgram(package=path, target=target, exported=program, _keepalive=folder)


def _program_tensors(program: Any) -> dict[str, Any]:
    """``{FQN: tensor}`` of an ExportedProgram's parameters, buffers and tensor constants (what AOTInductor makes its
    constants of, by the same names)."""
    import torch

    found = {**program.state_dict, **program.constants}
    return {fqn: t.detach() for fqn, t in found.items() if isinstance(t, torch.Tensor)}


def _spec(tensor: Any) -> list[Any]:
    return [str(tensor.dtype).removeprefix("torch."), list(tensor.shape), list(tensor.stride())]


def _constants_table(program: Any) -> dict[str, list[Any]]:
    """What the package is compiled for: ``{FQN: [dtype, shape, strides]}`` of the program's tensors."""
    return {fqn: _spec(t) for fqn, t in _program_tensors(program).items()}


def _package_constants(model: Any, program: CompiledProgram, device: Any, where: str) -> dict[str, Any] | None:
    """The tensors a package without weights reads, checked against what it was compiled for; None for a package
    that holds its own (compiled before :data:`CONSTANTS_METADATA`).

    Raises:
        UnsafeExportError: The package asks for a constant the program lacks, or one whose dtype, shape or strides
            differ from the program's (reading it would run the kernels over the wrong memory).
    """
    metadata = model.get_metadata()
    if CONSTANTS_METADATA not in metadata:
        return None
    fix = "refusing to load it. Re-download or re-export it (the package and its .pt2 must come from one export)."
    text = metadata[CONSTANTS_METADATA].encode()
    if len(text) > MAX_CONSTANTS_METADATA:
        raise UnsafeExportError(f"{where}: its package lists {len(text)} bytes of constants; {fix}")
    table = loads_bounded_json(text, f"{where}: the package's constants", max_containers=len(text) // 2 + 2)
    if not isinstance(table, dict) or program.exported is None:
        raise UnsafeExportError(f"{where}: its package's constants table is not a JSON object; {fix}")
    tensors = _program_tensors(program.exported)
    constants = {}
    for fqn in model.get_constant_fqns():
        tensor = tensors.get(fqn)
        if tensor is None or fqn not in table:
            raise UnsafeExportError(f"{where}: its package reads a constant {fqn[:120]!r} its program lacks; {fix}")
        if _spec(tensor) != table[fqn]:
            raise UnsafeExportError(
                f"{where}: constant {fqn[:120]!r} is {_spec(tensor)} (dtype, shape, strides) in the program, but "
                f"its package was compiled for {str(table[fqn])[:200]}; {fix}"
            )
        same = tensor.device.type == device.type and device.index in (None, tensor.device.index)
        constants[fqn] = tensor if same else _on_device(tensor, device)
    return constants


def _on_device(tensor: Any, device: Any) -> Any:
    """``tensor`` copied to ``device`` once per process: components whose constants are one memory (a weight of
    ``shared.safetensors``) get one copy on the device too. The copy keeps its source alive, so the source's address
    (the key) names no other memory while the copy is found under it."""
    key = (tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tuple(tensor.stride()), str(device))
    copy = _DEVICE_COPIES.get(key)
    if copy is None:
        copy = _DEVICE_COPIES[key] = tensor.to(device)
        copy.hub_export_source = tensor
    return copy


def load_compiled(program: CompiledProgram, device: str | None, where: str) -> Any:
    """Check the target, load the package's model (a callable taking the program's flat inputs), and hand it its
    constants, the program's tensors where they are (``user_managed``: not copied; the model keeps them alive)."""
    import torch

    check_target(program.target, device, where)
    index = torch.device(device).index if device and ":" in str(device) else -1
    model: Any = torch._inductor.aoti_load_package(
        str(program.package), device_index=index if index is not None else -1
    )
    constants = _package_constants(model, program, torch.device(device or program.target.get("device", "cpu")), where)
    if constants is not None:
        model.load_constants(constants, check_full_update=True, user_managed=True)
        model.hub_export_constants = constants  # the package holds raw pointers to them
    return model
