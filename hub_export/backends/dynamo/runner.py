"""Run a ``torch.export`` program (its ``.module()``), or its AOTInductor-compiled package, on a torch device."""

from __future__ import annotations

from typing import Any

from ...errors import ConfigError, DeviceUnavailableError, UnsafeExportError
from ...manifest import ComponentEntry
from ...runner import ModelRunner
from ._call import call_flat
from .compiled import CompiledProgram, load_compiled

__all__ = ["DynamoRunner"]


def _torch_device(device: str | None) -> Any:
    import torch

    name = device or "cpu"
    try:
        dev = torch.device(name)
    except RuntimeError as exc:
        raise DeviceUnavailableError(f"Unknown torch device {name!r}: {exc}.") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise DeviceUnavailableError("device='cuda' was requested but torch sees no CUDA device; use device='cpu'.")
    return dev


class DynamoRunner(ModelRunner):
    """Runs an ``ExportedProgram`` as a module on ``device`` (``cpu`` by default, or ``cuda``), or the AOTInductor
    package of a compiled export on the device it was compiled for.

    Options:
        num_threads: The CPU threads torch (and a compiled package's kernels, which ask OpenMP when they run) uses
            during this runner's calls: set for each call and restored after it, so the rest of the process keeps
            its own count. None (the default) leaves torch's count (``torch.set_num_threads``) as it is.

    Attributes:
        module: ``ExportedProgram.module()`` (called through the program's call spec: the model's kwargs, or the flat
            inputs of an export made before those), or the loaded AOTInductor model (the flat inputs).
        compiled: Whether it runs an AOTInductor package.
        num_threads: The thread count of each call (None: torch's).
    """

    options = ("num_threads",)

    def __init__(
        self,
        module: Any,
        metadata: ComponentEntry,
        device: str | None = None,
        compiled: bool = False,
        num_threads: int | None = None,
        in_spec: Any = None,
    ) -> None:
        super().__init__(metadata, device or "cpu")
        self.module = module
        self.compiled = compiled
        self.in_spec = in_spec
        self.num_threads = num_threads
        self._device = _torch_device(device)

    @classmethod
    def from_program(
        cls,
        program: Any,
        metadata: ComponentEntry,
        device: str | None = None,
        num_threads: int | None = None,
        **options: Any,
    ) -> DynamoRunner:
        """Build the runner; ``program`` is an ``ExportedProgram`` or a compiled program.

        Args:
            program: The ExportedProgram, or a :class:`CompiledProgram`.
            metadata: The component's manifest entry.
            device: ``cpu`` (default) or ``cuda``; a compiled program runs on the device it was compiled for.
            num_threads: CPU threads for each call (see the class docstring; None: torch's count).

        Raises:
            ConfigError: An unknown option, or ``num_threads`` not an int >= 1.
            DeviceUnavailableError: The device is unknown or unavailable, or a compiled program was compiled for
                another device, CPU or torch version.
        """
        cls.check_options(options)
        if num_threads is not None and (
            isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1
        ):
            raise ConfigError(f"num_threads must be an int >= 1 (or None: torch's count), got {num_threads!r}.")
        if isinstance(program, CompiledProgram):
            target = program.target.get("device", "cpu")
            where = f"{metadata.files[0].path if metadata.files else 'this'} component"
            model = load_compiled(program, device or target, where)
            return cls(model, metadata, device or target, compiled=True, num_threads=num_threads)
        dev = _torch_device(device)
        try:
            module = program.module()
        except Exception as exc:  # noqa: BLE001 - a loaded program torch cannot turn into a module
            raise UnsafeExportError(
                f"torch could not build a module from the program ({type(exc).__name__}: {str(exc)[:300]})."
            ) from None
        if dev.type != "cpu":
            module = module.to(dev)
        return cls(module, metadata, device, num_threads=num_threads, in_spec=program.call_spec.in_spec)

    def run_flat(self, tensors: list[Any]) -> list[Any]:
        """Run the module on the flat inputs. A compiled package reads its inputs with the strides it was compiled
        for (contiguous) and does not check them, so they are made contiguous first (a prefill's cache outputs are
        transposed views)."""
        import torch

        device = self._device
        inputs = [t if t.device == device else t.to(device) for t in tensors]
        if self.compiled:
            inputs = [t.contiguous() for t in inputs]
        before = torch.get_num_threads()
        threads = self.num_threads or before
        if threads != before:
            torch.set_num_threads(threads)
        try:
            with torch.no_grad():
                if self.in_spec is None:
                    return list(self.module(*inputs))
                return call_flat(self.module, self.in_spec, inputs)
        finally:
            if threads != before:
                torch.set_num_threads(before)
