"""The sizes of an export: named dimensions (:class:`Dim`) and the size expressions over them.

A symbolic axis of an export has a name (``batch``, ``sequence``) and bounds; an output axis may be an
expression over those names (``past_sequence + sequence``, ``Max(0, sequence - 3)``). Both come from
``export.json``, which may be untrusted, so expressions are parsed here under a small grammar and never handed
to ``eval`` or ``sympy.sympify``:

.. code-block:: text

    expr       := comparison
    comparison := sum (("==" | "!=" | "<=" | ">=" | "<" | ">") sum)?
    sum        := product (("+" | "-") product)*
    product    := unary (("*" | "//" | "/" | "%") unary)*
    unary      := "-" unary | power
    power      := atom ("**" INTEGER)?
    atom       := INTEGER | NAME | "(" expr ")" | FUNCTION "(" expr ("," expr)* ")"

``FUNCTION`` is one of :data:`FUNCTIONS` (``Min``, ``Max``, ``floor``, ``ceiling``, ``FloorDiv``, ``Mod`` and the
few other integer functions torch prints); a name is an identifier that is not a function. Anything else (an
attribute, a string, a call of another name, a lambda) is refused with ``ValueError``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .errors import InputBoundsError, ManifestError

__all__ = [
    "FUNCTIONS",
    "Dim",
    "SizeExpr",
    "dims_from_json",
    "dims_to_json",
    "is_unbounded",
    "parse_size",
]


def is_unbounded(upper: Any) -> bool:
    """Whether ``upper``, a dim's maximum as torch gives it, means no bound: None, torch's ``int_oo``, or an int of
    2**62 or more (torch derives ``sys.maxsize - 1`` and the like from unbounded ranges; no tensor axis is that
    long, and a runtime given such a bound overflows computing sizes)."""
    return upper is None or str(upper) in {"int_oo", "oo", "inf"} or (isinstance(upper, int) and upper >= 2**62)


#: Functions a size expression may call, with their arity (None: two or more arguments).
FUNCTIONS: dict[str, int | None] = {
    "Min": None,
    "Max": None,
    "floor": 1,
    "ceiling": 1,
    "FloorDiv": 2,
    "Mod": 2,
    "PythonMod": 2,
    "CeilToInt": 1,
    "FloorToInt": 1,
    "TruncToInt": 1,
    "CleanDiv": 2,
    "IntTrueDiv": 2,
    "Abs": 1,
    "Eq": 2,
    "Ne": 2,
    "Lt": 2,
    "Le": 2,
    "Gt": 2,
    "Ge": 2,
}
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(\*\*|//|==|!=|<=|>=|[-+*/%(),<>]))")
_MAX_LENGTH = 4096
_MAX_DEPTH = 64


@dataclass(frozen=True)
class SizeExpr:
    """A parsed size expression: ``op`` and ``args`` (an int for ``int``, a str for ``name``, else child nodes)."""

    op: str
    args: tuple[Any, ...]

    @property
    def names(self) -> frozenset[str]:
        """Every name the expression reads."""
        if self.op == "name":
            return frozenset(self.args)
        if self.op == "int":
            return frozenset()
        return frozenset().union(*(a.names for a in self.args if isinstance(a, SizeExpr)))  # a power's exponent: int

    def evaluate(self, values: Mapping[str, int]) -> int:
        """The integer value with ``values`` for the names (a fractional result is floored).

        Raises:
            KeyError: A name has no value.
            ZeroDivisionError: A division by zero.
        """
        return math.floor(self._value(values))

    def _value(self, values: Mapping[str, int]) -> Fraction:
        op, args = self.op, self.args
        if op == "int":
            return Fraction(args[0])
        if op == "name":
            return Fraction(int(values[args[0]]))
        if op == "**":
            return args[0]._value(values) ** int(args[1])
        v = [a._value(values) for a in args]
        if op == "neg":
            return -v[0]
        if op in _BINARY:
            return Fraction(_BINARY[op](v[0], v[1]))
        return Fraction(_CALLS[op](*v))

    def __str__(self) -> str:
        op, args = self.op, self.args
        if op in ("int", "name"):
            return str(args[0])
        if op == "neg":
            return f"-{_wrap(args[0])}"
        if op == "**":
            return f"{_wrap(args[0])}**{args[1]}"
        if op in _BINARY:
            return f"{_wrap(args[0])} {op} {_wrap(args[1])}"
        return f"{op}({', '.join(str(a) for a in args)})"


def _wrap(node: SizeExpr) -> str:
    return str(node) if node.op in ("int", "name", "neg") or node.op in FUNCTIONS else f"({node})"


def _floordiv(a: Fraction, b: Fraction) -> int:
    return math.floor(a / b)


_BINARY = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "//": _floordiv,
    "/": lambda a, b: a / b,
    "%": lambda a, b: a % b,
    "==": lambda a, b: int(a == b),
    "!=": lambda a, b: int(a != b),
    "<=": lambda a, b: int(a <= b),
    ">=": lambda a, b: int(a >= b),
    "<": lambda a, b: int(a < b),
    ">": lambda a, b: int(a > b),
}
_CALLS: dict[str, Callable[..., Any]] = {
    "Min": min,
    "Max": max,
    "floor": math.floor,
    "ceiling": math.ceil,
    "FloorDiv": _floordiv,
    "Mod": lambda a, b: a % b,
    "PythonMod": lambda a, b: a % b,
    "CeilToInt": math.ceil,
    "FloorToInt": math.floor,
    "TruncToInt": math.trunc,
    "CleanDiv": _floordiv,
    "IntTrueDiv": lambda a, b: a / b,
    "Abs": abs,
    "Eq": lambda a, b: int(a == b),
    "Ne": lambda a, b: int(a != b),
    "Lt": lambda a, b: int(a < b),
    "Le": lambda a, b: int(a <= b),
    "Gt": lambda a, b: int(a > b),
    "Ge": lambda a, b: int(a >= b),
}


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            match = _TOKEN.match(text, pos)
            if match is None or match.end() == pos:
                if text[pos:].strip() == "":
                    break
                raise ValueError(f"unexpected character {text[pos:].strip()[:1]!r}")
            pos = match.end()
            number, name, punct = match.groups()
            self.tokens.append(("int", number) if number else ("name", name) if name else ("op", punct))
        self.pos = 0
        self.depth = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if token is None or (value is not None and token[1] != value):
            raise ValueError(f"expected {value or 'a term'}, got {token[1] if token else 'the end'}")
        self.pos += 1
        return token

    def parse(self) -> SizeExpr:
        node = self.comparison()
        if self.peek() is not None:
            raise ValueError(f"unexpected {self.peek()[1]!r}")  # type: ignore[index]
        return node

    def comparison(self) -> SizeExpr:
        left = self.sum()
        token = self.peek()
        if token and token[1] in ("==", "!=", "<=", ">=", "<", ">"):
            self.pos += 1
            return SizeExpr(token[1], (left, self.sum()))
        return left

    def sum(self) -> SizeExpr:
        node = self.product()
        while (token := self.peek()) and token[1] in ("+", "-"):
            self.pos += 1
            node = SizeExpr(token[1], (node, self.product()))
        return node

    def product(self) -> SizeExpr:
        node = self.unary()
        while (token := self.peek()) and token[1] in ("*", "//", "/", "%"):
            self.pos += 1
            node = SizeExpr(token[1], (node, self.unary()))
        return node

    def unary(self) -> SizeExpr:
        if (token := self.peek()) and token[1] == "-":
            self.pos += 1
            return self.nested(lambda: SizeExpr("neg", (self.unary(),)))
        return self.power()

    def power(self) -> SizeExpr:
        node = self.atom()
        if (token := self.peek()) and token[1] == "**":
            self.pos += 1
            kind, value = self.take()
            if kind != "int":
                raise ValueError("an exponent must be an integer")
            node = SizeExpr("**", (node, int(value)))
        return node

    def atom(self) -> SizeExpr:
        kind, value = self.take()
        if kind == "int":
            return SizeExpr("int", (int(value),))
        if kind == "name":
            if value in FUNCTIONS:
                return self.nested(lambda: self.call(value))
            if (token := self.peek()) and token[1] == "(":
                raise ValueError(f"{value!r} is not a size function ({', '.join(FUNCTIONS)})")
            return SizeExpr("name", (value,))
        if value == "(":
            node = self.nested(self.comparison)
            self.take(")")
            return node
        raise ValueError(f"unexpected {value!r}")

    def call(self, function: str) -> SizeExpr:
        self.take("(")
        args = [self.comparison()]
        while (token := self.peek()) and token[1] == ",":
            self.pos += 1
            args.append(self.comparison())
        self.take(")")
        arity = FUNCTIONS[function]
        if (arity is None and len(args) < 2) or (arity is not None and len(args) != arity):
            raise ValueError(f"{function} takes {arity or 'two or more'} argument(s), got {len(args)}")
        return SizeExpr(function, tuple(args))

    def nested(self, build: Any) -> SizeExpr:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise ValueError(f"nested deeper than {_MAX_DEPTH} levels")
        try:
            return build()
        finally:
            self.depth -= 1


def parse_size(text: str, names: frozenset[str] | set[str] | None = None) -> SizeExpr:
    """Parse a size expression under the grammar of this module.

    Args:
        text: The expression (``"past_sequence + sequence"``).
        names: The names it may read (None: any identifier that is not a function).

    Raises:
        ValueError: The text is not an expression of the grammar, is too long or too deep, or reads a name
            outside ``names``.
    """
    if not isinstance(text, str):
        raise ValueError(f"a size expression must be a string, got {type(text).__name__}")
    if len(text) > _MAX_LENGTH:
        raise ValueError(f"a size expression is limited to {_MAX_LENGTH} characters")
    expr = _Parser(text).parse()
    if names is not None:
        unknown = sorted(expr.names - set(names))
        if unknown:
            raise ValueError(f"unknown dim(s) {unknown}; known: {sorted(names)}")
    return expr


@dataclass(frozen=True)
class Dim:
    """A named symbolic dimension of an export and the sizes it accepts.

    Attributes:
        name: Its name in shapes (``batch``, ``sequence``).
        min: The smallest size accepted.
        max: The largest size accepted (None: unbounded).
        multiple_of: Sizes must be a multiple of this (a model whose pooling or striding needs it).

    A dim with ``min == max`` is an axis the model's code fixed while tracing (a "pinned" axis): the export
    accepts that one size there.
    """

    name: str
    min: int = 0
    max: int | None = None
    multiple_of: int = 1

    def __post_init__(self) -> None:
        if self.max is not None and self.max < self.min:
            raise ValueError(f"Dim {self.name!r}: max {self.max} is below min {self.min}")
        if self.multiple_of < 1:
            raise ValueError(f"Dim {self.name!r}: multiple_of must be >= 1, got {self.multiple_of}")

    @property
    def pinned(self) -> bool:
        """Whether the dim admits one size only (an axis the model's code fixed while tracing)."""
        return self.max is not None and self.min == self.max

    def __contains__(self, size: object) -> bool:
        if not isinstance(size, int):
            return False
        return (
            size >= self.min
            and (self.max is None or size <= self.max)
            and (self.multiple_of == 1 or size % self.multiple_of == 0)
        )

    def describe(self) -> str:
        """``[min, max]`` (``inf`` when unbounded), with the multiple when there is one."""
        text = f"[{self.min}, {self.max if self.max is not None else 'inf'}]"
        return text + (f", a multiple of {self.multiple_of}" if self.multiple_of > 1 else "")

    def check(self, size: int, where: str, axis: int) -> None:
        """Raise unless ``size`` is accepted.

        Raises:
            InputBoundsError: Naming ``where`` (an input), the axis, the bounds and how to fix it.
        """
        if size in self:
            return
        if self.pinned:
            fix = (
                "The model's code fixed this axis while tracing (a limitation of its implementation, e.g. a Python "
                f"loop over it): re-exporting with dynamic=True does not change it. Pass size {self.min} there, or "
                "export with a sample of the size you will run."
            )
        elif self.multiple_of > 1 and size % self.multiple_of:
            fix = f"Pad it to a multiple of {self.multiple_of}."
        else:
            fix = (
                f"Run a size inside these bounds, or re-export with a larger bound for {self.name!r} if the export "
                "set one (a bound the model's own size arithmetic imposes stays)."
            )
        raise InputBoundsError(
            f"{where} has size {size} on axis {axis} ({self.name}), outside the exported bounds {self.describe()}. "
            f"{fix}"
        )

    def to_json(self) -> dict[str, Any]:
        """``{"min", "max"[, "multiple_of"]}``: the dim's entry in the ``dims`` table of ``export.json``."""
        data: dict[str, Any] = {"min": self.min, "max": self.max}
        if self.multiple_of > 1:
            data["multiple_of"] = self.multiple_of
        return data

    @classmethod
    def from_json(cls, name: str, data: Mapping[str, Any]) -> Dim:
        """Rebuild a dim from its entry in the ``dims`` table."""
        return cls(name, int(data.get("min") or 0), data.get("max"), int(data.get("multiple_of") or 1))

    def to_torch(self) -> Any:
        """A ``torch.export.Dim`` with these bounds (``multiple_of`` as a derived dim ``multiple_of * k``)."""
        import torch

        if self.multiple_of > 1:
            base = torch.export.Dim(
                f"{self.name}_over_{self.multiple_of}",
                min=max(1, -(-self.min // self.multiple_of)),
                **({} if self.max is None else {"max": self.max // self.multiple_of}),
            )
            return self.multiple_of * base
        return torch.export.Dim(self.name, min=self.min, **({} if self.max is None else {"max": self.max}))

    def to_auto(self) -> Any:
        """``Dim.AUTO`` bounded like this dim (torch names the symbol itself)."""
        import torch

        return torch.export.Dim.AUTO(min=self.min, max=self.max)

    @classmethod
    def from_torch(cls, dim: Any) -> Dim:
        """The dim of a ``torch.export.Dim(name, min=, max=)`` (an unbounded max becomes None)."""
        upper = dim.max
        return cls(dim.__name__, int(dim.min), None if is_unbounded(upper) else int(upper))


def dims_to_json(dims: Mapping[str, Dim]) -> dict[str, dict[str, Any]]:
    """The ``dims`` table of ``export.json``: name -> :meth:`Dim.to_json`."""
    return {name: dim.to_json() for name, dim in dims.items()}


def dims_from_json(data: Mapping[str, Any], where: str = "dims") -> dict[str, Dim]:
    """Rebuild a ``dims`` table.

    Raises:
        ManifestError: An entry is inconsistent (max below min, multiple_of below 1).
    """
    try:
        return {name: Dim.from_json(name, entry) for name, entry in data.items()}
    except (TypeError, ValueError) as exc:
        raise ManifestError(f"{where}: {exc}") from None
