"""ExecuTorch lowering workarounds (``hub_export/backends/executorch/patches.py``, ``_op_rewrites.py``, ``_refused.py``,
``_complex.py``, ``_scan.py``), each on a tiny synthetic module that reproduces the upstream failure it works around."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from hub_export import ExecutorchConfig, ExecutorchExporter
from hub_export.backends.executorch.io import program_contents

pytest.importorskip("executorch")


def _matches_eager(
    model: torch.nn.Module, sample: torch.Tensor, others: list[torch.Tensor], tolerance: float = 0.0
) -> None:
    """Export ``model`` from ``inputs_embeds=sample`` (``dynamic=True``) and compare every output with eager's at
    each of ``others`` (within ``tolerance``, absolute)."""
    model = model.eval()
    export = ExecutorchExporter().export(model, {"inputs_embeds": sample}, config=ExecutorchConfig(dynamic=True))
    with torch.no_grad():
        for x in others:
            got, want = export(inputs_embeds=x), model(x)
            pairs = zip(got, want, strict=True) if isinstance(want, tuple) else [(got, want)]
            for g, w in pairs:
                torch.testing.assert_close(g, w, rtol=0, atol=tolerance)


class _MaxOverStride(torch.nn.Module):
    """Hiera's query pooling: ``x.view(batch, stride, -1, hidden).max(dim=1).values`` of a 4-D tensor, which
    XNNPACK's partitioner accepts and its visitor refuses (it pools dims 2 or 3, keepdim only); beside it a
    ``max(dim=3, keepdim=True)`` the delegate does take."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.proj(x)
        pooled = hidden.view(x.shape[0], 2, -1, 8).max(dim=1).values
        kept = hidden.view(x.shape[0], 2, -1, 8).max(dim=3, keepdim=True).values
        return pooled + kept.sum(1)


def test_max_dims_xnnpack_cannot_pool_run_outside_the_delegate() -> None:
    from executorch.backends.xnnpack.partition.config import node_configs

    original = node_configs.MaxDimConfig.check_constraints
    model = _MaxOverStride().eval()
    export = ExecutorchExporter().export(model, {"x": torch.randn(2, 6, 8)}, config=ExecutorchConfig(dynamic=True))
    operators, delegates = program_contents(export.program)
    assert "aten::max" in operators and delegates  # the dim-1 reduction left to the portable kernels
    for shape in [(2, 6, 8), (5, 4, 8)]:
        x = torch.randn(shape)
        with torch.no_grad():
            assert float((export(x=x) - model(x)).abs().max()) < 1e-5
    assert node_configs.MaxDimConfig.check_constraints is original


class _Buckets(torch.nn.Module):
    """Idefics3's patch position buckets: ``torch.bucketize`` (not in the core ATen opset, no decomposition)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        boundaries = torch.arange(0, 1, 1 / 8)
        return torch.bucketize(x, boundaries, right=True) * 10 + torch.bucketize(x, boundaries)


def test_bucketize_is_lowered_as_comparisons_and_restored() -> None:
    from hub_export.backends.executorch._op_rewrites import bucketize_as_comparisons

    program = torch.export.export(_Buckets(), (torch.rand(2, 5),))
    before = [node.target for node in program.graph.nodes]
    with bucketize_as_comparisons(program) as count:
        assert count == 2
    assert [node.target for node in program.graph.nodes] == before
    export = ExecutorchExporter().export(_Buckets(), {"x": torch.rand(2, 5)}, config=ExecutorchConfig(dynamic=True))
    for shape in [(2, 5), (3, 4)]:
        x = torch.rand(shape)
        x[0, :3] = torch.tensor([0.0, 0.125, 0.5])  # on boundaries: right=True and False differ
        assert torch.equal(export(x=x), _Buckets()(x))


class _Nonzero(torch.nn.Module):
    """A data-dependent size (``nonzero``): its re-trace creates unbacked symbols in the program's ShapeEnv."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nonzero(x > 0).sum(0)


