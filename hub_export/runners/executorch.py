"""Run an ExecuTorch program's ``forward`` method through ``executorch.runtime``."""

from __future__ import annotations

from typing import Any

from ..errors import DeviceUnavailableError
from ..formats import ExportFormat
from ..manifest import ComponentEntry
from .base import ModelRunner

__all__ = ["ExecutorchRunner"]

# Where each delegate's program runs: ExecuTorch has no device switch, a program runs where it was lowered for.
_DEVICES = {"xnnpack": "cpu", "cuda": "cuda", "mlx": "mps"}


class ExecutorchRunner(ModelRunner):
    """Runs the ``forward`` method of an ExecuTorch program on the device its delegate targets."""

    export_format = ExportFormat.EXECUTORCH

    def __init__(self, method: Any, metadata: ComponentEntry, device: str | None = None, program: Any = None) -> None:
        super().__init__(metadata, device)
        self.method = method
        self._program = program  # the runtime Program owns the method's memory: keep it alive

    @classmethod
    def from_program(
        cls, program: Any, metadata: ComponentEntry, device: str | None = None, **options: Any
    ) -> ExecutorchRunner:
        """Load ``forward`` from an ``ExecutorchProgramManager`` (its buffer) or an ``executorch.runtime.Program``.

        Raises:
            DeviceUnavailableError: ``device`` is not where the program was lowered to run.
            TypeError: Unknown runner options.
        """
        if options:
            raise TypeError(f"ExecutorchRunner takes no options, got {sorted(options)}.")
        backend = str(metadata.extra.get("backend", "xnnpack"))
        target = _DEVICES.get(backend, "cpu")
        if device is not None and str(device).split(":")[0] != target:
            raise DeviceUnavailableError(
                f"device={device!r}: an ExecuTorch program runs where it was lowered to run, and this one was "
                f"lowered for the {backend!r} delegate ({target}). Use device=None or {target!r}, or re-export with "
                "ExecutorchConfig(backend=...) for another target."
            )
        from executorch.runtime import Runtime

        if hasattr(program, "write_to_file") and hasattr(program, "buffer"):  # ExecutorchProgramManager
            program = Runtime.get().load_program(program.buffer)
        return cls(program.load_method("forward"), metadata, device or target, program=program)

    def run_flat(self, tensors: list[Any]) -> list[Any]:
        """Execute ``forward`` on the flat inputs (made contiguous, as ExecuTorch requires).

        The runtime copies outputs out of its planned buffers, so results stay valid across calls.
        """
        import torch

        outputs = self.method.execute([t.detach().to("cpu").contiguous() for t in tensors])
        return [o if isinstance(o, torch.Tensor) else torch.as_tensor(o) for o in outputs]
