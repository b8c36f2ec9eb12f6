"""ExecuTorch backend: four tiny models through XNNPACK with dynamic shapes, bounds, delegates and the runner.

Lowering a dynamic program with XNNPACK takes 5-30 s per tiny model on two cores (it grows with the graph), so each
model has one layer per stack and is exported once per module (the ``exports`` fixture caches them); every test of
that model shares the export. T5 (45 s to lower) is covered by the support-matrix benchmark; here only the bounds
it is planned for are checked.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny_models import build, text_inputs

from hub_export import (
    DeviceUnavailableError,
    ExecutorchConfig,
    ExecutorchExporter,
    ExportedModel,
    ExportError,
    InputBoundsError,
)
from hub_export.backends.executorch.io import program_contents
from hub_export.dims import Dim
from hub_export.formats import backend_for
from hub_export.structure import flatten_value

#: A Llama (with its cache) is lowered by tests/test_generation_one_graph.py: one decode program serving the prompt too.
MODELS = ["gpt2", "bert", "vit", "whisper"]
# The upper bounds dynamic=True plans for, from each tiny model's config (batch: ExecutorchExporter.max_batch).
EXPECTED_MAX = {
    "gpt2": {"batch": 8, "sequence": 128},  # n_positions
    "bert": {"batch": 8, "sequence": 128},  # max_position_embeddings
    "vit": {"batch": 8},  # channels, height and width are fixed by the weights and position embeddings
    "whisper": {"batch": 8, "decoder_sequence": 64},  # max_target_positions (frames are fixed by the model)
}
ATOL = 1e-3

Export = tuple[Any, Any, Path]


def _flat(output: Any) -> list[tuple[str, Any]]:
    leaves: list[tuple[str, Any]] = []
    flatten_value(output, (), leaves)
    return leaves


def _max_diff(got: Any, expected: Any) -> float:
    got_leaves, expected_leaves = _flat(got), _flat(expected)
    assert [n for n, _ in got_leaves] == [n for n, _ in expected_leaves]
    return max(float((a - b).abs().max()) for (_, a), (_, b) in zip(got_leaves, expected_leaves))


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Export]:
    """``get(name) -> (case, in-memory export, saved folder)``, exporting each model once for the module."""
    cache: dict[str, Export] = {}

    def get(name: str) -> Export:
        if name not in cache:
            case = build(name, layers=1)
            export = ExecutorchExporter().export(case.model, case.sample, config=ExecutorchConfig(dynamic=True))
            folder = export.save_pretrained(tmp_path_factory.mktemp(name) / "executorch")
            cache[name] = (case, export, folder)
        return cache[name]

    return get


@pytest.mark.parametrize("name", MODELS)
def test_saved_export_matches_eager_within_bounds(exports: Callable[[str], Export], name: str) -> None:
    from executorch.runtime import Program

    case, export, folder = exports(name)
    assert isinstance(export.program, Program)  # the lowered program, written to files and mapped back
    # tied weights (GPT-2's and Whisper's embedding and output projection) go to a .ptd, which stores them once
    named = list(case.model.named_parameters(remove_duplicate=False))
    tied = len({p.untyped_storage().data_ptr() for _, p in named}) < len(named)
    assert sorted(p.name for p in folder.iterdir() if p.name not in ("config.json", "generation_config.json")) == [
        "export.json",
        *(["model.ptd"] if tied else []),
        "model.pte",
    ]
    loaded = ExportedModel.from_pretrained(folder)
    assert isinstance(loaded.program, Program)
    metadata = loaded.components["model"].metadata
    assert metadata.parity["max_abs_diff"] <= ATOL
    assert metadata.extra["backend"] == "xnnpack"
    for inputs in (case.sample, case.other):
        with torch.no_grad():
            expected = case.model(**inputs)
        got = loaded(**inputs)
        assert type(got) is type(expected)
        assert _max_diff(got, expected) <= ATOL
    with torch.no_grad():
        assert _max_diff(export(**case.other), case.model(**case.other)) <= ATOL  # the exported program runs too


@pytest.mark.parametrize("name", MODELS)
def test_manifest_dims_carry_the_planned_upper_bounds(exports: Callable[[str], Export], name: str) -> None:
    _, _, folder = exports(name)
    dims = json.loads((folder / "export.json").read_text())["components"]["model"]["dims"]
    assert {dim: bounds["max"] for dim, bounds in dims.items()} == EXPECTED_MAX[name]
    assert all(bounds["min"] >= 1 for bounds in dims.values())


def test_a_config_without_a_maximum_length_plans_max_sequence() -> None:
    case = build("t5")  # T5's config has no max_position_embeddings: sequences get ExecutorchExporter.max_sequence
    bounds = ExecutorchExporter().dynamic_bounds(case.model, ExecutorchConfig(dynamic=True))
    assert bounds("batch", "input_ids", 0, 2) == (1, 8)
    assert bounds("sequence", "input_ids", 1, 7) == (1, 512)
    assert bounds("decoder_sequence", "decoder_input_ids", 1, 5) == (1, 512)
    assert bounds("sequence", "input_ids", 1, 600) == (1, 600)  # never below the sample's size


def test_input_beyond_a_bound_raises_naming_input_size_and_bound(exports: Callable[[str], Export]) -> None:
    _, _, folder = exports("gpt2")
    loaded = ExportedModel.from_pretrained(folder)
    with pytest.raises(InputBoundsError, match=r"'input_ids' has size 9 on axis 0 \(batch\).*\[1, 8\]"):
        loaded(**text_inputs(9, 5))
    with pytest.raises(InputBoundsError, match=r"'input_ids' has size 129 on axis 1 \(sequence\).*\[1, 128\]"):
        loaded(**text_inputs(1, 129))
    at_bounds = text_inputs(8, 128, seed=3)  # the largest planned input still runs, and correctly
    with torch.no_grad():
        assert _max_diff(loaded(**at_bounds), exports("gpt2")[0].model(**at_bounds)) <= ATOL


def test_saving_a_loaded_program_writes_the_same_pte(exports: Callable[[str], Export], tmp_path: Path) -> None:
    _, _, folder = exports("vit")
    loaded = ExportedModel.from_pretrained(folder)
    assert backend_for("executorch").save_program(loaded.program, tmp_path, "model") == ["model.pte"]
    assert (tmp_path / "model.pte").read_bytes() == (folder / "model.pte").read_bytes()
    resaved = loaded.save_pretrained(tmp_path / "again")
    assert ExportedModel.from_pretrained(resaved)(**build("vit", layers=1).other).logits.shape == (3, 5)


def _locked_kb() -> int:
    """The process's memory locked in RAM (``VmLck``), in kB."""
    lines = Path("/proc/self/status").read_text().splitlines()
    return next(int(line.split()[1]) for line in lines if line.startswith("VmLck:"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="locked memory is read from /proc")
def test_the_parity_runner_goes_with_its_method_and_no_load_locks_pages(exports: Callable[[str], Export]) -> None:
    import resource

    from executorch.runtime import Runtime

    case, _, folder = exports("bert")  # its weights in the .pte: the runtime's own load maps and locks them
    limit, capabilities = resource.getrlimit(resource.RLIMIT_MEMLOCK), _effective_capabilities()
    locked = _locked_kb()
    loaded = ExportedModel.from_pretrained(folder)
    component = loaded.components["model"]
    runner = ExecutorchExporter().parity_runner(component.program, component.metadata)
    with torch.no_grad():
        assert _max_diff(runner(**case.sample), case.model(**case.sample)) <= ATOL
    # the check's method (the delegate's packed weights) is not kept by the program, which the export keeps
    assert component.program._methods == {"forward": None}
    loaded.runners  # noqa: B018 - the runtime maps the files without locking them
    assert _locked_kb() == locked
    assert resource.getrlimit(resource.RLIMIT_MEMLOCK) == limit and _effective_capabilities() == capabilities
    if limit[0] > 1 << 20 or capabilities & (1 << 14):  # this process may lock: the runtime's own load does
        plain = Runtime.get().load_program(folder / "model.pte")
        plain.load_method("forward")
        assert _locked_kb() > locked


def test_a_dropped_parity_runner_frees_its_method_then_trims_the_heap(
    exports: Callable[[str], Export], monkeypatch: pytest.MonkeyPatch
) -> None:
    import weakref

    from hub_export.backends.executorch import runner as runner_module

    case, export, _ = exports("bert")
    component = export.components["model"]
    trims: list[bool] = []
    runner = ExecutorchExporter().parity_runner(component.program, component.metadata)
    with torch.no_grad():
        assert _max_diff(runner(**case.sample), case.model(**case.sample)) <= ATOL
    method = weakref.ref(runner.method)
    # the heap is trimmed once the method (XNNPACK's packed weights) is gone, not before
    monkeypatch.setattr(runner_module, "release_freed_heap", lambda: trims.append(method() is None))
    del runner
    assert method() is None and trims == [True]
    assert component.metadata.parity["max_abs_diff"] <= ATOL  # the export's own check ran


def _effective_capabilities() -> int:
    lines = Path("/proc/self/status").read_text().splitlines()
    return int(next(line.split()[1] for line in lines if line.startswith("CapEff:")), 16)


def test_runner_refuses_another_device(exports: Callable[[str], Export]) -> None:
    case, _, folder = exports("vit")
    loaded = ExportedModel.from_pretrained(folder, device="cuda")
    with pytest.raises(DeviceUnavailableError, match="runs where it was lowered"):
        loaded(**case.sample)
    assert loaded.to("cpu")(**case.sample).logits.shape == (2, 5)


class _MustNotBeTraced(torch.nn.Module):
    """A model whose forward fails: an export that traced it would raise ExportError, not RuntimeError."""

    def forward(self, **kwargs: Any) -> Any:
        raise AssertionError("traced")


@pytest.mark.parametrize("backend, reason", [("cuda", "CUDA"), ("mlx", "Apple Silicon")])
def test_unavailable_delegate_raises_before_tracing(backend: str, reason: str) -> None:
    with pytest.raises(RuntimeError, match=reason) as info:
        config = ExecutorchConfig(backend=backend)
        ExecutorchExporter().export(_MustNotBeTraced(), {"x": torch.ones(2, 3)}, config=config)
    assert isinstance(info.value, DeviceUnavailableError)
    assert f"backend {backend!r}" in str(info.value)


class _PixelHead(torch.nn.Module):
    """A linear head over flattened pixels: explicit dims do not depend on the model (ViT's lowering takes 5x longer)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.head = torch.nn.Linear(3 * 4 * 4, 5)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.head(pixel_values.flatten(1))


def test_explicit_dims_are_honoured_exactly() -> None:
    model = _PixelHead().eval()
    batch = torch.export.Dim("images", min=1, max=4)
    config = ExecutorchConfig(dynamic_shapes={"pixel_values": {0: batch}})
    export = ExecutorchExporter().export(model, {"pixel_values": torch.randn(2, 3, 4, 4)}, config=config)
    assert export.components["model"].metadata.signature.dims == {"batch": Dim("batch", 1, 4)}
    assert export.export_config.to_dict()["dynamic_shapes"]["items"][0][1]["items"][0][1] == {
        "dim": {"name": "images", "min": 1, "max": 4}
    }
    other = torch.randn(3, 3, 4, 4)
    with torch.no_grad():
        assert float((export(pixel_values=other) - model(other)).abs().max()) <= ATOL  # batch 3
    with pytest.raises(InputBoundsError, match=r"'pixel_values' has size 5 on axis 0 \(batch\).*\[1, 4\]"):
        export(pixel_values=torch.randn(5, 3, 4, 4))


def test_a_dim_without_upper_bound_is_refused() -> None:
    case = build("vit", layers=1)
    config = ExecutorchConfig(dynamic_shapes={"pixel_values": {0: torch.export.Dim("images", min=1)}})
    with pytest.raises(ExportError, match=r"dims \['batch'\] have no upper bound"):
        ExecutorchExporter().export(case.model, case.sample, config=config)


def test_outputs_over_the_memory_limit_are_refused_before_lowering(monkeypatch: pytest.MonkeyPatch) -> None:
    """A large vocabulary's logits at the bounds (batch 8 x 4096 tokens x 150k: 20 GB) are refused before the
    minutes of lowering that the memory plan's check would come after."""
    from hub_export.backends.executorch import exporter as module

    def lower(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("lowered although the outputs alone exceed the limit")

    monkeypatch.setattr(module, "_lower", lower)
    exporter = ExecutorchExporter()
    exporter.max_planned_bytes = 8 * 2 * 4 // 2  # the output at the bounds (batch 8 x 2, float32) is twice that
    with pytest.raises(ExportError, match=r"its outputs alone.*batch <= 8"):
        exporter.export(_SplitMul(), {"x": torch.randn(2, 4)}, config=ExecutorchConfig(dynamic=True))


class _SplitMul(torch.nn.Module):
    """``split`` returns a ``Tensor[]``: the edge dtype validator used to pin the batch of such outputs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        left, right = x.split(2, dim=-1)
        return left * right


def test_split_outputs_keep_the_batch_dynamic() -> None:
    export = ExecutorchExporter().export(_SplitMul(), {"x": torch.randn(2, 4)}, config=ExecutorchConfig(dynamic=True))
    assert export.components["model"].metadata.signature.dims["batch"] == Dim("batch", 1, 8)
    x = torch.randn(5, 4)
    assert torch.allclose(export(x=x), _SplitMul()(x))


class _LinearOfInput(torch.nn.Module):
    """``linear`` of a weight given as an input: XNNPACK delegates linears of constant weights only."""

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, weight)


def test_xnnpack_ops_are_kept_with_one_decomposition_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lowering re-traces a program at most twice (functionalize; decompose all but XNNPACK's ops, where any is left),
    not three times; a kept ``linear`` XNNPACK then refuses is lowered again with XNNPACK's node-by-node choice, which
    decomposes it."""
    from executorch.backends.xnnpack.partition.graphs import bilinear_2d, sdpa
    from torch.export.exported_program import ExportedProgram

    sdpa.get_graphs(), bilinear_2d.get_graphs()  # XNNPACK's patterns, decomposed once per process (cached)
    traced: list[str] = []
    run = ExportedProgram.run_decompositions
    monkeypatch.setattr(ExportedProgram, "run_decompositions", lambda *a, **k: traced.append("run") or run(*a, **k))
    with torch.no_grad():
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()).eval()
    config = ExecutorchConfig(dynamic=True)
    export = ExecutorchExporter().export(model, {"input": torch.randn(2, 4)}, config=config)
    assert len(traced) == 1  # functionalized; no op of the table is left to decompose (XNNPACK's three: 3)
    operators, delegates = program_contents(export.components["model"].program)
    assert "XnnpackBackend" in delegates and not {t for t in operators if "linear" in t or "addmm" in t}, operators
    x = torch.randn(5, 4)
    torch.testing.assert_close(export(input=x), model(x), atol=1e-5, rtol=0)

    traced.clear()
    refused = ExecutorchExporter().export(_LinearOfInput(), {"x": torch.randn(2, 4), "weight": torch.randn(3, 4)})
    assert len(traced) >= 1 + 3, traced  # one table, refused; then XNNPACK's three
    weight = torch.randn(3, 4)
    torch.testing.assert_close(refused(x=x[:2], weight=weight), _LinearOfInput()(x[:2], weight), atol=1e-5, rtol=0)


def test_unbounded_sizes_fail_the_lowering_instead_of_planning_the_sample() -> None:
    import executorch.exir.sym_util as sym_util
    from executorch.exir import to_edge_transform_and_lower

    from hub_export.backends.executorch.patches import executorch_patches

    original = sym_util.eval_upper_bound
    program = torch.export.export(_SplitMul(), (torch.randn(3, 4),), dynamic_shapes=({0: torch.export.Dim("n")},))
    with pytest.raises(ExportError, match="has no upper bound"):
        with executorch_patches():
            to_edge_transform_and_lower(program).to_executorch()
    assert sym_util.eval_upper_bound is original  # the patch is undone


class _CountSized(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        count = (x > 0).sum().item()
        torch._check(count >= 0)
        return torch.ones(count) * 2


def test_an_unbounded_size_names_the_op_and_the_model_line_that_made_it() -> None:
    """A size read from the data has no upper bound to plan: the error names the node and the model's source line."""
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

    from hub_export.backends.executorch._bounds import bounds_pass

    program = torch.export.export(_CountSized(), (torch.randn(6),), strict=False)
    edge = to_edge_transform_and_lower(program)
    with pytest.raises(ExportError, match=r"output of .*(ones|full).*test_executorch\.py.*torch\.ones\(count\)"):
        edge.to_executorch(ExecutorchBackendConfig(sym_shape_eval_pass=bounds_pass()))


class _TwoDynamicDimReshapes(torch.nn.Module):
    """A 1D convolution, a ``BatchNorm1d`` (XNNPACK makes it a 1D convolution) and a trailing ``unsqueeze`` on
    ``(batch, length)`` tensors: XNNPACK turns them into reshapes with two dynamic dims, which its serializer refuses
    (CodeGen, Wav2Vec2, HuBERT and Canary failed to lower)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 4, kernel_size=3, stride=2)
        self.norm = torch.nn.BatchNorm1d(4)

    def forward(self, input_values: torch.Tensor) -> torch.Tensor:
        features = self.norm(torch.relu(self.conv(input_values[:, None]))).transpose(1, 2)  # (batch, frames, 4)
        return features * features.mean(-1)[..., None]


def test_reshapes_with_two_dynamic_dims_stay_outside_xnnpack() -> None:
    from executorch.backends.xnnpack.partition.config import gemm_configs, generic_node_configs, node_configs

    originals = (
        gemm_configs.ConvolutionConfig.check_constraints,
        generic_node_configs.UnsqueezeCopyConfig.check_constraints,
        node_configs.BatchNormConfig.check_constraints,
    )
    model = _TwoDynamicDimReshapes().eval()
    config = ExecutorchConfig(
        dynamic_shapes={
            "input_values": {0: torch.export.Dim("batch", min=1, max=4), 1: torch.export.Dim("samples", min=8, max=64)}
        }
    )
    export = ExecutorchExporter().export(model, {"input_values": torch.randn(2, 20)}, config=config)
    targets, _ = program_contents(export.program)
    assert any("convolution" in t for t in targets) and any("unsqueeze" in t for t in targets)  # portable kernels
    assert any("batch_norm" in t for t in targets)
    for shape in [(2, 20), (3, 63), (1, 9)]:
        x = torch.randn(shape)
        with torch.no_grad():
            assert float((export(input_values=x) - model(x)).abs().max()) < 1e-5
    assert (
        gemm_configs.ConvolutionConfig.check_constraints,
        generic_node_configs.UnsqueezeCopyConfig.check_constraints,
        node_configs.BatchNormConfig.check_constraints,
    ) == originals


def test_raw_audio_samples_are_bounded_by_the_frames_planned() -> None:
    from zoo import build as build_zoo

    model = build_zoo("wav2vec2").model  # conv strides (5, 2): 10 samples per frame
    bounds = ExecutorchExporter().dynamic_bounds(model, ExecutorchConfig(dynamic=True))
    assert bounds("samples", "input_values", 1, 400) == (1, 10 * ExecutorchExporter.max_sequence)
    # no strides in the config (Moonshine, Moonshine Streaming): max_audio_seconds at the config's rate, else 16 kHz
    module = torch.nn.Module()
    module.config = type("Config", (), {"sample_rate": 8000})()
    assert ExecutorchExporter().dynamic_bounds(module, ExecutorchConfig(dynamic=True))("samples", "x", 1, 400) == (
        1,
        8000 * ExecutorchExporter.max_audio_seconds,
    )
    # either axis of input_features may be time (Canary's are (batch, frames, mels)): bounded like a sequence
    assert bounds("features", "input_features", 1, 64) == (1, ExecutorchExporter.max_sequence)


class _Boxes(torch.nn.Module):
    """LayoutLM-style inputs: ``bbox`` [batch, sequence, 4] comes first and must match ``input_ids``' sequence."""

    def __init__(self) -> None:
        super().__init__()
        self.words, self.boxes = torch.nn.Embedding(50, 8), torch.nn.Linear(4, 8)

    def forward(self, bbox: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
        return self.boxes(bbox) + self.words(input_ids)


def test_an_axis_without_a_role_does_not_narrow_the_named_dim_it_equals() -> None:
    from hub_export.export.trace import trace

    model, config = _Boxes().eval(), ExecutorchConfig(dynamic=True)
    sample = {"bbox": torch.rand(2, 7, 4), "input_ids": torch.randint(0, 50, (2, 7))}
    traced = trace(model, sample, config, bounds=ExecutorchExporter().dynamic_bounds(model, config))
    # bbox's axis 1 was bounded at its sample size (7), and tracing ties it to the sequence: [1, 7] for both
    assert traced.signature.dims["sequence"].max == ExecutorchExporter.max_sequence
    # the shared dim is named after its role, though bbox (no role of its own) comes first
    assert [spec.shape for spec in traced.signature.inputs] == [("batch", "sequence", 4), ("batch", "sequence")]


class _Codec(torch.nn.Module):
    """An audio codec's encoder: raw audio with channels, ``input_values`` [batch, channels, samples]."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 4, kernel_size=8, stride=4)

    def forward(self, input_values: torch.Tensor) -> torch.Tensor:
        return self.conv(input_values)


class _Perceiver(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(50, 4)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.embed(inputs)


def test_axes_take_their_role_from_the_inputs_rank_and_dtype() -> None:
    """Raw audio with channels (a 3-D ``input_values``: DAC, EnCodec) is bounded as samples, not at the sample's
    length; a 2-D floating ``inputs`` (SpeechEncoderDecoder's audio) likewise, while Perceiver's integer ``inputs``
    keep an axis of their own."""
    from hub_export.export.trace import trace

    model, config = _Codec().eval(), ExecutorchConfig(dynamic=True)
    bounds = ExecutorchExporter().dynamic_bounds(model, config)
    traced = trace(model, {"input_values": torch.randn(2, 1, 400)}, config, bounds=bounds)
    assert traced.signature.inputs[0].shape == ("batch", 1, "samples")
    assert traced.signature.dims["samples"].max == 16_000 * ExecutorchExporter.max_audio_seconds
    perceiver = trace(_Perceiver(), {"inputs": torch.randint(0, 50, (2, 9))}, config, bounds=bounds)
    assert perceiver.signature.inputs[0].shape == ("batch", "inputs_dim1")
    from hub_export.export.roles import shape_roles

    assert shape_roles([("inputs", 2, True), ("inputs_embeds", 3, True)]) == {("inputs", 1): "samples"}
    assert shape_roles([("inputs", 3, True)]) == {}  # features, not raw audio
    # the packed patches beside a grid (Qwen2-VL); PaddleOCR-VL's [patches, channels, patch, patch] keep their own
    assert shape_roles([("pixel_values", 2, True), ("image_grid_thw", 2, False)]) == {("pixel_values", 0): "patches"}
    assert shape_roles([("pixel_values", 4, True), ("image_grid_thw", 2, False)]) == {}


def test_sizes_interval_arithmetic_cannot_bound_are_planned_at_their_exact_maximum() -> None:
    """Mamba-2's chunk size ``padded // (padded // 16)``: sympy's intervals give [0, oo), the planner used to fail."""
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    from torch.utils._sympy.functions import FloorDiv, Mod
    from torch.utils._sympy.numbers import int_oo
    from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

    from hub_export.backends.executorch.patches import upper_bound

    env = ShapeEnv()
    sequence = env.create_symbol(8, ConstantSource("sequence"))
    env.var_to_range[sequence] = ValueRanges(4, 512)
    padded = sequence + Mod(16 - Mod(sequence, 16), 16)
    chunk = FloorDiv(padded, FloorDiv(padded, 16))
    assert bound_sympy(chunk, env.var_to_range).upper is int_oo
    assert upper_bound(env.create_symintnode(chunk, hint=16)) == 16
    assert upper_bound(env.create_symintnode(8 * chunk * FloorDiv(padded, 16), hint=32)) == 8 * 512
    # a divisor that is 0 below 8 (Granite Speech's CTC pooling): those sizes cannot run; the maximum is at 15
    assert upper_bound(env.create_symintnode(FloorDiv(sequence, FloorDiv(sequence, 8)), hint=8)) == 15
    # SEW-D's pooled attention: 4 * b // (4 * b * L**2 // (4 * L**2)) over 7 x 162481 points, a constant 4
    batch = env.create_symbol(2, ConstantSource("batch"))
    samples = env.create_symbol(4000, ConstantSource("samples"))
    env.var_to_range[batch], env.var_to_range[samples] = ValueRanges(2, 8), ValueRanges(1360, 163840)
    frames = FloorDiv(FloorDiv(FloorDiv(FloorDiv(samples, 80) - 3, 2) - 1, 2) - 1, 2) + 1
    pooled = FloorDiv(4 * batch, FloorDiv(4 * batch * frames**2, frames * (4 * frames)))
    assert upper_bound(env.create_symintnode(pooled, hint=4)) == 4
    unbounded = env.create_unbacked_symint().node.expr  # no range: data-dependent
    assert upper_bound(env.create_symintnode(FloorDiv(unbounded, FloorDiv(unbounded, 16)), hint=8)) is None


def test_views_bounded_above_their_base_are_planned_within_it() -> None:
    """A view's dims are bounded one by one: Granite Speech's ``(s, 32)`` blocks viewed as ``(s // 8, s // (s // 8),
    32)`` are bounded 64 x 15 x 32, above the 512 x 32 of the buffer they share; the runtime refused to load the
    program (error 0x21: the view ends past the arena), or let it overlap the next buffer."""
    from executorch.exir.memory import view
    from executorch.exir.passes.replace_view_copy_with_view_pass import _ViewSpec
    from executorch.exir.tensor import TensorSpec
    from torch._dynamo.source import ConstantSource
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    from torch.utils._sympy.value_ranges import ValueRanges

    from hub_export.backends.executorch._bounds import bounds_pass
    from hub_export.backends.executorch.patches import planned_sizes_must_be_bounded

    env = ShapeEnv()
    symbol = env.create_symbol(16, ConstantSource("s"))
    env.var_to_range[symbol] = ValueRanges(4, 512)
    s = env.create_symintnode(symbol, hint=16)
    with FakeTensorMode(shape_env=env):
        base_value, view_value = torch.empty(s, 32), torch.empty(s // 8, s // (s // 8), 32)
    graph = torch.fx.Graph()
    base = graph.placeholder("x")
    base.meta.update(val=base_value, spec=TensorSpec.from_tensor(base_value))
    blocks = graph.call_function(view, (base, [-1, 8, 32]))  # the sizes the pass reads are the specs'
    blocks.meta.update(val=view_value, spec=_ViewSpec(base.meta["spec"], list(view_value.shape)))
    kept = graph.call_function(view, (base, [-1, 4, 8]))  # bounded 512 x 4 x 8: within its base
    kept.meta.update(val=base_value.view(s, 4, 8), spec=_ViewSpec(base.meta["spec"], [s, 4, 8]))
    graph.output((blocks, kept))
    module = torch.fx.GraphModule(torch.nn.Module(), graph)
    with planned_sizes_must_be_bounded():
        bounds_pass()(module)
    assert base.meta["spec"].shape == [512, 32]
    assert blocks.target is view and isinstance(blocks.meta["spec"], _ViewSpec)  # still in its base's buffer
    assert blocks.meta["spec"].shape == [512 * 32, 1, 1]  # as many elements as its base: et_view resizes it
    assert blocks.meta["spec"].nbytes() == base.meta["spec"].nbytes()
    assert kept.target is view and kept.meta["spec"].shape == [512, 4, 8]


def test_symbolic_size_functions_pass_the_edge_verifier_only_inside_the_patch() -> None:
    from executorch.exir.verification import verifier

    from hub_export.backends.executorch.patches import symbolic_functions_admitted

    before = verifier._EXECUTORCH_SYM_OPS
    assert torch.sym_min not in before  # the upstream gap: to_executorch maps them, to_edge's verifier refuses them
    with symbolic_functions_admitted():
        assert {torch.sym_min, torch.sym_max, torch.sym_ite, torch.sym_not} <= verifier._EXECUTORCH_SYM_OPS
    assert verifier._EXECUTORCH_SYM_OPS is before


class _SquaredSize(torch.nn.Module):
    """A size squared (``n ** 2``): MobileViT's unfolding of dynamic image sizes leaves such powers in the graph."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(-1)[None].expand(2, -1).sum(0)[: x.shape[0] ** 2] * 2


def test_integer_powers_of_sizes_are_emitted_as_products() -> None:
    import operator

    from hub_export.backends.executorch.patches import integer_powers_as_products

    dims = {0: torch.export.Dim("n", min=2, max=8), 1: torch.export.Dim("m", min=2, max=8)}
    program = torch.export.export(_SquaredSize(), (torch.randn(3, 3),), dynamic_shapes=(dims,))
    assert any(n.target is operator.pow for n in program.graph.nodes)  # what ExecuTorch's emitter rejects
    assert integer_powers_as_products(program) == 1
    assert not any(n.target is operator.pow for n in program.graph.nodes)
    config = ExecutorchConfig(dynamic_shapes={"x": dims})
    export = ExecutorchExporter().export(_SquaredSize(), {"x": torch.randn(3, 3)}, config=config)  # emitted
    for shape in [(3, 3), (4, 5), (2, 7)]:
        x = torch.randn(shape)
        assert torch.equal(export(x=x), _SquaredSize()(x))


class _PaddedToBlocks(torch.nn.Module):
    """Pads the sequence to a whole number of blocks of 8 with ``-length % 8`` (Granite Speech's block attention)."""

    def forward(self, inputs_embeds: torch.Tensor) -> torch.Tensor:
        padded = torch.nn.functional.pad(inputs_embeds, (0, 0, 0, -inputs_embeds.shape[1] % 8), value=1.0)
        return padded.reshape(padded.shape[0], -1, 8 * padded.shape[2]).sum(-1)


def test_modulo_of_sizes_takes_the_divisors_sign_at_run_time() -> None:
    """The runtime's ``%`` of sizes is C's (``-13 % 8 == -5``): a negative pad, refused, before the rewrite."""
    model = _PaddedToBlocks()
    config = ExecutorchConfig(dynamic=True)
    export = ExecutorchExporter().export(model, {"inputs_embeds": torch.randn(2, 16, 4)}, config=config)
    for shape in [(2, 16, 4), (3, 13, 4), (1, 3, 4)]:
        x = torch.randn(shape)
        assert torch.allclose(export(inputs_embeds=x), model(x), atol=ATOL)


class _Convolutions3d(torch.nn.Module):
    """A patch embedding whose kernel spans every frame it reads (Qwen2-VL's: kernel = stride) and a video
    convolution with overlapping, dilated, padded depth taps and groups."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.patches = torch.nn.Conv3d(3, 8, kernel_size=(2, 4, 4), stride=(2, 4, 4), bias=False)
        self.video = torch.nn.Conv3d(
            8, 4, kernel_size=3, stride=(2, 1, 1), padding=(2, 1, 0), dilation=(2, 1, 1), groups=2
        )

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.video(self.patches(pixel_values))


def test_3d_convolutions_run_as_2d_convolutions_over_the_depth_taps() -> None:
    """Neither XNNPACK nor the runtime's portable kernel runs a 3-D convolution (error 0x12 at the first run):
    the program holds each as 2-D convolutions, one per tap of the kernel's depth, with eager's numbers."""
    from hub_export.backends.executorch._conv3d import conv3d_by_depth_taps

    model = _Convolutions3d().eval()
    x = torch.randn(2, 3, 6, 16, 12)
    export = ExecutorchExporter().export(model, {"pixel_values": x}, config=ExecutorchConfig(dynamic=True))
    with torch.no_grad():
        assert torch.allclose(export(pixel_values=x), model(x), atol=ATOL)
    conv = model.video
    args = (conv.weight, conv.bias, conv.stride, conv.padding, conv.dilation, False, [0, 0, 0], conv.groups)
    y = torch.randn(3, 8, 7, 5, 6)
    with torch.no_grad():
        torch.testing.assert_close(conv3d_by_depth_taps(y, *args), conv(y), rtol=0, atol=1e-5)


def test_dim_orders_of_data_dependent_strides_are_read_by_divisibility() -> None:
    """``32 * u0`` against ``32`` (a row count read from the data: Idefics3's selected images, FastSpeech2's frames):
    upstream guards on the data one way round; both ways give the contiguous order, and concrete strides upstream's."""
    import executorch.exir.tensor as exir_tensor
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode, ShapeEnv

    from hub_export.backends.executorch._dim_order import dim_order_from_stride, dim_orders_by_divisibility

    rows = ShapeEnv().create_unbacked_symint()
    torch._check(rows >= 0)
    assert dim_order_from_stride((32 * rows, 32, 1)) == (0, 1, 2)  # a contiguous (rows, 32) in a batch
    assert dim_order_from_stride((32, 32 * rows, 1)) == (1, 0, 2)
    assert dim_order_from_stride((1, 32, 32 * rows)) == (2, 1, 0)
    with pytest.raises(GuardOnDataDependentSymNode):
        exir_tensor.dim_order_from_stride((32 * rows, 32, 1))
    for stride in ((12, 4, 1), (12, 1, 3), (3, 1, 3, 3), (4, 3, 1, 1), (1, 8, 2)):
        assert dim_order_from_stride(stride) == exir_tensor.dim_order_from_stride(stride), stride
    original = exir_tensor.dim_order_from_stride
    with dim_orders_by_divisibility():
        assert exir_tensor.dim_order_from_stride is dim_order_from_stride
    assert exir_tensor.dim_order_from_stride is original


class _FilledEmpty(torch.nn.Module):
    """DeepSeek-V3's MLA ``expand_kv``: a ``new_empty`` key of the input's batch and length, filled by slices."""

    def forward(self, inputs_embeds: torch.Tensor) -> torch.Tensor:
        batch, length, width = inputs_embeds.shape
        key = inputs_embeds.new_empty((batch, length, 2 * width))
        key[..., :width] = inputs_embeds
        key[..., width:] = inputs_embeds * 2
        return key


def test_an_empty_of_symbolic_size_does_not_pin_the_program_to_the_sample() -> None:
    """``to_edge`` makes an ``empty`` a ``_empty_dim_order`` whose ``int[] size`` pinned every dim to the sample's
    value (DeepSeek-V3 planned for batch 2 x 7 tokens only); as zeros of the size, the dims keep their bounds."""
    model = _FilledEmpty()
    export = ExecutorchExporter().export(
        model, {"inputs_embeds": torch.randn(2, 7, 4)}, config=ExecutorchConfig(dynamic=True)
    )
    dims = export.components["model"].metadata.signature.dims
    assert dims["batch"].max == ExecutorchExporter.max_batch and dims["sequence"].max > 7
    x = torch.randn(3, 11, 4)
    assert torch.equal(export(inputs_embeds=x), model(x))


class _Int32Scatter(torch.nn.Module):
    """GLM-5-Next's top-k attention mask: ``scatter_add`` of an ``int32`` index."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        index = (input_ids % 4).to(torch.int32)
        counts = torch.zeros_like(index).scatter_add(1, index, torch.ones_like(index))
        return counts + torch.gather(index, 1, index)


def test_int32_indices_are_cast_for_the_edge_verifier() -> None:
    """The edge verifier admits only int64 indices for scatter_add / gather ("mismatched dtypes"): cast, same values."""
    model = _Int32Scatter()
    export = ExecutorchExporter().export(
        model, {"input_ids": torch.randint(0, 9, (2, 7))}, config=ExecutorchConfig(dynamic=True)
    )
    x = torch.randint(0, 9, (3, 10))
    assert torch.equal(export(input_ids=x), model(x))


@pytest.mark.parametrize("name", ["falcon", "gpt_neox"])
def test_the_llm_runner_cache_is_sized_as_the_model_writes_it(name: str) -> None:
    """transformers' recipe sizes the static cache from the config: Falcon's multi-query attention writes one
    key/value head, and the tiny GPT-NeoX config carries a ``num_key_value_heads`` its model never reads. The
    program's cache takes each layer's shape from an eager step instead, so the prompt and the steps run as eager's."""
    from zoo import build as build_zoo

    from hub_export.backends.executorch.llm_runner import runner_module

    model = build_zoo(name).model
    ids = torch.tensor([[5, 9, 14, 3, 7]])
    module = runner_module(model, 32, ids[:, :1])
    with torch.no_grad():
        eager = model(input_ids=ids, use_cache=True)
        logits = module(ids, torch.arange(5))
        step = module(torch.tensor([[11]]), torch.tensor([5]))
        eager_step = model(input_ids=torch.tensor([[11]]), past_key_values=eager.past_key_values, use_cache=True)
    heads = eager.past_key_values.layers[0].keys.shape[1]
    assert all(layer.keys.shape[1] == heads for layer in module.cache.layers)
    assert torch.allclose(logits[0, -1], eager.logits[0, -1], atol=1e-5)
    assert torch.allclose(step[0, -1], eager_step.logits[0, -1], atol=1e-5)


def test_the_llm_runner_program_of_a_model_deriving_positions_from_its_cache_lowers() -> None:
    """OPT computes its positions from the cache's fill count (``get_seq_length()``), a value read out of a buffer
    that the lowering could not bound; the program passes them from ``cache_position`` and lowers, checked against
    eager's greedy tokens by the export itself."""
    from zoo import build as build_zoo

    from hub_export.backends.executorch.llm_runner import export_llm_runner

    case = build_zoo("opt", num_hidden_layers=1)
    component = export_llm_runner(ExecutorchExporter(), case.model, dict(case.sample), ExecutorchConfig(dynamic=True))
    assert component.metadata.parity["max_abs_diff"] < 1e-4
