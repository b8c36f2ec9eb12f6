"""ONNX backend: export, save (model.onnx + model.onnx_data), lazy load, run on ONNX Runtime, errors."""

from __future__ import annotations

import gc
import hashlib
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny_models import CASES, build, text_inputs

from hub_export import ExportedModel, OnnxConfig, OnnxExporter
from hub_export.errors import ConfigError, DeviceUnavailableError, InputError
from hub_export.formats import backend_for
from hub_export.loading import LocalFiles, load_export
from hub_export.manifest import Manifest
from hub_export.structure import flatten_value

ATOL = 1e-4


def flat(output: Any) -> list[tuple[str, torch.Tensor]]:
    leaves: list = []
    flatten_value(output, (), leaves)
    return leaves


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """name -> (case, saved folder, loaded export); each tiny model is exported and saved once. The Llama keeps two
    layers (a decode step's cache names layer 1); the other models have one: their tests make single calls."""
    done: dict[str, tuple[Any, Path, ExportedModel]] = {}

    def get(name: str) -> tuple[Any, Path, ExportedModel]:
        if name not in done:
            case = build(name) if name == "llama" else build(name, layers=1)
            exported = OnnxExporter().export(case.model, case.sample, config=OnnxConfig(dynamic=True))
            assert exported.components["model"].metadata.parity["max_abs_diff"] <= ATOL
            folder = exported.save_pretrained(tmp_path_factory.mktemp(name) / "onnx")
            done[name] = (case, folder, ExportedModel.from_pretrained(folder))
        return done[name]

    return get


@pytest.mark.parametrize("name", list(CASES))
def test_tiny_models_match_eager(name: str, exports: Any) -> None:
    import onnx
    import onnx_ir as ir

    case, folder, loaded = exports(name)
    assert isinstance(loaded.program, ir.Model)
    for inputs in (case.sample, case.other):
        with torch.no_grad():
            expected = case.model(**inputs)
        got = loaded(**inputs)
        assert type(got) is type(expected)
        got_leaves, expected_leaves = flat(got), flat(expected)
        assert [n for n, _ in got_leaves] == [n for n, _ in expected_leaves]
        for (leaf, a), (_, b) in zip(got_leaves, expected_leaves):
            assert a.shape == b.shape, leaf
            assert float((a - b).abs().max()) <= ATOL, (name, leaf)
    onnx.checker.check_model(str(folder / _graph_file(loaded)), full_check=True)


def _graph_file(loaded: ExportedModel, component: str = "model") -> str:
    """The ``.onnx`` file of a component, as its manifest lists it."""
    return loaded.components[component].metadata.files[0].path


def test_files_weights_external_and_listed(exports: Any) -> None:
    import onnx
    from onnx.external_data_helper import uses_external_data

    _, folder, loaded = exports("llama")
    files = loaded.components["model"].metadata.files
    # a causal LM's forward without cache inputs: optimum's name for it (transformers.js must not take it for a
    # generation graph: conventions.py)
    assert [f.path for f in files] == ["decoder_model.onnx", "decoder_model.onnx_data"]
    for entry in files:
        assert entry.sha256 == hashlib.sha256((folder / entry.path).read_bytes()).hexdigest()
    proto = onnx.load(str(folder / "decoder_model.onnx"), load_external_data=False)
    external = 0
    for init in proto.graph.initializer:
        count = int(torch.tensor(list(init.dims), dtype=torch.int64).prod())
        nbytes = onnx.helper.tensor_dtype_to_np_dtype(init.data_type).itemsize * count
        if nbytes >= 1024:
            assert uses_external_data(init), init.name
            location = {e.key: e.value for e in init.external_data}["location"]
            assert location == "decoder_model.onnx_data"  # relative, beside the graph
            external += 1
    assert external > 0
    # the loaded program keeps its weights on disk
    import onnx_ir as ir

    lazy = [v.const_value for v in loaded.program.graph.initializers.values()]
    assert any(isinstance(t, ir.ExternalTensor) for t in lazy)