def test_a_failed_lowering_leaves_no_pending_unbacked_symbols_for_the_next() -> None:
    from torch._guards import detect_fake_mode

    from hub_export.backends.executorch._decompose import unbacked_symbols_restorer

    program = torch.export.export(_Nonzero(), (torch.randn(6),))
    values = [n.meta["val"] for n in program.graph.nodes if n.op == "placeholder"]
    env = detect_fake_mode(values).shape_env
    before = list(env.pending_fresh_unbacked_symbols)
    restore = unbacked_symbols_restorer(program)
    with pytest.raises(RuntimeError, match="kept"):
        with detect_fake_mode(values):
            env.create_unbacked_symint()  # what a lowering failing half-way through run_decompositions leaves
            raise RuntimeError("a node kept whole was not decomposed or delegated")
    assert env.pending_fresh_unbacked_symbols != before
    restore()
    assert env.pending_fresh_unbacked_symbols == before
    program.run_decompositions({})  # re-traces: would fail on the pending symbol


class _AvgPool(torch.nn.Module):
    """An ``AvgPool2d``: XNNPACK's serializer writes its (unused) dilations as 0 (SEW's pooling)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.avg_pool2d(x, 2)


def test_an_average_pooling_delegate_passes_the_load_time_check(tmp_path: Path) -> None:
    from hub_export import ExportedModel

    export = ExecutorchExporter().export(_AvgPool(), {"x": torch.randn(2, 3, 4, 4)}, config=ExecutorchConfig())
    export.save_pretrained(tmp_path)
    loaded = ExportedModel.from_pretrained(tmp_path)  # checks every XNNPACK node's fields before the runtime
    x = torch.randn(2, 3, 4, 4)
    assert torch.allclose(loaded(x=x), _AvgPool()(x), atol=1e-6)


class _PermuteTwoConsumers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(5, 4)

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.proj(hidden_states).permute(0, 2, 1)
        return y.reshape(hidden_states.shape[0], -1) + 1, y.sum(dim=1)


def test_partitions_xnnpack_cannot_compile_run_on_the_portable_kernels() -> None:
    """XNNPACK's compile of one partition raises (a permute with two consumers becomes the partition's output and its
    input: "Output node ... is already in the inputs", pytorch/executorch#19152); that partition runs on the portable
    kernels, the rest stays delegated, and the program gives eager's numbers at another shape."""
    model = _PermuteTwoConsumers().eval()
    x = torch.randn(2, 3, 5)
    # shown while the export hides other libraries' output: a warning of hub_export's own
    with pytest.warns(
        UserWarning, match=r"XNNPACK could not compile 1 of the 2 partitions \(RuntimeError: Output node"
    ):
        export = ExecutorchExporter().export(model, {"hidden_states": x}, config=ExecutorchConfig(dynamic=True))
    other = torch.randn(3, 2, 5)
    with torch.no_grad():
        for got, want in zip(export(hidden_states=other), model(other), strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-3)


class _TwoGelus(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 16)

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.proj(hidden_states)
        return torch.nn.functional.gelu(h, approximate="tanh"), torch.nn.functional.gelu(h)


def test_tanh_gelu_keeps_its_approximation() -> None:
    """XNNPACK (executorch 1.5.1) ran ``gelu(approximate="tanh")`` as the exact GELU, up to 4.7e-4 apart per value
    (pytorch/executorch#22851): the program now gives each GELU its own numbers, on values where the two differ."""
    model = _TwoGelus().eval()
    torch.nn.init.eye_(model.proj.weight[:8])
    torch.nn.init.zeros_(model.proj.bias)
    x = torch.linspace(-4, 4, 48).reshape(2, 3, 8)  # |tanh GELU - GELU| reaches 4.7e-4 near -2.7
    export = ExecutorchExporter().export(model, {"hidden_states": x}, config=ExecutorchConfig(dynamic=True))
    with torch.no_grad():
        tanh_gelu, gelu = model(x)
        assert (tanh_gelu - gelu).abs().max() > 3e-4  # the sample tells the two apart
        got = export(hidden_states=x)
    torch.testing.assert_close(got[0], tanh_gelu, rtol=0, atol=1e-5)
    torch.testing.assert_close(got[1], gelu, rtol=0, atol=1e-5)


