"""Indices of an ExecuTorch program's execution plans, checked before the runtime reads them.

The runtime's flatbuffer verification (``Verification.InternalConsistency``) checks that every table and vector lies
inside the buffer, not that the indices the plans hold name something: ``Method::get_value`` aborts the process
(``ET_CHECK``) on a value index past the plan's values, where a byte flip in a program's output list lands. So,
reading the flatbuffer itself (bounds-checked, nothing allocated per element beyond Python ints), each execution plan
must have:

* its inputs, outputs, chains' inputs and outputs, kernel and delegate call arguments, move sources and targets,
  jump conditions and freed values index one of its values;
* tensor list items index tensor values (optional tensor lists: tensor or null values, or -1), int list items (boxed:
  the runtime reads each with ``toInt()``) int values;
* kernel calls name one of its operators, delegate calls one of its delegates, jumps an instruction of their chain;
* ``arange`` kernels' constant bounds give 0 to 2**31 elements (the portable kernel aborts on more, or fewer);
* a kernel call of an operator whose schema torch (or ExecuTorch's own dim-order operators, listed here) knows has
  one argument per schema argument, each of the kind the schema declares: kernels read them with ``toTensor()``,
  ``toInt()``... which abort the process on another kind; then its outputs, as the emitter writes them: an out
  variant (a schema with ``out`` arguments) one value, its ``out`` tensor itself (a tensor list when its ``out`` is
  a list or it has several); another operator one value per return, of the return's kind. XNNPACK delegate calls take tensors only.

The schema is ``executorch/schema/program.fbs`` (field order = vtable slot; a union takes two slots: type, value).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Any

from ...errors import UnsafeExportError

__all__ = ["check_plan_indices"]

_MAX_ITEMS = 1 << 24
# KernelTypes union tags (program.fbs): 1 Null ... 5 Tensor ... 10 TensorList, 11 OptionalTensorList
_NULL, _TENSOR, _TENSOR_LIST, _OPTIONAL_TENSOR_LIST = 1, 5, 10, 11
# InstructionArguments union tags
_KERNEL_CALL, _DELEGATE_CALL, _MOVE_CALL, _JUMP_FALSE_CALL, _FREE_CALL = 1, 2, 3, 4, 5


_INT, _BOOL, _DOUBLE, _STRING, _INT_LIST, _DOUBLE_LIST, _BOOL_LIST = 2, 3, 4, 6, 7, 8, 9
_XNNPACK = "XnnpackBackend"
_XNNPACK_ARGS = frozenset({_TENSOR, _INT})
_KIND_NAMES = {
    0: "none", 1: "null", 2: "int", 3: "bool", 4: "float", 5: "tensor", 6: "string", 7: "int list", 8: "float list",
    9: "bool list", 10: "tensor list", 11: "optional tensor list",
}  # fmt: skip


class _Bad(Exception):
    pass


_Kinds = list[frozenset[int] | None]
# (name, argument kinds or None when unknown, positions of the out arguments, return kinds)
_Operator = tuple[str, _Kinds | None, list[int], _Kinds]


class _Buffer:
    """Bounds-checked reads of a flatbuffer."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def _unpack(self, fmt: str, pos: int) -> int:
        if pos < 0 or pos + struct.calcsize(fmt) > len(self.data):
            raise _Bad(f"offset {pos} is outside the program")
        return struct.unpack_from(fmt, self.data, pos)[0]

    def table(self, pos: int) -> tuple[int, int, int]:
        """``(table, vtable, vtable size)`` of the table at ``pos``."""
        vtable = pos - self._unpack("<i", pos)
        return pos, vtable, self._unpack("<H", vtable)

    def field(self, table: tuple[int, int, int], slot: int) -> int | None:
        """Where field ``slot`` of ``table`` is stored, or None when absent."""
        pos, vtable, size = table
        if 4 + 2 * slot + 2 > size:
            return None
        offset = self._unpack("<H", vtable + 4 + 2 * slot)
        return pos + offset if offset else None

    def scalar(self, table: tuple[int, int, int], slot: int, fmt: str, default: int = 0) -> int:
        at = self.field(table, slot)
        return default if at is None else self._unpack(fmt, at)

    def indirect(self, at: int) -> int:
        return at + self._unpack("<I", at)

    def child(self, table: tuple[int, int, int], slot: int) -> tuple[int, int, int] | None:
        at = self.field(table, slot)
        return None if at is None else self.table(self.indirect(at))

    def vector(self, table: tuple[int, int, int], slot: int) -> tuple[int, int]:
        """``(start of the elements, count)`` of a vector field (``(0, 0)`` when absent)."""
        at = self.field(table, slot)
        if at is None:
            return 0, 0
        start = self.indirect(at)
        count = self._unpack("<I", start)
        if count > _MAX_ITEMS:
            raise _Bad(f"a vector of {count} items")
        return start + 4, count

    def ints(self, table: tuple[int, int, int], slot: int, fmt: str = "<i") -> list[int]:
        start, count = self.vector(table, slot)
        step = struct.calcsize(fmt)
        return [self._unpack(fmt, start + i * step) for i in range(count)]

    def string(self, table: tuple[int, int, int], slot: int) -> str:
        """A string field (empty when absent), bounded by the buffer."""
        at = self.field(table, slot)
        if at is None:
            return ""
        start = self.indirect(at)
        length = self._unpack("<I", start)
        if start + 4 + length > len(self.data) or length > 4096:
            raise _Bad(f"a string at {start} passes the end of the program")
        return self.data[start + 4 : start + 4 + length].decode("utf-8", errors="replace")

    def tables(self, table: tuple[int, int, int], slot: int) -> list[tuple[int, int, int]]:
        start, count = self.vector(table, slot)
        return [self.table(self.indirect(start + 4 * i)) for i in range(count)]


