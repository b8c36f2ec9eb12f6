"""3-D convolutions as a sum of 2-D convolutions, one per tap of the kernel's depth, for the ExecuTorch runtime.

Neither XNNPACK's delegate nor the portable ``aten::convolution.out`` kernel of the ExecuTorch runtime (executorch
1.5.1, ``kernels/portable/cpu/util/kernel_ops_util.cpp``: "Expect input tensor to be 3-D or 4-D") runs a 3-D
convolution: a program holding one lowers, then fails at its first run (error 0x12). Qwen2-VL's patch embedding and
its copies (Qwen2.5-VL, Qwen3-VL, GLM-4V, GLM-OCR, ...: a ``Conv3d`` whose kernel spans ``temporal_patch_size``
frames) and the video encoders' tubelet embeddings are such convolutions.

:func:`convolutions_in_two_dims` re-traces a program holding an ``aten.conv3d`` (or a 5-D ``aten.convolution``)
with :func:`conv3d_by_depth_taps` as its decomposition: for each tap ``j`` of the kernel's depth, the input frames that
tap reads (``j * dilation`` onwards, every ``stride``-th, as many as output frames) are folded into the batch and
convolved in two dimensions with the tap's slice of the weight; the taps' outputs are summed, the bias added once.
The same products as the 3-D convolution, summed in another order (float rounding only).
"""

from __future__ import annotations

from typing import Any

__all__ = ["conv3d_by_depth_taps", "convolutions_in_two_dims"]


def conv3d_by_depth_taps(
    input: Any,
    weight: Any,
    bias: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: bool,
    output_padding: Any,
    groups: int,
) -> Any:
    """``aten.convolution`` of a batched 5-D input as 2-D convolutions over the kernel's depth taps (other
    convolutions: ``NotImplemented``, left as they are)."""
    import torch
    import torch.nn.functional as F

    if transposed or input.dim() != 5 or len(stride) != 3:
        return NotImplemented
    (sd, sh, sw), (pd, ph, pw), (dd, dh, dw) = stride, padding, dilation
    x = F.pad(input, (0, 0, 0, 0, pd, pd)) if pd else input
    batch, channels, depth, height, width = x.shape
    taps = weight.shape[2]
    frames = (depth - dd * (taps - 1) - 1) // sd + 1
    total = None
    for tap in range(taps):
        start = tap * dd
        read = x[:, :, start : start + sd * (frames - 1) + 1 : sd]  # (batch, channels, frames, height, width)
        folded = read.transpose(1, 2).reshape(batch * frames, channels, height, width)
        out = torch.ops.aten.convolution.default(
            folded, weight[:, :, tap], None, [sh, sw], [ph, pw], [dh, dw], False, [0, 0], groups
        )
        total = out if total is None else total + out
    assert total is not None  # a kernel has at least one tap
    if bias is not None:
        total = total + bias[None, :, None, None]
    out_channels, out_height, out_width = total.shape[1:]
    return total.reshape(batch, frames, out_channels, out_height, out_width).transpose(1, 2)


def _conv3d(
    input: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = (1,),
    padding: Any = (0,),
    dilation: Any = (1,),
    groups: int = 1,
) -> Any:
    """``aten.conv3d`` (a composite ``run_decompositions`` keeps when its table is given) as
    :func:`conv3d_by_depth_taps`; an unbatched 4-D input is given a batch of one, as ``conv3d`` does."""
    triple = lambda value: list(value) * 3 if len(value) == 1 else list(value)  # noqa: E731
    batched = input if input.dim() == 5 else input.unsqueeze(0)
    args = (triple(stride), triple(padding), triple(dilation), False, [0, 0, 0], groups)
    out = conv3d_by_depth_taps(batched, weight, bias, *args)
    return out if input.dim() == 5 else out.squeeze(0)


def convolutions_in_two_dims(program: Any) -> Any:
    """``program`` re-traced with its 5-D convolutions as :func:`conv3d_by_depth_taps`, or ``program`` itself when
    it holds none (no re-trace)."""
    import torch

    aten = torch.ops.aten
    if not any(
        node.op == "call_function"
        and (
            node.target is aten.conv3d.default
            or (
                node.target is aten.convolution.default
                and isinstance(value := node.args[0].meta.get("val"), torch.Tensor)
                and value.dim() == 5
            )
        )
        for module in program.graph_module.modules()
        if isinstance(module, torch.fx.GraphModule)
        for node in module.graph.nodes
    ):
        return program
    return program.run_decompositions({aten.conv3d.default: _conv3d, aten.convolution.default: conv3d_by_depth_taps})