class _ComplexRotary(torch.nn.Module):
    """Llama-4 / DeepSeek-V2's rotary embedding: ``polar`` frequencies times ``view_as_complex`` pairs."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8)), persistent=False)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(hidden_states.shape[1], dtype=torch.float32)
        angles = positions[:, None] * self.inv_freq[None, :]
        freqs = torch.polar(torch.ones_like(angles), angles)
        pairs = torch.view_as_complex(hidden_states.float().reshape(*hidden_states.shape[:-1], -1, 2))
        return torch.view_as_real(pairs * freqs[None, :, :]).flatten(2) + 0.5 * hidden_states


def test_complex_arithmetic_runs_on_real_pairs() -> None:
    """No ExecuTorch kernel takes a complex tensor and ``polar`` is outside the core ATen opset: the program holds the
    same arithmetic on real pairs (no complex value left) and gives eager's numbers at another length and batch."""
    from hub_export.backends.executorch._complex import complex_as_real_pairs

    model = _ComplexRotary().eval()
    x = torch.randn(2, 5, 8)
    export = ExecutorchExporter().export(model, {"hidden_states": x}, config=ExecutorchConfig(dynamic=True))
    other = torch.randn(3, 4, 8)
    with torch.no_grad():
        torch.testing.assert_close(export(hidden_states=other), model(other), rtol=0, atol=1e-5)
    program = complex_as_real_pairs(torch.export.export(model, (x,)))
    assert not any(
        isinstance(value := node.meta.get("val"), torch.Tensor) and value.is_complex() for node in program.graph.nodes
    )


class _EmptyCat(torch.nn.Module):
    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        empty = hidden_states[..., :0]  # a zero-width part (Mistral-Large-4's key without its positional half)
        return torch.cat([empty, empty * 2], dim=1) + 1, hidden_states * 2


def test_a_cat_of_empty_tensors_keeps_its_symbolic_size() -> None:
    """ExecuTorch replaces a ``cat`` of only empty inputs by a ``full`` of the output's shape, whose symbolic sizes it
    cannot emit ("Unsupported type encountered in int list"); the ``full`` now reads them from the inputs, and the
    output has eager's shape at another batch and length."""
    model = _EmptyCat().eval()
    export = ExecutorchExporter().export(
        model, {"hidden_states": torch.randn(2, 3, 4)}, config=ExecutorchConfig(dynamic=True)
    )
    other = torch.randn(3, 2, 4)
    with torch.no_grad():
        for got, want in zip(export(hidden_states=other), model(other), strict=True):
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, rtol=0, atol=0)


