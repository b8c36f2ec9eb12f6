"""``len(tensor)`` traced as the tensor's symbolic first size, not as the sample's integer.

Python's ``len()`` must return an ``int``: CPython converts whatever ``Tensor.__len__`` returns with ``__index__``,
so under non-strict ``torch.export`` ``len(x)`` on a tensor whose first axis is dynamic turns the symbolic size into
the sample's integer and guards on it (``Eq(batch, 2)``): the axis is pinned. torch's non-strict tracer already
swaps ``builtins.max``, ``min`` and ``math.pow`` for symbolic versions while tracing
(``_override_builtin_ops`` in torch/_export/non_strict_utils.py) but not ``len`` in torch 2.13; upstream adds it in
pytorch/pytorch#185804 ("Fix non-strict export tensor len handling"; the limitation itself: pytorch/pytorch#91901).
transformers' modeling code calls it on batched tensors: ``batch_size = len(source_flatten)`` in the RT-DETR family's
``forward`` (transformers/models/rt_detr/modeling_rt_detr.py and its copies in RT-DETRv2, D-FINE, DEIMv2), which
pins the batch of every detector built on it.

:func:`tensor_len_symbolic` routes ``len()`` of a tensor to ``tensor.shape[0]`` for the duration of a ``with`` block
(the same value in eager; a ``SymInt`` while tracing) and every other object to the original ``len``. Unlike
upstream's fix, which swaps ``builtins.len`` everywhere, it is scoped to the transformers modules defining the
traced model's classes (a module-global ``len`` that shadows the builtin, removed after the block), so torch's own
code keeps the builtin. Retire it when the pinned torch includes pytorch/pytorch#185804.
"""

from __future__ import annotations

import builtins
import contextlib
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["tensor_len_symbolic"]


def _length(obj: Any, /) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        if obj.dim() == 0:
            raise TypeError("len() of a 0-d tensor")
        return obj.shape[0]
    return builtins.len(obj)


@contextlib.contextmanager
def tensor_len_symbolic(model: Any, packages: tuple[str, ...] = ("transformers.",)) -> Iterator[int]:
    """Inside the block, ``len(tensor)`` in the modules defining ``model``'s classes (those under ``packages``) is
    ``tensor.shape[0]`` (a ``SymInt`` while tracing); see the module docstring. A 0-d tensor still raises
    ``TypeError``, as ``len()`` does. A module that defines its own ``len`` is left alone.

    Yields:
        How many modules were patched.
    """
    names = {type(m).__module__ for m in model.modules()} if hasattr(model, "modules") else set()
    modules = [
        module
        for name in sorted(names)
        if name.startswith(packages) and (module := sys.modules.get(name)) is not None and "len" not in vars(module)
    ]
    for module in modules:
        module.len = _length  # type: ignore[attr-defined]
    try:
        yield len(modules)
    finally:
        for module in modules:
            vars(module).pop("len", None)
