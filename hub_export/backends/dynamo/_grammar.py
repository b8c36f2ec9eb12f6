"""The small grammars a ``.pt2`` program's strings must match before torch reads them.

``torch.export.load`` hands several strings of ``models/model.json`` to code that evaluates Python: symbolic sizes
go to ``sympy.sympify`` (which ``eval``s), ``guards_code`` is pasted into a function that ``ExportedProgram.module()``
``exec``s, node names and argument names become identifiers of generated code, and node targets are resolved as
attributes of ``torch``, ``operator`` or ``math``. Each such string is checked here against a grammar that admits
what torch writes for our exports and nothing else:

* a symbolic expression is sympy's ``srepr`` of an integer expression: ``Symbol('s0', positive=True,
  integer=True)``, ``Integer(n)``, ``Float('-0.5', precision=53)``, ``Add``/``Mul``/``Pow`` and the integer and
  float functions and relations torch uses (:data:`SYMPY_HEADS`), nested at most :data:`MAX_DEPTH` deep, with small
  exponents;
* a guard is a Python expression whose syntax tree holds only comparisons and arithmetic of numbers over sources
  ``L['name'][0].size()[1]``, with ``max``/``min``/``abs``/``math.floor``/``math.ceil``, torch's ``sym_float``
  family and ``and``/``or``/``not``;
* names are identifiers, qualified names are dotted identifiers, node targets are in an allow-list (with the
  functorch calls one ``torch.vmap`` writes, checked by :mod:`._vmap`).

Every check is linear in the length of its string, and the strings are bounded.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..._bounded import json_depth
from ._vmap import VMAP_TARGETS

__all__ = [
    "MAX_DEPTH",
    "SYMPY_HEADS",
    "check_guard",
    "check_metadata",
    "check_sym_expr",
    "check_target",
    "check_treespec",
    "is_fqn",
    "is_identifier",
    "is_module_path",
    "is_symbol",
]

MAX_DEPTH = 32
_MAX_EXPR = 8192
_MAX_GUARD = 8192
_MAX_EXPONENT = 64
_MAX_POWERS = 4
_MAX_DIGITS = 20  # |n| < 10**20: a 64-bit size, or 2**64
#: A sympy ``Float`` literal (float arithmetic on sizes: ``ceil((w // 8 - 0.5) / 1.0)``): a bounded decimal.
_FLOAT_LITERAL = re.compile(r"-?[0-9]{1,20}(?:\.[0-9]{0,20})?(?:[eE]-?[0-9]{1,3})?")
_MAX_PRECISION = 113  # bits: a float128 at most

#: The sympy constructors a symbolic expression may call (sympy's own, and torch's integer functions).
SYMPY_HEADS = frozenset(
    {
        "Symbol",
        "Integer",
        "Rational",
        "Add",
        "Mul",
        "Pow",
        "Max",
        "Min",
        "Abs",
        "FloorDiv",
        "Mod",
        "PythonMod",
        "CleanDiv",
        "CeilDiv",
        "ModularIndexing",
        "CeilToInt",
        "FloorToInt",
        "TruncToInt",
        "IntTrueDiv",
        "ToFloat",
        "FloatTrueDiv",
        "FloatPow",
        "TruncToFloat",
        "RoundToInt",
        "Float",
        "floor",
        "ceiling",
        "Equality",
        "Unequality",
        "StrictLessThan",
        "LessThan",
        "StrictGreaterThan",
        "GreaterThan",
        "And",
        "Or",
        "Not",
    }
)
_ATOMS = frozenset({"true", "false"})
_ASSUMPTIONS = frozenset(
    {
        "positive",
        "negative",
        "nonnegative",
        "nonpositive",
        "integer",
        "real",
        "finite",
        "zero",
        "nonzero",
        "even",
        "odd",
    }
)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")
_FQN = re.compile(r"[A-Za-z_][A-Za-z0-9_/]*(?:\.[A-Za-z0-9_/]+)*")  # "/": see _MODULE_PATH
# NNCF names the modules it inserts after the node they follow ("slice_21_0_0/nncf_smooth_quant"): a module path is
# only ever split on dots and looked up as attributes, so "/" inside a segment is plain text.
_MODULE_PATH = re.compile(r"(?:[A-Za-z0-9_/]+(?:\.[A-Za-z0-9_/]+)*(?:@[0-9]+)?)?")
_SYMBOL = re.compile(r"[a-z]{1,4}[0-9]{1,9}")
_SREPR_TOKEN = re.compile(r"\s*(?:(-?[0-9]+)|([A-Za-z_][A-Za-z0-9_]*)|('[^'\\]{0,64}')|([(),=]))")
_OPERATOR_TARGETS = frozenset(
    f"_operator.{name}"
    for name in (
        "add", "sub", "mul", "floordiv", "truediv", "mod", "pow", "neg", "pos", "abs", "eq", "ne", "lt", "le", "gt",
        "ge", "and_", "or_", "xor", "not_", "invert", "getitem", "lshift", "rshift",
    )
)  # fmt: skip
_TORCH_TARGETS = frozenset(
    f"torch.{name}"
    for name in ("sym_not", "sym_float", "sym_int", "sym_max", "sym_min", "sym_ite", "sym_sqrt", "sym_sum", "_sym_sqrt")
)
_MATH_TARGETS = frozenset(f"math.{name}" for name in ("ceil", "floor", "trunc", "sqrt"))
_OP_NAMESPACES = ("aten", "prims", "quantized_decomposed", "torchao")
_OP_TARGET = re.compile(r"torch\.ops\.([a-z_]+)\.([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)")
#: ATen operators that read or write files: never in a program.
_DENIED_OPS = frozenset({"from_file", "save", "_nested_from_file"})
#: Higher-order operators (control flow, grad/autocast regions) a program may call; their graphs are checked too.
HIGHER_ORDER = frozenset({"wrap_with_set_grad_enabled", "wrap_with_autocast", "cond", "while_loop", "map_impl", "scan"})
_METADATA_KEYS = frozenset({"stack_trace", "nn_module_stack", "torch_fn", "source_fn_stack", "from_node", "custom"})
#: The fields torch writes for a node's provenance (``torch.fx.traceback.NodeSource.to_dict``), and their types.
_FROM_NODE_FIELDS = {"name": str, "target": str, "graph_id": int, "pass_name": str, "action": str, "from_node": list}
_MAX_JSON_DEPTH = 64
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_MAX_METADATA = 65536
_TREESPEC_TYPES = frozenset(
    {
        "builtins.tuple",
        "builtins.list",
        "builtins.dict",
        "collections.OrderedDict",
        "torch.fx.immutable_collections.immutable_list",
        "torch.fx.immutable_collections.immutable_dict",
    }
)


def is_identifier(value: Any) -> bool:
    """A Python identifier of ASCII letters, digits and underscores."""
    return isinstance(value, str) and _IDENT.fullmatch(value) is not None


def is_fqn(value: Any) -> bool:
    """A dotted name of a parameter, buffer or constant (``model.layers.0.weight``)."""
    return isinstance(value, str) and len(value) <= 1024 and _FQN.fullmatch(value) is not None


def is_module_path(value: Any) -> bool:
    """A module's path in the call graph (``''``, ``model.layers.0``, ``model.rotary_emb@1``)."""
    return isinstance(value, str) and len(value) <= 1024 and _MODULE_PATH.fullmatch(value) is not None


