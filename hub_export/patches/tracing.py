"""Workarounds applied while tracing with ``torch.export`` (every format traces through here).

* :func:`size_one_dims_stay_dynamic` — 0/1 specialization (pytorch/pytorch#106289).
* :func:`decode_attention_without_kv_copies` — transformers' SDPA repeats the KV cache in traced GQA decode steps.
* :func:`sdpa_causal_flag_as_bool` — transformers' SDPA can pass a ``SymBool`` as ``is_causal``, which SDPA refuses.
* :func:`~hub_export.patches.modeling.symbolic_sizes` — transformers' modeling code that pins a dynamic axis
  (a Python list or loop over a size), rewritten on tensors for the models that use it.
* :func:`~hub_export.patches.lengths.tensor_len_symbolic` — ``len(tensor)`` in transformers' modeling code pins the
  first axis (pytorch/pytorch#185804): traced as ``tensor.shape[0]``; ``torch.div`` on symbolic sizes
  (:func:`~hub_export.patches.lengths.size_division_symbolic`) and transformers' ``conv1d_output_length``
  (:func:`~hub_export.patches.lengths.conv_length_symbolic`) as ``//``.
* :func:`~hub_export.patches.vision_grid.grid_as_input` — grid-driven vision encoders (the Qwen2-VL family): their
  position ids, attention segments and windows computed per patch, so the image grid stays an input.
* :func:`~hub_export.patches.multimodal.features_kept_whole` — multimodal models that split the encoder's packed
  features per image (a Python list as long as the image count) only to concatenate them again keep them whole.
* :func:`~hub_export.patches.per_image.images_at_once` — vision towers and projectors that loop over the images of
  a padded batch (Pixtral's crops, positions and block mask; Mistral 3's patch merger) compute over all at once.
* :func:`~hub_export.patches.masks.causal_mask_skip_kept` — a causal mask that eager skips on an all-ones mask
  under ``is_causal=False`` attention (a branch on the mask's values), traced as eager's select;
  :func:`~hub_export.patches.masks.no_padding_mask_skipped` — a bidirectional mask with no padding mask skipped as
  in eager; :func:`~hub_export.patches.masks.mask_functions_broadcast` — a model's own mask function expanded by
  broadcasting, not ``torch.vmap`` (a ``flat_apply`` node a ``.pt2`` cannot hold).
* :func:`~hub_export.patches.shapes.unsolvable_guards_dropped` — torch's export constraint solver crashes on the
  guards of nested integer divisions (pytorch/pytorch#131897); they stay guards, read as ``multiple_of`` bounds.
* :func:`module_conversions_without_swaps` — ``module.to(dtype)`` inside a forward (Switch Transformers' router
  casts its classifier on every call) swaps fake parameters that export holds weakrefs on (pytorch/pytorch#153056):
  a conversion that changes nothing returns the module as eager's does, without the swap.
* :func:`experts_as_standard_ops` — transformers' mixture-of-experts layers (``@use_experts_implementation``)
  default to ``grouped_mm``: ``torch.histc`` + ``empty_permuted`` + the custom op
  ``transformers::grouped_mm_fallback``, which no backend but PyTorch itself can run (no ONNX function, no
  OpenVINO conversion rule, and a ``.pt2`` that needs ``import transformers`` to load). A backend may pick another
  forward per module (its exporter's ``experts_forward``).
"""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import PatchTargetMissing
from ._base import patch_attribute
from .experts import custom_experts_modules
from .lengths import conv_length_symbolic, size_division_symbolic, tensor_len_symbolic
from .masks import causal_mask_skip_kept, mask_functions_broadcast, no_padding_mask_skipped
from .modeling import symbolic_sizes
from .multimodal import features_kept_whole
from .per_image import images_at_once
from .shapes import unsolvable_guards_dropped
from .vision_grid import grid_as_input

__all__ = [
    "ExpertsChoice",
    "decode_attention_without_kv_copies",
    "distribution_checks_skipped",
    "experts_as_standard_ops",
    "experts_per_expert_loop",
    "gathered_experts_forward",
    "module_conversions_without_swaps",
    "sdpa_causal_flag_as_bool",
    "size_one_dims_stay_dynamic",
    "tracing_patches",
]

#: ``choose(module) -> forward | None``: the forward an experts module runs while tracing (None: the default).
ExpertsChoice = Callable[[Any], "Callable[..., Any] | None"]