def check_plan_indices(program: bytes, label: str) -> None:
    """Refuse a program whose execution plans hold an index that names nothing (see the module docstring).

    Args:
        program: The program's flatbuffer (the ``.pte`` up to its segments).
        label: How messages name the file.

    Raises:
        UnsafeExportError: Naming the plan and the bad index.
    """
    buf = _Buffer(program)
    try:
        root = buf.table(buf.indirect(0))
        for n, plan in enumerate(buf.tables(root, 1)):
            _check_plan(buf, plan, n)
    except _Bad as exc:
        raise UnsafeExportError(f"{label}: execution plan {exc}; refusing to load it.") from None


def _check_plan(buf: _Buffer, plan: tuple[int, int, int], n: int) -> None:
    values = buf.tables(plan, 2)
    kinds = [buf.scalar(value, 0, "<B") for value in values]
    operators = [_operator_kinds(buf, op) for op in buf.tables(plan, 6)]
    delegates = [buf.string(delegate, 0) for delegate in buf.tables(plan, 7)]

    def value(index: int, what: str) -> None:
        if not 0 <= index < len(values):
            raise _Bad(f"{what} names value {index}, but the plan has {len(values)}")

    for index in buf.ints(plan, 3):
        value(index, f"{n}: an input")
    for index in buf.ints(plan, 4):
        value(index, f"{n}: an output")
    for i, (kind, item) in enumerate(zip(kinds, values)):
        if kind == _INT_LIST:  # boxed: each item is the index of an int value (kernels read them with toInt())
            body = buf.child(item, 1)
            for index in buf.ints(body, 0, "<q") if body is not None else []:
                value(index, f"{n}: int list {i}")
                if kinds[index] != _INT:
                    raise _Bad(f"{n}: int list {i} holds value {index}, which is not an int")
            continue
        if kind not in (_TENSOR_LIST, _OPTIONAL_TENSOR_LIST):
            continue
        allowed = (_TENSOR,) if kind == _TENSOR_LIST else (_TENSOR, _NULL)
        body = buf.child(item, 1)
        for index in buf.ints(body, 0) if body is not None else []:
            if kind == _OPTIONAL_TENSOR_LIST and index == -1:
                continue
            value(index, f"{n}: tensor list {i}")
            if kinds[index] not in allowed:
                raise _Bad(f"{n}: tensor list {i} holds value {index}, which is not a tensor")
    chains = [buf.tables(chain, 2) for chain in buf.tables(plan, 5)]
    written = set(buf.ints(plan, 3)) | _written_by_calls(buf, [i for instructions in chains for i in instructions])
    for c, chain in enumerate(buf.tables(plan, 5)):
        for index in buf.ints(chain, 0) + buf.ints(chain, 1):
            value(index, f"{n}: chain {c}'s inputs or outputs")
        instructions = chains[c]
        for i, instruction in enumerate(instructions):
            where = f"{n}: chain {c} instruction {i}"
            _check_instruction(buf, instruction, where, value, (len(operators), len(delegates), len(instructions)))
            _check_argument_kinds(buf, instruction, where, kinds, operators, delegates)
            _check_scalar_arguments(buf, instruction, where, values, operators, written)


def _written_by_calls(buf: _Buffer, instructions: list[tuple[int, int, int]]) -> set[int]:
    """The values kernel calls write: each call's last argument (its out argument or its return, a size that
    ``sym_size`` or a prim op computes at run time)."""
    written = set()
    for instruction in instructions:
        body = buf.child(instruction, 1)
        if buf.scalar(instruction, 0, "<B") == _KERNEL_CALL and body is not None:
            args = buf.ints(body, 1)
            written.update(args[-1:])
    return written


