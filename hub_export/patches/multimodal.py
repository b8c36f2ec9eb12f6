"""Multimodal language models traced with the image count and grid dynamic on the text side (the Qwen2-VL family).

:mod:`hub_export.patches.vision_grid` keeps the image grid an input of the vision encoder; the language side of
the same models pinned it again in two places, each fixed here while tracing:

* ``get_rope_index`` (M-RoPE positions: transformers/models/qwen2_vl/modeling_qwen2_vl.py ``Qwen2VLModel``, its
  copies in paddleocr_vl, qwen2_5_vl (video time scaled by ``tokens_per_second * second_per_grid_ts``) and the
  Qwen3-VL form (videos split into one-frame grids) that qwen3_vl, qwen3_vl_moe, qwen3_5, qwen3_5_moe, qwen4_exp,
  glm4v, glm4v_moe, glm46v, glm_ocr, cosmos3_omni, cosmos3_edge and cohere_compass copy): each row's token types are
  grouped with ``itertools.groupby`` over ``.tolist()`` and the images are walked one by one, which pins the batch,
  the sequence and the image count. :func:`mrope_positions` computes the same positions per token: a vision token's
  image is found from the cumulative token counts of the images (in row-major order, as upstream consumes the
  grids), its frame, row and column from its index within that image; every position starts from the exclusive
  cumulative sum of the steps before it (1 per text token, ``max(h, w)`` after an image's last token, or after
  each frame's in the Qwen3-VL form).
* ``get_image_features`` / ``get_video_features`` (every modeling module of the family, ~30 classes): the encoder's
  packed output is split per image with ``torch.split(features, (grid.prod(-1) // k).tolist())`` (or the
  ``features.split(sizes)`` method: Dots3-Note, Inkling2), a Python list as long as the image count, which pins
  it; every caller concatenates the pieces again (``torch.cat(pooler_output)``).
  :func:`features_kept_whole` makes that one ``.tolist()`` (in the method's own frame) and the split that consumes it
  return the packed features as one piece, so the caller's ``torch.cat`` gets them back unchanged. A model that
  also returns the pieces (``image_hidden_states``, one output per image) is left as it is.

HunYuan-VL's own layout (``HunYuanVLModel.get_rope_index``, transformers/models/hunyuan_vl/modeling_hunyuan_vl.py)
walks the same groups in the same loops: the positions of a row count its unmasked tokens; an image's run of
placeholder tokens (with or without a begin and an end token around its grid) writes, over its grid of
``h // k`` rows of ``w // k + 1`` tokens (a row-end token each), the column and the row on the last three axes but
one and the image's ordinal on the last. :func:`rope_index_hunyuan_vl` computes them per token (a token's run start
from a running maximum, its image from the cumulative count of run starts in row-major order, its run length by a
scatter over the images).

Numbers are eager's exactly (integer arithmetic; the features are the same tensor).
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from ._base import patch_attribute

__all__ = [
    "features_kept_whole",
    "mrope_positions",
    "rope_index_hunyuan_vl",
    "rope_index_qwen2",
    "rope_index_qwen2_5",
    "rope_index_qwen3",
]

_SPLIT_REASON = (
    "get_image_features / get_video_features split the packed features by grid.prod(-1).tolist() (a Python list as "
    "long as the image count), or list() a batch of them (LLaVA), only for the caller to concatenate them again"
)


def mrope_positions(
    input_ids: Any,
    token_types: Any,
    grids: dict[int, tuple[Any, Any, bool]],
    spatial_merge_size: int,
    attention_mask: Any = None,
) -> tuple[Any, Any]:
    """M-RoPE position ids ``(3, batch, sequence)`` and deltas ``(batch, 1)``, as ``Qwen2VLModel.get_rope_index``.

    Args:
        input_ids: ``(batch, sequence)`` token ids (their shape and dtype only).
        token_types: ``(batch, sequence)`` modality of each token (0 text, else a key of ``grids``).
        grids: modality -> ``(grid_thw, time_interval, per_frame)``: the ``(items, 3)`` grids consumed in order by
            that modality's runs of tokens, each item's time interval (a ``(items,)`` tensor, or None for 1), and
            whether every frame is a run of its own (the Qwen3-VL form: upstream splits each grid into one-frame
            grids, so the temporal position is 0 and the position advances after each frame).
        spatial_merge_size: The encoder's spatial merge (grid rows and columns per LLM token).
        attention_mask: ``(batch, sequence)``; masked tokens get position 0 and are skipped.
    """
    import torch

    batch, length = input_ids.shape
    device = input_ids.device
    valid = attention_mask.bool() if attention_mask is not None else torch.ones_like(input_ids, dtype=torch.bool)
    zeros = torch.zeros_like(input_ids, dtype=torch.int64)
    step = (valid & (token_types == 0)).long()
    offsets = [zeros, zeros, zeros]
    for modality, (grid, interval, per_frame) in grids.items():
        if grid is None:
            continue
        grid = grid.to(device)
        mine = valid & (token_types == modality)
        rank = mine.reshape(-1).long().cumsum(0).reshape(batch, length) - 1
        frames, rows, cols = grid[:, 0], grid[:, 1] // spatial_merge_size, grid[:, 2] // spatial_merge_size
        counts = frames * rows * cols
        ends = counts.cumsum(0)
        item = (rank[..., None] >= ends).sum(-1).clamp(max=grid.shape[0] - 1)
        local = (rank - (ends - counts)[item]).clamp(min=0)
        h, w = rows[item], cols[item]
        frame, within = local // (h * w), local % (h * w)
        if per_frame:
            time = zeros
            last = within == h * w - 1
        else:
            time = frame if interval is None else (frame * interval.to(device)[item]).long()
            last = local == counts[item] - 1
        step = step + torch.where(mine & last, torch.maximum(h, w), zeros)
        offsets = [torch.where(mine, part, offset) for part, offset in zip((time, within // w, within % w), offsets)]
    start = step.cumsum(-1) - step
    positions = torch.stack([start + offset for offset in offsets]).masked_fill(~valid[None], 0)
    positions = positions.to(input_ids.dtype)
    deltas = positions.amax(dim=(0, 2)) + 1 - valid.sum(-1)
    return positions, deltas.to(torch.int64)[:, None]


def _bound(original: Callable[..., Any], self: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    arguments = inspect.signature(original).bind(self, *args, **kwargs).arguments
    return {**arguments.pop("kwargs", {}), **arguments}


def _rope_index(variant: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def replacement(original: Callable[..., Any]) -> Callable[..., Any]:
        def get_rope_index(self: Any, *args: Any, **kwargs: Any) -> Any:
            import torch

            bound = _bound(original, self, args, kwargs)
            vision = self.config.vision_config
            video_interval = None
            if variant == "qwen2_5":
                seconds = bound.get("second_per_grid_ts")
                videos = bound.get("video_grid_thw")
                if videos is not None:
                    seconds = torch.ones(videos.shape[0]) if seconds is None else torch.as_tensor(seconds)
                    video_interval = vision.tokens_per_second * seconds
            videos = bound.get("video_grid_thw")
            if variant == "ernie" and videos is not None:  # a clip's frames merged in pairs by the resampler
                merge = vision.temporal_merge_size
                videos = torch.cat([videos[:, :1] // merge, videos[:, 1:]], dim=-1)
            grids = {
                1: (bound.get("image_grid_thw"), None, False),
                2: (videos, video_interval, variant == "qwen3"),
            }
            return mrope_positions(
                bound["input_ids"],
                bound["mm_token_type_ids"],
                grids,
                vision.spatial_merge_size,
                bound.get("attention_mask"),
            )

        return get_rope_index

    return replacement


#: ``get_rope_index`` of Qwen2-VL (transformers/models/qwen2_vl/modeling_qwen2_vl.py): time interval 1
rope_index_qwen2 = _rope_index("qwen2")
#: ``get_rope_index`` of Qwen2.5-VL (transformers/models/qwen2_5_vl/modeling_qwen2_5_vl.py): a video's temporal
#: positions scaled by ``tokens_per_second * second_per_grid_ts`` (truncated to integers)
rope_index_qwen2_5 = _rope_index("qwen2_5")
#: ``get_rope_index`` of Qwen3-VL (transformers/models/qwen3_vl/modeling_qwen3_vl.py): a video's grid split into
#: one-frame grids (``repeat_interleave(grid, grid[:, 0])``, ``t = 1``), each frame a run of its own
rope_index_qwen3 = _rope_index("qwen3")
#: ``get_rope_index`` of ERNIE-4.5-VL (transformers/models/ernie4_5_vl_moe/modeling_ernie4_5_vl_moe.py): a video's
#: frames divided by the resampler's ``temporal_merge_size`` (``get_vision_position_ids``' ``temp_merge_size``)
rope_index_ernie = _rope_index("ernie")


class _Unsplit:
    """What ``.tolist()`` returns in a patched features method: split sizes the split that follows ignores."""

    __slots__ = ()


_UNSPLIT = _Unsplit()


def _splits_features(function: Any) -> Any:
    """The code object of ``function`` when it splits packed features by ``grid.prod(-1).tolist()`` (the pattern
    of ``Qwen2VLModel.get_image_features``), by a count of each image's real patches (``mask.sum(-1) //
    k).tolist()``, ``Gemma4Model.get_image_features``) or by sizes from the grid's rows and columns
    (``HunYuanVLModel.get_image_features``) or by each row's count of real images (``Idefics2Model``:
    ``image_features.split(num_real_images_per_batch.tolist())``), the sizes named ``split_sizes`` or passed straight to the split
    (``features.split(grid.prod(-1).tolist())``, Inkling2), else None."""
    function = inspect.unwrap(function) if function is not None else None
    code = getattr(function, "__code__", None)
    if code is None:
        return None
    names = set(code.co_names)  # sizes from the grid's product, a count of real patches (Gemma 4), or the grid's
    # rows and columns (HunYuan-VL: ``merged_h * (merged_w + 1) + 2`` from ``grid[:, 1:].unbind(-1)``)
    if not (
        {"tolist", "pooler_output"} <= names and names & set(_SPLIT_FUNCTIONS) and names & {"prod", "sum", "unbind"}
    ):
        return None
    # a cell when a comprehension reads it
    return code if "split_sizes" in code.co_varnames + code.co_cellvars or _splits_by_tolist(function) else None


def _splits_by_tolist(function: Any) -> bool:
    """Whether ``function``'s source passes a ``.tolist()`` straight to a split (no source: False)."""
    import ast
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return False

    def is_tolist(node: ast.AST) -> bool:
        return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "tolist"

    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _SPLIT_FUNCTIONS
        and any(is_tolist(arg) for arg in (*node.args, *(keyword.value for keyword in node.keywords)))
        for node in ast.walk(tree)
    )