#: Experts implementations that already trace to standard ATen ops; every other one is replaced while tracing.
_TRACEABLE_EXPERTS = ("batched_mm",)


@contextlib.contextmanager
def size_one_dims_stay_dynamic() -> Iterator[None]:
    """Keep size-0/1 sample dims symbolic under ``Dim.AUTO``.

    torch.export specializes any dim whose sample size is 0 or 1 ("0/1 specialization",
    pytorch/pytorch#106289), so ``tokenizer("Hello")`` (batch 1) silently yields a batch-1-only graph.
    ``backed_size_oblivious`` makes the tracer reason about such dims as if they were >= 2.
    """
    import torch.fx.experimental._config as fx_config

    with patch_attribute(
        fx_config, "backed_size_oblivious", True, reason="0/1 specialization (pytorch/pytorch#106289)"
    ):
        yield


def experts_per_expert_loop(self: Any, hidden_states: Any, top_k_index: Any, top_k_weights: Any) -> Any:
    """A ``@use_experts_implementation`` experts forward made of standard ops: one matmul pair per expert.

    Same maths as transformers' implementations (gated or not, biases, transposed weights, post-expert norm),
    but the loop runs over the static expert count and each expert takes only its own tokens (``where`` on the
    routing, a data-dependent row count every backend handles), so the compute is the routed one: no
    ``(tokens * top_k, inter, hidden)`` weight gather like ``batched_mm``. Contributions are summed with
    ``scatter_add`` (OpenVINO has no ``index_add`` without ``alpha``). Routing ids past ``num_experts``
    (expert-parallel sentinels) match no expert and add nothing, as upstream.
    """
    import torch
    import torch.nn.functional as F

    output = torch.zeros_like(hidden_states)
    rows = (-1, hidden_states.shape[-1])
    for expert in range(self.num_experts):
        token_idx, slot = torch.where(top_k_index == expert)
        states = hidden_states[token_idx]
        weight = self.gate_up_proj[expert] if self.has_gate else self.up_proj[expert]
        states = states @ weight if self.is_transposed else F.linear(states, weight)
        if self.has_bias:
            states = states + (self.gate_up_proj_bias if self.has_gate else self.up_proj_bias)[expert]
        states = self._apply_gate(states) if self.has_gate else self.act_fn(states)
        weight = self.down_proj[expert]
        states = states @ weight if self.is_transposed else F.linear(states, weight)
        if self.has_bias:
            states = states + self.down_proj_bias[expert]
        if self.has_post_expert_norm:
            states = self.post_expert_norm(states)
        states = states * top_k_weights[token_idx, slot, None]
        output = output.scatter_add(0, token_idx[:, None].expand(rows), states.to(output.dtype))
    return output


def _experts_modules(model: Any) -> list[Any]:
    """The ``@use_experts_implementation`` experts modules of ``model``."""
    modules = getattr(model, "modules", None)
    if modules is None:
        return []
    needed = ("has_gate", "is_transposed", "num_experts", "down_proj")
    return [module for module in modules() if all(hasattr(module, attr) for attr in needed)]


def _traces(module: Any) -> bool:
    """Whether the experts module's own implementation already traces to standard ops."""
    return getattr(getattr(module, "config", None), "_experts_implementation", None) in _TRACEABLE_EXPERTS


def gathered_experts_forward(module: Any) -> Any:
    """``module``'s forward as transformers' ``batched_mm`` (every routed token gathers its expert's weights):
    static shapes, which ExecuTorch's runtime needs (it cannot run the per-expert loop's data-dependent row
    counts: ``method->execute()`` fails with error 0x12). It costs memory on long prompts.

    Raises:
        PatchTargetMissing: transformers no longer has ``batched_mm_experts_forward``.
    """
    from transformers.integrations import moe

    forward = getattr(moe, "batched_mm_experts_forward", None)
    if forward is None:
        raise PatchTargetMissing(
            "transformers.integrations.moe.batched_mm_experts_forward is gone; the gathered experts switch needs review."
        )
    return types.MethodType(forward, module)