def _check_instruction(
    buf: _Buffer,
    instruction: tuple[int, int, int],
    where: str,
    check: Callable[[int, str], None],
    limits: tuple[int, int, int],
) -> None:
    """One instruction: its value indices (``check``), and its operator, delegate or jump target within ``limits``
    (operators, delegates, instructions of its chain)."""
    operators, delegates, count = limits
    kind = buf.scalar(instruction, 0, "<B")
    body = buf.child(instruction, 1)
    if body is None:
        raise _Bad(f"{where} has no arguments")
    if kind in (_KERNEL_CALL, _DELEGATE_CALL):
        target, limit = buf.scalar(body, 0, "<i"), operators if kind == _KERNEL_CALL else delegates
        if not 0 <= target < limit:
            what = "operator" if kind == _KERNEL_CALL else "delegate"
            raise _Bad(f"{where} calls {what} {target}, but the plan has {limit}")
        for index in buf.ints(body, 1):
            check(index, f"{where}'s argument")
    elif kind == _MOVE_CALL:
        check(buf.scalar(body, 0, "<i"), f"{where}'s move source")
        check(buf.scalar(body, 1, "<i"), f"{where}'s move target")
    elif kind == _JUMP_FALSE_CALL:
        check(buf.scalar(body, 0, "<i"), f"{where}'s condition")
        destination = buf.scalar(body, 1, "<i")
        if not 0 <= destination < count:
            raise _Bad(f"{where} jumps to instruction {destination} of {count}")
    elif kind == _FREE_CALL:
        check(buf.scalar(body, 0, "<i"), f"{where}'s freed value")
    else:
        raise _Bad(f"{where} has unknown instruction type {kind}")


def _check_argument_kinds(
    buf: _Buffer,
    instruction: tuple[int, int, int],
    where: str,
    kinds: list[int],
    operators: list[_Operator],
    delegates: list[str],
) -> None:
    """A call's arguments are of the kinds its operator's schema (or the XNNPACK delegate) takes."""
    kind, body = buf.scalar(instruction, 0, "<B"), buf.child(instruction, 1)
    if body is None or kind not in (_KERNEL_CALL, _DELEGATE_CALL):
        return
    args = buf.ints(body, 1)
    if kind == _DELEGATE_CALL:
        name = delegates[buf.scalar(body, 0, "<i")]
        # XNNPACK reads tensors at the positions its graph's external values name (checked against the call's
        # arguments, tensor and element size, by ._xnnpack); a partition may also take sizes (a view's SymInt) it
        # never reads
        expected: list[frozenset[int] | None] | None = [_XNNPACK_ARGS] * len(args) if name == _XNNPACK else None
    else:
        name, expected, _, _ = operators[buf.scalar(body, 0, "<i")]
    if expected is None:
        return  # an operator torch does not know here, or another delegate: the indices were checked
    outputs: _Kinds = []  # an out variant outputs its out argument itself (a tensor list of several), others returns
    outs: list[int] = []
    if kind == _KERNEL_CALL:
        _, _, outs, returns = operators[buf.scalar(body, 0, "<i")]
        outputs = [frozenset({_TENSOR_LIST})] if len(outs) > 1 else [expected[outs[0]]] if outs else returns
    if len(args) != len(expected) + len(outputs):
        raise _Bad(
            f"{where} passes {len(args)} arguments to {name}, whose schema takes {len(expected)} and "
            f"{len(outputs)} outputs"
        )
    for position, (index, allowed) in enumerate(zip(args, expected + outputs)):
        if allowed is not None and kinds[index] not in allowed:
            wanted = " or ".join(_KIND_NAMES[k] for k in sorted(allowed))
            got = _KIND_NAMES.get(kinds[index], str(kinds[index]))
            raise _Bad(
                f"{where}: argument {position} of {name} is value {index} ({got}), where the schema takes {wanted}"
            )
    single = len(outs) == 1 and expected[outs[0]] == frozenset({_TENSOR})  # (a list is emitted again as a new list)
    if kind == _KERNEL_CALL and single and args[len(expected)] != args[outs[0]]:
        raise _Bad(f"{where}: {name} outputs value {args[len(expected)]}, not its out argument (value {args[outs[0]]})")


# Kernels that abort the process on scalar arguments out of range: operator -> positions of (start, end, step)
_ARANGES = {"aten::arange.start_out": (0, 1, 2), "aten::arange.out": (None, 0, None)}


