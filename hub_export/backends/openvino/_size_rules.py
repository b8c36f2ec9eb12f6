"""Conversion rules for the arithmetic on sizes that OpenVINO's PyTorch frontend gets wrong or lacks (openvino 2026.4).

A traced graph computes sizes with Python-level nodes (``SymInt``/``SymFloat``/``SymBool`` arithmetic: ``s // 4``,
``s ** 2``, ``min(h, w)``, ``s > 1``), whose targets are the functions of torch's ``METHOD_TO_OPERATOR``
(``torch/fx/experimental/sym_node.py``). The frontend converts only ``+``, ``-``, ``*``, unary ``-`` and ``//`` (which
truncates); :data:`_SIZE_OPERATORS` holds a rule for every other one, in one table, with Python's semantics:

* ``operator.floordiv`` (and ``aten.floor_divide`` / ``aten.div.Tensor_mode`` with ``rounding_mode="floor"`` of
  integer tensors): the built-in rule truncates toward zero at run time (``-5 // 4`` gives -1, Python -2: the CPU
  and GPU plugins ignore ``Divide``'s python-division flag for integers, openvinotoolkit/openvino#38248, fix proposed
  in openvinotoolkit/openvino#38260). Ceil divisions written ``-(-n // k)`` (Mamba-2's chunk count) then come out one
  short. The rule is ``(a - a mod b) / b``: the division is exact, so no rounding is left.
* ``operator.mod`` (Swin's ``(window - width % window) % window``, Mamba-2's ``seq_len % chunk_size``): Python's sign
  rule, through :func:`floor_mod` (never ``FloorMod``, whose bounds OpenVINO evaluates wrongly).
* ``operator.pow`` (GPT-NeoX-Japanese's ``2 ** n``), ``truediv``, ``sym_float``, ``sym_int``, ``sym_min``,
  ``sym_max``, ``abs``, ``math.floor``/``ceil``/``trunc``, ``round``, the comparisons, ``and``/``or``/``xor``/
  ``not``, the shifts and ``sym_ite``: no rule at all ("No conversion rule found for operations: <built-in
  function pow>"). A Python float is an f32 scalar in the IR (the type the frontend gives other Python floats).

The frontend names a Python-level node by ``str(target)`` (``<built-in function mod>``, ``<function sym_min at
0x...>``), hence the rules are built per process from the live functions.
"""

from __future__ import annotations

import builtins
import contextlib
import math
import operator
from collections.abc import Callable, Iterator
from typing import Any

from ...patches import patch_attribute
from ._op_rewrites import index_add_rule, scatter_reduce_rule

__all__ = [
    "floor_mod",
    "floor_mods_of_integers_as_mods",
    "size_arithmetic_extensions",
    "size_arithmetic_rules",
]

#: ``rule(inputs) -> output``: a size operator on OpenVINO outputs
_Rule = Callable[..., Any]


def _is_float(value: Any) -> bool:
    return bool(value.get_element_type().is_real())


def _is_bool(value: Any) -> bool:
    import openvino

    return bool(value.get_element_type() == openvino.Type.boolean)


def _promoted(*values: Any) -> list[Any]:
    """The operands in one type, as Python computes: f32 if any is a float, else the first integer operand's type
    (a ``SymBool`` in arithmetic counts as an integer)."""
    import openvino
    import openvino.opset13 as ops

    if any(_is_float(v) for v in values):
        target = openvino.Type.f32
    else:
        integer = next((v for v in values if not _is_bool(v)), None)
        if integer is None:
            return list(values)
        target = integer.get_element_type()
    return [v if v.get_element_type() == target else ops.convert(v, target).output(0) for v in values]


def _as_int(value: Any) -> Any:
    """An integral float as i64 (a size)."""
    import openvino.opset13 as ops

    return ops.convert(value, "i64")


def floor_mod(left: Any, right: Any) -> Any:
    """Python's ``left % right`` (the sign of ``right``) of integers, built from ``Mod`` (truncating: the sign of
    ``left``) and a ``Select`` adding ``right`` where the signs differ, instead of ``FloorMod``.

    OpenVINO's bound evaluation of ``FloorMod`` (openvino 2026.4) is elementwise on the bounds: for a size in
    ``[1, 17]`` it gives ``1 % 2 = 1`` as both the lower and the upper bound, and the CPU plugin's constant folding
    then replaces ``size % 2`` by the constant 1 (Swin's window padding: 16 rows reshaped into 7 windows of 2).
    ``Mod``'s bounds are right for such intervals (openvinotoolkit/openvino#20169); no upstream report of
    ``FloorMod``'s was found. The values are ``FloorMod``'s.
    """
    import numpy as np
    import openvino.opset13 as ops

    zero = ops.constant(np.array(0, dtype=left.get_element_type().to_dtype()))
    remainder = ops.mod(left, right)
    signs_differ = ops.not_equal(ops.less(remainder, zero), ops.less(right, zero))
    wrapped = ops.logical_and(ops.not_equal(remainder, zero), signs_differ)
    return ops.select(wrapped, ops.add(remainder, right), remainder)


