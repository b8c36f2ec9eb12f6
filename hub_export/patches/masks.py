"""Attention masks whose eager outcome depends on the mask's values, kept as a select in the traced graph.

transformers' ``create_causal_mask`` (masking_utils.py) skips building a mask when SDPA runs and no token is
padded (``_ignore_causal_mask_sdpa``: ``padding_mask.all()``, a query as long as the keys): it returns None and
leaves causality to the attention module's ``is_causal`` flag. While tracing it never skips (the values are
unknown), so the graph always applies the causal mask it built. The two agree for an attention module with
``is_causal=True``; a model whose attention modules say ``is_causal=False`` yet build a causal mask (AIMv2's text
tower; the same class of bug as huggingface/transformers#42820 for T5Gemma 2's encoder) runs eager bidirectionally
on an all-ones mask and causally on a padded one: a branch on the mask's values. :func:`causal_mask_skip_kept`
traces that branch as ``where(attention_mask.all(), no mask, the causal mask)``, so the export computes what eager
computes for every mask, padded or not.

The select is made where the mask is consumed, in ``sdpa_attention_forward`` (integrations/sdpa_attention.py), which
reads the call's own ``is_causal`` before the module's: a model whose modules say ``is_causal=False`` but whose
encoder passes ``is_causal=True`` (CLIP's and OWL-ViT's text towers) runs causally in eager either way, so its
causal mask is kept as built; only a call that resolves to non-causal takes the select.

:func:`no_padding_mask_skipped`: ``create_bidirectional_mask`` called without a padding mask returns None in eager
(``_ignore_bidirectional_mask_sdpa``: nothing to mask) but, while exporting, refuses every skip
(``is_torchdynamo_exporting()``, to avoid reading a mask's values) and builds an all-True mask although there are no
values to read. Most attention modules ignore such a mask; Autoformer's and Informer's do not (their attention
views the scores by the mask's key length, which their auto-correlation / ProbSparse attention changed:
``Attention mask should be of size (b, 1, 2, 2), but is (b, 1, 4, 4)``, transformers/models/informer/
modeling_informer.py ``InformerProbSparseAttention``), so the export failed where eager runs. The patch skips the
mask while exporting too when no padding mask was given and no local window applies: a decision on no values.

:func:`mask_functions_broadcast`: ``sdpa_mask`` (masking_utils.py) expands a model's own mask function (an
``and_mask_function``/``or_mask_function``, such as T5Gemma 2's bidirectional sliding window,
transformers/models/t5gemma2/modeling_t5gemma2.py ``sliding_window_mask_function``) with four nested
``torch.vmap`` (``_vmap_expansion_sdpa``); transformers' own index-based functions take the broadcast path
(``_non_vmap_expansion_sdpa``: the function called once on index tensors shaped to broadcast to
``[batch, heads, query, key]``). The vmap runs under ``TransformGetItemToIndex`` (torch/_dynamo/
_trace_wrapped_higher_order_op.py), whose indexing (``padding_mask[batch_idx, kv_idx]``) traces to a ``flat_apply``
higher-order op holding a pytree ``TreeSpec`` constant, which the ``.pt2`` serializer refuses (``Unsupported getattr attribute
function_const_func_spec0``): the export ran but could not be saved. The patch expands the function by broadcasting
while tracing (the same booleans for a function of its indices written with tensor ops) and keeps the vmap for a
function that fails on broadcast indices.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from ._base import patch_attribute

__all__ = ["causal_mask_skip_kept", "mask_functions_broadcast", "no_padding_mask_skipped"]

_REASON = "create_causal_mask skipped on an all-ones mask under is_causal=False (cf. huggingface/transformers#42820)"


def _non_causal_sdpa(model: Any) -> bool:
    """Whether every attention module of ``model`` (a module with a boolean ``is_causal``) is non-causal and runs
    SDPA: the only case where eager's skip and the traced mask differ."""
    flags = [m.is_causal for m in model.modules() if isinstance(getattr(m, "is_causal", None), bool)]
    implementation = getattr(getattr(model, "config", None), "_attn_implementation", None)
    return bool(flags) and not any(flags) and implementation == "sdpa"


def _kept(original: Any, skips: dict[int, tuple[Any, Any]]) -> Any:
    def create_causal_mask(*args: Any, **kwargs: Any) -> Any:
        import torch

        mask = original(*args, **kwargs)
        names = ("config", "inputs_embeds", "attention_mask", "past_key_values")
        given = {**dict(zip(names, args, strict=False)), **kwargs}
        padding = given.get("attention_mask")
        if given.get("past_key_values") is not None or not torch.is_tensor(mask) or not torch.is_tensor(padding):
            return mask  # with a cache, eager skips only a one-token query, where both agree
        if padding.dim() != 2:
            return mask  # a 4-D mask of the caller's own is used as given
        skip = padding.bool().all()
        if mask.dtype == torch.bool:  # True attends: the skip attends everywhere (ONNX Runtime has no bool Where)
            skips[id(mask)] = (mask, mask | skip)
        else:
            skips[id(mask)] = (mask, mask.masked_fill(skip, 0.0))  # an additive mask: the skip adds nothing
        return mask

    create_causal_mask.__wrapped__ = original  # type: ignore[attr-defined]
    return create_causal_mask


