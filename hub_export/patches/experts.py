"""Mixture-of-experts layers with their own loop over the experts hit, traced as a loop over every expert.

transformers' ``@use_experts_implementation`` experts are switched to standard ops by
:func:`~hub_export.patches.tracing.experts_as_standard_ops`. A few experts classes keep a forward of their own that
iterates ``for idx in (expert_mask.sum(...) > 0).nonzero()`` and turns each id into a Python integer
(``int(idx.item())``, ``expert_idx == self.num_experts``): a data-dependent value per step, so torch.export raises
``GuardOnDataDependentSymNode`` (``unbind`` of the ``nonzero`` result). The patches below run the same per-expert
computation over the static expert count instead, each expert on the tokens routed to it (``torch.where`` on the
routing), in upstream's order (ascending expert id), so the sums are eager's:

* ``LongcatFlashExperts.forward`` (transformers/models/longcat_flash/modeling_longcat_flash.py): routed experts,
  then ``zero_expert_num`` identity experts (ids past ``num_routed_experts``) that pass their tokens through.
* ``Step3p7Experts.forward`` (transformers/models/step3p7/modeling_step3p7.py): its clamped SwiGLU
  (``_apply_gate``); the id ``num_experts`` is a sentinel no expert serves, as upstream.
* ``SwitchTransformersExperts.forward`` (transformers/models/switch_transformers/modeling_switch_transformers.py):
  a ``ModuleDict`` of dense experts indexed by ``f"expert_{expert_idx[0]}"`` of each id hit; the one-hot routing
  (``selected_experts``, masked by the expert capacity) gives each expert its tokens.
* ``DbrxExperts.forward`` (transformers/models/dbrx/modeling_dbrx.py): ``for expert_idx in expert_hit`` over the
  ``nonzero`` of the hit mask (``GuardOnDataDependentSymNode: Eq(u0, 0)`` in ``unbind``); each expert's GLU
  weights are rows ``idx`` of ``mlp.w1`` / ``v1`` / ``w2`` viewed ``(experts, ffn, hidden)``, as upstream.

The tokens of each expert are a size read from the routing (``torch.where``), which the ExecuTorch runtime cannot run
(``method->execute()`` error 0x12: DBRX's and Switch Transformers' programs). :func:`dense_experts_forward` gives an
exporter the same forward with every expert run on every token and weighted by the token's routing weight for it
(zero where the token did not pick it): static shapes, the same sums in the same order of experts, ``count`` times the
expert compute (ExecuTorch's choice, :meth:`~hub_export.backends.executorch.ExecutorchExporter.experts_forward`).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

__all__ = [
    "custom_experts_modules",
    "dbrx_experts",
    "dense_experts_forward",
    "longcat_experts",
    "step3p7_experts",
    "switch_experts",
]


def _routed(hidden_states: Any, top_k_index: Any, top_k_weights: Any, count: int, expert: Callable[..., Any]) -> Any:
    """Sum over experts ``0..count-1`` of ``expert(id, its tokens) * routing weight``, scattered to the tokens."""
    import torch

    output = torch.zeros_like(hidden_states)
    rows = (-1, hidden_states.shape[-1])
    for idx in range(count):
        token_idx, slot = torch.where(top_k_index == idx)
        states = expert(idx, hidden_states[token_idx]) * top_k_weights[token_idx, slot, None]
        output = output.scatter_add(0, token_idx[:, None].expand(rows), states.to(output.dtype))
    return output


def _dense(hidden_states: Any, top_k_index: Any, top_k_weights: Any, count: int, expert: Callable[..., Any]) -> Any:
    """:func:`_routed` with every token through every expert, weighted by its routing weight for that expert (zero
    where it did not pick it): no size read from the routing."""
    import torch

    output = torch.zeros_like(hidden_states)
    for idx in range(count):
        weight = (top_k_weights * (top_k_index == idx)).sum(-1, keepdim=True)
        output = output + (expert(idx, hidden_states) * weight).to(output.dtype)
    return output


#: How a patched experts forward sums its experts: :func:`_routed` (each expert on its tokens) or :func:`_dense`.
Route = Callable[[Any, Any, Any, int, Callable[..., Any]], Any]


def longcat_experts(original: Callable[..., Any], route: Route = _routed) -> Callable[..., Any]:
    """``LongcatFlashExperts.forward`` over every expert (identity experts included)."""

    def forward(self: Any, hidden_states: Any, top_k_index: Any, top_k_weights: Any) -> Any:
        import torch.nn.functional as F

        def expert(idx: int, states: Any) -> Any:
            if idx >= self.num_routed_experts or self.gate_up_proj is None:
                return self.identity_expert(states)
            gate, up = F.linear(states, self.gate_up_proj[idx]).chunk(2, dim=-1)
            return F.linear(self.act_fn(gate) * up, self.down_proj[idx])

        return route(hidden_states, top_k_index, top_k_weights, self.total_experts, expert)

    return forward


def step3p7_experts(original: Callable[..., Any], route: Route = _routed) -> Callable[..., Any]:
    """``Step3p7Experts.forward`` over every expert."""

    def forward(self: Any, hidden_states: Any, top_k_index: Any, top_k_weights: Any) -> Any:
        import torch.nn.functional as F

        def expert(idx: int, states: Any) -> Any:
            return F.linear(self._apply_gate(F.linear(states, self.gate_up_proj[idx])), self.down_proj[idx])

        return route(hidden_states, top_k_index, top_k_weights, self.num_experts, expert)

    return forward


def switch_experts(original: Callable[..., Any], route: Route = _routed) -> Callable[..., Any]:
    """``SwitchTransformersExperts.forward`` over every expert: its one-hot routing (``selected_experts``
    ``[tokens, slots, experts]``, masked by the expert capacity) read as each slot's expert id, an id past the last
    expert for a slot no expert took."""

    def forward(self: Any, hidden_states: Any, selected_experts: Any, routing_weights: Any) -> Any:
        taken = selected_experts.amax(-1) > 0
        top_k_index = selected_experts.argmax(-1).masked_fill(~taken, self.num_experts)

        def expert(idx: int, states: Any) -> Any:
            return self[f"expert_{idx}"](states)

        return route(hidden_states, top_k_index, routing_weights, self.num_experts, expert)

    return forward


def dbrx_experts(original: Callable[..., Any], route: Route = _routed) -> Callable[..., Any]:
    """``DbrxExperts.forward`` over every expert."""

    def forward(self: Any, hidden_states: Any, top_k_index: Any, top_k_weights: Any) -> Any:
        batch = hidden_states.shape[0]
        shape = (-1, self.ffn_hidden_size, self.hidden_size)

        def expert(idx: int, states: Any) -> Any:
            weights = (self.mlp.w1.view(shape)[idx], self.mlp.v1.view(shape)[idx], self.mlp.w2.view(shape)[idx])
            return self.mlp(states, *weights).view(-1, self.hidden_size)

        flat = hidden_states.reshape(-1, self.hidden_size)
        return route(flat, top_k_index, top_k_weights, self.num_experts, expert).view(batch, -1, self.hidden_size)

    return forward


#: The experts classes with a forward of their own, by class name, and the patch building it.
_CUSTOM_EXPERTS: dict[str, Callable[..., Callable[..., Any]]] = {
    "DbrxExperts": dbrx_experts,
    "LongcatFlashExperts": longcat_experts,
    "Step3p7Experts": step3p7_experts,
    "SwitchTransformersExperts": switch_experts,
}


def dense_experts_forward(module: Any) -> Callable[..., Any] | None:
    """``module``'s forward with every expert on every token (:func:`_dense`), bound to it, for an experts class of
    :data:`_CUSTOM_EXPERTS`; None for any other module."""
    factory = _CUSTOM_EXPERTS.get(type(module).__name__)
    if factory is None or not type(module).__module__.startswith("transformers.models."):
        return None
    return types.MethodType(factory(type(module).forward, route=_dense), module)


def custom_experts_modules(model: Any) -> list[Any]:
    """The modules of ``model`` whose class is one of :data:`_CUSTOM_EXPERTS` (transformers' own)."""
    modules = getattr(model, "modules", None)
    return [m for m in modules() if dense_experts_forward(m) is not None] if modules is not None else []
