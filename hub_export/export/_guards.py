"""Size guards of a traced program turned into dim bounds: a multiple, a maximum, a pinned size.

``torch.export`` keeps the conditions a model's code put on input sizes as guards. Simple ones (``sequence >= 2``)
already narrow the symbol's range; the ones that go through size arithmetic do not: a ``view(b, s // 4, 4)``
guards ``s * b == 4 * b * (s // 4)`` (the sequence must be a multiple of 4), and a compressed-attention block
``4 * (4 * min(s, 4 * (s // 4)) // ...) >= 16 * min(...)`` caps it. Left as guards, another size fails at run time
with ``Guard failed: <expression>`` (Dynamo) or runs into a wrong shape (the other backends, which keep no guards).
:func:`bound_dims` reads those guards and gives each dim the sizes they admit (``Dim.min``, ``max``,
``multiple_of``), so every backend refuses another size up front with one clear
:class:`~hub_export.errors.InputBoundsError` ("pad it to a multiple of 4", "outside [2, 7]").

The guards are sympy expressions evaluated at integer sizes (never code); each dim is probed over a window of
sizes with the other dims at their traced sizes. A period longer than the window (an audio encoder folding 1920
samples per token: ``Eq(Mod(samples, 1920), 0)``) leaves only the traced size in it; the dim is then probed again on
the sizes the guards' own divisors step through (:func:`_periods`, finest first), so it reads ``multiple_of=1920`` instead of
pinning the sample's length.
"""

from __future__ import annotations

import math
from typing import Any

from ..dims import Dim

__all__ = ["bound_dims"]

#: sizes probed on each side of the traced one (a run reaching the edge of the window is taken as unbounded)
WINDOW = 64
#: the longest period probed in steps (a longer one is left to torch's guards)
MAX_PERIOD = 1 << 20
#: guards read at most (a model with more non-linear size guards keeps the rest as torch guards only)
MAX_GUARDS = 64


def _shape_env(program: Any) -> Any:
    for node in program.graph.nodes:
        if node.op != "placeholder":
            continue
        value = node.meta.get("val")
        for size in getattr(value, "shape", ()):
            env = getattr(getattr(size, "node", None), "shape_env", None)
            if env is not None:
                return env
    return None


def _hints(env: Any) -> dict[Any, int]:
    values = getattr(env, "backed_var_to_val", None)
    if values is None:  # older torch
        values = env.var_to_val
    return {symbol: int(value) for symbol, value in values.items()}


def _arithmetic_guards(env: Any, hints: dict[Any, int]) -> list[Any]:
    """Guards over backed sizes that go through a function (``//``, ``%``, ``min``): the ones ranges miss."""
    import sympy

    guards: list[Any] = []
    for guard in getattr(env, "guards", ()):
        expr = guard.expr
        if not expr.free_symbols or not expr.free_symbols <= set(hints) or expr in guards:
            continue
        if expr.atoms(sympy.Function):
            guards.append(expr)
        if len(guards) >= MAX_GUARDS:
            break
    return guards


def _verdicts(expr: Any, values: dict[Any, Any], symbols: list[Any], sizes: range) -> tuple[bool, ...]:
    """Whether ``expr`` holds at each size given to ``symbols`` (``values`` for the other symbols)."""
    import sympy

    fixed = expr.xreplace(values)
    verdicts = []
    for size in sizes:
        try:
            result = fixed.xreplace({symbol: sympy.Integer(size) for symbol in symbols})
        except (ArithmeticError, TypeError, ValueError):
            result = sympy.false
        verdicts.append(result is not sympy.false)
    return tuple(verdicts)


def _periods(guards: list[Any], group: list[Any]) -> list[int]:
    """The steps to probe the guards reading ``group`` in, finest first: each ``//`` and ``%`` divisor multiplied by
    the divisors it is nested in (``(s // 16) % 6`` steps by 96), then their lcm, the period of them all; empty
    without any (those past ``MAX_PERIOD`` left out). An audio encoder framing 80 samples, then pooling frames by 4
    (``(s // 80 - 1) // 4``) has the period 320 but admits every multiple of 80: the finer step is tried first."""
    import sympy
    from torch.utils._sympy.functions import FloorDiv, Mod, PythonMod

    kinds = (FloorDiv, Mod, PythonMod)

    def period(atom: Any) -> int:
        divisor = atom.args[1]
        if not isinstance(divisor, sympy.Integer) or int(divisor) < 1:
            return 1
        inner = [period(a) for a in atom.args[0].atoms(*kinds)]
        return int(divisor) * math.lcm(1, *inner)

    steps: set[int] = set()
    for expr in guards:
        if set(group) & expr.free_symbols:
            steps.update(period(atom) for atom in expr.atoms(*kinds))
    steps.add(math.lcm(1, *steps))
    return sorted(step for step in steps if 1 < step <= MAX_PERIOD)