def _caller_code() -> Any:
    """The code object of the frame that called ``.tolist()`` (the caller of the patched method)."""
    frame = sys._getframe(2)
    return frame.f_code if frame is not None else None


def _lists_features(code: Any) -> bool:
    """Whether a features method lists a tensor of per-image features (``list(image_features)``, LLaVA) and asks
    no length itself: only then do its ``list()`` calls see one piece (a ``len()`` of its own would see 1 too)."""
    return "list" in code.co_names and "len" not in code.co_names


#: The instructions a frame stands at while a call it makes runs: ``CALL`` (3.11 to 3.13), ``CALL_FUNCTION`` (3.10)
#: and 3.11's ``PRECALL``: once 3.11 specializes ``list(x)`` (``PRECALL_BUILTIN_CLASS``, after a few runs of the
#: same code) the call runs inside ``PRECALL`` and the frame stands there (``co_code`` shows the unspecialized name).
_CALL_OPS = ("CALL", "CALL_FUNCTION", "PRECALL")


def _listed_by(code: Any) -> bool:
    """Whether the caller of the patched ``__iter__`` / ``__len__`` (two frames up) is ``code`` at a call
    (``list(features)``), not at a ``for`` loop, an unpacking or a ``*`` over a tensor (GET_ITER,
    UNPACK_SEQUENCE, LIST_EXTEND: left as they are)."""
    import dis

    frame = sys._getframe(2)
    if frame is None or frame.f_code is not code:
        return False
    return dis.opname[code.co_code[frame.f_lasti]] in _CALL_OPS


