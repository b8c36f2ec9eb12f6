"""Run a ``torch.export`` program (its ``.module()``) on a torch device."""

from __future__ import annotations

from typing import Any

from ...errors import DeviceUnavailableError, UnsafeExportError
from ...manifest import ComponentEntry
from ...runner import ModelRunner

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
    """Runs an ``ExportedProgram`` as a module on ``device`` (``cpu`` by default, or ``cuda``)."""

    def __init__(self, module: Any, metadata: ComponentEntry, device: str | None = None) -> None:
        super().__init__(metadata, device or "cpu")
        self.module = module
        self._device = _torch_device(device)

    @classmethod
    def from_program(
        cls, program: Any, metadata: ComponentEntry, device: str | None = None, **options: Any
    ) -> DynamoRunner:
        """Build the runner; ``program`` is an ``ExportedProgram``.

        Raises:
            ConfigError: Unknown runner options (it takes none).
            DeviceUnavailableError: The device is unknown or unavailable.
        """
        cls.check_options(options)
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
        """Run the module on the flat inputs."""
        import torch

        with torch.no_grad():
            outputs = self.module(*[t.to(self._device) for t in tensors])
        return list(outputs)
