"""Integer inputs whose values the model turns into sizes (an image grid, image sizes, a frame mask).

``torch.export`` cannot trace ``grid_thw.tolist()`` feeding a split or a Python loop: the values become unbacked
symbols and the first guard on them fails (``GuardOnDataDependentSymNode``). :func:`value_inputs` picks the inputs
an export may fix to the sample's values instead; ``trace`` then rebuilds them inside the graph from those values
(``Signature.constants``), under :func:`hub_export.patches.values.fixed_values_fold`, and a call with other values
is refused (``Signature.check_fixed``).
"""

from __future__ import annotations

from typing import Any

from ..signature import MAX_FIXED_NUMEL

__all__ = ["data_dependent", "drop_folded_reads", "value_inputs", "warn_fixed"]

#: Inputs whose values are tokens, positions or attention masks: never fixed to values (the export would run one
#: text); token-type maps of multimodal models (``mm_token_type_ids``: where the image tokens are) may be.
_NOT_FIXED = frozenset({"input_ids", "attention_mask", "position_ids", "cache_position", "token_type_ids"})


def data_dependent(exc: BaseException) -> bool:
    """Whether torch.export failed on a guard or size over a tensor's values (``GuardOnDataDependentSymNode``)."""
    seen: BaseException | None = exc
    while seen is not None:
        if "DataDependent" in type(seen).__name__ or "data-dependent" in str(seen):
            return True
        seen = seen.__cause__
    return False


def value_inputs(traced_kwargs: dict[str, Any], masks: bool = False) -> dict[str, Any]:
    """The integer inputs a model may derive sizes from (``image_grid_thw``, ``image_sizes``, a features mask):
    small integer tensors that are not tokens, positions or (unless ``masks``) attention masks."""
    import torch

    skipped = _NOT_FIXED - ({"attention_mask"} if masks else set())
    suffixes = ("input_ids", "position_ids") + (() if masks else ("attention_mask",))
    return {
        name: value
        for name, value in traced_kwargs.items()
        if isinstance(value, torch.Tensor)
        and not value.is_floating_point()
        and not value.is_complex()
        and value.dtype != torch.bool
        and value.numel() <= MAX_FIXED_NUMEL
        and name not in skipped
        and not name.endswith(suffixes)
    }


def warn_fixed(model: Any, fixed: dict[str, Any]) -> None:
    """Warn once that the export fixed ``fixed``'s values (what a call must pass, how to export for others)."""
    import warnings

    names = ", ".join(f"{name!r}" for name in fixed)
    warnings.warn(
        f"{type(model).__name__} derives sizes from the values of {names} (a Python loop or size over them: a "
        "limitation of the model's implementation): the export is built for the sample's values there, and a "
        "call with other values is refused. Export with a sample holding the values you will run.",
        UserWarning,
        stacklevel=6,  # warn_fixed < _export_folded < trace < export_component < export < the caller
    )


def drop_folded_reads(program: Any) -> None:
    """Remove the unused nodes a fixed input's folded reads leave (``aten.item`` whose value became a Python int,
    which ``torch.export``'s serializer cannot write back: "Failed deserializing node ... aten.item")."""
    graph = program.graph_module.graph
    if graph.eliminate_dead_code():
        program.graph_module.recompile()
