"""Trace a model once with ``torch.export`` into a flat-tensor ExportedProgram that every backend lowers.

The model is wrapped in :class:`FlatModule`, whose ``forward(*tensors)`` rebuilds the kwargs (caches
included) from flat tensors, applies the trace-time constants (``use_cache``, ``return_dict``, ...), calls the
model and returns its output flattened to a tuple of tensors. The structure of both sides is recorded as plain
data (:mod:`hub_export.signature`) so runners can rebuild the model's own ``ModelOutput``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._allowlist import is_model_output
from ..configs import ExportConfig
from ..dims import Dim, is_unbounded
from ..errors import ConfigError, ExportError
from ..patches.tracing import ExpertsChoice, tracing_patches
from ..patches.values import fixed_values_fold
from ..signature import (
    Signature,
    TensorSpec,
    dtype_name,
    fixed_constant,
    fixed_tensor,
    is_fixed,
    pair_names,
    split_kwargs,
)
from ..structure import flatten_value, refuse_own_state_input, unflatten
from ._fixed import data_dependent, drop_folded_reads, value_inputs, warn_fixed
from ._guards import bound_dims
from ._program import own, user_output_values
from .roles import axis_role, bound_roles, input_axis_name, shape_roles
from .widen import admit_down_to, capped_dims, longer_kwargs, matches

__all__ = ["DimBounds", "FlatModule", "Traced", "trace"]

#: ``bounds(role, leaf, axis, sample_size) -> (min, max) | None`` for one axis of a ``dynamic=True`` trace; ``role``
#: is the dim's readable name (``batch``, ``sequence``, ...), ``leaf`` the flat input's name.
DimBounds = Callable[[str, str, int, int], "tuple[int | None, int | None] | None"]


class FlatModule:
    """Builds the ``torch.nn.Module`` that maps flat tensors to flat tensors around ``model``."""

    def __new__(cls, model: Any, input_structure: list[tuple[str, dict]], constants: dict[str, Any]) -> Any:
        import torch

        class _Flat(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model
                self.output_names: list[str] = []
                self.output_structure: dict[str, Any] | None = None
                self.sizes: set[str] = set()  # outputs that are sizes of dynamic dims: returned as tensors

            def forward(self, *tensors: Any) -> tuple[Any, ...]:
                kwargs = {name: unflatten(node, list(tensors)) for name, node in input_structure}
                # an input fixed to values is rebuilt here from Python data: a constant the tracer folds
                flags = {k: fixed_tensor(v) if is_fixed(v) else v for k, v in constants.items()}
                outputs = self.model(**kwargs, **flags)
                leaves: list[tuple[str, Any]] = []
                # a ModelOutput's tensors are named after its fields; a bare tensor or tuple is `output`, `output.0`
                path = () if is_model_output(outputs) else ("output",)
                self.output_structure = flatten_value(outputs, path, leaves, self.sizes)
                self.output_names = [name for name, _ in leaves]
                return tuple(tensor for _, tensor in leaves)

        return _Flat()


@dataclass(frozen=True)
class Traced:
    """One traced component, ready for a backend to lower.

    Attributes:
        program: The flat ``torch.export`` ExportedProgram.
        module: The eager module it was traced from.
        signature: Its :class:`~hub_export.signature.Signature` (axes the model fixed while tracing are dims with
            ``min == max``).
        sample: The flat sample inputs it was traced with.
        expected: Eager's flat outputs on ``sample`` (the parity reference).
        architecture: The model class name.
        dtype: The model's dtype.
        device: The model's device type.
        folded: Whether the trace kept the values of tensors computed from constants (a data-dependent model:
            :func:`~hub_export.patches.values.fixed_values_fold`); a backend that traces the program again while
            lowering (``run_decompositions``) needs the same fold.
        checks: Other flat samples with eager's outputs on them, which the backend's parity check runs too: the
            user's own sample, when the trace is from a longer one (:mod:`.widen`: a dim the guards capped at the
            sample).
    """

    program: Any
    module: Any
    signature: Signature
    sample: list[Any]
    expected: list[Any]
    architecture: str | None
    dtype: str
    device: str
    folded: bool = False
    checks: tuple[tuple[list[Any], list[Any]], ...] = ()

    def replace(self, **changes: Any) -> Traced:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def lowering_patches(self) -> contextlib.AbstractContextManager[None]:
        """The patches a backend lowers this trace under: the fold of a folded trace, else none."""
        return fixed_values_fold() if self.folded else contextlib.nullcontext()


def _axes(spec_entry: Any) -> dict[int, Any]:
    """One input's entry of a ``dynamic_shapes`` spec as ``{axis: dim}`` (a dict, or a list / tuple by axis)."""
    if isinstance(spec_entry, dict):
        return spec_entry
    return dict(enumerate(spec_entry)) if isinstance(spec_entry, (list, tuple)) else {}


