"""Strict validation of a ``.pt2``'s JSON documents (``models/model.json``, the weights and constants configs).

The shape of each document is torch's own serialization schema (the dataclasses of ``torch._export.serde.schema``),
read strictly: every object has only its dataclass's fields (unknown keys are refused, where torch would ignore
them), a union holds exactly one known variant, integers fit 64 bits, enums hold known values. On top of the shape,
the strings torch evaluates or turns into code are checked against :mod:`._grammar` (symbolic expressions, guards,
names, node targets, tree specs, metadata), and the variants that load native objects (custom objects, operators
passed as values) are refused. The walk is iterative and linear in the size of the document.
"""

from __future__ import annotations

import functools
import re
import types
import typing
from collections.abc import Callable
from typing import Any

from ._grammar import (
    check_guard,
    check_metadata,
    check_sym_expr,
    check_target,
    check_treespec,
    is_fqn,
    is_identifier,
    is_module_path,
    is_symbol,
)
from ._vmap import check_vmap_nodes

__all__ = ["MAX_SYMBOLIC_EXPRESSIONS", "validate_document"]

#: A program with more symbolic expressions than this is refused (each one costs torch a sympy parse).
MAX_SYMBOLIC_EXPRESSIONS = 250_000
_MAX_STRING = 65536
_INT_RANGE = (-(2**63), 2**64)
_FLOAT_WORDS = frozenset({"Infinity", "-Infinity", "NaN"})
_DEVICE = re.compile(r"[a-z_]{1,16}")
_TORCH_VERSION = re.compile(r"[0-9A-Za-z.+<=_-]{1,64}")
_PATH_NAME = re.compile(r"(weight|tensor|custom_obj|opaque_obj)_(0|[1-9][0-9]{0,8})")
_VERIFIERS = frozenset({"ATEN", "TRAINING"})
_DENIED_VARIANTS = {
    ("Argument", "as_custom_obj"): "a custom (native) object argument",
    ("Argument", "as_operator"): "an operator passed as a value",
    ("InputSpec", "custom_obj"): "a custom (native) object input",
}


class _Refused(Exception):
    def __init__(self, path: Any, message: str) -> None:
        super().__init__(message)
        self.path = path


def _where(path: Any) -> str:
    parts: list[str] = []
    while path is not None:
        path, key = path
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    return "$" + "".join(reversed(parts))


# -- the schema, compiled once from torch's dataclasses -----------------------------------------------------------
@functools.cache
def _types() -> dict[str, Any]:
    import dataclasses
    import enum

    from torch._export.serde import schema
    from torch._export.serde.union import _Union

    compiled: dict[Any, Any] = {}

    def build(tp: Any) -> Any:
        origin = typing.get_origin(tp)
        if origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != 1:
                raise TypeError(f"unsupported union {tp}")
            return ("opt", build(args[0]))
        if origin is list:
            return ("list", build(typing.get_args(tp)[0]))
        if origin is dict:
            return ("dict", build(typing.get_args(tp)[1]))
        if tp in (int, float, bool, str):
            return (tp.__name__,)
        if isinstance(tp, type) and issubclass(tp, enum.IntEnum):
            return ("enum", frozenset(int(v) for v in tp))
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            if tp in compiled:
                return compiled[tp]
            is_union = issubclass(tp, _Union)
            fields: dict[str, Any] = {}
            node = ("union" if is_union else "struct", tp.__name__, fields)
            compiled[tp] = node
            hints = typing.get_type_hints(tp, globalns=vars(schema))
            for f in dataclasses.fields(tp):
                required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                fields[f.name] = (build(hints[f.name]), required)
            return node
        raise TypeError(f"unsupported schema type {tp!r}")

    return {name: build(getattr(schema, name)) for name in ("ExportedProgram", "PayloadConfig")}


# -- hooks on strings torch evaluates ----------------------------------------------------------------------------
def _identifier(value: Any) -> None:
    if not is_identifier(value):
        raise ValueError(f"{str(value)[:80]!r} is not an identifier")


def _optional_identifier(value: Any) -> None:
    if value is not None:
        _identifier(value)


def _fqn(value: Any) -> None:
    if not is_fqn(value):
        raise ValueError(f"{str(value)[:80]!r} is not a dotted name")


def _keys(check: Callable[[Any], bool], what: str) -> Callable[[Any], None]:
    def hook(value: Any) -> None:
        if isinstance(value, dict):
            for key in value:
                if not check(key):
                    raise ValueError(f"key {str(key)[:80]!r} is not {what}")

    return hook


