"""Run an ExecuTorch program's ``forward`` method through ``executorch.runtime``."""

from __future__ import annotations

from typing import Any

from ...errors import DeviceUnavailableError, ExportError, UnsafeExportError
from ...manifest import ComponentEntry
from ...runner import ModelRunner
from ._log_sink import runtime_logs_bypass_python
from ._pages import pages_not_locked, release_freed_heap

__all__ = ["ExecutorchRunner"]

# Where each delegate's program runs: ExecuTorch has no device switch, a program runs where it was lowered for.
_DEVICES = {"xnnpack": "cpu", "cuda": "cuda", "mlx": "mps"}


class ExecutorchRunner(ModelRunner):
    """Runs the ``forward`` method of an ExecuTorch program on the device its delegate targets."""

    def __init__(self, method: Any, metadata: ComponentEntry, device: str | None = None, program: Any = None) -> None:
        super().__init__(metadata, device)
        self.method = method
        self._program = program  # the runtime Program owns the method's memory: keep it alive
        self._owns_method = False  # a parity runner's method is its own: freed (and the heap trimmed) with it

    def __del__(self) -> None:
        """A parity runner frees its method first, then gives the C heap's freed pages back (:func:`._pages.
        release_freed_heap`): the delegate packed a copy of the weights into many heap blocks, and glibc keeps the
        freed ones in the process (0.1-0.3x of the weights after an export) until trimmed."""
        if getattr(self, "_owns_method", False):
            self.method = None
            release_freed_heap()

    @classmethod
    def from_program(
        cls, program: Any, metadata: ComponentEntry, device: str | None = None, **options: Any
    ) -> ExecutorchRunner:
        """Load ``forward`` from an ``executorch.runtime.Program`` (what hub_export exports and loads) or an
        ``ExecutorchProgramManager`` (its buffer).

        Raises:
            DeviceUnavailableError: ``device`` is not where the program was lowered to run.
            ConfigError: Unknown runner options (it takes none).
        """
        cls.check_options(options)
        return cls._loaded(program, metadata, device, cached=True)

    @classmethod
    def for_parity(cls, program: Any, metadata: ComponentEntry) -> ExecutorchRunner:
        """A runner for the export's parity check (it runs once), whose method goes with it.

        Loading a method makes the delegate pack its weights into its own layout (XNNPACK: a full copy of every
        linear layer's weights), and ``Program.load_method`` keeps the method for the program's lifetime, which is
        the export's: this runner's method is not kept by ``program``, so that copy is freed with the runner,
        before the export goes on (the next component of a generation export is lowered without it).
        """
        runner = cls._loaded(program, metadata, None, cached=False)
        runner._owns_method = True
        return runner

    @classmethod
    def _loaded(cls, program: Any, metadata: ComponentEntry, device: str | None, cached: bool) -> ExecutorchRunner:
        backend = str(metadata.extra.get("backend", "xnnpack"))
        target = _DEVICES.get(backend, "cpu")
        if device is not None and str(device).split(":")[0] != target:
            raise DeviceUnavailableError(
                f"device={device!r}: an ExecuTorch program runs where it was lowered to run, and this one was "
                f"lowered for the {backend!r} delegate ({target}). Use device=None or {target!r}, or re-export with "
                "ExecutorchConfig(backend=...) for another target."
            )
        from executorch.runtime import Method, Runtime

        with runtime_logs_bypass_python(), pages_not_locked():
            if hasattr(program, "write_to_file") and hasattr(program, "buffer"):  # ExecutorchProgramManager
                program = Runtime.get().load_program(program.buffer)
            try:
                binding = getattr(program, "_program", None)  # executorch.runtime.Program caches what it loads
                if cached or binding is None:
                    method = program.load_method("forward")
                else:
                    method = Method(binding.load_method("forward"))
            except (RuntimeError, KeyError, ValueError) as exc:  # KeyError: the program has no method "forward"
                raise UnsafeExportError(
                    f"The ExecuTorch runtime cannot load the program's forward ({type(exc).__name__}: {exc})."
                ) from None
        return cls(method, metadata, device or target, program=program)

    def run_flat(self, tensors: list[Any]) -> list[Any]:
        """Execute ``forward`` on the flat inputs (made contiguous, as ExecuTorch requires).

        The runtime copies outputs out of its planned buffers, so results stay valid across calls.
        """
        import torch

        with runtime_logs_bypass_python():
            try:
                outputs = self.method.execute([t.detach().to("cpu").contiguous() for t in tensors])
            except RuntimeError as exc:  # the inputs match the signature: the program is damaged or not this export's
                raise UnsafeExportError(
                    f"The ExecuTorch runtime failed to run the program on inputs that match its signature ({exc}); "
                    "the .pte is damaged, crafted, or does not belong to this export.json. Re-export it."
                ) from None
        outputs = [o if isinstance(o, torch.Tensor) else torch.as_tensor(o) for o in outputs]
        return self._write_back(tensors, outputs)

    def _write_back(self, tensors: list[Any], outputs: list[Any]) -> list[Any]:
        """A program that updates inputs in place (a static KV cache) returns the updated inputs first; they are
        copied into the caller's tensors (the runtime planned its own input buffers) and the user outputs of an
        updated input are the caller's tensor, as with the other backends."""
        extra = len(outputs) - len(self.metadata.signature.outputs)
        if extra == 0:
            return outputs
        pairs = self.signature.in_place_pairs()
        mutated = sorted(set(pairs.values()))
        if extra != len(mutated):
            raise ExportError(
                f"The ExecuTorch program returned {len(outputs)} outputs for {len(self.metadata.signature.outputs)} in its "
                f"signature and {len(mutated)} inputs it updates in place; re-export it with this hub_export version."
            )
        import torch

        with torch.no_grad():
            for index, value in zip(mutated, outputs[:extra]):
                if tensors[index].data_ptr() != value.data_ptr():
                    tensors[index].copy_(value)
        user = outputs[extra:]
        return [tensors[pairs[j]] if j in pairs else value for j, value in enumerate(user)]