def test_io_and_dim_names(exports: Any, tmp_path: Path) -> None:
    import onnx

    case, folder, loaded = exports("llama")
    metadata = loaded.components["model"].metadata
    graph = onnx.load(str(folder / _graph_file(loaded)), load_external_data=False).graph
    assert (
        [i.name for i in graph.input] == [s.name for s in metadata.signature.inputs] == ["input_ids", "attention_mask"]
    )
    assert [o.name for o in graph.output] == [s.name for s in metadata.signature.outputs]
    # a cache nothing feeds back keeps the model's name for it: consumers read only present.* as a cache
    assert [o.name for o in graph.output][:3] == ["logits", "past_key_values.0.key", "past_key_values.0.value"]
    # the dims as ONNX's tools name them (transformers.js sizes an empty cache from batch_size)
    assert [d.dim_param for d in graph.input[0].type.tensor_type.shape.dim] == ["batch_size", "sequence_length"]
    # a decode step: the cache output's length is an expression over the named dims
    with torch.no_grad():
        prompt = case.model(**text_inputs(2, 5), use_cache=True)
    step = {
        "input_ids": text_inputs(2, 3, seed=3)["input_ids"],
        "attention_mask": torch.ones(2, 8, dtype=torch.int64),
        "past_key_values": prompt.past_key_values,
    }
    exported = OnnxExporter().export(case.model, step, config=OnnxConfig(dynamic=True))
    exported.save_pretrained(tmp_path / "step")
    # a graph that takes the cache back is model.onnx, with the cache named as transformers.js, optimum and
    # onnxruntime-genai read it: past_key_values.N.* in, present.N.* out
    proto = onnx.load(str(tmp_path / "step" / "model.onnx"), load_external_data=False)
    dims = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in proto.graph.output}
    assert dims["present.0.key"] == ["batch_size", 2, "past_sequence_length + sequence_length", 8]
    inputs = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in proto.graph.input}
    assert inputs["past_key_values.1.value"] == ["batch_size", 2, "past_sequence_length", 8]
    assert inputs["attention_mask"] == ["batch_size", "total_sequence_length"]
    # no exporter symbol (s0, s42) is left anywhere in the graph
    every = [*proto.graph.input, *proto.graph.output, *proto.graph.value_info]
    params = {d.dim_param for v in every for d in v.type.tensor_type.shape.dim if d.dim_param}
    assert not [p for p in params if re.search(r"\bs\d+\b", p) or p.isdigit()], params
    loaded_step = ExportedModel.from_pretrained(tmp_path / "step")
    with torch.no_grad():  # eager updates the cache it is given: each side gets its own
        expected = case.model(**{**step, "past_key_values": case.model(**text_inputs(2, 5)).past_key_values})
        fresh = case.model(**text_inputs(2, 5)).past_key_values
    got = loaded_step(**{**step, "past_key_values": fresh})
    assert max(float((a - b).abs().max()) for (_, a), (_, b) in zip(flat(got), flat(expected))) <= ATOL


def test_wrong_inputs_raise_input_error(exports: Any) -> None:
    case, _, loaded = exports("bert")
    good = dict(case.sample)
    with pytest.raises(InputError, match="Missing input 'input_ids'"):
        loaded(**{k: v for k, v in good.items() if k != "input_ids"})
    with pytest.raises(InputError, match="dtype"):
        loaded(**{**good, "input_ids": good["input_ids"].float()})
    with pytest.raises(InputError, match="rank"):
        loaded(**{**good, "attention_mask": good["attention_mask"][0]})


def test_providers_and_devices(exports: Any) -> None:
    import onnxruntime as ort

    case, folder, _ = exports("bert")
    with pytest.raises(DeviceUnavailableError, match="CUDAExecutionProvider"):
        ExportedModel.from_pretrained(folder, device="cuda")(**case.sample)
    with pytest.raises(DeviceUnavailableError, match="BogusExecutionProvider"):
        ExportedModel.from_pretrained(folder, providers=["BogusExecutionProvider"])(**case.sample)
    with pytest.raises(ConfigError, match="either"):
        ExportedModel.from_pretrained(folder, device="cpu", providers=["CPUExecutionProvider"])(**case.sample)
    with pytest.raises(TypeError, match=r"\['thread_count'\]: neither it nor any format's runner takes them"):
        ExportedModel.from_pretrained(folder, thread_count=2)
    with pytest.raises(ConfigError, match="providers, session_options, intra_op_num_threads, allow_spinning"):
        ExportedModel.from_pretrained(folder, cpu_pinning=True)  # an option of the OpenVINO runner
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    loaded = ExportedModel.from_pretrained(folder, providers=["CPUExecutionProvider"], session_options=options)
    out = loaded(**case.sample)
    session = loaded.runners["model"].session
    assert session.get_providers() == ["CPUExecutionProvider"]
    assert session.get_session_options().intra_op_num_threads == 1
    assert out.logits.shape == (2, 3)