def _returns_pieces(cls: type) -> bool:
    """Whether ``cls.forward`` returns the per-image pieces themselves (``image_hidden_states=...pooler_output``,
    transformers/models/minimax_m3_vl/modeling_minimax_m3_vl.py): keeping them whole would change the outputs. A
    forward returning the features it concatenated (``image_hidden_states=image_features``, Mistral 3) does not."""
    import ast
    import textwrap

    forward = inspect.unwrap(cls.__dict__.get("forward", None) or (lambda: None))
    code = getattr(forward, "__code__", None)
    if code is None or "pooler_output" not in code.co_names:
        return False
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(forward)))
    except (OSError, TypeError, SyntaxError):  # no source: the names alone decide
        keywords = {n for const in code.co_consts if isinstance(const, tuple) for n in const if isinstance(n, str)}
        return bool(keywords & {"image_hidden_states", "video_hidden_states"})
    return any(
        isinstance(node, ast.keyword)
        and node.arg in ("image_hidden_states", "video_hidden_states")
        and any(_holds_pieces(part) for part in _value_nodes(node.value))
        for node in ast.walk(tree)
    )


def _value_nodes(node: Any) -> list[Any]:
    """The sub-expressions an output keyword's value can come from: both branches of a conditional, never its test
    (``image_features if mm_encoder_outputs.get("image") is not None else None``, LLaVA and Mistral 3, returns the
    concatenated features)."""
    import ast

    if isinstance(node, ast.IfExp):
        return [*_value_nodes(node.body), *_value_nodes(node.orelse)]
    return list(ast.walk(node))