def _pin_axes(
    model: Any,
    config: ExportConfig,
    spec: Any,
    leaves: list[str],
    names: list[str],
    shapes: list[tuple[int | str, ...]],
    dims: dict[str, Dim],
) -> list[tuple[int | str, ...]]:
    """Turn the axes asked to be dynamic that came out static into dims with ``min == max`` (``leaves``: flat input
    names, ``names``: their specs' names); returns the shapes with those axes named, and adds their dims to ``dims``.

    Under ``dynamic=True`` only batch and sequence axes count (channels, hidden sizes, a ViT's image size are
    static by nature); under ``dynamic_shapes`` every axis given a dim does. Warns once, naming each axis.
    """
    import warnings

    import torch

    cache_inputs = any(n.endswith((".key", ".value")) for n in leaves)
    shaped = shape_roles([(leaf, len(shape), False) for leaf, shape in zip(leaves, shapes)])
    pinned = []
    named: list[list[int | str]] = [list(shape) for shape in shapes]
    for leaf, name, axes, shape in zip(leaves, names, spec[0] if spec else (), named):
        for axis, dim in _axes(axes).items():
            if dim is None or dim == torch.export.Dim.STATIC or axis >= len(shape) or not isinstance(shape[axis], int):
                continue
            role = axis_role(leaf, axis, cache_inputs, shaped)
            if not config.dynamic or role in ("batch", "patches") or role.endswith("sequence"):
                size = int(shape[axis])
                dim_name = role if role not in dims or dims[role] == Dim(role, size, size) else f"{role}_{size}"
                dims[dim_name] = Dim(dim_name, size, size)
                shape[axis] = dim_name
                pinned.append({"input": name, "axis": axis, "size": size})
    if pinned:
        axes_text = ", ".join(f"{p['input']!r} axis {p['axis']} (fixed to {p['size']})" for p in pinned)
        warnings.warn(
            f"{type(model).__name__}: dynamic shapes were asked for {axes_text}, but the model's code fixed "
            f"{'them' if len(pinned) > 1 else 'it'} while tracing (a Python loop or branch on that size: a limitation "
            "of the model's implementation, not of this export). The export accepts only the traced size there: "
            "run it with that size, or export with a sample of the size you will run.",
            UserWarning,
            stacklevel=5,  # _pin_axes < trace < export_component < export < the caller
        )
    return [tuple(shape) for shape in named]


def _warn_capped(model: Any, spec: Any, shapes: list[tuple[int | str, ...]], dims: dict[str, Dim]) -> None:
    """Warn when the model's code capped a dim below what the export asked for (its own size guards: a sequence
    taking 4 to 15 tokens only), so that an export narrower than asked is never a silent outcome."""
    import warnings

    capped: dict[str, tuple[Dim, int | None]] = {}
    for axes, shape in zip(spec[0] if spec else (), shapes):
        for axis, wanted in _axes(axes).items():
            size = shape[axis] if axis < len(shape) else None
            dim = dims.get(size) if isinstance(size, str) else None
            if dim is None or dim.max is None or dim.name in capped:
                continue
            asked = getattr(wanted, "max", None)
            asked = int(asked) if isinstance(asked, int) and asked < 2**31 else None
            if asked is None or dim.max < asked:
                capped[dim.name] = (dim, asked)
    if capped:
        text = ", ".join(
            f"{name!r} to [{dim.min}, {dim.max}]" + (f" (asked: up to {asked})" if asked else "")
            for name, (dim, asked) in capped.items()
        )
        warnings.warn(
            f"{type(model).__name__}: the model's code bounds {text} while tracing (size guards on that dim): the "
            "export refuses other sizes with InputBoundsError. Export from a sample of the size you will run, or "
            "look for the limit in the model's code.",
            UserWarning,
            stacklevel=4,  # _warn_capped < trace < export_component < the exporter
        )


