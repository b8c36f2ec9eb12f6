"""A ``scan``'s carried state takes the size of what it is set to at run time (a reversible patch of the emitter).

ExecuTorch 1.5.1 emits ``torch.ops.higher_order.scan`` as a loop (``_Emitter._emit_scan``, exir/emit/_emitter.py)
that sets the carried state with ``aten::copy_(carry, value)``, before the first step from the initial state and
after each step from the step's result. The runtime's ``copy_`` writes into ``carry`` at the size ``carry`` has and
requires ``value`` to broadcast to it; a carry whose size depends on an input (a recurrent state of shape
``[batch, ...]``) is planned at its upper bound and never resized, so any input below that bound failed with
``tensor_is_broadcastable_to`` (error 0x12): every model whose recurrence hub_export runs under ``scan`` (Mamba,
Falcon-Mamba, Jamba, RecurrentGemma, MiniMax's lightning attention, the LSTMs of Parakeet and EnCodec...). No
upstream issue is known to us.

The patch rewrites those two ``copy_`` calls of each emitted scan into ``aten::clone.out(value, out=carry)``, which
resizes ``carry`` to ``value`` before writing it; nothing else of the emitted loop changes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ...patches import patch_attribute

__all__ = ["scan_carries_take_their_sizes"]


@contextlib.contextmanager
def scan_carries_take_their_sizes() -> Iterator[None]:
    """Emit the carry updates of every ``scan`` as ``clone.out`` instead of ``copy_`` (see the module)."""
    from executorch.exir.emit._emitter import _Emitter
    from executorch.exir.schema import Bool, EValue, Instruction, Int, JumpFalseCall, KernelCall, Null

    original = _Emitter._emit_scan

    def _emit_scan(self: Any, args: Any, outputs: Any) -> Any:
        start, carried = len(self.chain.instructions), len(args[1])
        result = original(self, args, outputs)
        carries = {value.id for value in list(outputs)[:carried]}
        stacks = {value.id for value in list(outputs)[carried:]}
        copy_index, _ = self._get_operator(name="aten::copy_")
        stack_index, _ = self._get_operator(name="executorch_prim::et_copy_index", overload="tensor")
        clone_index, _ = self._get_operator(name="aten::clone", overload="out")
        eq_index, _ = self._get_operator(name="executorch_prim::eq", overload="Scalar")
        unsqueeze_index, _ = self._get_operator(name="aten::unsqueeze_copy", overload="out")
        preserve = self._emit_evalue(EValue(Null())).id  # memory_format=None: the value's own layout
        zero = self._emit_evalue(EValue(Int(0))).id
        at = start
        while at < len(self.chain.instructions):
            call = self.chain.instructions[at].instr_args
            if isinstance(call, KernelCall) and call.op_index == copy_index and len(call.args) == 4:
                carry, value, _non_blocking, out = call.args
                if carry == out and carry in carries:
                    call.op_index, call.args = clone_index, [value, preserve, carry, carry]  # the out, then the return
            elif isinstance(call, KernelCall) and call.op_index == stack_index and call.args[0] in stacks:
                stacked, step, index = call.args
                first = self._emit_evalue(EValue(Bool(False))).id
                after = self.instruction_start_offset + at + 3  # this et_copy_index, once the three are in
                self.chain.instructions[at:at] = [
                    Instruction(KernelCall(op_index=eq_index, args=[index, zero, first])),
                    Instruction(JumpFalseCall(cond_value_index=first, destination_instruction=after)),
                    Instruction(KernelCall(op_index=unsqueeze_index, args=[step, zero, stacked, stacked])),
                ]
                at += 3
            at += 1
        return result

    reason = "scan carries set with copy_, which keeps the carry's planned size (executorch 1.5.1 _emit_scan)"
    with patch_attribute(_Emitter, "_emit_scan", _emit_scan, reason=reason):
        yield