def _holds_pieces(node: Any) -> bool:
    """Whether an expression of an output keyword reads the per-image pieces: ``....pooler_output``, or the whole
    encoder output that holds them (``mm_encoder_outputs.get("image")``, transformers/models/smolvlm)."""
    import ast

    if isinstance(node, ast.Attribute):
        return node.attr == "pooler_output" or (
            node.attr == "get" and isinstance(node.value, ast.Name) and node.value.id == "mm_encoder_outputs"
        )
    return (
        isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "mm_encoder_outputs"
    )


def _tensor_classes(name: str = "tolist") -> list[type]:
    """``torch.Tensor`` and its subclasses that define the method ``name`` again (``tolist``: the fake and
    functional tensors that ``torch.export`` traces with)."""
    import torch

    found: list[type] = [torch.Tensor]
    stack: list[type] = list(torch.Tensor.__subclasses__())
    while stack:
        cls = stack.pop()
        if name in cls.__dict__ and cls not in found:
            found.append(cls)
        stack.extend(cls.__subclasses__())
    return found


#: Every spelling of a split by sizes the features methods may use, as (owner, name): the function
#: (``torch.split``, ``torch.split_with_sizes``) and the tensor method (``features.split(sizes)``, Dots3-Note and
#: Inkling2; ``features.split_with_sizes(sizes)``). ``Tensor.split`` calls ``torch._VF.split_with_sizes`` itself,
#: never ``torch.split``, so each spelling is patched on its own.
_SPLIT_FUNCTIONS = ("split", "split_with_sizes")


def _whole_split(split: Callable[..., Any]) -> Callable[..., Any]:
    """``split`` returning its tensor as one piece when the sizes are :data:`_UNSPLIT` (positional or keyword),
    else the original's pieces."""

    def whole_split(*args: Any, **kwargs: Any) -> Any:
        if any(value is _UNSPLIT for value in (*args, *kwargs.values())):
            tensor = args[0] if args else next(v for k, v in kwargs.items() if k in ("tensor", "input", "self"))
            return (tensor,)
        return split(*args, **kwargs)

    return whole_split


