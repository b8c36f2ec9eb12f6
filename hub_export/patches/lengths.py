"""Python size arithmetic of modeling code traced on symbolic sizes, not on the sample's integers.

* :func:`tensor_len_symbolic`: ``len(tensor)``.
* :func:`size_division_symbolic`: ``torch.div(size, n, rounding_mode=...)`` on sizes.
* :func:`conv_length_symbolic`: transformers' ``conv1d_output_length`` (``int()`` of a true division).

``len(tensor)``

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

``torch.div`` on sizes
    Longformer-style sliding-window attention divides sizes with ``torch.div(seq_len, window_overlap,
    rounding_mode="trunc")`` (``_chunk`` and ``_sliding_chunks_query_key_matmul`` in
    transformers/models/longformer/modeling_longformer.py and its copy in LED). On Python ints that returns a 0-d
    tensor, which eager turns back into an int where it becomes a size; while tracing, the symbolic size becomes a
    tensor and reading it back as a size is a data-dependent value (``GuardOnDataDependentSymNode: Could not guard
    on data-dependent expression 4*u1 < 8``: ``torch.div`` has no integer overload, its operands become a tensor). :func:`size_division_symbolic` computes ``size // n`` instead when a call from the traced model's modules
    divides a symbolic size by an integer (the same integer eager reads back; plain ints and tensors keep
    ``torch.div``).

``conv1d_output_length``
    ``transformers.audio_utils.conv1d_output_length`` computes a convolution's output length as
    ``int((length + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1)``: a true division then ``int()``,
    which turns a symbolic length into the sample's integer (``Eq(TruncToInt(...), 4000)``), pinning the audio
    length of XCodec (``XcodecModel.encode`` compares it with its semantic branch's length to decide on padding) and
    the Higgs Audio v2 tokenizer. :func:`conv_length_symbolic` computes the same length with integer floor division
    for a symbolic length (equal whenever the length is valid, i.e. the numerator is not negative), in
    ``audio_utils`` and the modules that imported the function.
"""

from __future__ import annotations

import builtins
import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from ._base import patch_attribute

__all__ = ["conv_length_symbolic", "size_division_symbolic", "tensor_len_symbolic"]


def _model_modules(model: Any, packages: tuple[str, ...]) -> list[Any]:
    """The imported modules under ``packages`` that define the classes of ``model``'s submodules."""
    names = {type(m).__module__ for m in model.modules()} if hasattr(model, "modules") else set()
    return [sys.modules[name] for name in sorted(names) if name.startswith(packages) and name in sys.modules]


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


@contextlib.contextmanager
def size_division_symbolic(model: Any, packages: tuple[str, ...] = ("transformers.",)) -> Iterator[int]:
    """Inside the block, ``torch.div(a, b, rounding_mode="trunc" | "floor")`` called from the modules defining
    ``model``'s classes (under ``packages``) with integer operands, one of them a ``SymInt``, returns ``a // b``
    (see the module docstring); every other call is ``torch.div``'s.

    Yields:
        How many modules the patch covers.
    """
    import torch
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    original = torch.div
    covered = {module.__name__ for module in _model_modules(model, packages)}

    def div(a: Any, b: Any, *args: Any, rounding_mode: str | None = None, **kwargs: Any) -> Any:
        integers = isinstance(a, (int, torch.SymInt)) and isinstance(b, (int, torch.SymInt))
        if (
            integers
            and not args
            and not kwargs
            and (isinstance(a, torch.SymInt) or isinstance(b, torch.SymInt))
            and (
                rounding_mode == "floor"
                or (rounding_mode == "trunc" and statically_known_true(a >= 0) and statically_known_true(b > 0))
            )
            and sys._getframe(1).f_globals.get("__name__") in covered
        ):
            return a // b
        return original(a, b, *args, rounding_mode=rounding_mode, **kwargs)

    reason = "torch.div on symbolic sizes becomes a data-dependent tensor (modeling_longformer.py _chunk)"
    with patch_attribute(torch, "div", div, reason=reason):
        yield len(covered)


@contextlib.contextmanager
def conv_length_symbolic(model: Any, packages: tuple[str, ...] = ("transformers.",)) -> Iterator[int]:
    """Inside the block, ``conv1d_output_length(module, length)`` of a symbolic length is computed with ``//`` (see
    the module docstring) in ``transformers.audio_utils`` and the modules defining ``model``'s classes that imported
    it; a Python int keeps upstream's computation.

    Yields:
        How many modules were patched (0: transformers has no such function, or no module of the model uses it).
    """
    audio_utils = sys.modules.get("transformers.audio_utils")
    original = getattr(audio_utils, "conv1d_output_length", None)
    users = [m for m in _model_modules(model, packages) if vars(m).get("conv1d_output_length") is original]
    if original is None or not users:
        yield 0
        return

    def conv1d_output_length(module: Any, input_length: Any) -> Any:
        if isinstance(input_length, int):
            return original(module, input_length)
        span = module.dilation[0] * (module.kernel_size[0] - 1)
        return (input_length + 2 * module.padding[0] - span - 1) // module.stride[0] + 1

    with contextlib.ExitStack() as stack:
        for owner in [audio_utils, *users]:
            stack.enter_context(
                patch_attribute(owner, "conv1d_output_length", conv1d_output_length, reason="int() of a size")
            )
        yield len(users)
