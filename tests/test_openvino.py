"""OpenVINO backend: export, save (openvino_model.xml + .bin), load, run on OpenVINO Runtime, devices, patches."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny_models import CASES, build, llama

from hub_export import ExportedModel, OpenVINOConfig, OpenVINOExporter, formats
from hub_export.errors import BackendUnavailableError, ConfigError, DeviceUnavailableError
from hub_export.formats import backend_for
from hub_export.structure import flatten_value

ATOL = 1e-4


def flat(output: Any) -> list[tuple[str, torch.Tensor]]:
    leaves: list = []
    flatten_value(output, (), leaves)
    return leaves


def max_diff(got: Any, expected: Any) -> float:
    got_leaves, expected_leaves = flat(got), flat(expected)
    assert [n for n, _ in got_leaves] == [n for n, _ in expected_leaves]
    worst = 0.0
    for (leaf, a), (_, b) in zip(got_leaves, expected_leaves):
        assert a.shape == b.shape, leaf
        assert a.dtype == b.dtype, leaf
        worst = max(worst, float((a.double() - b.double()).abs().max()))
    return worst


def param_bytes(model: Any) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """name -> (case, saved folder, loaded export); each tiny model is exported and saved once. The Llama has real
    LLMs' head dim, 128: OpenVINO's CPU plugin gets attention wrong past 64 when an op sits on its output (see
    ``zero_fully_masked_attention_rows``). The other models have one layer: every test here makes single calls."""
    done: dict[str, tuple[Any, Path, ExportedModel]] = {}

    def get(name: str) -> tuple[Any, Path, ExportedModel]:
        if name not in done:
            case = llama(head_dim=128) if name == "llama" else build(name, layers=1)
            exported = OpenVINOExporter().export(case.model, case.sample, config=OpenVINOConfig(dynamic=True))
            assert exported.components["model"].metadata.parity["max_abs_diff"] <= ATOL
            folder = exported.save_pretrained(tmp_path_factory.mktemp(name) / "openvino")
            done[name] = (case, folder, ExportedModel.from_pretrained(folder))
        return done[name]

    return get


@pytest.mark.parametrize("name", list(CASES))
def test_tiny_models_match_eager(name: str, exports: Any) -> None:
    import openvino

    case, folder, loaded = exports(name)
    assert isinstance(loaded.program, openvino.Model)
    assert [f.path for f in loaded.components["model"].metadata.files] == ["openvino_model.xml", "openvino_model.bin"]
    for inputs in (case.sample, case.other):  # `other`: another batch and length, left-padded mask
        with torch.no_grad():
            expected = case.model(**inputs)
        got = loaded(**inputs)
        assert type(got) is type(expected)
        assert max_diff(got, expected) <= ATOL, name


def _xml_ports(xml_path: Path) -> tuple[dict[str, str], set[str]]:
    """Parameter name -> its ``shape`` attribute, and the Results' output names, read from the IR text."""
    root = ET.parse(xml_path).getroot()
    inputs, outputs = {}, set()
    for layer in root.iter("layer"):
        if layer.get("type") == "Parameter":
            port = layer.find("output/port")
            inputs[port.get("names")] = layer.find("data").get("shape")
        elif layer.get("type") == "Result":
            outputs.add(layer.get("output_names"))
    return inputs, outputs


@pytest.mark.parametrize("name", ["llama", "t5", "vit"])
def test_port_names_and_dims_follow_the_manifest(name: str, exports: Any) -> None:
    _, folder, loaded = exports(name)
    metadata = loaded.components["model"].metadata
    inputs, outputs = _xml_ports(folder / "openvino_model.xml")
    assert set(inputs) == {s.name for s in metadata.signature.inputs}
    assert outputs == {s.name for s in metadata.signature.outputs}
    program = loaded.program
    assert [p.get_any_name() for p in program.inputs] == [s.name for s in metadata.signature.inputs]
    assert [p.get_any_name() for p in program.outputs] == [s.name for s in metadata.signature.outputs]
    for spec in metadata.signature.inputs:
        dims = inputs[spec.name].split(",")
        for dim, xml_dim in zip(spec.shape, dims, strict=True):
            if isinstance(dim, int):
                assert xml_dim == str(dim), (spec.name, spec.shape, dims)
            else:  # symbolic: dynamic in the IR, with the traced lower bound
                low = metadata.signature.dims[dim].min
                assert xml_dim == ("?" if low == 0 else f"{low}.."), (spec.name, spec.shape, dims)
    for port, spec in zip(program.outputs, metadata.signature.outputs):
        shape = port.get_partial_shape()
        for axis, dim in enumerate(spec.shape):
            assert shape[axis].is_static == isinstance(dim, int), (spec.name, shape)