def is_symbol(value: Any) -> bool:
    """A shape symbol as torch names them (``s0``, ``u3``, ``zuf1``)."""
    return isinstance(value, str) and _SYMBOL.fullmatch(value) is not None


# -- symbolic expressions (sympy srepr) ----------------------------------------------------------------------
def check_sym_expr(text: Any) -> None:
    """Check a ``SymExpr.expr_str`` against the srepr grammar.

    Raises:
        ValueError: Saying what is not allowed.
    """
    if not isinstance(text, str) or len(text) > _MAX_EXPR:
        raise ValueError(f"a symbolic expression is a string of at most {_MAX_EXPR} characters")
    tokens = _srepr_tokens(text)
    parser = _SreprParser(tokens)
    parser.expr(0)
    if parser.pos != len(tokens):
        raise ValueError(f"unexpected {tokens[parser.pos][1]!r} after the expression")
    if parser.powers > _MAX_POWERS:
        raise ValueError(f"more than {_MAX_POWERS} powers in one expression")


def _srepr_tokens(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].isspace():
            break
        match = _SREPR_TOKEN.match(text, pos)
        if match is None:
            raise ValueError(f"unexpected character {text[pos:].lstrip()[:1]!r}")
        number, name, string, punct = match.groups()
        kind = "int" if number else "name" if name else "str" if string else "punct"
        tokens.append((kind, number or name or string or punct))
        pos = match.end()
    return tokens