@contextlib.contextmanager
def experts_as_standard_ops(model: Any, choose: ExpertsChoice | None = None) -> Iterator[int]:
    """Run every mixture-of-experts layer of ``model`` with standard ops inside the block.

    transformers 5 dispatches ``@use_experts_implementation`` layers on ``config._experts_implementation``,
    ``grouped_mm`` by default on CPU. Its graph holds ``aten.histc``, ``aten.empty_permuted`` and the custom op
    ``transformers::grouped_mm_fallback`` (transformers/integrations/moe.py): ONNX has no function for the
    custom op, OpenVINO no conversion rule for any of the three, and a ``.pt2`` holding it loads only after
    ``import transformers``. ``eager`` iterates over the experts hit (data-dependent control flow) and the
    kernels (``sonicmoe``, ``deepgemm``) are GPU-only. :func:`experts_per_expert_loop` computes the same sums
    with ops every backend has. Only the module instances' ``forward`` changes (an instance attribute, removed in
    ``finally``); the config and the model's class are untouched, and eager runs after the export use their own
    implementation.

    ``choose(module)`` lets the backend pick another forward for a module (ExecuTorch:
    :func:`gathered_experts_forward`; ONNX fused for cuda: one ``MoE`` node); None keeps the default: the module's
    own implementation when it already traces to standard ops, else the per-expert loop. It is asked too for the
    experts classes with a forward of their own (:func:`~hub_export.patches.experts.custom_experts_modules`: DBRX,
    Switch Transformers; ExecuTorch: :func:`~hub_export.patches.experts.dense_experts_forward`), whose default is
    their class patch.

    Yields:
        How many experts modules were switched.
    """
    switched = []
    for module in _experts_modules(model):
        forward = choose(module) if choose is not None else None
        if forward is None and not _traces(module):
            forward = types.MethodType(experts_per_expert_loop, module)
        if forward is not None:
            module.forward = forward
            switched.append(module)
    for module in custom_experts_modules(model) if choose is not None else ():
        forward = choose(module) if choose is not None else None  # None: the class's own patch (patches/experts.py)
        if forward is not None:
            module.forward = forward
            switched.append(module)
    try:
        yield len(switched)
    finally:
        for module in switched:
            module.__dict__.pop("forward", None)


@contextlib.contextmanager
def decode_attention_without_kv_copies() -> Iterator[None]:
    """Trace grouped-query attention of a one-token query the way eager runs it: without copying the KV cache.

    transformers' ``sdpa_attention_forward`` (integrations/sdpa_attention.py) folds a one-token query's head
    groups into the query axis (``pack_gqa``) so that SDPA reads the key/value heads as they are, but skips
    this under ``torch.compile``/``torch.export`` (``is_torchdynamo_compiling()``) and falls back to
    ``repeat_kv``: every exported decode step then copies the whole cache ``num_key_value_groups`` times per layer
    (the exported Llama decode step measured 1.4x slower than eager, 58% of its time in those copies). Our decode
    graphs have a static query length of 1, so the eager path traces to plain reshapes; symbolic query lengths
    still take ``repeat_kv`` (the ``q_length == 1`` test comes first and is False for them).
    """
    from transformers.integrations import sdpa_attention

    with patch_attribute(
        sdpa_attention, "is_torchdynamo_compiling", lambda: False, reason="repeat_kv copies in traced GQA decode"
    ):
        yield


@contextlib.contextmanager
def sdpa_causal_flag_as_bool() -> Iterator[None]:
    """Trace SDPA calls whose ``is_causal`` is a symbolic boolean as eager runs them: with that boolean's value.

    transformers' ``sdpa_attention_forward`` (integrations/sdpa_attention.py) computes
    ``is_causal = q_length > 1 and attention_mask is None and is_causal``; with a symbolic query length Python's
    ``and`` evaluates ``q_length > 1`` (a guard, as in eager) and, when it is false, returns that ``SymBool`` itself,
    which ``torch.nn.functional.scaled_dot_product_attention`` refuses (``argument 'is_causal' must be bool, not
    SymBool``: BERT decoders in ``EncoderDecoderModel`` / ``SpeechEncoderDecoderModel`` decode steps, the
    SeamlessM4T speech encoders). transformers leaves it to the exporter (the TODO above that line, see
    huggingface/transformers#46196). Inside the block SDPA receives ``bool(is_causal)``: the value the guard
    already fixed, what eager passes.
    """
    import torch

    original = torch.nn.functional.scaled_dot_product_attention

    @functools.wraps(original)
    def scaled_dot_product_attention(*args: Any, **kwargs: Any) -> Any:
        if isinstance(kwargs.get("is_causal"), torch.SymBool):
            kwargs["is_causal"] = bool(kwargs["is_causal"])
        return original(*args, **kwargs)

    reason = "a SymBool is_causal from transformers' sdpa_attention_forward (huggingface/transformers#46196)"
    with patch_attribute(
        torch.nn.functional, "scaled_dot_product_attention", scaled_dot_product_attention, reason=reason
    ):
        yield