class _Recurrence(torch.nn.Module):
    """A recurrence under ``scan`` (how hub_export runs Mamba's, RecurrentGemma's and the LSTMs' loops): a state of
    shape ``[batch, 4]`` carried over the sequence, and every step's output stacked."""

    def forward(self, inputs_embeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        from torch._higher_order_ops.scan import scan

        def step(state: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            state = torch.tanh(0.5 * state + x)
            return state, 2 * state

        init = inputs_embeds.new_zeros(inputs_embeds.shape[0], inputs_embeds.shape[2])
        final, stacked = scan(step, init, inputs_embeds.transpose(0, 1))
        return final, stacked.transpose(0, 1)


def test_a_scan_carries_and_stacks_at_the_sizes_of_each_run() -> None:
    """ExecuTorch 1.5.1 emits a ``scan`` whose carried state is set with ``copy_`` (which keeps the state's planned
    size) and whose outputs are stacked at the planned size: every run below the upper bounds failed (error 0x12). The
    program now gives eager's numbers at sizes below the sample's, above it, and again after a longer run."""
    model = _Recurrence().eval()
    export = ExecutorchExporter().export(
        model, {"inputs_embeds": torch.randn(2, 5, 4)}, config=ExecutorchConfig(dynamic=True)
    )
    with torch.no_grad():
        for shape in ((3, 7, 4), (1, 3, 4), (2, 5, 4)):
            x = torch.randn(shape)
            for got, want in zip(export(inputs_embeds=x), model(x), strict=True):
                assert got.shape == want.shape
                torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


class _PositionsFromOne(torch.nn.Module):
    def forward(self, inputs_embeds: torch.Tensor) -> torch.Tensor:
        return inputs_embeds * torch.arange(1, inputs_embeds.shape[1] + 1, dtype=torch.float32)[:, None]


def test_an_arange_to_a_size_computed_at_run_time_passes_the_load_time_check() -> None:
    """The load-time check of ``arange``'s bounds (the kernel aborts the process outside 0 to 2**31 elements) reads
    the constants only: an end the program computes at run time (``sequence + 1``) holds a placeholder in the file
    (0: from 1 to 0, refused before; SAM-3's vision model)."""
    model = _PositionsFromOne().eval()
    export = ExecutorchExporter().export(
        model, {"inputs_embeds": torch.randn(2, 5, 4)}, config=ExecutorchConfig(dynamic=True)
    )
    x = torch.randn(3, 7, 4)
    with torch.no_grad():
        torch.testing.assert_close(export(inputs_embeds=x), model(x), rtol=0, atol=0)


class _Shuffle(torch.nn.Module):
    """ViT-MAE's random masking: patches ranked by noise (``argsort``), and a descending ``sort`` beside it."""

    def forward(self, inputs_embeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ranks = torch.argsort(inputs_embeds[..., 0], dim=1)
        values, indices = torch.sort(inputs_embeds, dim=-1, descending=True)
        return torch.argsort(ranks, dim=1), values, indices


def test_sorts_run_as_topk_of_the_whole_axis() -> None:
    """The runtime has no ``sort`` kernel ("Missing operator: aten::sort.values": the program did not load); the
    program ranks with ``topk`` and gives eager's values and indices at another batch and length."""
    model = _Shuffle().eval()
    export = ExecutorchExporter().export(
        model, {"inputs_embeds": torch.randn(2, 5, 4)}, config=ExecutorchConfig(dynamic=True)
    )
    operators, _ = program_contents(export.program)
    assert "aten::topk" in operators and "aten::sort" not in operators
    x = torch.randn(3, 9, 4)
    with torch.no_grad():
        for got, want in zip(export(inputs_embeds=x), model(x), strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)


class _TimeShift(torch.nn.Module):
    """RWKV's time shift (``ZeroPad2d((0, 0, 1, -1))``: one step later, the last step cropped) and a pad that crops
    the first feature and pads two more."""

    def forward(self, inputs_embeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shifted = torch.nn.ZeroPad2d((0, 0, 1, -1))(inputs_embeds)
        return shifted, torch.nn.functional.pad(inputs_embeds, (-1, 2), value=0.5)


def test_negative_pads_crop_as_in_torch() -> None:
    """A negative pad crops in torch; the runtime's kernel refused it ("Padding values must be non-negative", error
    0x12 when run): the program gives eager's values at another batch and length."""
    _matches_eager(_TimeShift(), torch.randn(2, 5, 4), [torch.randn(3, 9, 4)])


class _SelectedRows(torch.nn.Module):
    """Qwen3-ASR's valid frames (``mask.flatten().nonzero().squeeze(-1)``) and Longformer's global tokens
    (``mask.nonzero(as_tuple=True)`` of a 2-D mask): ``nonzero`` returns its indices column by column (strides
    ``(1, n)``), which for one column is a contiguous ``[n, 1]`` and for two a transposed ``[n, 2]``."""

    def forward(self, inputs_embeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mask = inputs_embeds[..., 0] > 0
        frames = mask.flatten().nonzero().squeeze(-1)
        rows, columns = mask.nonzero(as_tuple=True)
        return inputs_embeds.flatten(0, 1)[frames], inputs_embeds[rows, columns] * 2


def test_indices_of_nonzero_keep_their_layout() -> None:
    """The runtime's kernels compare their tensors' dim orders, which ExecuTorch read from strides: a one-column
    ``nonzero`` had the transposed order of its meaningless size-1 stride and was refused beside its squeeze ("2
    input tensors have different dim orders", error 0x12). The program gives eager's rows at another batch and
    length, with one column and two."""
    _matches_eager(_SelectedRows(), torch.randn(2, 5, 4), [torch.randn(3, 9, 4)])


class _Fourier(torch.nn.Module):
    """FNet's token mixing (``fftn`` over the sequence and the features, real part) and Autoformer's autocorrelation
    (``irfft(rfft(q) * conj(rfft(k)))`` over the sequence, of an odd or even length)."""

    def forward(self, inputs_embeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        length = inputs_embeds.shape[1]
        mixed = torch.fft.fftn(inputs_embeds, dim=(1, 2)).real
        spectrum = torch.fft.rfft(inputs_embeds, n=length, dim=1)
        correlation = torch.fft.irfft(
            spectrum * torch.conj(torch.fft.rfft(inputs_embeds * 2, n=length, dim=1)), n=length, dim=1
        )
        return mixed, correlation


def test_fourier_transforms_run_as_products_with_their_matrices() -> None:
    """The runtime has no Fourier transform ("_fft_c2c is not in Core ATen opset"); each axis' transform is a product
    with its cos / sin matrix, built for the axis' size at run time: eager's values at another batch and length."""
    _matches_eager(_Fourier(), torch.randn(2, 6, 4), [torch.randn(2, 6, 4), torch.randn(3, 9, 4)], tolerance=1e-4)


class _Quantiles(torch.nn.Module):
    """Gemma-3n's activation sparsity (a normal quantile of a constant target, ``Normal(0, 1).icdf``) and ``erfinv``
    of values across (-1, 1), tails included."""

    def forward(self, inputs_embeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        normal = torch.distributions.normal.Normal(torch.tensor(0.0), torch.tensor(1.0))
        cutoff = normal.icdf(torch.tensor(0.95, dtype=torch.float32))
        return torch.relu(inputs_embeds * 4 - cutoff), torch.erfinv(inputs_embeds)


def test_erfinv_runs_as_polynomials() -> None:
    """``erfinv`` is outside the core ATen opset ("not in Core ATen opset"); as Giles' polynomials it gives eager's
    values within 1e-5 (5e-7 measured), in the tails too (``1 - x`` and ``1 + x`` apart: ``1 - x * x`` lost 3% there)."""
    tails = torch.tensor([-1.0, -0.9999999, -0.999, -0.99, 0.99, 0.999, 0.9999999, 1.0]).reshape(2, 1, 4)
    other = torch.cat([torch.rand(2, 8, 4) * 2 - 1, tails], dim=1)
    _matches_eager(_Quantiles(), torch.rand(2, 5, 4) * 2 - 1, [other], tolerance=1e-5)


class _StaticTableView(torch.nn.Module):
    """ViTDet's relative positions: a static table viewed with sizes computed from the input's length (symbolic in
    the trace, equal to static ones at every admitted length)."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(64, 8))
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, inputs_embeds: torch.Tensor) -> torch.Tensor:
        rows = inputs_embeds.shape[1] // 8
        grid = self.proj(self.table)[None].view(1, rows, 64 // rows, 8)
        return inputs_embeds + grid.mean((1, 2))[:, None]


def test_a_view_as_dynamic_as_its_static_base_stays_a_copy() -> None:
    """ExecuTorch turns a ``view_copy`` into a view of its base's memory and raised where the view's shape is
    symbolic and its base's static ("_ViewSpec is incompatible with its base on creation"); that view stays a copy,
    with eager's values at another length."""
    _matches_eager(_StaticTableView(), torch.randn(2, 16, 8), [torch.randn(2, 16, 8), torch.randn(3, 20, 8)], 1e-5)


class _ConvolutionStack(torch.nn.Module):
    """What XNNPACK's passes rewrite, and what they look for: a 1-D convolution, batch norms to fuse, activations,
    a PReLU, a bilinear upsampling, a pooling and a concatenation of more inputs than XNNPACK takes at once."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1d, self.norm1d = torch.nn.Conv1d(4, 8, 3, padding=1), torch.nn.BatchNorm1d(8)
        self.conv2d, self.norm2d = torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.BatchNorm2d(8)
        self.prelu, self.pool = torch.nn.PReLU(8), torch.nn.MaxPool2d(2)
        self.upsample = torch.nn.Upsample(scale_factor=2, mode="bilinear")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.norm1d(self.conv1d(x)))
        z = y.unsqueeze(-1).expand(-1, -1, -1, 4).contiguous()
        z = self.pool(self.upsample(self.prelu(self.norm2d(self.conv2d(z)))))
        return torch.cat([z] * 8, dim=1)


def _with_and_without(
    patch: str, counts: list[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, Any]:
    """:class:`_ConvolutionStack` lowered to ExecuTorch from a fixed seed with the patch of
    ``hub_export.backends.executorch.patches`` named ``patch``, then without it: what ``counts`` recorded during each
    lowering. The saved files of the two are asserted to be the same bytes."""
    from contextlib import nullcontext

    from hub_export.backends.executorch import patches

    def lowered(directory: Path) -> tuple[list[Any], dict[str, bytes]]:
        counts.clear()
        torch.manual_seed(0)
        model = _ConvolutionStack().eval()
        export = ExecutorchExporter().export(model, {"x": torch.randn(2, 4, 8)}, config=ExecutorchConfig())
        export.save_pretrained(directory)
        return list(counts), {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}

    with_patch, files = lowered(tmp_path / "with")
    monkeypatch.setattr(patches, patch, nullcontext)
    without, files_without = lowered(tmp_path / "without")
    assert files == files_without
    return with_patch, without


def test_xnnpack_passes_skip_only_the_retraces_that_change_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With ``xnnpack_passes_retrace_changed_graphs`` XNNPACK's passes re-trace the partitions fewer times, and the
    lowering writes the same bytes as without it."""
    from executorch.backends.xnnpack._passes import XNNPACKPassManager
    from executorch.exir.pass_base import ExportPass

    retraces: list[str] = []  # the re-traces of XNNPACK's passes (the edge passes run as before)
    xnnpack_passes: set[str] = set()
    retrace, transform = ExportPass.call, XNNPACKPassManager.transform

    def counted_retrace(self: ExportPass, graph_module: torch.fx.GraphModule) -> object:
        if type(self).__name__ in xnnpack_passes:
            retraces.append(type(self).__name__)
        return retrace(self, graph_module)

    def counted_transform(self: XNNPACKPassManager) -> object:
        xnnpack_passes.update(p.__name__ for p in self.passes)
        return transform(self)

    monkeypatch.setattr(ExportPass, "call", counted_retrace)
    monkeypatch.setattr(XNNPACKPassManager, "transform", counted_transform)

    skipping, every = _with_and_without("xnnpack_passes_retrace_changed_graphs", retraces, tmp_path, monkeypatch)
    # measured: 10 re-traces of 30 over the two partitions (the passes that fused the batch norms and the ReLU,
    # unsqueezed the 1-D convolution and tagged the channels-last layout, and the two that work inside the re-trace)
    assert "FuseBatchNormPass" in skipping and "RemoveGetItemPass" not in skipping
    assert len(skipping) < len(every) and "RemoveGetItemPass" in every


def test_partitions_are_cut_out_with_one_recompile_of_the_program(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With ``partition_graphs_recompiled_once`` the program's graph module is recompiled once after its partitions
    are cut out instead of once per partition, and the lowering writes the same bytes as without it."""
    from executorch.exir.backend import backend_api

    recompiles: list[int] = []  # of the program's graph module, while to_backend cuts its partitions out
    partitioning: list[torch.fx.GraphModule] = []
    recompile, create = torch.fx.GraphModule.recompile, backend_api._create_partitions_in_graph_module

    def counted_recompile(self: torch.fx.GraphModule) -> object:
        if partitioning and self is partitioning[-1]:
            recompiles[-1] += 1
        return recompile(self)

    def watched_create(graph_module: torch.fx.GraphModule, *args: object, **kwargs: object) -> object:
        partitioning.append(graph_module)
        recompiles.append(0)
        try:
            return create(graph_module, *args, **kwargs)
        finally:
            partitioning.pop()

    monkeypatch.setattr(torch.fx.GraphModule, "recompile", counted_recompile)
    monkeypatch.setattr(backend_api, "_create_partitions_in_graph_module", watched_create)

    once, each = _with_and_without("partition_graphs_recompiled_once", recompiles, tmp_path, monkeypatch)
    # the recompile at the end comes after the watched call returns: none inside it (two partitions here)
    assert once == [0] and each == [2]


def test_the_partition_patch_recompiles_and_undoes_itself_when_cutting_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    from executorch.exir.backend import backend_api

    from hub_export.backends.executorch._partitions import partition_graphs_recompiled_once

    graph_module = torch.fx.symbolic_trace(torch.nn.ReLU())
    recompiled: list[str] = []

    def failing(module: torch.fx.GraphModule, *args: object) -> object:
        module.recompile()  # deferred inside: a no-op
        recompiled.append("inside")
        raise RuntimeError("cutting failed")

    recompile = torch.fx.GraphModule.recompile

    def counted(self: torch.fx.GraphModule) -> object:
        recompiled.append("recompile")
        return recompile(self)

    monkeypatch.setattr(torch.fx.GraphModule, "recompile", counted)
    monkeypatch.setattr(backend_api, "_create_partitions_in_graph_module", failing)
    with partition_graphs_recompiled_once():
        with pytest.raises(RuntimeError, match="cutting failed"):
            backend_api._create_partitions_in_graph_module(graph_module)
    assert recompiled == ["inside", "recompile"]  # recompiled once, after: the graph module's code is current
    assert "recompile" not in vars(graph_module)
    assert backend_api._create_partitions_in_graph_module is failing  # the patch is undone