class _SreprParser:
    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.powers = 0

    def take(self, value: str | None = None, kind: str | None = None) -> tuple[str, str]:
        if self.pos >= len(self.tokens):
            raise ValueError("the expression ends early")
        token = self.tokens[self.pos]
        if (value is not None and token[1] != value) or (kind is not None and token[0] != kind):
            raise ValueError(f"expected {value or kind}, got {token[1]!r}")
        self.pos += 1
        return token

    def peek(self) -> str | None:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else None

    def expr(self, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
        kind, head = self.take(kind="name")
        if head in _ATOMS:
            return
        if head not in SYMPY_HEADS:
            raise ValueError(f"{head!r} is not an allowed constructor")
        self.take("(")
        if head == "Symbol":
            self.symbol()
        elif head == "Integer":
            _check_int(self.take(kind="int")[1])
        elif head == "Float":  # Float('-0.5', precision=53): a decimal literal and its precision in bits
            literal = self.take(kind="str")[1][1:-1]
            if _FLOAT_LITERAL.fullmatch(literal) is None:
                raise ValueError(f"{literal[:40]!r} is not a decimal number")
            if self.peek() == ",":
                self.take(",")
                self.take("precision")
                self.take("=")
                if not 1 <= _check_int(self.take(kind="int")[1]) <= _MAX_PRECISION:
                    raise ValueError(f"a Float's precision is at most {_MAX_PRECISION} bits")
        elif head == "Rational":
            _check_int(self.take(kind="int")[1])
            self.take(",")
            _check_int(self.take(kind="int")[1])
        elif head == "Pow":
            self.powers += 1
            self.expr(depth + 1)
            self.take(",")
            self.take("Integer")
            self.take("(")
            exponent = _check_int(self.take(kind="int")[1])
            self.take(")")
            if abs(exponent) > _MAX_EXPONENT:
                raise ValueError(f"exponent {exponent} is over {_MAX_EXPONENT}")
        else:
            self.expr(depth + 1)
            while self.peek() == ",":
                self.take(",")
                self.expr(depth + 1)
        self.take(")")

    def symbol(self) -> None:
        name = self.take(kind="str")[1][1:-1]
        if not is_symbol(name):
            raise ValueError(f"{name!r} is not a shape symbol name")
        while self.peek() == ",":
            self.take(",")
            key = self.take(kind="name")[1]
            self.take("=")
            value = self.take(kind="name")[1]
            if key not in _ASSUMPTIONS or value not in ("True", "False"):
                raise ValueError(f"{key}={value} is not a symbol assumption")


def _check_int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_DIGITS:
        raise ValueError(f"integer {text[:24]}... has more than {_MAX_DIGITS} digits")
    return int(text)


# -- guards ---------------------------------------------------------------------------------------------------
def check_guard(text: Any) -> None:
    """Check one ``guards_code`` entry: a boolean combination of integer comparisons over input sizes.

    The entry is parsed with :func:`ast.parse` (which never runs anything) and every node of the tree must be one of:
    ``and``/``or``/``not``, a comparison, ``+ - * / // %``, a power with a small constant exponent (or its negative), an integer or a
    finite float, ``True``/``False``, a call of ``max``/``min``/``abs``/``math.floor``/``math.ceil``/``math.trunc`` or of torch's
    ``sym_float``/``sym_int``/``sym_max``/``sym_min``/``sym_sqrt``, or a source
    ``L['name'][0]['key'].size()[1]`` (also ``.stride()[i]``, ``.storage_offset()``). This is exactly what Python
    evaluates when ``ExportedProgram.module()`` compiles the guards.

    Raises:
        ValueError: Saying what is not allowed.
    """
    import ast

    if not isinstance(text, str) or len(text) > _MAX_GUARD or not text.isascii() or "\n" in text or "\r" in text:
        raise ValueError(f"a guard is one line of ASCII of at most {_MAX_GUARD} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ValueError(f"not a Python expression ({type(exc).__name__})") from None
    stack: list[tuple[Any, int, float]] = [(tree.body, 0, 1.0)]
    powers = 0
    while stack:
        node, depth, scale = stack.pop()
        if depth > MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
        children = _guard_children(node, ast)
        if children is None:
            raise ValueError(f"{type(node).__name__} {ast.unparse(node)[:60]!r} is not allowed in a guard")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            powers += 1
            if powers > _MAX_POWERS:
                raise ValueError(f"more than {_MAX_POWERS} powers")
            # Powers of powers multiply their exponents: ((n ** 64) ** 64) ** 64 is an integer of millions of digits
            # that Python would compute at every call. The product of the exponents over a base stays small.
            exponent = _constant_exponent(node.right, ast)  # a finite int or float: _guard_children checked it
            scale *= max(1.0, abs(float(exponent or 1)))
            if scale > _MAX_EXPONENT:
                raise ValueError(f"powers of powers raise a size to more than the {_MAX_EXPONENT}th power")
        stack.extend((child, depth + 1, scale) for child in children)


_GUARD_CALLS = frozenset({"max", "min", "abs"})
#: ``module.function`` calls a guard may make: math's roundings, and torch's symbolic-number helpers (pure
#: arithmetic on ints and floats: a size as a float for a float division or a square root, and back).
_GUARD_MODULE_CALLS = {
    "math": frozenset({"floor", "ceil", "trunc"}),
    "torch": frozenset({"sym_float", "sym_int", "sym_max", "sym_min", "sym_sqrt"}),
}
_MAX_FLOAT_TEXT = 32


def _is_number(value: Any) -> bool:
    """An int of at most :data:`_MAX_DIGITS` digits or a finite float (bools and other constants are not)."""
    import math

    if type(value) is int:
        return len(str(abs(value))) <= _MAX_DIGITS
    return type(value) is float and math.isfinite(value) and len(repr(value)) <= _MAX_FLOAT_TEXT


_GUARD_METHODS = frozenset({"size", "stride"})


def _guard_children(node: Any, ast: Any) -> list[Any] | None:
    """The sub-expressions to check next, or None when ``node`` is not allowed."""
    if isinstance(node, ast.BoolOp):
        return list(node.values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub, ast.UAdd)):
        return [node.operand]
    if isinstance(node, ast.Compare):
        return [node.left, *node.comparators]
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Pow):
            # an int, or a float such as the 0.5 of a square root of sizes, or their negative (-0.5: one over it)
            exponent = _constant_exponent(node.right, ast)
            if exponent is None or abs(exponent) > _MAX_EXPONENT:
                return None
            return [node.left]
        if isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod)):
            return [node.left, node.right]
        return None
    if isinstance(node, ast.Constant):  # a guard torch simplified to a constant (BLT: 'True') runs nothing
        return [] if _is_number(node.value) or type(node.value) is bool else None
    if isinstance(node, ast.Call):
        func = node.func
        if not node.args:
            return [] if _is_source(node, ast) else None
        if node.keywords:
            return None
        named = isinstance(func, ast.Name) and func.id in _GUARD_CALLS
        module_call = (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.attr in _GUARD_MODULE_CALLS.get(func.value.id, ())
        )
        return list(node.args) if named or module_call else None
    if isinstance(node, ast.Subscript):
        return [] if _is_source(node, ast) else None
    return None