def _whole(original: Callable[..., Any], code: Any) -> Callable[..., Any]:
    """``original`` with its own ``.tolist()`` returning :data:`_UNSPLIT` and a split by that (every spelling in
    :data:`_SPLIT_FUNCTIONS`, function or tensor method) returning the tensor whole, and its own ``list(features)``
    (a batch of per-image features listed, LLaVA's branch without ``image_sizes``) one piece, the images' rows one
    after another: what ``torch.cat`` of the per-image pieces gives (every other call is the original's).

    Why swapping ``tolist`` on the tensor classes is safe: ``tensor.tolist()`` is a Python attribute lookup along
    ``type(tensor).__mro__``, which ends at the first class defining ``tolist``; the swap covers ``torch.Tensor``
    and every subclass defining its own when the block is entered (:func:`_tensor_classes`: the fake and
    functional tensors ``torch.export`` traces with), so whichever of them the method holds, the call reaches the
    marked wrapper, which answers :data:`_UNSPLIT` only to the method's own frame (its code object). Should a
    tensor class escape the swap (one created inside the block), its own ``tolist`` runs: the trace then stops on
    the data-dependent guard it met without the patch, never with other numbers; and :data:`_UNSPLIT` reaching
    anything but a patched split fails at once (it is not a list).
    """

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        import torch

        with contextlib.ExitStack() as stack:
            for cls in _tensor_classes("tolist"):
                tolist = cls.__dict__.get("tolist", torch.Tensor.tolist)

                def marked(tensor: Any, _tolist: Any = tolist) -> Any:
                    return _UNSPLIT if _caller_code() is code else _tolist(tensor)

                stack.enter_context(patch_attribute(cls, "tolist", marked, reason=_SPLIT_REASON))
            for name in _SPLIT_FUNCTIONS:
                for owner in (torch, *_tensor_classes(name)):
                    split = getattr(owner, name)
                    stack.enter_context(patch_attribute(owner, name, _whole_split(split), reason=_SPLIT_REASON))
            for cls in _tensor_classes("__iter__") if _lists_features(code) else ():
                iterate = cls.__dict__.get("__iter__", torch.Tensor.__iter__)

                def marked_iter(tensor: Any, _iterate: Any = iterate) -> Any:
                    if tensor.dim() >= 2 and _listed_by(code):
                        return iter((tensor.flatten(0, 1),))
                    return _iterate(tensor)

                stack.enter_context(patch_attribute(cls, "__iter__", marked_iter, reason=_SPLIT_REASON))
            for cls in _tensor_classes("__len__") if _lists_features(code) else ():  # list() asks the length too
                length = cls.__dict__.get("__len__", torch.Tensor.__len__)

                def marked_len(tensor: Any, _length: Any = length) -> Any:
                    return 1 if tensor.dim() >= 2 and _listed_by(code) else _length(tensor)

                stack.enter_context(patch_attribute(cls, "__len__", marked_len, reason=_SPLIT_REASON))
            return original(self, *args, **kwargs)

    return method


@contextlib.contextmanager
def features_kept_whole(model: Any) -> Iterator[int]:
    """Keep the packed features of every split-then-concatenated features method of ``model``'s classes in one
    piece while tracing; yields how many methods were patched."""
    classes = {type(module) for module in model.modules()} if hasattr(model, "modules") else set()
    with contextlib.ExitStack() as stack:
        applied = 0
        pieces = sorted(cls.__name__ for cls in classes if _returns_pieces(cls))
        if pieces:  # one output per image: the image count is part of the output structure
            warnings.warn(
                f"{pieces[0]} returns one output per image (image_hidden_states): the export keeps the sample's "
                "image count; export with a sample of the image count you will run.",
                UserWarning,
                stacklevel=2,
            )
            classes = set()
        for cls in sorted(classes, key=lambda c: c.__qualname__):
            for name in ("get_image_features", "get_video_features"):
                original = cls.__dict__.get(name)
                code = _splits_features(original)
                if original is not None and code is not None:
                    stack.enter_context(patch_attribute(cls, name, _whole(original, code), reason=_SPLIT_REASON))
                    applied += 1
        yield applied


