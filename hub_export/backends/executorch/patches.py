"""Workarounds applied while lowering to ExecuTorch; each names the upstream behaviour it works around.

* :func:`planned_sizes_must_be_bounded`, :func:`list_outputs_validated_whole`,
  :func:`xnnpack_reshapes_with_one_dynamic_dim`, :func:`xnnpack_max_dims_its_visitors_take`,
  :func:`xnnpack_exact_gelu_only`, :func:`views_as_dynamic_as_their_base`, :func:`empty_cats_as_full_of_graph_sizes` and
  :func:`symbolic_functions_admitted`, :func:`._dim_order.dim_orders_by_divisibility`,
  :func:`._dim_order.dim_orders_the_kernels_take`, :func:`._scan.scan_carries_take_their_sizes`,
  :func:`._retrace.xnnpack_passes_retrace_changed_graphs` and :func:`._partitions.partition_graphs_recompiled_once`
  (reversible patches, applied by :func:`executorch_patches` around the lowering).
* :func:`retrace_without_size_one_hints` (a re-trace of the program, not a patch: it changes nothing upstream).
* :func:`contiguous_attention_outputs` (an edit of hub_export's own traced graph, before lowering),
  :func:`integer_powers_as_products` and :func:`python_modulo_of_sizes` (edits of the edge program, before
  ``to_executorch``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ...dims import Dim
from ...errors import ExportError
from ...patches import patch_attribute
from ...patches.tracing import size_one_dims_stay_dynamic
from ._bounds import upper_bound
from ._dim_order import dim_orders_by_divisibility, dim_orders_the_kernels_take
from ._partitions import partition_graphs_recompiled_once
from ._retrace import xnnpack_passes_retrace_changed_graphs
from ._scan import scan_carries_take_their_sizes

__all__ = [
    "contiguous_attention_outputs",
    "empty_cats_as_full_of_graph_sizes",
    "executorch_patches",
    "is_tanh_gelu",
    "integer_powers_as_products",
    "list_outputs_validated_whole",
    "planned_sizes_must_be_bounded",
    "python_modulo_of_sizes",
    "retrace_without_size_one_hints",
    "symbolic_functions_admitted",
    "upper_bound",
    "views_as_dynamic_as_their_base",
    "xnnpack_exact_gelu_only",
    "xnnpack_max_dims_its_visitors_take",
    "xnnpack_reshapes_with_one_dynamic_dim",
]

_HINT_FALLBACK = "eval_upper_bound planning unbounded sizes at the trace-time hint (pytorch/executorch#20834)"


@contextlib.contextmanager
def planned_sizes_must_be_bounded() -> Iterator[None]:
    """Fail the export when a tensor size has no upper bound, instead of planning it at its traced size.

    ExecuTorch plans every buffer for its largest size. Since pytorch/executorch#20834, ``eval_upper_bound``
    returns the trace-time hint when a symbolic size has no finite bound: the program then holds buffers sized
    for the sample inputs, and a larger input overruns them at run time (``Attempted to resize a bounded tensor``)
    or is silently truncated. hub_export bounds every input dim, so a size is planned at :func:`upper_bound`
    (exact where sympy's interval arithmetic gives up), and a size without one is data-dependent (``nonzero``,
    ``.item()``): raise an :class:`ExportError` that names it.
    """
    import executorch.exir.passes.sym_shape_eval_pass as sym_shape_eval_pass
    import executorch.exir.sym_util as sym_util

    original = sym_util.eval_upper_bound

    def bounded(value: Any) -> int:
        node = getattr(value, "node", None)
        if node is None:
            return original(value)
        planned = upper_bound(value)
        if planned is None:
            raise ExportError(
                f"ExecuTorch cannot plan memory for a tensor of size {node.expr}: it has no upper bound (a "
                "data-dependent size, or an input dim without a max). Give every dynamic input dim a max "
                "(dynamic_shapes={'input_ids': {1: Dim('sequence', min=1, max=N)}}) or export with static shapes."
            )
        return planned

    with contextlib.ExitStack() as stack:
        for owner in (sym_util, sym_shape_eval_pass):
            stack.enter_context(patch_attribute(owner, "eval_upper_bound", bounded, reason=_HINT_FALLBACK))
        yield


@contextlib.contextmanager
def list_outputs_validated_whole() -> Iterator[None]:
    """Make the edge dtype validator read a ``Tensor[]`` output as a list, not as its first tensor.

    ``EdgeOpArgValidator.call_function`` (executorch/exir/verification/arg_validator.py, executorch 1.5.1) iterates a
    node's outputs one per schema return; for an op with a single ``Tensor[]`` return (``split_with_sizes_copy``,
    ``unbind_copy``) it takes the first tensor for the list and calls ``len()`` on it. ``len`` of a tensor with a
    dynamic first dim guards it to its traced size: GPT-2's ``c_attn(...).split(...)`` pins ``batch`` to the
    sample's batch and the program is planned for that batch only. No upstream issue is known to us; the patch
    presents such outputs wrapped in a one-item list for the duration of the check.
    """
    import torch
    from executorch.exir.verification.arg_validator import EdgeOpArgValidator

    original = EdgeOpArgValidator.call_function
    tensor_list = torch.ListType.ofTensors()

    def call_function(self: Any, target: Any, args: Any, kwargs: Any) -> Any:
        node = self.node
        returns: Any = getattr(getattr(target, "_schema", None), "returns", ())
        value = node.meta.get("val")
        if not (isinstance(value, (list, tuple)) and len(returns) == 1 and returns[0].type == tensor_list):
            return original(self, target, args, kwargs)
        node.meta["val"] = [value]
        try:
            return original(self, target, args, kwargs)
        finally:
            node.meta["val"] = value

    reason = "EdgeOpArgValidator calling len() on the first tensor of a Tensor[] output (executorch 1.5.1)"
    with patch_attribute(EdgeOpArgValidator, "call_function", call_function, reason=reason):
        yield


@contextlib.contextmanager
def xnnpack_reshapes_with_one_dynamic_dim() -> Iterator[None]:
    """Keep XNNPACK's partitioner from delegating nodes it will turn into a reshape with two dynamic dims.

    XNNPACK serializes ``unsqueeze_copy``/``squeeze_copy`` as a static reshape, which takes at most one dynamic
    dim: its visitors (executorch/backends/xnnpack/operators/op_squeeze.py, executorch 1.5.1) raise "XNNPACK
    reshape only supports 1 dynamic dimension", and the error fails the whole lowering. The partitioner does not
    test this: ``UnsqueezeCopyConfig.check_constraints`` only checks the unsqueezed position (``x[..., None]`` on a
    ``(batch, sequence)`` tensor: CodeGen's rotary positions), ``ConvolutionConfig`` accepts 1D convolutions,
    which the delegate's ``Conv1dUnsqueezePass`` wraps in an unsqueeze/squeeze pair (Wav2Vec2/HuBERT's feature
    encoder on ``(batch, channels, samples)``), and ``BatchNormConfig`` accepts a ``BatchNorm1d`` on
    ``(batch, channels, frames)``, which ``DecomposeBatchNorm`` turns into such a 1D convolution (the FastConformer
    convolution module of Canary and Parakeet). The patch adds the visitors' test to the three configs, so such
    nodes run as portable kernels outside the delegate. No upstream issue is known to us.
    """
    from executorch.backends.xnnpack.partition.config import gemm_configs, generic_node_configs, node_configs
    from torch.fx.experimental.symbolic_shapes import free_symbols

    def dynamic_dims(node: Any) -> int:
        value = node.meta.get("val") if hasattr(node, "meta") else None
        return 0 if value is None else sum(1 for size in value.shape if free_symbols(size))

    def unsqueeze_check(original: Any) -> Any:
        def check_constraints(self: Any, node: Any, ep: Any) -> bool:
            return original(self, node, ep) and dynamic_dims(node) <= 1

        return check_constraints

    def conv_check(original: Any) -> Any:
        def check_constraints(self: Any, node: Any, ep: Any) -> bool:
            if not original(self, node, ep):
                return False
            weight = node.args[1].meta.get("val")
            one_d = weight is not None and weight.dim() == 3
            return not (one_d and dynamic_dims(node.args[0]) > 1)

        return check_constraints

    def batch_norm_check(original: Any) -> Any:
        def check_constraints(self: Any, node: Any, ep: Any) -> bool:
            if not original(self, node, ep):
                return False
            value = node.args[0].meta.get("val")
            return value is None or value.dim() > 3 or dynamic_dims(node.args[0]) <= 1

        return check_constraints

    reason = "XNNPACK partitioner delegating reshapes with 2+ dynamic dims (executorch 1.5.1)"
    checks = (
        (generic_node_configs.UnsqueezeCopyConfig, unsqueeze_check),
        (gemm_configs.ConvolutionConfig, conv_check),
        (node_configs.BatchNormConfig, batch_norm_check),
    )
    with contextlib.ExitStack() as stack:
        for config, check in checks:
            stack.enter_context(
                patch_attribute(config, "check_constraints", check(config.check_constraints), reason=reason)
            )
        yield


@contextlib.contextmanager
def xnnpack_max_dims_its_visitors_take() -> Iterator[None]:
    """Keep XNNPACK's partitioner from delegating ``max.dim`` nodes its visitors refuse.

    XNNPACK runs ``max.dim`` (and the ``amax`` that ``RemoveGetItemPass`` makes of one whose indices go unused) as a
    max pooling over the height or width of an NHWC tensor: its visitors (executorch/backends/xnnpack/operators/
    op_max_dim.py, executorch 1.5.1) raise "amax.default only supports keep_dim == True" or "... only supports
    dim == 2 or dim == 3", and the error fails the whole lowering. ``MaxDimConfig.check_constraints`` only checks the
    input's rank and dtypes, so a 4-D ``x.max(dim=1).values`` (Hiera's query pooling) was delegated. The patch adds
    the visitors' test (``keepdim`` given and True, ``dim`` 2 or 3 as written), so other reductions run as portable
    kernels outside the delegate. No upstream issue is known to us.
    """
    from executorch.backends.xnnpack.partition.config import node_configs

    original = node_configs.MaxDimConfig.check_constraints

    def check_constraints(self: Any, node: Any, ep: Any) -> bool:
        args = node.args
        return original(self, node, ep) and len(args) == 3 and args[1] in (2, 3) and args[2] is True

    reason = "XNNPACK partitioner delegating max.dim its visitors refuse (executorch 1.5.1)"
    with patch_attribute(node_configs.MaxDimConfig, "check_constraints", check_constraints, reason=reason):
        yield


def is_tanh_gelu(node: Any) -> bool:
    """Whether ``node`` is a ``gelu`` with ``approximate="tanh"`` (HF's ``gelu_pytorch_tanh``)."""
    if getattr(node, "op", None) != "call_function" or "gelu" not in str(node.target):
        return False
    approximate = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
    return approximate == "tanh"


@contextlib.contextmanager
def xnnpack_exact_gelu_only() -> Iterator[None]:
    """Keep XNNPACK's partitioner from delegating a ``gelu(approximate="tanh")`` as the exact GELU.

    ExecuTorch 1.5.1's XNNPACK ``GeluConfig`` takes every ``aten.gelu`` and its visitor (``operators/op_gelu.py``)
    serializes it as ``XNNGelu``, XNNPACK's exact (erf) GELU, whatever its ``approximate``: the tanh approximation
    that Gemma, SigLIP and many other models use (``gelu_pytorch_tanh``) ran as the exact one, up to 4.7e-4 apart per
    activation (Gemma-3's logits 1.5e-3 from eager's on a tiny model; fixed upstream by pytorch/executorch#22851, which
    needs a newer runtime). The patch refuses those nodes: they decompose to core ops (``tanh``, ``mul``, ``add``),
    which XNNPACK delegates with the approximation's own numbers.
    """
    from executorch.backends.xnnpack.partition.config import generic_node_configs

    original = generic_node_configs.GeluConfig.check_constraints

    def check_constraints(self: Any, node: Any, ep: Any) -> bool:
        return not is_tanh_gelu(node) and original(self, node, ep)

    reason = "XNNPACK delegating gelu(approximate='tanh') as the exact GELU (pytorch/executorch#22851)"
    with patch_attribute(generic_node_configs.GeluConfig, "check_constraints", check_constraints, reason=reason):
        yield


@contextlib.contextmanager
def views_as_dynamic_as_their_base() -> Iterator[None]:
    """Leave a ``view_copy`` a copy where its shape is dynamic and its base's static (or the converse).

    ``ReplaceViewCopyWithViewPass`` (executorch 1.5.1, ``exir/passes/replace_view_copy_with_view_pass.py``) turns
    every ``view_copy`` into a view sharing its base's memory, and ``_ViewSpec`` raises when the two differ in shape
    dynamism ("_ViewSpec is incompatible with its base on creation": ViTDet's relative positions, a static table
    viewed with sizes the trace keeps symbolic although they equal static ones). The pass skips those nodes: they
    stay copies, with the same values.
    """
    from executorch.exir.passes import replace_view_copy_with_view_pass as views
    from executorch.exir.tensor import determine_tensor_dynanism

    original = views._is_view_copy

    def is_view_copy(node: Any) -> bool:
        if not original(node):
            return False
        base_spec = getattr(node.args[0], "meta", {}).get("spec")
        value = node.meta.get("val")
        if base_spec is None or value is None:
            return True
        return bool(determine_tensor_dynanism(value.shape) == base_spec.shape_dynamism)

    reason = "_ViewSpec raising on a view whose shape dynamism differs from its base's (executorch 1.5.1)"
    with patch_attribute(views, "_is_view_copy", is_view_copy, reason=reason):
        yield


@contextlib.contextmanager
def empty_cats_as_full_of_graph_sizes() -> Iterator[None]:
    """Give the ``full`` that replaces a ``cat`` of empty tensors its symbolic sizes as graph values.

    ``PruneEmptyTensorsPass`` (executorch 1.5.1, ``exir/passes/prune_empty_tensors_pass.py``) drops the empty inputs
    of every ``cat`` and, when none is left, puts ``full(shape, 0)`` in its place with the output's shape as it is:
    symbolic sizes there are SymInt objects, not graph values, and ``to_executorch`` then fails ("Unsupported type
    encountered in int list": Mistral-Large-4's cache update of a zero-width key part, ``[batch, 1, sequence, 0]``).
    Keeping the ``cat`` is no way out: the runtime's ``cat`` of only empty inputs sizes its output wrongly
    (``(2, 0, 0)`` for ``(2, 6, 0)``). The patch builds the ``full``'s sizes from the inputs' own (``sym_size``,
    summed along the concatenated axis); a ``cat`` of a static size is pruned as upstream does. No upstream issue is
    known to us.
    """
    import operator

    import torch
    from executorch.exir.dialects._ops import ops as exir_ops
    from executorch.exir.passes.prune_empty_tensors_pass import PruneEmptyTensorsPass
    from torch.fx.experimental.symbolic_shapes import guard_or_true

    original = PruneEmptyTensorsPass.remove_empty_tensors_from_cat

    def remove_empty_tensors_from_cat(self: Any, graph_module: Any, cat_node: Any) -> None:
        value, inputs = cat_node.meta.get("val"), list(cat_node.args[0])
        symbolic = value is not None and not all(isinstance(size, int) for size in value.shape)
        everything_empty = not any(guard_or_true(arg.meta["val"].numel() != 0) for arg in inputs)
        inputs = [arg for arg in inputs if value is not None and arg.meta["val"].dim() == value.dim()]  # not a 1-D [0]
        if not symbolic or not everything_empty or not inputs:
            original(self, graph_module, cat_node)
            return
        graph = graph_module.graph
        axis = (cat_node.args[1] if len(cat_node.args) > 1 else cat_node.kwargs.get("dim", 0)) % value.dim()

        def size_of(node: Any, dim: int) -> Any:
            size = node.meta["val"].shape[dim]
            if isinstance(size, int):
                return size
            out = graph.call_function(torch.ops.aten.sym_size.int, (node, dim))
            out.meta["val"] = size
            return out

        with graph.inserting_before(cat_node):
            sizes: list[Any] = []
            for dim, size in enumerate(value.shape):
                if isinstance(size, int):
                    sizes.append(size)
                elif dim != axis:
                    sizes.append(size_of(inputs[0], dim))
                else:
                    total: Any = 0
                    for count, arg in enumerate(inputs, 1):
                        part = size_of(arg, dim)
                        if isinstance(total, int) and isinstance(part, int):
                            total += part
                            continue
                        total = graph.call_function(operator.add, (total, part))
                        total.meta["val"] = sum(each.meta["val"].shape[dim] for each in inputs[:count])
                    sizes.append(total)
            full = graph.call_function(exir_ops.edge.aten.full.default, (sizes, 0), {"dtype": value.dtype})
        full.meta = cat_node.meta
        cat_node.replace_all_uses_with(full)

    reason = "PruneEmptyTensorsPass replacing an empty cat by a full of SymInt objects (executorch 1.5.1)"
    with patch_attribute(
        PruneEmptyTensorsPass, "remove_empty_tensors_from_cat", remove_empty_tensors_from_cat, reason=reason
    ):
        yield


@contextlib.contextmanager
def symbolic_functions_admitted() -> Iterator[None]:
    """Let the edge verifier pass the size arithmetic ``to_executorch`` maps to prim ops (``torch.sym_min``,
    ``sym_max``, ``sym_ite``, ``sym_not``, ``sym_float``, ``sym_int``).

    ``to_executorch`` replaces these Python functions with ``executorch_prim::`` ops the runtime has
    (executorch/exir/passes/executorch_prim_ops_registry.py maps them), but ``to_edge``'s verifier
    (exir/verification/verifier.py, executorch 1.5.1) only admits the prim ops and asserts on the Python functions:
    the lowering failed with a bare ``AssertionError`` for Mamba-2, whose chunked scan computes
    ``min(chunk, sequence)``, and for Aya Vision and Aria, whose traced code selects a size with ``torch.sym_ite``.
    The patch adds every Python function of that map to the set the verifier reads. No upstream issue is known to us.
    """
    import types

    from executorch.exir.passes import executorch_prim_ops_registry as registry
    from executorch.exir.verification import verifier

    functions = {op for op in registry._PYTHON_SYM_OPS_TO_EXECUTORCH_SYM_OPS if isinstance(op, types.FunctionType)}
    admitted = set(verifier._EXECUTORCH_SYM_OPS) | functions
    reason = "edge verifier rejecting torch.sym_* functions that to_executorch maps to prim ops (executorch 1.5.1)"
    with patch_attribute(verifier, "_EXECUTORCH_SYM_OPS", admitted, reason=reason):
        yield


@contextlib.contextmanager
def weights_shared_by_deep_copies(program: Any) -> Iterator[None]:
    """Deep copies of ``program``'s weight tensors are the tensors themselves inside the block.

    ExecuTorch deep-copies the whole ExportedProgram, weights included, when it converts it to the edge dialect
    (``_generate_edge_program`` in ``exir/program/_program.py``) and again for every partition it hands a delegate
    (``to_backend``, pytorch/executorch#4311): two more copies of a multi-GB model's weights, and a tied weight
    copied once per name. The copies exist so passes can edit the graph; passes build new tensors rather than
    writing into weights, so sharing the weights' storage is safe (executorch 1.5.1). Only plain CPU tensors and
    parameters whose storage is one of ``program``'s are shared; everything else deep-copies as before.
    """
    import torch

    storages = set()
    for value in [*program.state_dict.values(), *program.constants.values()]:
        if isinstance(value, torch.Tensor) and value.device.type == "cpu":
            storages.add(value.untyped_storage().data_ptr())
    storages.discard(0)

    def sharing(original: Any) -> Any:
        def __deepcopy__(self: Any, memo: dict[int, Any]) -> Any:  # noqa: N807 - the special method itself
            if type(self) in (torch.Tensor, torch.nn.Parameter) and self.device.type == "cpu":
                if self.untyped_storage().data_ptr() in storages:
                    memo[id(self)] = self
                    return self
            return original(self, memo)

        return __deepcopy__

    reason = "ExecuTorch's deep copies of the ExportedProgram's weights (pytorch/executorch#4311)"
    with contextlib.ExitStack() as stack:
        for owner in (torch.Tensor, torch.nn.Parameter):
            stack.enter_context(patch_attribute(owner, "__deepcopy__", sharing(owner.__deepcopy__), reason=reason))
        yield


@contextlib.contextmanager
def executorch_patches() -> Iterator[None]:
    """Every patch applied while lowering to ExecuTorch."""
    with contextlib.ExitStack() as stack:
        for patch in (
            planned_sizes_must_be_bounded,
            list_outputs_validated_whole,
            xnnpack_reshapes_with_one_dynamic_dim,
            xnnpack_max_dims_its_visitors_take,
            xnnpack_exact_gelu_only,
            views_as_dynamic_as_their_base,
            empty_cats_as_full_of_graph_sizes,
            symbolic_functions_admitted,
            dim_orders_by_divisibility,
            dim_orders_the_kernels_take,
            scan_carries_take_their_sizes,
            xnnpack_passes_retrace_changed_graphs,
            partition_graphs_recompiled_once,
        ):
            stack.enter_context(patch())
        yield


def retrace_without_size_one_hints(program: Any, signature: Any, sample: list[Any]) -> Any:
    """Re-export ``program`` with every size-1 dynamic dim of the sample widened to 2, or return it unchanged.

    ``to_edge`` runs ``run_decompositions``, whose C++ decompositions (``reshape`` inside ``matmul``, ...) evaluate
    guards with each symbol's trace-time hint and ignore ``backed_size_oblivious``. A dim traced at size 1 (batch 1
    from ``tokenizer("Hello")``) then takes the size-1 branch, and the frozen ShapeEnv still narrows its range
    (``batch`` in [1, 8] becomes [1, 2]): the program is planned and specialized for the sample, not the bounds
    (0/1 specialization, pytorch/pytorch#106289; decompositions adding guards, pytorch/pytorch#175281). The flat
    program is already general, so exporting it again from inputs of size 2 (same bounds) only changes the hints.

    A dim whose upper bound is 2 is re-exported with the bound 3: the decompositions' ``size != 1`` guards narrow
    [1, 2] to [2, 2], which makes the dim a constant 2 inside the program. Where the input kept its symbol, the
    program then failed at size 1 (``aten::index`` out of bounds, error 0x12: a causal LM's mask indexed with
    ``arange(2)`` rows of a batch-1 mask, ``ExecutorchExporter.max_batch = 2``); where the input was pinned, a
    size 1 was refused. The program is planned for 3 there; the manifest keeps the bound 2.

    Args:
        program: The traced flat ExportedProgram.
        signature: Its :class:`~hub_export.signature.Signature` (symbolic dims by name, with their bounds).
        sample: The flat sample tensors.

    Returns:
        The re-exported program, or ``program`` itself when no dynamic dim was traced at size 1 or bounded at 2.
    """
    import torch

    shapes, widened, changed = [], [], False
    for spec, tensor in zip(signature.inputs, sample):
        axes: dict[int, Any] = {}
        for axis, name in enumerate(signature.concrete_shape(spec)):
            if not isinstance(name, str):
                continue
            dim = signature.dims[name]
            if dim.max == 2 and dim.min < 2:  # room above the hint 2: see the docstring
                dim, changed = Dim(dim.name, dim.min, 3, dim.multiple_of), True
            axes[axis] = dim.to_auto()
            if tensor.shape[axis] == 1 and (dim.max is None or dim.max >= 2):
                tensor, changed = torch.cat([tensor, tensor], dim=axis), True
        shapes.append(axes or None)
        widened.append(tensor.contiguous())
    if not changed:
        return program
    with size_one_dims_stay_dynamic():
        return torch.export.export(program.module(), tuple(widened), dynamic_shapes=tuple(shapes), strict=False)


def contiguous_attention_outputs(program: Any) -> int:
    """Follow every ``scaled_dot_product_attention`` in ``program`` with a contiguous ``clone``; returns how many.

    Traced SDPA outputs are contiguous, so the model's ``transpose(1, 2).reshape(...)`` and later ``view(-1, d)``
    are recorded as views. ``to_edge`` decomposes SDPA through ``_scaled_dot_product_flash_attention_for_cpu``,
    whose output has another layout, and the recorded view then fails ("Cannot view a tensor with shape ... and
    strides ...", pytorch/pytorch#136543). A contiguous clone gives every later view the layout it was traced with.
    The graph is hub_export's own copy: nothing upstream is changed.
    """
    import torch

    graph = program.graph_module.graph
    count = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not torch.ops.aten.scaled_dot_product_attention.default:
            continue
        with graph.inserting_after(node):
            contiguous = {"memory_format": torch.contiguous_format}
            clone = graph.call_function(torch.ops.aten.clone.default, (node,), contiguous)
        clone.meta.update(node.meta)
        node.replace_all_uses_with(clone, delete_user_cb=lambda user, clone=clone: user is not clone)
        count += 1
    if count:
        program.graph_module.recompile()
    return count


def integer_powers_as_products(program: Any) -> int:
    """Replace ``size ** k`` (a Python ``pow`` of a symbolic size by a small integer) with multiplications, in place.

    ``to_edge``'s decompositions can leave integer powers of dynamic sizes in the graph (MobileViT's unfolding of
    dynamic image sizes: ``(((height - 1) // 16) + 1) ** 2``), but ExecuTorch's emitter has no prim op for ``pow``
    (executorch_prim_ops_registry maps ``operator.mul`` and friends, not ``pow``) and fails with "invalid target for
    call_function <built-in function pow>" (executorch 1.5.1). ``k`` chained ``operator.mul`` compute the same size.

    Returns:
        How many powers were replaced.
    """
    import operator

    import torch

    graph = program.graph_module.graph
    replaced = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in (operator.pow, pow) or len(node.args) != 2:
            continue
        base, exponent = node.args
        if not isinstance(base, torch.fx.Node) or isinstance(exponent, bool) or not isinstance(exponent, int):
            continue
        if not 1 <= exponent <= 16:
            continue
        result, value = base, base.meta["val"]
        with graph.inserting_before(node):
            for _ in range(exponent - 1):
                result = graph.call_function(operator.mul, (result, base))
                result.meta["val"] = value = value * base.meta["val"]
        node.replace_all_uses_with(result)
        graph.erase_node(node)
        replaced += 1
    if replaced:
        program.graph_module.recompile()
    return replaced


def python_modulo_of_sizes(program: Any) -> int:
    """Replace ``a % b`` of symbolic sizes with ``(a % b + b) % b``, in place: Python's modulo under C's.

    ExecuTorch's runtime computes the ``executorch_prim::mod.Scalar`` that ``to_executorch`` emits for
    ``operator.mod`` with C++'s ``%``, which takes the dividend's sign (executorch 1.5.1): the padding idiom
    ``-length % block`` (Granite Speech's block attention, Longformer's and LED's padding) gave ``-5`` for a length of
    13 and a block of 8 where Python gives 3, and ``constant_pad_nd`` refused the negative pad (error 0x12). C's
    ``a % b`` lies strictly between ``-|b|`` and ``|b|`` with ``a``'s sign, so adding ``b`` and taking ``%`` again
    gives Python's result, ``b``'s sign, for either sign of ``b`` (the trace's values are unchanged). ``//`` is
    floored by the runtime already.

    Returns:
        How many modulos were replaced.
    """
    import operator

    import torch

    graph = program.graph_module.graph
    replaced = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not operator.mod or len(node.args) != 2:
            continue
        dividend, divisor = node.args
        value = node.meta.get("val")
        with graph.inserting_before(node):
            shifted = graph.call_function(
                operator.add, (graph.call_function(operator.mod, (dividend, divisor)), divisor)
            )
        if value is not None:  # the sizes as the trace computes them (Python's modulo): what later passes read
            shifted.args[0].meta["val"] = value
            shifted.meta["val"] = value + (divisor.meta["val"] if isinstance(divisor, torch.fx.Node) else divisor)
        node.args = (shifted, divisor)
        replaced += 1
    if replaced:
        program.graph_module.recompile()
    return replaced