def _constant_exponent(node: Any, ast: Any) -> int | float | None:
    """The number a power's exponent is (a constant, or ``-``/``+`` of one), or None for anything else."""
    sign = 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        sign = -1 if isinstance(node.op, ast.USub) else 1
        node = node.operand
    if isinstance(node, ast.Constant) and _is_number(node.value):
        return sign * node.value
    return None


def _is_source(node: Any, ast: Any) -> bool:
    """``L['name']...`` optionally followed by ``.size()[i]``, ``.stride()[i]`` or ``.storage_offset()``."""
    if isinstance(node, ast.Call):  # x.storage_offset()
        func = node.func
        if node.args or node.keywords or not isinstance(func, ast.Attribute) or func.attr != "storage_offset":
            return False
        return _is_input(func.value, ast)
    if not isinstance(node, ast.Subscript):
        return False
    value = node.value
    if isinstance(value, ast.Call):  # x.size()[i]
        func = value.func
        if value.args or value.keywords or not isinstance(func, ast.Attribute) or func.attr not in _GUARD_METHODS:
            return False
        return _is_index(node.slice, ast) and _is_input(func.value, ast)
    return _is_input(node, ast)


def _is_index(node: Any, ast: Any) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and 0 <= node.value < 1_000_000


def _is_input(node: Any, ast: Any) -> bool:
    """``L['name']`` followed by ``[int]`` or ``['identifier']`` subscripts."""
    while isinstance(node, ast.Subscript):
        key = node.slice
        is_key = isinstance(key, ast.Constant) and isinstance(key.value, str) and is_identifier(key.value)
        if not (is_key or _is_index(key, ast)):
            return False
        if isinstance(node.value, ast.Name):
            return node.value.id == "L" and is_key
        node = node.value
    return False