def _exact_floor_division(left: Any, right: Any) -> Any:
    """``left // right`` of integers as ``(left - left % right) / right``: exact, so no rounding mode is involved."""
    import openvino.opset13 as ops

    return ops.divide(ops.subtract(left, floor_mod(left, right)), right)


def _floordiv(left: Any, right: Any) -> Any:
    import openvino.opset13 as ops

    left, right = _promoted(left, right)
    if _is_float(left):
        return ops.floor(ops.divide(left, right))
    return _exact_floor_division(left, right)


def _mod(left: Any, right: Any) -> Any:
    import openvino.opset13 as ops

    left, right = _promoted(left, right)
    if _is_float(left):  # a - floor(a / b) * b: Python's sign rule for floats
        return ops.subtract(left, ops.multiply(ops.floor(ops.divide(left, right)), right))
    return floor_mod(left, right)


def _truediv(left: Any, right: Any) -> Any:
    import openvino.opset13 as ops

    return ops.divide(*(ops.convert(v, "f32") for v in (left, right)))


def _pow(left: Any, right: Any) -> Any:
    import openvino.opset13 as ops

    return ops.power(*_promoted(left, right))


def _binary(build: Callable[[Any, Any], Any]) -> _Rule:
    """A rule applying ``build`` to the operands in one type."""
    return lambda left, right: build(*_promoted(left, right))


def _logical(logical: str, bitwise: str) -> _Rule:
    """``and``/``or``/``xor``: logical on booleans, bitwise on integers."""

    def rule(left: Any, right: Any) -> Any:
        import openvino.opset15 as ops

        if _is_bool(left) and _is_bool(right):
            return getattr(ops, logical)(left, right)
        return getattr(ops, bitwise)(*_promoted(left, right))

    return rule


def _shift(name: str) -> _Rule:
    def rule(left: Any, right: Any) -> Any:
        import openvino.opset15 as ops

        return getattr(ops, name)(*_promoted(left, right))

    return rule


def _rounded(build: Callable[[Any], Any]) -> _Rule:
    """``math.floor``/``ceil``/``trunc``, one-argument ``round``: a float's rounded value as an integer; an integer
    is kept."""
    return lambda value: _as_int(build(value)) if _is_float(value) else value


def _trunc(value: Any) -> Any:
    import openvino.opset13 as ops

    return ops.multiply(ops.sign(value), ops.floor(ops.abs(value)))


def _sym_int(value: Any) -> Any:
    return _as_int(_trunc(value)) if _is_float(value) else value


def _sym_ite(condition: Any, if_true: Any, if_false: Any) -> Any:
    import openvino.opset13 as ops

    return ops.select(condition, *_promoted(if_true, if_false))


def _size_operators() -> dict[Any, _Rule]:
    """The table: a Python-level size operator -> its rule over OpenVINO outputs."""
    import openvino.opset13 as ops
    import torch

    rules: dict[Any, _Rule] = {
        operator.floordiv: _floordiv,
        operator.mod: _mod,
        operator.truediv: _truediv,
        operator.pow: _pow,
        operator.lshift: _shift("bitwise_left_shift"),
        operator.rshift: _shift("bitwise_right_shift"),
        operator.and_: _logical("logical_and", "bitwise_and"),
        operator.or_: _logical("logical_or", "bitwise_or"),
        operator.xor: _logical("logical_xor", "bitwise_xor"),
        operator.eq: _binary(ops.equal),
        operator.ne: _binary(ops.not_equal),
        operator.lt: _binary(ops.less),
        operator.le: _binary(ops.less_equal),
        operator.gt: _binary(ops.greater),
        operator.ge: _binary(ops.greater_equal),
        torch.sym_min: _binary(ops.minimum),
        torch.sym_max: _binary(ops.maximum),
        operator.abs: ops.abs,
        operator.pos: lambda value: value,
        torch.sym_not: ops.logical_not,
        torch.sym_float: lambda value: ops.convert(value, "f32"),
        torch.sym_int: _sym_int,
        torch.sym_ite: _sym_ite,
        math.floor: _rounded(ops.floor),
        math.ceil: _rounded(ops.ceiling),
        math.trunc: _rounded(_trunc),
        builtins.round: _rounded(lambda value: ops.round(value, "half_to_even")),  # Python rounds half to even
    }
    return rules


def _context_rule(rule: _Rule) -> Callable[[Any], list[Any]]:
    """A ``ConversionExtension`` rule calling ``rule`` on the node's inputs."""

    def convert(context: Any) -> list[Any]:
        inputs = [context.get_input(i) for i in range(context.get_input_size())]
        result = rule(*inputs)
        return [result.output(0) if hasattr(result, "output") else result]  # a node, or an input kept as it is

    return convert