def _admitted(
    guards: list[Any], group: list[Any], groups: dict[str, list[Any]], hints: dict[Any, int], sizes: range
) -> list[int]:
    """The sizes in ``sizes`` that every guard admits for the symbols of ``group`` (one dim).

    A guard that also reads other dims counts only when its verdicts do not depend on them (probed at their traced
    sizes and two others): ``b * s == 4 * b * (s // 4)`` bounds ``s`` alone; a truly coupled guard stays torch's.
    """
    import sympy

    mine = set(group)
    others = [g for g in groups.values() if not mine & set(g)]
    admitted = [True] * len(sizes)
    for expr in guards:
        if not mine & expr.free_symbols:
            continue
        coupled = [g for g in others if set(g) & expr.free_symbols]
        settings = [0, 1, 3] if coupled else [0]
        seen = set()
        for extra in settings:
            values = {}
            for other in coupled:
                size = hints[other[0]] * (2 if extra == 3 else 1) + extra
                values.update({symbol: sympy.Integer(size) for symbol in other})
            seen.add(_verdicts(expr, values, group, sizes))
        if len(seen) == 1:
            admitted = [a and v for a, v in zip(admitted, seen.pop())]
    return [size for size, ok in zip(sizes, admitted) if ok]


def _bounds(admitted: list[int], hint: int, dim: Dim, sizes: range) -> Dim | None:
    """The dim admitting the run of sizes around ``hint`` (one step apart); None when nothing narrows."""
    if hint not in admitted:
        return None  # the guards do not even admit the traced size: leave them to torch
    step = 0
    for size in admitted:
        step = math.gcd(step, size - hint)
    step = step or 1
    if hint % step:
        return None  # a period that is not "a multiple of" (sizes 3, 7, 11...): no dim says it, torch's guard stays
    accepted = set(admitted)
    low = hint
    while low - step >= sizes.start and low - step in accepted:
        low -= step
    top = hint
    while top + step < sizes.stop and top + step in accepted:
        top += step
    # a run reaching an edge of the window keeps the dim's own bound there
    low = dim.min if low - step < sizes.start else low
    upper = dim.max if top + step >= sizes.stop else top
    if step == 1 and low == dim.min and upper == dim.max:
        return None
    return Dim(dim.name, low, upper, math.lcm(dim.multiple_of, step))


def bound_dims(program: Any, symbols: dict[str, str], dims: dict[str, Dim]) -> dict[str, Dim]:
    """``dims`` with the bounds the program's size guards impose (the others unchanged).

    Args:
        program: The ``torch.export`` ExportedProgram.
        symbols: Symbol name (``s85``) -> dim name (``sequence``), as the trace named them.
        dims: Dim name -> its bounds from the program's range constraints.
    """
    env = _shape_env(program)
    if env is None:
        return dims
    hints = _hints(env)
    guards = _arithmetic_guards(env, hints)
    if not guards:
        return dims
    groups: dict[str, list[Any]] = {}
    for symbol in hints:
        groups.setdefault(symbols.get(str(symbol), str(symbol)), []).append(symbol)
    result = dict(dims)
    for name, group in groups.items():
        hint = hints[group[0]]
        if name not in result or any(hints[s] != hint for s in group):
            continue
        if not any(set(group) & g.free_symbols for g in guards):
            continue
        dim = result[name]
        sizes = range(
            max(dim.min, hint - WINDOW, 0), hint + WINDOW + 1 if dim.max is None else min(dim.max, hint + WINDOW) + 1
        )
        narrowed = _bounds(_admitted(guards, group, groups, hints, sizes), hint, dim, sizes)
        for step in _periods(guards, group) if narrowed is not None and narrowed.min == narrowed.max else ():
            # only the traced size in the window: probe the sizes the guards' divisors step through
            low = hint - step * min(WINDOW, (hint - max(dim.min, 0)) // step)
            top = hint + step * WINDOW if dim.max is None else min(dim.max, hint + step * WINDOW)
            stepped = range(low, top + 1, step)
            wider = _bounds(_admitted(guards, group, groups, hints, stepped), hint, dim, stepped)
            if wider is not None and wider.min != wider.max:
                narrowed = wider
                break
        if narrowed is not None:
            result[name] = narrowed
    return result