def _empty(value: Any) -> None:
    if value:
        raise ValueError("must be empty in an export of hub_export (it names native or user classes)")


def _text(value: Any) -> None:
    items = value if isinstance(value, list) else [value]
    for item in items:
        if isinstance(item, str) and (len(item) > _MAX_STRING or "\x00" in item):
            raise ValueError(f"a string over {_MAX_STRING} characters or with a NUL")


def _guards(value: Any) -> None:
    for i, guard in enumerate(value if isinstance(value, list) else []):
        try:
            check_guard(guard)
        except ValueError as exc:
            raise ValueError(f"guard [{i}] {str(guard)[:120]!r}: {exc}") from None


def _verifiers(value: Any) -> None:
    for item in value if isinstance(value, list) else []:
        if item not in _VERIFIERS:
            raise ValueError(f"verifier {str(item)[:40]!r} is not one of {sorted(_VERIFIERS)}")


def _match(pattern: re.Pattern[str], what: str) -> Callable[[Any], None]:
    def hook(value: Any) -> None:
        if not isinstance(value, str) or pattern.fullmatch(value) is None:
            raise ValueError(f"{str(value)[:80]!r} is not {what}")

    return hook


def _schema_major(value: Any) -> None:
    from torch._export.serde.schema import SCHEMA_VERSION

    if value != SCHEMA_VERSION[0]:
        raise ValueError(f"schema major version {value!r}, this torch reads {SCHEMA_VERSION[0]}")


def _metadata(value: Any) -> None:
    if isinstance(value, dict):
        check_metadata(value)


def _forward_arg_names(value: Any) -> None:
    for name in value or []:
        _identifier(name)


def _treespec(value: Any) -> None:
    check_treespec(value)


def _target(value: Any) -> None:
    check_target(value)


_HOOKS: dict[tuple[str, str], Callable[[Any], None]] = {
    ("Node", "target"): _target,
    ("Node", "name"): _optional_identifier,
    ("Node", "metadata"): _metadata,
    ("NamedArgument", "name"): lambda v: None if v == "" else _identifier(v),  # higher-order ops' are unnamed
    ("TensorArgument", "name"): _identifier,
    ("TokenArgument", "name"): _identifier,
    ("GraphArgument", "name"): _identifier,
    ("SymIntArgument", "as_name"): _identifier,
    ("SymFloatArgument", "as_name"): _identifier,
    ("SymBoolArgument", "as_name"): _identifier,
    ("Graph", "tensor_values"): _keys(is_identifier, "an identifier"),
    ("Graph", "sym_int_values"): _keys(is_identifier, "an identifier"),
    ("Graph", "sym_bool_values"): _keys(is_identifier, "an identifier"),
    ("Graph", "sym_float_values"): _keys(is_identifier, "an identifier"),
    ("Graph", "custom_obj_values"): _empty,
    ("Graph", "nodes"): check_vmap_nodes,
    ("InputToParameterSpec", "parameter_name"): _fqn,
    ("InputToBufferSpec", "buffer_name"): _fqn,
    ("InputToTensorConstantSpec", "tensor_constant_name"): _fqn,
    ("BufferMutationSpec", "buffer_name"): _fqn,
    ("ParameterMutationSpec", "parameter_name"): _fqn,
    ("GradientToParameterSpec", "parameter_name"): _fqn,
    ("GradientToUserInputSpec", "user_input_name"): _identifier,
    ("UserInputMutationSpec", "user_input_name"): _identifier,
    ("InputToConstantInputSpec", "name"): _identifier,
    ("ModuleCallSignature", "in_spec"): _treespec,
    ("ModuleCallSignature", "out_spec"): _treespec,
    ("ModuleCallSignature", "forward_arg_names"): _forward_arg_names,
    ("ModuleCallEntry", "fqn"): lambda v: None if is_module_path(v) else _fqn(v),
    ("GraphModule", "metadata"): _empty,
    ("GraphModule", "treespec_namedtuple_fields"): _empty,
    ("ExportedProgram", "range_constraints"): _keys(is_symbol, "a shape symbol"),
    ("ExportedProgram", "opset_version"): _keys(is_identifier, "an identifier"),
    ("ExportedProgram", "verifiers"): _verifiers,
    ("ExportedProgram", "torch_version"): _match(_TORCH_VERSION, "a torch version"),
    ("ExportedProgram", "guards_code"): _guards,
    ("SchemaVersion", "major"): _schema_major,
    ("Argument", "as_string"): _text,
    ("Argument", "as_strings"): _text,
    ("ConstantValue", "as_string"): _text,
    ("Device", "type"): _match(_DEVICE, "a device type"),
    ("PayloadConfig", "config"): _keys(is_fqn, "a dotted name"),
    ("PayloadMeta", "path_name"): _match(_PATH_NAME, "a payload file name (weight_N, tensor_N, ...)"),
}