def _model_dtype_device(model: Any) -> tuple[str, str]:
    import torch

    param = next(iter(model.parameters()), None)
    if param is None:
        return dtype_name(torch.get_default_dtype()), "cpu"
    return dtype_name(param.dtype), param.device.type


def _dynamic_shapes(
    config: ExportConfig,
    leaves: list[tuple[str, Any]],
    input_structure: list[tuple[str, dict]],
    bounds: DimBounds | None = None,
) -> Any:
    import torch

    if config.dynamic and bounds is not None:
        cache_inputs = any(n.endswith((".key", ".value")) for n, _ in leaves)
        roles = bound_roles(leaves, cache_inputs)
        per_leaf = []
        for leaf, t in leaves:
            spec: Any = {}
            for axis in range(t.dim()):
                if axis != 0 and t.shape[axis] in (0, 1):
                    continue  # static, as below: a one-token query (decode step) stays 1, an empty axis 0
                limits = bounds(roles[leaf, axis], leaf, axis, int(t.shape[axis]))
                spec[axis] = (
                    torch.export.Dim.AUTO if limits is None else torch.export.Dim.AUTO(min=limits[0], max=limits[1])
                )
            per_leaf.append(spec)
        return (tuple(per_leaf),)
    if config.dynamic:
        # Every axis is dynamic, except size-1 axes past the batch axis: a one-token query (a decode step) is
        # static by nature, and a symbolic one turns `q_len > 1` checks in attention code into SymBools. An empty
        # axis past the batch (no time features) stays empty: traced symbolic, a layer sized for the other features
        # fails its shape check (`s + 9 == 9`) instead of pinning it.
        return (
            tuple(
                {axis: torch.export.Dim.AUTO for axis, size in enumerate(t.shape) if size > 1 or axis == 0}
                for _, t in leaves
            ),
        )
    if not config.dynamic_shapes:
        return None
    names = {name for name, _ in input_structure}
    unknown = sorted(set(config.dynamic_shapes) - names)
    if unknown:
        raise ConfigError(
            f"dynamic_shapes names {unknown}, which are not traced inputs; traced inputs: {sorted(names)}."
        )
    per_leaf = []
    for leaf_name, _ in leaves:
        kwarg = leaf_name.split(".", 1)[0]
        spec = config.dynamic_shapes.get(kwarg)
        if isinstance(spec, (list, tuple)) and "." in leaf_name and spec and isinstance(spec[0], (dict, type(None))):
            spec = spec[[n for n, _ in leaves if n.split(".", 1)[0] == kwarg].index(leaf_name)]
        per_leaf.append(spec)
    return (tuple(per_leaf),)


def _name_dims(program: Any, names: list[str]) -> tuple[list[tuple[int | str, ...]], dict[str, str], dict[str, Dim]]:
    """Shapes of the user inputs with symbols renamed to stable names, the symbol map, and bounds."""
    user_inputs = program.graph_signature.user_inputs
    nodes = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    cache_inputs = any(n.endswith((".key", ".value")) for n in names)
    values = [nodes[node].meta["val"] for node in user_inputs]
    shaped = shape_roles([(leaf, v.dim(), v.is_floating_point()) for leaf, v in zip(names, values)])
    symbols: dict[str, str] = {}
    hints: dict[str, int | None] = {}  # dim name -> its sample size
    shapes: list[tuple[int | str, ...]] = []
    # A symbol that an axis without a role of its own meets first (LayoutLM's bbox before input_ids) is named after
    # the role a later axis of it has (sequence), not after the first input.
    roles: dict[str, str] = {}
    for leaf, node_name in zip(names, user_inputs):
        for axis, size in enumerate(nodes[node_name].meta["val"].shape):
            expr = getattr(size, "node", None)
            role = axis_role(leaf, axis, cache_inputs, shaped)
            if expr is not None and expr.maybe_as_int() is None and role != input_axis_name(leaf, axis):
                roles.setdefault(str(expr.expr), role)
    for leaf, node_name in zip(names, user_inputs):
        shape: list[int | str] = []
        for axis, size in enumerate(nodes[node_name].meta["val"].shape):
            expr = getattr(size, "node", None)
            if expr is None or expr.maybe_as_int() is not None:  # static, or pinned by the tracer
                shape.append(int(size))
                continue
            key = str(expr.expr)
            if key not in symbols:
                # Same role, same name: torch may trace e.g. the mask's batch as its own symbol, but the model
                # needs it equal to input_ids' batch, which is what a shared name tells a reader and a runtime.
                # Sizes that differ in the sample are not one dim (packed patches and their images' grid rows,
                # both on axis 0): the later one is named after its input.
                name = roles.get(key) or axis_role(leaf, axis, cache_inputs, shaped)
                hint = getattr(expr, "hint", None)
                if name in hints and hint is not None and hints[name] is not None and hints[name] != hint:
                    name = input_axis_name(leaf, axis)
                hints.setdefault(name, hint)
                symbols[key] = name
            shape.append(symbols[key])
        shapes.append(tuple(shape))
    dims: dict[str, Dim] = {}
    for symbol, bounds in program.range_constraints.items():
        if str(symbol) not in symbols:
            continue
        name = symbols[str(symbol)]
        low = int(bounds.lower)
        upper = bounds.upper if str(bounds.upper) in ("int_oo", "oo") else int(bounds.upper)  # sympy's, as an int
        high = None if is_unbounded(upper) else int(upper)
        if name in dims:  # a shared name must satisfy every symbol it stands for
            known = dims[name]
            low = max(known.min, low)
            high = known.max if high is None else high if known.max is None else min(known.max, high)
        dims[name] = Dim(name, low, high)
    return shapes, symbols, dims