def _floor_divide(context: Any) -> list[Any]:
    """``aten.floor_divide.default`` of tensors: the exact form for integers, ``Floor(Divide)`` for floats."""
    return [_floordiv(context.get_input(0), context.get_input(1)).output(0)]


def _rounding_mode(context: Any) -> str | None:
    """``aten.div.Tensor_mode``'s ``rounding_mode``: None when absent or given as None, which the Python context
    cannot read ("Attribute rounding_mode can't be converted to defined types"; SeamlessM4T v2's
    ``torch.div(..., rounding_mode=None)``): read with two defaults, an unreadable value gives each back."""
    if not context.has_attribute("rounding_mode"):
        return None
    read = {context.get_attribute("rounding_mode", default_value=d) for d in ("floor", "trunc")}
    return str(read.pop()) if len(read) == 1 else None


def _divide_mode(context: Any) -> list[Any]:
    import openvino.opset13 as ops

    mode = _rounding_mode(context)
    if mode == "floor":
        return _floor_divide(context)
    left, right = context.get_input(0), context.get_input(1)
    if right.get_element_type() != left.get_element_type():
        right = ops.convert_like(right, left).output(0)
    if mode is None:  # true division: floating (the default float32) for integers, as torch's
        if left.get_element_type().is_integral():
            left, right = ops.convert(left, "f32").output(0), ops.convert(right, "f32").output(0)
        return [ops.divide(left, ops.convert_like(right, left)).output(0)]
    if left.get_element_type().is_integral():  # trunc: integer Divide truncates
        return [ops.divide(left, right).output(0)]
    quotient = ops.divide(left, right)
    return [ops.multiply(ops.sign(quotient), ops.floor(ops.abs(quotient))).output(0)]


def size_arithmetic_extensions() -> list[Any]:
    """OpenVINO ``ConversionExtension`` rules: every operator of :data:`_size_operators`, plus

    * ``aten.floor_divide.default`` and ``aten.div.Tensor_mode`` (``rounding_mode="floor"``, what ``//`` of tensors
      exports to) of integer tensors: the same truncation at run time (``(x - 1) // 2`` of 0 gives 0, torch -1); the
      Qwen3 audio encoders' frame counts of an empty remainder come out one long. The exact form for integers;
      ``Floor(Divide)`` for floating tensors.
    * ``aten.scatter_reduce.two``: no rule (:func:`~._op_rewrites.scatter_reduce_rule`); ``aten.index_add``: a rule
      requiring the argument tracing drops (:func:`~._op_rewrites.index_add_rule`).
    """
    from openvino.frontend.pytorch import ConversionExtension

    extensions = [ConversionExtension(str(target), _context_rule(rule)) for target, rule in _size_operators().items()]
    extensions.append(ConversionExtension("aten.floor_divide.default", _floor_divide))
    extensions.append(ConversionExtension("aten.scatter_reduce.two", scatter_reduce_rule))
    extensions.append(ConversionExtension("aten.index_add.default", index_add_rule))
    return [*extensions, ConversionExtension("aten.div.Tensor_mode", _divide_mode)]


@contextlib.contextmanager
def size_arithmetic_rules() -> Iterator[None]:
    """Give ``openvino.convert_model`` the rules of :func:`size_arithmetic_extensions` inside the block.

    ``convert_model`` takes extensions per call; the patch appends these to the caller's own ``extension``.
    """
    import openvino

    original = openvino.convert_model

    def convert_model(*args: Any, extension: Any = None, **kwargs: Any) -> Any:
        given = [] if extension is None else list(extension) if isinstance(extension, (list, tuple)) else [extension]
        return original(*args, extension=[*given, *size_arithmetic_extensions()], **kwargs)

    reason = "size arithmetic rules missing or truncating in OpenVINO's PyTorch frontend (openvino 2026.4)"
    with patch_attribute(openvino, "convert_model", convert_model, reason=reason):
        yield


def floor_mods_of_integers_as_mods(model: Any) -> int:
    """Replace every integer ``FloorMod`` of a converted ``openvino.Model`` by :func:`floor_mod`'s ``Mod`` form (the
    same values), so that the plugin's folding of shape arithmetic evaluates no ``FloorMod`` bound.

    The rules here never emit ``FloorMod``; this catches the ones the frontend's own rules emit.

    Returns:
        How many ``FloorMod`` nodes were replaced.
    """
    count = 0
    for op in model.get_ordered_ops():
        if op.get_type_name() != "FloorMod" or not op.get_output_element_type(0).is_integral():
            continue
        exact = floor_mod(op.input_value(0), op.input_value(1))
        exact.set_friendly_name(op.get_friendly_name())
        op.output(0).replace(exact.output(0))
        count += 1
    return count