def _selected(sdpa: Any, skips: dict[int, tuple[Any, Any]]) -> Any:
    """``sdpa_attention_forward`` taking eager's select for a mask built by :func:`_kept` when the call resolves to
    non-causal (upstream: ``is_causal if is_causal is not None else module.is_causal``)."""

    def sdpa_attention_forward(
        module: Any, query: Any, key: Any, value: Any, attention_mask: Any, *args: Any, **kwargs: Any
    ) -> Any:
        entry = skips.get(id(attention_mask))
        if entry is not None and entry[0] is attention_mask:
            is_causal = kwargs.get("is_causal")
            if not (is_causal if is_causal is not None else getattr(module, "is_causal", True)):
                attention_mask = entry[1]
        return sdpa(module, query, key, value, attention_mask, *args, **kwargs)

    return sdpa_attention_forward


@contextlib.contextmanager
def causal_mask_skip_kept(model: Any) -> Iterator[int]:
    """Inside the block, the modeling modules of ``model`` build their causal mask as eager's select (see the module
    docstring) when every attention module of ``model`` is non-causal and runs SDPA; yields the number of modeling
    modules patched (0: nothing to do)."""
    from transformers import masking_utils
    from transformers.modeling_utils import AttentionInterface

    if not _non_causal_sdpa(model):
        yield 0
        return
    original = masking_utils.create_causal_mask
    owners = {sys.modules.get(type(m).__module__) for m in model.modules()}
    targets = [o for o in owners if o is not None and getattr(o, "create_causal_mask", None) is original]
    skips: dict[int, tuple[Any, Any]] = {}  # id(mask built) -> (that mask, eager's select); held while tracing
    functions = AttentionInterface._global_mapping
    with contextlib.ExitStack() as stack:
        for owner in targets:
            stack.enter_context(patch_attribute(owner, "create_causal_mask", _kept(original, skips), reason=_REASON))
        if targets:
            selected = {**functions, "sdpa": _selected(functions["sdpa"], skips)}
            stack.enter_context(patch_attribute(AttentionInterface, "_global_mapping", selected, reason=_REASON))
        yield len(targets)


@contextlib.contextmanager
def no_padding_mask_skipped() -> Iterator[None]:
    """Inside the block, a bidirectional mask with no padding mask and no local window is skipped as in eager (see
    the module docstring)."""
    from transformers import masking_utils

    original = masking_utils._ignore_bidirectional_mask_sdpa

    def ignore(padding_mask: Any, kv_length: Any, local_attention_size: Any = None) -> Any:
        if padding_mask is None and local_attention_size is None:
            return True
        return original(padding_mask, kv_length, local_attention_size)

    reason = "create_bidirectional_mask builds an all-True mask while exporting without a padding mask"
    with patch_attribute(masking_utils, "_ignore_bidirectional_mask_sdpa", ignore, reason=reason):
        yield


@contextlib.contextmanager
def mask_functions_broadcast() -> Iterator[None]:
    """Inside the block, ``sdpa_mask`` expands a custom mask function by broadcasting its index tensors instead of
    with ``torch.vmap``, which a ``.pt2`` cannot hold (see the module docstring); a function that raises on broadcast
    indices, or whose result does not broadcast to the mask's shape, keeps the vmap."""
    from transformers import masking_utils

    original = masking_utils._vmap_expansion_sdpa
    broadcast = masking_utils._non_vmap_expansion_sdpa
    item_to_index = masking_utils.TransformGetItemToIndex  # vmap's indexing mode: its indexing traces to flat_apply

    def expansion(mask_function: Any) -> Any:
        def expanded(batch: Any, head: Any, query: Any, key: Any) -> Any:
            shape = (batch.shape[0], head.shape[0], query.shape[0], key.shape[0])
            try:
                return mask_function(*broadcast(batch, head, query, key)).expand(shape)
            except (RuntimeError, TypeError, IndexError, ValueError):  # not a function of broadcastable indices
                with item_to_index():
                    return original(mask_function)(batch, head, query, key)

        return expanded

    reason = "vmap-expanded mask functions trace to flat_apply, which .pt2 cannot serialize"
    with (
        patch_attribute(masking_utils, "_vmap_expansion_sdpa", expansion, reason=reason),
        patch_attribute(masking_utils, "TransformGetItemToIndex", contextlib.nullcontext, reason=reason),
    ):
        yield