def _at_last_mark(marks: Any, values: Any) -> Any:
    """Per position of each row, ``values`` at the last marked position at or before it (-1 before the first mark).

    The same as ``torch.where(marks, values, -1).cummax(1).values`` where ``values`` do not decrease along a row,
    written as a scatter and a gather: ``aten.cummax`` has no ONNX function and no OpenVINO conversion rule
    (onnxscript 0.7, openvino 2026.4), while every format converts these two.
    """
    import torch

    values = values.expand_as(marks)  # a row of values may stand for every row
    count = marks.long().cumsum(1)  # marks so far, 0 before the first
    table = values.new_full((marks.shape[0], marks.shape[1] + 1), -1)  # slot k: the value at the k-th mark
    table = table.scatter(1, torch.where(marks, count, 0), torch.where(marks, values, -1))  # unmarked: -1 into 0
    return table.gather(1, count)


def rope_index_hunyuan_vl(original: Callable[..., Any]) -> Callable[..., Any]:
    """``HunYuanVLModel.get_rope_index`` computed per token (see the module docstring)."""

    def get_rope_index(
        self: Any,
        input_ids: Any,
        mm_token_type_ids: Any,
        image_grid_thw: Any = None,
        attention_mask: Any = None,
        **kwargs: Any,
    ) -> tuple[Any, Any]:
        import torch

        axes = len((self.config.text_config.rope_parameters or {}).get("mrope_section", []))
        if axes < 3 or image_grid_thw is None or image_grid_thw.shape[0] == 0:
            return original(self, input_ids, mm_token_type_ids, image_grid_thw, attention_mask, **kwargs)
        batch, length = input_ids.shape
        steps = torch.arange(length, device=input_ids.device)
        valid = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        position = valid.long().cumsum(1) - 1  # upstream's positions count the unmasked tokens of the row
        image = (mm_token_type_ids == 1) & valid
        latest = _at_last_mark(valid, steps)  # groupby runs over the unmasked tokens only
        before = torch.cat([latest.new_full((batch, 1), -1), latest[:, :-1]], dim=1)
        start = image & ~(image.gather(1, before.clamp(min=0)) & (before >= 0))
        ordinal = start.flatten().long().cumsum(0).view(batch, length) - 1  # grids are consumed in row-major order
        run_start = _at_last_mark(start, position)
        merge = self.config.vision_config.spatial_merge_size
        width = image_grid_thw[:, 2] // merge + 1  # a row-end token per row of the merged grid
        tokens = (image_grid_thw[:, 1] // merge) * width
        # the image count stays symbolic: no Python scalar of it (a Scalar argument would specialize it)
        bucket = torch.where(image, ordinal + 1, 0).flatten()  # 0: not an image token
        runs = tokens.new_zeros(tokens.shape[0] + 1)
        runs = runs.scatter_add(0, bucket, torch.ones_like(bucket))[1:]
        begin = (runs == tokens + 2).long()  # a begin token before the grid, an end token after it
        which = ordinal.clamp(min=0)  # an image token's own image; any image for the others (masked below)
        local = position - run_start - begin[which]
        grid = image & (local >= 0) & (local < tokens[which])
        local = local.clamp(min=0)
        rows = [position] * (axes - 3) + [
            torch.where(grid, local % width[which], position),
            torch.where(grid, local // width[which], position),
            torch.where(grid, ordinal, position),
        ]
        position_ids = torch.where(valid, torch.stack(rows), 0).to(input_ids.dtype)
        highest = position_ids.masked_fill(~valid, torch.iinfo(position_ids.dtype).min).amax(dim=(0, 2))
        deltas = (highest + 1 - valid.sum(1)).unsqueeze(1)
        return position_ids, deltas

    return get_rope_index
