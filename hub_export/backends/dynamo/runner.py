"""Run a ``torch.export`` program (its ``.module()``), or its AOTInductor-compiled package, on a torch device."""

from __future__ import annotations

from typing import Any

from ...errors import DeviceUnavailableError, UnsafeExportError
from ...manifest import ComponentEntry
from ...runner import ModelRunner
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

    Attributes:
        module: ``ExportedProgram.module()``, or the loaded AOTInductor model (both take the flat inputs).
        compiled: Whether it runs an AOTInductor package.
    """

    def __init__(
        self, module: Any, metadata: ComponentEntry, device: str | None = None, compiled: bool = False
    ) -> None:
        super().__init__(metadata, device or "cpu")
        self.module = module
        self.compiled = compiled
        self._device = _torch_device(device)

    @classmethod
    def from_program(
        cls, program: Any, metadata: ComponentEntry, device: str | None = None, **options: Any
    ) -> DynamoRunner:
        """Build the runner; ``program`` is an ``ExportedProgram`` or a compiled program.

        Raises:
            ConfigError: Unknown runner options (it takes none).
            DeviceUnavailableError: The device is unknown or unavailable, or a compiled program was compiled for
                another device, CPU or torch version.
        """
        cls.check_options(options)
        if isinstance(program, CompiledProgram):
            target = program.target.get("device", "cpu")
            where = f"{metadata.files[0].path if metadata.files else 'this'} component"
            model = load_compiled(program, device or target, where)
            return cls(model, metadata, device or target, compiled=True)
        dev = _torch_device(device)
        try:
            module = program.module()
        except Exception as exc:  # noqa: BLE001 - a loaded program torch cannot turn into a module
            raise UnsafeExportError(
                f"torch could not build a module from the program ({type(exc).__name__}: {str(exc)[:300]})."
            ) from None
        if dev.type != "cpu":
            module = module.to(dev)
        return cls(module, metadata, device)

    def run_flat(self, tensors: list[Any]) -> list[Any]:
        """Run the module on the flat inputs. A compiled package reads its inputs with the strides it was compiled
        for (contiguous) and does not check them, so they are made contiguous first (a prefill's cache outputs are
        transposed views)."""
        import torch

        device = self._device
        inputs = [t if t.device == device else t.to(device) for t in tensors]
        if self.compiled:
            inputs = [t.contiguous() for t in inputs]
        with torch.no_grad():
            outputs = self.module(*inputs)
        return list(outputs)