# -- node targets, metadata, tree specs -------------------------------------------------------------------------
def check_target(target: Any) -> bool:
    """Check a node's target; True when it is a higher-order operator (whose graph arguments hold more nodes).

    Raises:
        ValueError: The target is not an allowed operator.
    """
    if not isinstance(target, str):
        raise ValueError("a node target is a string")
    if target in _OPERATOR_TARGETS or target in _TORCH_TARGETS or target in _MATH_TARGETS or target in VMAP_TARGETS:
        return False  # torch.vmap's calls: their arguments and nesting are checked per graph (._vmap)
    if target.startswith("torch.ops.higher_order."):
        name = target[len("torch.ops.higher_order.") :]
        if name in HIGHER_ORDER:
            return True
        raise ValueError(f"higher-order operator {name!r} is not allowed")
    match = _OP_TARGET.fullmatch(target)
    if match is None or match.group(1) not in _OP_NAMESPACES:
        raise ValueError(f"{target[:200]!r} is not an operator of {', '.join(_OP_NAMESPACES)}")
    if match.group(2) in _DENIED_OPS:
        raise ValueError(f"operator {match.group(2)!r} reads or writes files")
    return False


def check_metadata(metadata: dict[str, Any]) -> None:
    """Check a node's ``metadata``: only the keys torch writes for our exports, plain bounded text.

    Raises:
        ValueError: An unknown key or a bad value.
    """
    for key, value in metadata.items():
        if key not in _METADATA_KEYS:
            raise ValueError(f"metadata key {key!r} is not allowed")
        if not isinstance(value, str) or len(value) > _MAX_METADATA or _CONTROL.search(value):
            raise ValueError(f"metadata {key!r} is not plain text of at most {_MAX_METADATA} characters")
        if key == "source_fn_stack":
            for item in value.split(";"):
                name, _, target = item.partition(",")
                if not is_identifier(name) or not is_fqn(target):
                    raise ValueError(f"source_fn_stack item {item[:80]!r} is not 'name,qualified.name'")
        elif key == "from_node":
            _check_from_node(value)
        elif key == "custom":  # annotations a pass or the user attached (fx.traceback.annotate): JSON data
            if json_depth(_loads(value, key), _MAX_JSON_DEPTH + 1) > _MAX_JSON_DEPTH:
                raise ValueError(f"metadata {key!r} is nested more than {_MAX_JSON_DEPTH} deep")
        elif key != "stack_trace" and "\n" in value:
            raise ValueError(f"metadata {key!r} spans several lines")