def test_weights_stay_float32_unless_compressed(exports: Any, tmp_path: Path) -> None:
    case, folder, loaded = exports("llama")
    fp32_bin = (folder / "openvino_model.bin").stat().st_size
    assert 0.95 <= fp32_bin / param_bytes(case.model) <= 1.1
    assert 'element_type="f16"' not in (folder / "openvino_model.xml").read_text()
    assert loaded.components["model"].metadata.extra == {
        "compress_to_fp16": False,
        "stateful": True,
        "inference_precision": "f32",
    }

    vit = build("vit", layers=1)
    config = OpenVINOConfig(dynamic=True, compress_to_fp16=True)
    compressed = OpenVINOExporter().export(vit.model, vit.sample, config=config)
    out = compressed.save_pretrained(tmp_path / "fp16")
    ratio = (out / "openvino_model.bin").stat().st_size / param_bytes(vit.model)
    assert 0.4 <= ratio <= 0.6
    assert 'element_type="f16"' in (out / "openvino_model.xml").read_text()
    assert compressed.components["model"].metadata.extra["compress_to_fp16"] is True
    reloaded = ExportedModel.from_pretrained(out)
    assert reloaded.export_config.compress_to_fp16 is True
    with torch.no_grad():
        expected = vit.model(**vit.other)
    assert max_diff(reloaded(**vit.other), expected) <= 2e-2  # fp16 weights: close, not exact


def test_cpu_runs_in_float32(exports: Any) -> None:
    import openvino

    case, folder, _ = exports("gpt2")
    on_cpu = ExportedModel.from_pretrained(folder, device="cpu")
    got = on_cpu(**case.other)
    runner = on_cpu.runners["model"]
    assert runner.device == "CPU"
    assert runner.compiled_model.get_property("INFERENCE_PRECISION_HINT") == openvino.Type.f32
    with torch.no_grad():
        assert max_diff(got, case.model(**case.other)) <= ATOL


@pytest.mark.parametrize("device", ["npu", "xpu", "cuda"])
def test_unavailable_device_is_a_clear_error(device: str, exports: Any) -> None:
    import openvino

    case, folder, _ = exports("bert")
    loaded = ExportedModel.from_pretrained(folder, device=device)
    present = device != "cuda" and {"npu": "NPU", "xpu": "GPU"}[device] in "".join(openvino.Core().available_devices)
    if present:  # a machine with that device: it must run there instead
        with torch.no_grad():
            assert max_diff(loaded(**case.sample), case.model(**case.sample)) <= 1e-2
        return
    with pytest.raises(DeviceUnavailableError, match=rf"(?s){device}.*CPU"):
        loaded(**case.sample)


def test_default_device_is_auto_and_compiles_once(exports: Any) -> None:
    case, _, loaded = exports("bert")
    component = loaded.components["model"]
    first, second = component.runner(None), component.runner(None)
    assert first.device == "AUTO"
    assert first.compiled_model is second.compiled_model  # compiled once per program and device
    assert first.request is not second.request
    a = first.run_flat(first.flatten_inputs(case.sample))
    kept = [t.clone() for t in a]
    b = first.run_flat(first.flatten_inputs(case.other))  # another shape through the same request
    assert all(torch.equal(x, y) for x, y in zip(a, kept))  # outputs were copied out of OpenVINO's buffers
    assert a[0].shape != b[0].shape
    with torch.no_grad():
        assert max_diff(loaded(**case.other), case.model(**case.other)) <= ATOL