def _rename_expr(size: Any, symbols: dict[str, str]) -> int | str:
    expr = getattr(size, "node", None)
    if expr is None or expr.maybe_as_int() is not None:
        return int(size)
    import sympy

    if expr.expr.is_number:
        return int(expr.expr)
    mapping = {sym: sympy.Symbol(symbols.get(str(sym), str(sym))) for sym in expr.expr.free_symbols}
    text = str(expr.expr.xreplace(mapping))
    return int(text) if text.isdigit() else text  # a symbol the tracer has since pinned to a constant


def trace(
    model: Any,
    sample_inputs: dict[str, Any],
    config: ExportConfig,
    *,
    bounds: DimBounds | None = None,
    experts: ExpertsChoice | None = None,
) -> Traced:
    """Trace ``model(**sample_inputs)`` into a flat ExportedProgram.

    ``experts`` picks the forward each mixture-of-experts module runs while tracing (the exporter's
    ``experts_forward``; see :func:`hub_export.patches.tracing.experts_as_standard_ops`).

    ``bounds`` (used with ``dynamic=True`` only) gives each axis its ``(min, max)``, or None to leave it unbounded:
    backends that plan memory ahead (ExecuTorch) need an upper bound on every dynamic dim.

    Raises:
        ExportError: Training-only inputs, untraceable values, or ``torch.export`` failed.
        ConfigError: ``dynamic_shapes`` names inputs that are not traced.
    """
    if not isinstance(sample_inputs, dict) or not sample_inputs:
        raise ExportError("sample_inputs must be a non-empty dict of the model's kwargs (e.g. a tokenizer's output).")
    traced_kwargs, constants = split_kwargs(dict(sample_inputs))
    folded = False
    try:
        attempt = _export_flat(model, traced_kwargs, constants, config, bounds, experts)
    except ExportError as exc:
        if not data_dependent(exc):
            raise
        attempt, constants = _export_folded(model, traced_kwargs, constants, config, bounds, experts, exc)
        folded = True
    program, leaves, input_structure, sample, expected, output_names, output_structure, dynamic_shapes = attempt
    own(program)
    input_names = [name for name, _ in leaves]
    shapes, symbols, ranged = _name_dims(program, input_names)
    dims = bound_dims(program, symbols, ranged)  # size guards through `//`, `%`, `min`: multiples, maxima
    checks: tuple[tuple[list[Any], list[Any]], ...] = ()
    capped = capped_dims(ranged, dims)
    if capped and not folded:  # a guard on a derived size of 1 capped a dim at the sample: trace from a longer one
        first = (input_names, shapes, ranged, dims, capped, sample, expected)
        wider = _trace_past_caps(model, traced_kwargs, constants, config, bounds, experts, *first)
        if wider is not None:
            attempt, shapes, symbols, dims = wider
            checks = ((sample, expected),)  # the user's own sample, checked by the backend too
            program, leaves, input_structure, sample, expected, output_names, output_structure, dynamic_shapes = attempt
    leaf_names = input_names
    input_names, output_names = pair_names(input_names, output_names)
    _warn_capped(model, dynamic_shapes, shapes, dims)
    shapes = _pin_axes(model, config, dynamic_shapes, leaf_names, input_names, shapes, dims)
    inputs = [TensorSpec(n, dtype_name(t.dtype), s) for n, t, s in zip(input_names, sample, shapes)]
    out_nodes = user_output_values(program)
    outputs = [
        TensorSpec(n, dtype_name(v.dtype), tuple(_rename_expr(d, symbols) for d in v.shape))
        for n, v in zip(output_names, out_nodes)
    ]
    dtype, device = _model_dtype_device(model)
    signature = Signature(
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        input_structure=tuple(input_structure),
        output_structure=output_structure,
        constants=dict(constants),
        dims=dims,
    )
    return Traced(
        program=program,
        module=model,
        signature=signature,
        sample=sample,
        expected=expected,
        architecture=type(model).__name__,
        dtype=dtype,
        device=device,
        folded=folded,
        checks=checks,
    )