def _loads(text: str, key: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise ValueError(f"metadata {key!r} is not JSON of bounded depth") from None


def _check_from_node(text: str) -> None:
    """``from_node`` (where a node came from, through which passes) is JSON that torch turns into ``NodeSource``
    objects field by field: a list of objects with :data:`_FROM_NODE_FIELDS` only, nested at most
    :data:`_MAX_JSON_DEPTH` deep."""
    pending = [(_loads(text, "from_node"), 0)]
    while pending:
        items, depth = pending.pop()
        if not isinstance(items, list) or depth > _MAX_JSON_DEPTH:
            raise ValueError("metadata 'from_node' is not a list of node sources of bounded depth")
        for item in items:
            if not isinstance(item, dict):
                raise ValueError("metadata 'from_node' holds something other than a node source")
            for field, value in item.items():
                kind = _FROM_NODE_FIELDS.get(field)
                if kind is None or not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                    raise ValueError(f"metadata 'from_node' field {str(field)[:40]!r} is not allowed there")
            if "from_node" in item:
                pending.append((item["from_node"], depth + 1))


def check_treespec(text: Any) -> None:
    """Check a serialized pytree spec: tuples, lists and dicts with identifier or integer keys, and leaves.

    Raises:
        ValueError: Another node type, a bad context or a malformed spec.
    """
    import json

    if not isinstance(text, str) or len(text) > 1024 * 1024:
        raise ValueError("a tree spec is a string of at most 1 MiB")
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not JSON ({type(exc).__name__})") from None
    if not isinstance(value, list) or len(value) != 2 or value[0] != 1:
        raise ValueError("expected [1, spec] (protocol 1)")
    stack = [(value[1], 0)]
    count = 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if depth > MAX_DEPTH or count > 1_000_000:
            raise ValueError("too deep or too large")
        if not isinstance(node, dict) or set(node) != {"type", "context", "children_spec"}:
            raise ValueError("a spec node has exactly type, context and children_spec")
        kind, context, children = node["type"], node["context"], node["children_spec"]
        if not isinstance(children, list):
            raise ValueError("children_spec is a list")
        if kind is None:
            if context is not None or children:
                raise ValueError("a leaf has no context and no children")
            continue
        if kind not in _TREESPEC_TYPES:
            raise ValueError(f"node type {str(kind)[:80]!r} is not allowed")
        _check_context(kind, context, len(children))
        stack.extend((child, depth + 1) for child in children)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _check_context(kind: str, context: Any, children: int) -> None:
    import json

    if not isinstance(context, str) or len(context) > 1024 * 1024:
        raise ValueError("a node context is a JSON string")
    try:
        value = json.loads(context, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise ValueError("a node context is JSON") from None
    if "dict" in kind.lower():
        if not isinstance(value, list) or len(value) != children:
            raise ValueError("a dict node's context lists its keys")
        for key in value:
            if not (is_identifier(key) or (isinstance(key, int) and not isinstance(key, bool))):
                raise ValueError(f"dict key {str(key)[:80]!r} is not an identifier or an integer")
    elif value is not None:
        raise ValueError("a tuple or list node has no context")