def test_the_parity_check_reads_the_weights_in_place(exports: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The export's parity runner compiles the large constants as inputs fed their own memory: the CPU plugin then
    holds no repacked copy of the weights (at 1B parameters the check peaked at 1.06x the weights above the model)."""
    import numpy as np

    from hub_export.backends.openvino.runner import OpenVINORunner

    case, _, loaded = exports("gpt2")
    component = loaded.components["model"]
    program, metadata = component.program, component.metadata
    monkeypatch.setattr(OpenVINORunner, "parity_weight_input_bytes", 4096)  # the tiny model's linear weights
    large = [
        op.get_data()
        for op in program.get_ordered_ops()
        if op.get_type_name() == "Constant" and op.get_byte_size() >= 4096 and op.get_element_type().is_real()
    ]
    inputs = len(program.inputs)
    runner = OpenVINORunner.for_parity(program, metadata)
    weights = set(runner._weight_views)
    assert len(runner.compiled_model.inputs) == inputs + len(large) > inputs  # every large float constant is an input
    for view in runner._weight_views.values():  # fed the constants' own memory, not copies
        assert any(np.shares_memory(view.data, data) for data in large)
    shapes = [port.get_partial_shape() for port in runner.compiled_model.inputs if port.get_any_name() in weights]
    # no input of static shape (the plugin gives those memory of their own when compiling: a copy again), but a
    # matrix multiplication's weights keep their output channels (here the tied lm_head's vocabulary)
    assert shapes and all(shape.is_dynamic for shape in shapes)
    vocabulary = case.model.config.vocab_size
    assert any(dim.is_static and dim.get_length() == vocabulary for shape in shapes for dim in shape)
    assert len(program.inputs) == inputs  # the program saved with the export keeps its constants
    with torch.no_grad():
        expected = case.model(**case.other)
    got = runner(**case.other)
    assert max_diff(got, expected) <= ATOL


def test_cpu_threads_are_unpinned_by_default_and_configurable(exports: Any) -> None:
    case, folder, _ = exports("bert")
    default = ExportedModel.from_pretrained(folder, device="cpu")
    expected = default(**case.sample)
    compiled = default.runners["model"].compiled_model
    assert compiled.get_property("ENABLE_CPU_PINNING") is False
    assert str(compiled.get_property("PERFORMANCE_HINT")).endswith("LATENCY")
    tuned = ExportedModel.from_pretrained(folder, device="cpu", num_threads=1, cpu_pinning=True)
    assert max_diff(tuned(**case.sample), expected) == 0
    compiled = tuned.runners["model"].compiled_model
    assert compiled.get_property("INFERENCE_NUM_THREADS") == 1
    assert compiled.get_property("ENABLE_CPU_PINNING") is True
    auto = ExportedModel.from_pretrained(folder, num_threads=1)  # AUTO: the CPU's properties go to the CPU
    assert max_diff(auto(**case.sample), expected) == 0
    for bad in ({"num_threads": 1.5}, {"cpu_pinning": "yes"}, {"config": "LATENCY"}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            ExportedModel.from_pretrained(folder, device="cpu", **bad)(**case.sample)


class _PaddedAttention(torch.nn.Module):
    """The graph shapes the patches fix: an empty-cache ``cat`` (also under ``no_grad``), a ``-1`` reshape, a fully
    masked row, a one-input ``cat`` and a ``squeeze`` of an axis that is not 1 (features kept whole), a check on a
    tensor condition, an output returned twice."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        from transformers.modeling_outputs import BaseModelOutput

        batch, seq = input_ids.shape
        x = self.proj(torch.nn.functional.one_hot(input_ids, 8).float()).view(batch, seq, 2, 4).transpose(1, 2)
        keys = torch.cat([torch.tensor([]), x], dim=-2)  # DynamicCache's first update
        with torch.no_grad():  # the same inside a region traced as a higher-order op's subgraph
            keys = keys + torch.cat([torch.tensor([]), x], dim=-2) * 0
        causal = torch.ones(seq, seq, dtype=torch.bool).tril()
        mask = causal[None, None] & attention_mask.bool()[:, None, None, :]
        torch._check_tensor_all(attention_mask >= 0)  # transformers' torch_compilable_check: aten._is_all_true
        out = torch.nn.functional.scaled_dot_product_attention(x, keys, keys, attn_mask=mask)
        out = torch.cat([out], dim=0).squeeze(0)  # a batch of 1 is not traced: the squeeze removes nothing
        hidden = out.transpose(1, 2).reshape(batch, seq, -1)
        return BaseModelOutput(last_hidden_state=hidden, hidden_states=(hidden,))  # one tensor returned twice


def test_patches_fix_the_graph_and_restore_it() -> None:
    from hub_export.backends.openvino.patches import (
        conversion_patches,
        copies_as_clones,
        distinct_outputs,
        pin_reshape_wildcards,
        skip_empty_cat_inputs,
        zero_fully_masked_attention_rows,
    )
    from hub_export.export.trace import trace
    from hub_export.patches.graph import all_true_checks_as_all

    torch.manual_seed(0)
    model = _PaddedAttention().eval()
    sample = {"input_ids": torch.randint(0, 8, (1, 5)), "attention_mask": torch.ones(1, 5, dtype=torch.long)}
    program = trace(model, sample, OpenVINOConfig(dynamic=True)).program
    assert any(isinstance(m, torch.fx.GraphModule) for m in program.graph_module.children())  # the no_grad region
    before = program.graph_module.code
    patches = (skip_empty_cat_inputs, pin_reshape_wildcards, zero_fully_masked_attention_rows, all_true_checks_as_all)
    for patch, least in zip((*patches, copies_as_clones, distinct_outputs), (2, 1, 1, 1, 2, 1)):
        with patch(program) as count:
            assert count >= least, patch.__name__
            assert program.graph_module.code != before
        assert program.graph_module.code == before, patch.__name__
    padded = {"input_ids": torch.randint(0, 8, (3, 6)), "attention_mask": torch.ones(3, 6, dtype=torch.long)}
    padded["attention_mask"][0, :2] = 0  # rows 0-1 of entry 0 see no key at all
    with torch.no_grad():
        expected = model(**padded)
    with conversion_patches(program), torch.no_grad():  # same semantics as the original graph
        patched = program.module()(padded["input_ids"], padded["attention_mask"])
    torch.testing.assert_close(patched[0], expected.last_hidden_state, rtol=0, atol=1e-6)

    exported = OpenVINOExporter().export(model, sample, config=OpenVINOConfig(dynamic=True))
    got = exported(**padded)
    assert not got.last_hidden_state.isnan().any()
    assert max_diff(got, expected) <= ATOL


class _WindowPartition(torch.nn.Module):
    """Swin's window partition of a bounded width (a position table bounds Swin's): padded to a multiple of the
    window and reshaped into windows; a power of a size (GPT-NeoX-Japanese) and a comparison of sizes."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows, cols = x.shape
        torch._check(cols <= 32)
        half = (cols + 1) // 2
        windows = torch.nn.functional.pad(x, (0, 2 * half - cols)).view(rows, half, 2)
        return windows.sum(-1) * cols**2 + (cols > 4)


def test_size_arithmetic_of_bounded_sizes_follows_python() -> None:
    """``(cols + 1) % 2`` of cols in [2, 32]: OpenVINO's bounds of ``FloorMod`` (both 1) made the CPU plugin fold
    it to 1, so 17 columns made 8 windows; ``**`` and ``>`` of sizes had no conversion rule."""
    model = _WindowPartition()
    exported = OpenVINOExporter().export(model, {"x": torch.randn(2, 16)}, config=OpenVINOConfig(dynamic=True))
    for cols in (2, 3, 16, 17, 31, 32):
        x = torch.randn(3, cols)
        torch.testing.assert_close(exported(x=x), model(x), rtol=0, atol=0)


class _IndexAdd(torch.nn.Module):
    def forward(self, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        rows = torch.zeros(4, x.shape[1]).index_add(0, index, x) + torch.zeros(4, x.shape[1]).index_add(
            0, index, x, alpha=2
        )
        return rows + x.t().index_add(1, index, x.t())[:, :4].t()


def test_index_add_converts_with_its_default_alpha() -> None:
    """``index_add`` traced without its default ``alpha`` (JetMoE): the frontend's rule required it; and with another
    ``alpha``, which the Python context cannot read, on another axis."""
    model = _IndexAdd()
    sample = {"x": torch.randn(5, 3), "index": torch.tensor([0, 1, 1, 3, 0])}
    exported = OpenVINOExporter().export(model, sample, config=OpenVINOConfig(dynamic=True))
    other = {"x": torch.randn(7, 6), "index": torch.tensor([0, 1, 1, 3, 0, 2, 2])}
    torch.testing.assert_close(exported(**other), model(**other), rtol=0, atol=1e-5)


def test_top_k_keeps_the_lower_index_among_equal_values() -> None:
    """ONNX's rule (and ``sort(stable=True)``'s): the CPU plugin's unstable TopK returned 102, 101, 100, 103."""
    import openvino

    from hub_export.backends.openvino.patches import stable_top_k

    class TopK(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            return torch.topk(x, 5).indices, torch.topk(x, x.shape[-1] // 50, largest=False).indices

    x = torch.zeros(2, 300)
    x[:, 7], x[:, 100:120] = 1.0, 0.5
    program = torch.export.export(TopK(), (x,), dynamic_shapes=({1: torch.export.Dim("n", min=100, max=1000)},))
    model = openvino.convert_model(program)
    assert stable_top_k(model) == 2
    compiled = openvino.Core().compile_model(model, "CPU")
    for size in (300, 450):
        y = torch.cat([x, torch.full((2, size - 300), 0.5)], -1)
        top, bottom = compiled(y.numpy()).values()
        assert top.tolist() == torch.sort(y, descending=True, stable=True).indices[:, :5].tolist()
        assert bottom.tolist() == torch.sort(y, stable=True).indices[:, : size // 50].tolist()


def test_the_parity_check_reads_convolution_weights_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parity runner's weight inputs keep a convolution's static shape (the CPU plugin refuses dynamic ones)."""
    from hub_export.backends.openvino.runner import OpenVINORunner

    monkeypatch.setattr(OpenVINORunner, "parity_weight_input_bytes", 256)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv1d(4, 8, 3), torch.nn.ConvTranspose1d(8, 4, 3)).eval()
    exported = OpenVINOExporter().export(model, {"input": torch.randn(1, 4, 9)}, config=OpenVINOConfig(dynamic=True))
    x = torch.randn(2, 4, 13)
    with torch.no_grad():
        torch.testing.assert_close(exported(input=x), model(x), rtol=0, atol=ATOL)


def test_missing_openvino_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = backend_for("openvino")
    monkeypatch.setitem(
        formats._BACKENDS, "openvino", dataclasses.replace(backend, packages=("hub_export_no_such_package",))
    )
    case = build("bert")
    with pytest.raises(BackendUnavailableError, match=r"hub-export\[openvino\]"):
        OpenVINOExporter().export(case.model, case.sample, config=OpenVINOConfig(dynamic=True))


def test_sizes_seen_at_the_sample_stay_symbolic_through_conversion() -> None:
    """``convert_model``'s re-trace guarded ``n > 1`` and ``n - 1 < 2`` (the gaps' metadata) at the sample's 2,
    which made ``n`` the constant 2: 3 inputs gave numbers scaled by 2 (cosmos3_omni, cohere_compass: 2 images).

    The first input is read by nothing: the frontend drops its Parameter and gave the shapes by position to the
    inputs left ("Incompatible shape was requested for input #0 ... update shape: [?,?,?]": Idefics3's vision tower,
    VisionEncoderDecoder, PP-FormulaNet). Each input keeps its own shape, the unread one is still an input."""

    class Gaps(torch.nn.Module):
        def forward(self, unread: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
            x = lengths.float()
            return torch.cat([x[1:] - x[:-1], x]) * x.shape[0]

    model = Gaps()
    sample = {"unread": torch.ones(1, 2, 3), "lengths": torch.tensor([4, 9])}
    exported = OpenVINOExporter().export(model, sample, config=OpenVINOConfig(dynamic=True))
    ranks = {port.get_any_name(): port.get_partial_shape().rank.get_length() for port in exported.program.inputs}
    assert ranks == {"unread": 3, "lengths": 1}
    other = torch.tensor([4, 9, 16])
    got = exported(unread=torch.ones(2, 1, 4), lengths=other)
    torch.testing.assert_close(got, model(None, other), rtol=0, atol=0)


class _MissingOps(torch.nn.Module):
    """Ops OpenVINO's frontend lacks or refuses: ceil-mode pools with a kernel over the input (global, padded,
    padding not counted, a divisor), ``fft``/``ifft``/``fftn``/``rfft``/``irfft``/``conj``, ``polar``,
    ``scatter_reduce``, ``unfold`` of dynamic sizes, ``cummax``, attention with ``enable_gqa``, ``div`` with
    ``rounding_mode=None``."""

    def __init__(self) -> None:
        super().__init__()
        pool = torch.nn.AvgPool2d
        self.pools = torch.nn.ModuleList(
            [
                pool(8, ceil_mode=True),
                pool(3, 4, 1, ceil_mode=True),
                pool(3, 3, 1, ceil_mode=True, count_include_pad=False),
                pool((2, 3), 3, ceil_mode=True, divisor_override=5),
            ]
        )

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> Any:
        fourier = torch.fft.fftn(x, dim=(2, 3)).real + torch.fft.ifft(torch.fft.fft(x, dim=-1), dim=2).imag
        spectrum = torch.fft.rfft(x[..., :6], dim=-1)
        correlation = torch.fft.irfft(spectrum * torch.conj(spectrum), n=6, dim=-1)
        angle = ids.float()[:, :, None] * torch.arange(4.0)
        rotary = torch.polar(torch.ones_like(angle), angle) * torch.view_as_complex(torch.stack([angle, -angle], -1))
        slots = (x > 0).long() * 3  # rows 0 and 3 of 4 (1 and 2 keep their zeros when the input is not counted)
        base = torch.zeros(*x.shape[:2], 4, x.shape[3])
        maxima = base.scatter_reduce(2, slots, x, "amax", include_self=False)
        sums = base.scatter_reduce(2, slots[:, :, :2], x, "sum")  # the part of ``x`` the index covers
        pooled = (p(x) for p in self.pools)
        windows = (x.unfold(2, 2, 1), x.unfold(-1, 3, 2))
        running = (ids.cummax(1).values, x.cummax(2).values)
        grouped = torch.nn.functional.scaled_dot_product_attention(x, x[:, :1], x[:, :1] * 2, enable_gqa=True)
        quotient = torch.div(x, x.abs() + 1, rounding_mode=None)
        rotary = torch.view_as_real(rotary)
        return (*pooled, fourier, correlation, rotary, maxima, sums, *windows, *running, grouped, quotient)


def test_missing_ops_are_rewritten_with_the_same_numbers() -> None:
    """``polar``, ``fft`` ops and ceil-mode pools with a kernel over the input (EfficientNet's global pool) become
    standard ops (exact on the traced graph, restored after) that OpenVINO converts and runs at other sizes;
    ``scatter_reduce`` gets a conversion rule."""
    import openvino

    from hub_export.backends.openvino._index_rewrites import index_rewrites
    from hub_export.backends.openvino._op_rewrites import ceil_pools_as_sums, fft_as_matmuls, polar_as_complex
    from hub_export.backends.openvino.patches import conversion_patches
    from hub_export.export.trace import trace

    torch.manual_seed(0)
    model = _MissingOps()
    sample = {"x": torch.randn(2, 2, 7, 9), "ids": torch.arange(5).repeat(2, 1) * 3}
    program = trace(model, sample, OpenVINOConfig(dynamic=True)).program
    before = program.graph_module.code
    others = [
        (torch.randn(2, 2, 10, 9), torch.arange(7).repeat(2, 1)),
        (torch.randn(3, 2, 3, 9), torch.arange(3).repeat(3, 1)),
    ]
    x, ids = others[0]
    with torch.no_grad():
        expected = model(x, ids)
    with polar_as_complex(program) as polars, fft_as_matmuls(program) as ffts, ceil_pools_as_sums(program) as pools:
        assert (polars, ffts, pools) == (1, 6, 4)
        with index_rewrites(program) as (unfolds, cummaxes, attentions):
            assert (unfolds, cummaxes, attentions) == (2, 2, 1)
            with torch.no_grad():
                patched = program.module()(x, ids)
    assert program.graph_module.code == before
    for got, want in zip(patched, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)

    with conversion_patches(program):  # the conversion the exporter runs, on the same program
        converted = openvino.convert_model(program)
    compiled = openvino.Core().compile_model(converted, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    for x, ids in others:
        with torch.no_grad():
            want = model(x, ids)
        for got_leaf, want_leaf in zip(compiled([x.numpy(), ids.numpy()]).values(), want, strict=True):
            torch.testing.assert_close(torch.from_numpy(got_leaf), want_leaf, rtol=0, atol=1e-5)