@contextlib.contextmanager
def distribution_checks_skipped() -> Iterator[None]:
    """Trace ``torch.distributions`` without their argument checks.

    ``Distribution.__init__`` (torch/distributions/distribution.py) validates its parameters by default
    (``constraints.real_vector.check(logits).all()``, then ``if not valid: raise``): a branch on tensor values,
    which torch.export refuses (``GuardOnDataDependentSymNode``; BLT's entropy patcher builds a
    ``Categorical(logits=...)``; pytorch/pytorch#135061). The checks only raise on invalid parameters and change no
    value; the patch turns the class default off (``Distribution.set_default_validate_args(False)``) for the block,
    as huggingface/transformers#43631 does for Autoformer and Informer.
    """
    from torch.distributions import Distribution

    with patch_attribute(Distribution, "_validate_args", False, reason="data-dependent distribution checks"):
        yield


@contextlib.contextmanager
def module_conversions_without_swaps() -> Iterator[None]:
    """Trace ``module.to(...)`` calls that convert nothing without swapping the module's parameters.

    transformers' Switch Transformers router casts its classifier to the router dtype on every call
    (``self.classifier = self.classifier.to(self.dtype)``, transformers/models/switch_transformers/
    modeling_switch_transformers.py ``SwitchTransformersTop1Router.forward``). Under non-strict ``torch.export`` the
    parameters are fake tensors, which ``Module._apply`` always converts with ``torch.utils.swap_tensors``, and the
    tracer holds weakrefs on them: ``_apply(): Couldn't swap Linear.weight`` ("Cannot swap t1 because it has weakref
    associated with it"; pytorch/pytorch#153056, fixed upstream by pytorch/pytorch#185595, which keeps fake tensors
    off the swap path). In eager such a call changes no tensor when every parameter and buffer already has the
    requested dtype and device; the patch returns the module itself then (``Module.to`` returns ``self`` too) and
    leaves every other conversion to torch. Retire it when the pinned torch includes pytorch/pytorch#185595.
    """
    import torch

    original = torch.nn.Module.to

    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        device, dtype, _, memory_format = torch._C._nn._parse_to(*args, **kwargs)
        tensors = [*self.parameters(), *self.buffers()]
        unchanged = memory_format is None and all(
            (device is None or t.device == device)
            and (dtype is None or t.dtype == dtype or not (t.is_floating_point() or t.is_complex()))
            for t in tensors
        )
        return self if unchanged else original(self, *args, **kwargs)

    reason = "Module.to swaps fake parameters held by weakrefs while exporting (pytorch/pytorch#153056)"
    with patch_attribute(torch.nn.Module, "to", to, reason=reason):
        yield


@contextlib.contextmanager
def tracing_patches(
    dynamic: bool, model: Any = None, experts: ExpertsChoice | None = None, grid: bool = True
) -> Iterator[None]:
    """Every patch needed while tracing an export (``model``: the eager model, for the per-module switches;
    ``experts``: the backend's choice of experts forward, see :func:`experts_as_standard_ops`; ``grid``: keep image
    grids inputs, see :func:`~hub_export.patches.vision_grid.grid_as_input`, off when a trace fixes their values)."""
    with contextlib.ExitStack() as stack:
        if dynamic:
            stack.enter_context(size_one_dims_stay_dynamic())
            stack.enter_context(unsolvable_guards_dropped())
        if model is not None:
            stack.enter_context(experts_as_standard_ops(model, experts))
            if dynamic:
                stack.enter_context(symbolic_sizes(model))
                stack.enter_context(tensor_len_symbolic(model))
                stack.enter_context(size_division_symbolic(model))
                stack.enter_context(conv_length_symbolic(model))
                if grid:
                    stack.enter_context(grid_as_input(model))
                    stack.enter_context(features_kept_whole(model))
                    stack.enter_context(images_at_once(model))
            stack.enter_context(causal_mask_skip_kept(model))
        stack.enter_context(no_padding_mask_skipped())
        stack.enter_context(mask_functions_broadcast())
        stack.enter_context(decode_attention_without_kv_copies())
        stack.enter_context(sdpa_causal_flag_as_bool())
        stack.enter_context(distribution_checks_skipped())
        stack.enter_context(module_conversions_without_swaps())
        yield