def test_thread_options_and_their_defaults(exports: Any) -> None:
    """Default: one intra-op thread per core this process may use, idle threads sleep; options override that,
    on hub_export's defaults or on a caller's SessionOptions (which is not modified)."""
    import onnxruntime as ort

    from hub_export.backends.onnx.runner import available_cores

    case, folder, _ = exports("bert")
    spinning = "session.intra_op.allow_spinning"
    default = ExportedModel.from_pretrained(folder)
    expected = default(**case.sample).logits
    options = default.runners["model"].session.get_session_options()
    assert options.intra_op_num_threads == available_cores()
    assert options.get_session_config_entry(spinning) == "0"
    tuned = ExportedModel.from_pretrained(
        folder, intra_op_num_threads=1, allow_spinning=True, session_config={"session.dynamic_block_base": "4"}
    )
    assert torch.equal(tuned(**case.sample).logits, expected)
    options = tuned.runners["model"].session.get_session_options()
    assert options.intra_op_num_threads == 1
    assert options.get_session_config_entry(spinning) == "1"
    assert options.get_session_config_entry("session.dynamic_block_base") == "4"
    mine = ort.SessionOptions()
    mine.intra_op_num_threads = 2
    loaded = ExportedModel.from_pretrained(folder, session_options=mine, allow_spinning=False)
    loaded(**case.sample)
    options = loaded.runners["model"].session.get_session_options()
    assert options.intra_op_num_threads == 2 and options.get_session_config_entry(spinning) == "0"
    with pytest.raises(RuntimeError):  # the caller's object is left alone: no entry was added to it
        mine.get_session_config_entry(spinning)
    for bad in ({"intra_op_num_threads": -1}, {"intra_op_num_threads": "2"}, {"allow_spinning": "no"}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            ExportedModel.from_pretrained(folder, **bad)(**case.sample)


def _hf_cache_layout(src: Path, root: Path) -> Path:
    """Copy an export into ``root`` the way huggingface_hub caches it: snapshot symlinks into blobs/."""
    blobs, snapshot = root / "blobs", root / "snapshots" / ("0" * 40) / "onnx"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for file in src.iterdir():
        blob = blobs / hashlib.sha256(file.read_bytes()).hexdigest()
        shutil.copyfile(file, blob)
        (snapshot / file.name).symlink_to(os.path.relpath(blob, snapshot))
    return snapshot


class _CacheSnapshot(LocalFiles):
    """A huggingface_hub cache snapshot: its files are symlinks into ``blobs/`` (see HubFiles)."""

    def read_manifest(self) -> Manifest:
        manifest = Manifest.loads((self.directory / "export.json").read_bytes())
        manifest.check_paths(self.directory, symlinks_into=self.directory.parents[2] / "blobs")
        return manifest


def test_symlinked_export_folder_loads_and_runs(exports: Any, tmp_path: Path) -> None:
    import onnx_ir as ir

    case, folder, _ = exports("gpt2")
    snapshot = _hf_cache_layout(folder, tmp_path / "cache")
    assert (snapshot / "decoder_model.onnx_data").is_symlink()
    component = load_export(_CacheSnapshot(snapshot)).components["model"]
    got = component.runner()(**case.other)
    with torch.no_grad():
        expected = case.model(**case.other)
    assert float((got.logits - expected.logits).abs().max()) <= ATOL
    # the lazy weights still read (onnx_ir refuses a data symlink that leaves the folder unless redirected)
    values = [v.const_value for v in component.program.graph.initializers.values()]
    tensor = next(t for t in values if isinstance(t, ir.ExternalTensor))
    assert tensor.numpy().size > 0
    # and the loaded program saves again as a whole export
    copy = backend_for("onnx").save_program(component.program, tmp_path, "again")
    assert copy == ["again.onnx", "again.onnx_data"]


def test_hub_round_trip_through_the_cache(exports: Any, hub_env: Any) -> None:
    case, folder, _ = exports("vit")
    ExportedModel.from_pretrained(folder).push_to_hub("tester/vit-onnx", endpoint=hub_env.url)
    loaded = ExportedModel.from_pretrained("tester/vit-onnx", subfolder="onnx")
    with torch.no_grad():
        expected = case.model(**case.other)
    assert float((loaded(**case.other).logits - expected.logits).abs().max()) <= ATOL


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def test_loading_keeps_weights_on_disk_until_the_session(tmp_path: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    # ~205 MB of float32 weights, almost all in two 50000 x 512 matrices (embedding and untied lm_head)
    config = LlamaConfig(
        vocab_size=50000,
        hidden_size=512,
        intermediate_size=256,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    inputs = {"input_ids": torch.randint(3, 50000, (1, 8)), "attention_mask": torch.ones(1, 8, dtype=torch.int64)}
    with torch.no_grad():
        expected = model(**inputs).logits
    OnnxExporter().export(model, inputs, config=OnnxConfig()).save_pretrained(tmp_path / "big")
    data_size = (tmp_path / "big" / "decoder_model.onnx_data").stat().st_size
    assert data_size >= 200 * 10**6
    assert (tmp_path / "big" / "decoder_model.onnx").stat().st_size < 10**6
    del model
    gc.collect()
    before = _rss()
    loaded = ExportedModel.from_pretrained(tmp_path / "big")
    after_load = _rss()
    assert after_load - before < 0.25 * data_size, (after_load - before, data_size)
    got = loaded(**inputs)  # the session opens the file now
    after_call = _rss()
    assert float((got.logits - expected).abs().max()) <= ATOL
    assert after_call - before > 0.25 * data_size  # the measurement does see weights once they are read


def test_patches_are_restored_after_export(exports: Any) -> None:
    from torch.onnx._internal.exporter import _fx_passes

    exports("t5")  # needs the view -> reshape patch (pytorch/pytorch#141107)
    assert _fx_passes.insert_type_promotion_nodes.__module__ == "torch.onnx._internal.exporter._fx_passes"


def test_the_optimizer_runs_no_quadratic_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """onnxscript matches a multi-output pattern in nodes x nodes (SlicesSplit: 18 s of a 0.5B export); the
    optimizer runs every default rule but those, and the default set is restored after the export."""
    from onnxscript import rewriter

    defaults = rewriter._DEFAULT_REWRITE_RULES
    multi = [r.name for r in defaults if not r._target_pattern.has_single_output_node]
    assert multi == ["SlicesSplit"]  # what the patch is for: if onnxscript adds one, check its cost
    used: list[list[str]] = []
    original = rewriter.RewritePass.__init__

    def recorded(self: Any, rules: Any) -> None:
        original(self, rules)
        used.append([r.name for r in self.rules.rules])

    monkeypatch.setattr(rewriter.RewritePass, "__init__", recorded)
    case = build("llama", layers=1)
    exported = OnnxExporter().export(case.model, case.sample, config=OnnxConfig(dynamic=True))
    assert exported.components["model"].metadata.parity["max_abs_diff"] <= ATOL
    assert used and all(set(names) == {r.name for r in defaults} - set(multi) for names in used)
    assert rewriter._DEFAULT_REWRITE_RULES is defaults


def test_io_binding_path_matches_numpy_path(exports: Any) -> None:
    # the path CUDA sessions take (and CPU graphs with dtypes numpy lacks), run here on CPU buffers
    case, _, loaded = exports("llama")
    runner = loaded.runners["model"]
    plain = runner(**case.other)
    runner._binding = True
    try:
        bound = runner(**case.other)
    finally:
        runner._binding = False
    for (name, a), (_, b) in zip(flat(bound), flat(plain)):
        assert a.dtype == b.dtype and torch.equal(a, b), name


def test_missing_onnxruntime_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from hub_export.errors import BackendUnavailableError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime" else real(name, *a))
    with pytest.raises(BackendUnavailableError, match=r"hub-export\[onnx\]"):
        OnnxExporter().export(torch.nn.Linear(2, 2), {"input": torch.ones(1, 2)}, config=OnnxConfig())