def _check_scalar_arguments(
    buf: _Buffer,
    instruction: tuple[int, int, int],
    where: str,
    values: list[Any],
    operators: list[_Operator],
    written: set[int],
) -> None:
    """``arange``'s constant bounds give a size the portable kernel accepts (0 to 2**31 elements): it aborts the
    process otherwise (``compute_arange_out_size``). The values in ``written`` (the plan's inputs, what calls write)
    hold a placeholder here, not their value: the bounds of which one is such a value are not checked."""
    body = buf.child(instruction, 1)
    if buf.scalar(instruction, 0, "<B") != _KERNEL_CALL or body is None:
        return
    name = operators[buf.scalar(body, 0, "<i")][0]
    if name not in _ARANGES:
        return
    args = buf.ints(body, 1)
    if any(p is not None and args[p] in written for p in _ARANGES[name]):
        return
    start, end, step = (0.0 if p is None and d == 0 else 1.0 if p is None else _number(buf, values[args[p]])
                        for d, p in enumerate(_ARANGES[name]))  # fmt: skip
    count = (end - start) / step if step else math.inf
    if not -1 < count < 2**31 - 1:
        raise _Bad(f"{where}: {name} from {start} to {end} by {step} (the kernel takes 0 to 2**31 elements)")


def _number(buf: _Buffer, value: tuple[int, int, int]) -> float:
    """The int, float or bool an EValue holds (NaN for another kind)."""
    kind, body = buf.scalar(value, 0, "<B"), buf.child(value, 1)
    if body is None or kind not in (_INT, _DOUBLE, _BOOL):
        return math.nan
    at = buf.field(body, 0)
    if at is None:
        return 0.0
    fmt = {_INT: "<q", _DOUBLE: "<d", _BOOL: "<?"}[kind]
    if at + struct.calcsize(fmt) > len(buf.data):
        raise _Bad(f"a scalar at {at} is outside the program")
    return float(struct.unpack_from(fmt, buf.data, at)[0])


def _operator_kinds(buf: _Buffer, operator: tuple[int, int, int]) -> _Operator:
    """``(name, the value kinds of its arguments, the positions of its out arguments, the kinds of its returns)``,
    None for the kinds when torch lacks the schema."""
    name, overload = buf.string(operator, 0), buf.string(operator, 1)
    label = f"{name}.{overload}" if overload else name
    schema = _schema(name, overload)
    if schema is None:
        return label, None, [], []
    outs = [i for i, a in enumerate(schema.arguments) if a.is_out]
    return label, [_kinds(a.type) for a in schema.arguments], outs, [_kinds(r.type) for r in schema.returns]


# ExecuTorch's own operators the exporter emits, which torch does not know unless executorch.exir is imported
_EXECUTORCH_SCHEMAS = {
    ("dim_order_ops::_to_dim_order_copy", "out"): "dim_order_ops::_to_dim_order_copy.out(Tensor self, *, "
    "bool non_blocking=False, int[]? dim_order=None, Tensor(a!) out) -> Tensor(a!)",
    ("dim_order_ops::_empty_dim_order", "out"): "dim_order_ops::_empty_dim_order.out(int[] size, *, "
    "int[]? dim_order=None, Tensor(a!) out) -> Tensor(a!)",
    ("dim_order_ops::_clone_dim_order", "out"): "dim_order_ops::_clone_dim_order.out(Tensor self, *, "
    "bool non_blocking=False, int[]? dim_order=None, Tensor(a!) out) -> Tensor(a!)",
}


def _schema(name: str, overload: str) -> Any:
    import torch

    if (name, overload) in _EXECUTORCH_SCHEMAS:
        return torch._C.parse_schema(_EXECUTORCH_SCHEMAS[name, overload])
    try:
        found = torch._C._jit_get_schemas_for_operator(name)
    except (RuntimeError, ValueError):
        return None
    return next((s for s in found if s.overload_name == overload), None)


def _kinds(tp: Any) -> frozenset[int] | None:
    """The EValue kinds an argument of TorchScript type ``tp`` may be (None: not checked)."""
    kind = type(tp).__name__
    simple = {
        "TensorType": {_TENSOR},
        "IntType": {_INT},
        "SymIntType": {_INT},
        "BoolType": {_BOOL},
        "SymBoolType": {_BOOL},
        "FloatType": {_DOUBLE},
        "NumberType": {_INT, _BOOL, _DOUBLE},
        "StringType": {_STRING},
    }
    if kind in simple:
        return frozenset(simple[kind])
    if kind == "OptionalType":
        inner = _kinds(tp.getElementType())
        return None if inner is None else inner | {_NULL}
    if kind == "ListType":
        element = tp.getElementType()
        element_kind = type(element).__name__
        if element_kind == "OptionalType" and type(element.getElementType()).__name__ == "TensorType":
            return frozenset({_OPTIONAL_TENSOR_LIST})
        lists = {"TensorType": _TENSOR_LIST, "IntType": _INT_LIST, "SymIntType": _INT_LIST,
                 "FloatType": _DOUBLE_LIST, "BoolType": _BOOL_LIST}  # fmt: skip
        return frozenset({lists[element_kind]}) if element_kind in lists else None
    return None