def _trace_past_caps(
    model: Any,
    traced_kwargs: dict[str, Any],
    constants: dict[str, Any],
    config: ExportConfig,
    bounds: DimBounds | None,
    experts: ExpertsChoice | None,
    leaf_names: list[str],
    shapes: list[tuple[int | str, ...]],
    ranged: dict[str, Dim],
    dims: dict[str, Dim],
    capped: dict[str, Dim],
    sample: list[Any],
    expected: list[Any],
) -> tuple[Any, list[tuple[int | str, ...]], dict[str, str], dict[str, Dim]] | None:
    """The trace from a sample tiled past the ``capped`` dims (:mod:`.widen`): its attempt, shapes, symbols and
    dims, each capped dim admitting the first trace's sizes too, the program checked against eager at the first
    trace's ``sample`` (``expected``: eager's outputs there); None when any of it does not hold (the first trace
    then stands)."""
    import torch

    longer = longer_kwargs(traced_kwargs, leaf_names, shapes, capped, ranged)
    if longer is None:
        return None
    try:
        attempt = _export_flat(model, longer, constants, config, bounds, experts)
    except Exception:  # eager or the tracer refused the longer size (a table of positions): the cap is real
        return None
    program = attempt[0]
    own(program)
    names = [name for name, _ in attempt[1]]
    wide_shapes, symbols, wide_ranged = _name_dims(program, names)
    wide = bound_dims(program, symbols, wide_ranged)
    if names != leaf_names or wide_shapes != shapes:
        return None
    if any(wide.get(name) != dim for name, dim in dims.items() if name not in capped):
        return None  # the longer sample changed another dim
    for name, dim in capped.items():
        past = wide.get(name)
        if past is None or past.pinned or dim.max is None or past.min > dim.max + past.multiple_of:
            return None  # the longer trace is capped again, or leaves a gap after the first one's sizes
        low = -(-dim.min // past.multiple_of) * past.multiple_of
        wide[name] = Dim(name, min(low, past.min), past.max, past.multiple_of)
    admit_down_to(program, wide, wide_shapes, names=capped)
    try:
        with torch.no_grad():
            produced = list(program.module()(*[t.clone() for t in sample]))
    except Exception:  # a guard of the longer trace refuses the user's sample: the first trace stands
        return None
    return (attempt, wide_shapes, symbols, wide) if matches(expected, produced) else None


def _export_folded(
    model: Any,
    traced_kwargs: dict[str, Any],
    constants: dict[str, Any],
    config: ExportConfig,
    bounds: DimBounds | None,
    experts: ExpertsChoice | None,
    failure: ExportError,
) -> tuple[Any, dict[str, Any]]:
    """Trace again after a data-dependent guard, the tracer keeping the values of what is computed from constants.

    First with the integer inputs the model may turn into sizes fixed to the sample's values (an image grid: the
    other axes stay dynamic); then, when sizes still symbolic stop the folding (a fixed mask viewed by the batch
    size, a mask the model builds from the input's shape), at the sample's sizes (the axes asked to be dynamic are
    then pinned, and say so); last, with the attention masks fixed too (a rotary index computed over the tokens the
    mask keeps, a global-attention branch on the mask: the export then takes that one mask). Returns the attempt and
    the constants, fixed inputs included.

    Raises:
        ExportError: Every attempt failed (the last failure; a guard on the values of a token, a mask or a
            hidden state cannot be folded).
    """
    base, masks = value_inputs(traced_kwargs), value_inputs(traced_kwargs, masks=True)
    dynamic = bool(config.dynamic or config.dynamic_shapes)
    plans = ([(base, False)] if base and dynamic else []) + [(base, True)] + ([(masks, True)] if masks != base else [])
    for fixed, static in plans:
        kwargs = {name: value for name, value in traced_kwargs.items() if name not in fixed}
        folded = {**constants, **{name: fixed_constant(value) for name, value in fixed.items()}}
        try:
            attempt = _export_flat(model, kwargs, folded, config, bounds, experts, static=static, fold=True)
        except ExportError as again:
            if not data_dependent(again):
                raise
            failure = again
            continue
        drop_folded_reads(attempt[0])
        if fixed:
            warn_fixed(model, fixed)
        return attempt, folded
    raise failure


def _export_flat(
    model: Any,
    traced_kwargs: dict[str, Any],
    constants: dict[str, Any],
    config: ExportConfig,
    bounds: DimBounds | None,
    experts: ExpertsChoice | None,
    static: bool = False,
    fold: bool = False,
) -> tuple[Any, list[tuple[str, Any]], list[tuple[str, dict]], list[Any], list[Any], list[str], Any, Any]:
    """One ``torch.export`` of ``model`` wrapped in :class:`FlatModule`: the program, the flat leaves, the input
    structure, the flat sample, eager's outputs, the output names and structure, and the dynamic shapes asked
    (``static``: traced at the sample's sizes, the axes asked to be dynamic then pinned by the caller; ``fold``:
    under :func:`~hub_export.patches.values.fixed_values_fold`)."""
    import torch

    leaves: list[tuple[str, Any]] = []
    for name, value in traced_kwargs.items():
        refuse_own_state_input(value, (name,))
    input_structure = [(name, flatten_value(value, (name,), leaves)) for name, value in traced_kwargs.items()]
    if not leaves:
        raise ExportError(
            "sample_inputs hold no tensor: pass the model's tensor inputs (input_ids, pixel_values, ...)."
        )
    sample = [tensor.detach().clone() for _, tensor in leaves]  # a view would bound dims by its base storage
    folding = fixed_values_fold() if fold else contextlib.nullcontext()
    was_training = model.training
    model.eval()
    try:
        wrapper = FlatModule(model, input_structure, constants)
        with torch.no_grad():
            # on copies: a graph that updates its inputs in place (a StaticCache) must not change the sample
            expected = [t.detach().clone() for t in wrapper(*[t.clone() for t in sample])]
        output_names, output_structure = list(wrapper.output_names), wrapper.output_structure
        dynamic_shapes = _dynamic_shapes(config, leaves, input_structure, bounds)
        try:
            with tracing_patches(config.dynamic, model, experts, grid=not fold), folding:
                program = torch.export.export(
                    wrapper,
                    tuple(sample),
                    dynamic_shapes=None if static else dynamic_shapes,
                    strict=config.strict,
                    prefer_deferred_runtime_asserts_over_guards=config.prefer_deferred_runtime_asserts_over_guards,
                )
        except (ConfigError, ExportError):
            raise
        except Exception as exc:  # torch raises many types; the message says what to try
            why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise ExportError(
                f"torch.export failed for {type(model).__name__}: {type(exc).__name__}: {str(exc)[:2000]}\n"
                "Try attn_implementation='sdpa' or 'eager', dynamic=False, or explicit dynamic_shapes with "
                "prefer_deferred_runtime_asserts_over_guards=True.",
                cli_message=f"torch.export could not trace {type(model).__name__} with dynamic shapes ({why}); "
                "export with --static (the sample's sizes), or from Python with explicit dynamic_shapes"
                if not static
                else f"torch.export could not trace {type(model).__name__} ({why}); run with --verbose for its trace.",
            ) from exc
        if wrapper.sizes and len(expected) != len(program.graph_signature.user_outputs):
            # the trace returned sizes of dynamic dims as tensors where eager returned ints: eager again, alike
            with torch.no_grad():
                expected = [t.detach().clone() for t in wrapper(*[t.clone() for t in sample])]
            output_names, output_structure = list(wrapper.output_names), wrapper.output_structure
    finally:
        model.train(was_training)
    return program, leaves, input_structure, sample, expected, output_names, output_structure, dynamic_shapes