# -- the walk -------------------------------------------------------------------------------------------------
def validate_document(data: Any, kind: str) -> None:
    """Validate a parsed JSON document against torch's schema and the grammars.

    Args:
        data: The parsed JSON.
        kind: ``"ExportedProgram"`` (``models/<name>.json``) or ``"PayloadConfig"`` (a weights/constants config).

    Raises:
        ValueError: ``"$.path: what is wrong"``.
    """
    try:
        _walk(_types()[kind], data)
    except _Refused as exc:
        raise ValueError(f"{_where(exc.path)}: {exc}") from None


def _walk(root: Any, data: Any) -> None:  # noqa: C901 - one dispatch over the schema's type kinds
    stack: list[tuple[Any, Any, Any]] = [(root, data, None)]
    expressions = 0
    while stack:
        node, value, path = stack.pop()
        kind = node[0]
        if kind == "opt":
            if value is not None:
                stack.append((node[1], value, path))
        elif kind == "str":
            if not isinstance(value, str):
                raise _Refused(path, f"expected a string, got {type(value).__name__}")
        elif kind == "int":
            if type(value) is not int or not _INT_RANGE[0] <= value < _INT_RANGE[1]:
                raise _Refused(path, f"expected a 64-bit integer, got {str(value)[:40]}")
        elif kind == "bool":
            if type(value) is not bool:
                raise _Refused(path, f"expected a boolean, got {type(value).__name__}")
        elif kind == "float":
            if not (type(value) in (int, float) or value in _FLOAT_WORDS):
                raise _Refused(path, f"expected a number, got {type(value).__name__}")
        elif kind == "enum":
            if type(value) is not int or value not in node[1]:
                raise _Refused(path, f"{str(value)[:40]} is not a known enum value")
        elif kind == "list":
            if not isinstance(value, list):
                raise _Refused(path, f"expected a list, got {type(value).__name__}")
            stack.extend((node[1], item, (path, i)) for i, item in enumerate(value))
        elif kind == "dict":
            if not isinstance(value, dict):
                raise _Refused(path, f"expected an object, got {type(value).__name__}")
            stack.extend((node[1], item, (path, key)) for key, item in value.items())
        elif kind == "struct":
            _, name, fields = node
            if not isinstance(value, dict):
                raise _Refused(path, f"expected a {name} object, got {type(value).__name__}")
            unknown = [k for k in value if k not in fields]
            if unknown:
                raise _Refused(path, f"{name} has no field {str(unknown[0])[:80]!r}")
            for field, (field_node, required) in fields.items():
                if field not in value:
                    if required:
                        raise _Refused(path, f"{name} lacks its field {field!r}")
                    continue
                here = (path, field)
                expressions += _run_hook(name, field, value[field], here)
                stack.append((field_node, value[field], here))
        else:  # union
            _, name, fields = node
            if not isinstance(value, dict) or len(value) != 1:
                raise _Refused(path, f"expected a {name} object with exactly one variant")
            variant, item = next(iter(value.items()))
            if variant not in fields:
                raise _Refused(path, f"{name} has no variant {str(variant)[:80]!r}")
            if (name, variant) in _DENIED_VARIANTS:
                raise _Refused((path, variant), f"{_DENIED_VARIANTS[name, variant]} is not allowed")
            here = (path, variant)
            expressions += _run_hook(name, variant, item, here)
            stack.append((fields[variant][0], item, here))
        if expressions > MAX_SYMBOLIC_EXPRESSIONS:
            raise _Refused(path, f"more than {MAX_SYMBOLIC_EXPRESSIONS} symbolic expressions")


def _run_hook(owner: str, field: str, value: Any, path: Any) -> int:
    if owner == "SymExpr" and field == "expr_str":
        try:
            check_sym_expr(value)
        except ValueError as exc:
            raise _Refused(path, f"symbolic expression {str(value)[:120]!r}: {exc}") from None
        return 1
    hook = _HOOKS.get((owner, field))
    if hook is not None:
        try:
            hook(value)
        except ValueError as exc:
            raise _Refused(path, str(exc)) from None
    return 0
