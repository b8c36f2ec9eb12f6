"""hub_export.structure: caches of every layer kind flatten to named tensors and rebuild to the same layers."""

from __future__ import annotations

import json
import warnings
from typing import Any

import jsonschema
import pytest
import torch
from tiny_models import seeded, text_inputs
from transformers.cache_utils import (
    DummyLayer,
    DynamicCache,
    DynamicIndexedLayer,
    DynamicLayer,
    DynamicSlidingWindowLayer,
    LinearAttentionAndFullAttentionLayer,
    LinearAttentionAndSlidingWindowAttentionLayer,
    LinearAttentionLayer,
    MtpCache,
    StaticLayer,
)

from hub_export import DynamoConfig, DynamoExporter, ExportedModel, ExportError, ManifestError
from hub_export.manifest import ComponentEntry, Manifest, schema
from hub_export.runner import ModelRunner
from hub_export.signature import Signature, TensorSpec
from hub_export.structure import count_tensors, flatten_value, held_tensors, refuse_own_state_input, unflatten, walk


def _state_layer(layer: LinearAttentionLayer, seed: int) -> LinearAttentionLayer:
    gen = torch.Generator().manual_seed(seed)
    layer.update_conv_state(torch.randn(2, 6, 4, generator=gen))
    layer.update_recurrent_state(torch.randn(2, 3, 5, 5, generator=gen))
    return layer


def _hybrid_cache() -> DynamicCache:
    attention = DynamicLayer()
    attention.update(torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8))
    both = _state_layer(LinearAttentionAndFullAttentionLayer(), 1)
    both.update(torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8))
    cache = DynamicCache()
    cache.layers[:] = [_state_layer(LinearAttentionLayer(), 0), attention, both, DynamicLayer()]
    return cache


def test_a_hybrid_cache_round_trips_layer_by_layer() -> None:
    cache = _hybrid_cache()
    leaves: list = []
    node = flatten_value(cache, ("past_key_values",), leaves)
    assert [name for name, _ in leaves] == [
        "past_key_values.0.conv",
        "past_key_values.0.recurrent",
        "past_key_values.1.key",
        "past_key_values.1.value",
        "past_key_values.2.conv",
        "past_key_values.2.recurrent",
        "past_key_values.2.key",
        "past_key_values.2.value",
    ]
    assert [layer.get("class") for layer in node["layers"]] == [
        None,
        None,
        "LinearAttentionAndFullAttentionLayer",
        None,
    ]
    assert count_tensors(node) == len(leaves) == len(list(walk(node)))
    held = held_tensors(node, cache)  # what the cache holds, read in flat order without flattening it
    assert held is not None and len(held) == len(leaves) and all(a is b for a, (_, b) in zip(held, leaves))
    assert held_tensors(node, DynamicCache()) is None  # another layer count: no longer that shape
    rebuilt = unflatten(node, [t for _, t in leaves])
    assert [type(layer) for layer in rebuilt.layers] == [type(layer) for layer in cache.layers]
    for before, after in zip(cache.layers, rebuilt.layers):
        if hasattr(before, "recurrent_states") and before.has_previous_state[0]:
            assert (
                after.conv_states[0] is before.conv_states[0]
                and after.recurrent_states[0] is before.recurrent_states[0]
            )
        if getattr(before, "keys", None) is not None and before.is_initialized:
            assert after.keys is before.keys and after.values is before.values  # no copies


def test_an_unknown_cache_layer_class_is_refused() -> None:
    node = flatten_value(_hybrid_cache(), ("past_key_values",), [])
    node["layers"][2]["class"] = "QuantoQuantizedLayer"
    with pytest.raises(ManifestError, match="cache layer class 'QuantoQuantizedLayer' is not allowed"):
        unflatten(node, [torch.zeros(1)] * 8)


def test_a_hybrid_model_generates_through_its_attention_and_state_layers(tmp_path) -> None:
    """Bamba mixes Mamba-2 layers (conv/SSM states) and attention layers (keys/values) in one DynamicCache."""
    from transformers import BambaConfig, BambaForCausalLM

    config = BambaConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        mamba_n_heads=4,
        mamba_d_head=16,
        mamba_n_groups=1,
        mamba_d_state=8,
        mamba_expand=2,
        attn_layer_indices=[1],
        pad_token_id=0,
        eos_token_id=2,
    )
    model = seeded(BambaForCausalLM, config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exported = DynamoExporter().export_for_generation(model, text_inputs(2, 7), config=DynamoConfig(dynamic=True))
    folder = exported.save_pretrained(tmp_path / "bamba")
    decode = Manifest.read(folder).components["decode"].signature
    assert [s.name for s in decode.inputs if s.name.startswith("input.")] == [
        "input.past_key_values.0.conv",
        "input.past_key_values.0.recurrent",
        "input.past_key_values.1.key",
        "input.past_key_values.1.value",
    ]
    loaded = ExportedModel.from_pretrained(folder)
    for inputs in (text_inputs(2, 7), text_inputs(3, 11, seed=2)):
        expected = model.generate(**inputs, max_new_tokens=6, do_sample=False)
        assert torch.equal(loaded.generate(**inputs, max_new_tokens=6), expected)


class _BareOutputs(torch.nn.Module):
    """A module returning a plain tensor (``tuple_outputs=False``) or a tuple of two, not a ModelOutput."""

    def __init__(self, tuple_outputs: bool) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.tuple_outputs = tuple_outputs

    def forward(self, x: torch.Tensor):
        y = self.linear(x)
        return (y, y * 2) if self.tuple_outputs else y


@pytest.mark.parametrize("tuple_outputs", [False, True])
@pytest.mark.parametrize("fmt", ["dynamo", "onnx"])
def test_plain_tensor_and_tuple_outputs_save_and_load(fmt: str, tuple_outputs: bool, tmp_path) -> None:
    from hub_export import AutoExportConfig, AutoHfExporter, ExportedModel

    model = _BareOutputs(tuple_outputs).eval()
    config = AutoExportConfig.from_dict({"export_format": fmt, "dynamic": True})
    exported = AutoHfExporter.from_config(config).export(model, {"x": torch.randn(2, 4)}, config=config)
    assert [spec.name for spec in exported.components["model"].metadata.signature.outputs] == (
        ["output.0", "output.1"] if tuple_outputs else ["output"]
    )
    exported.save_pretrained(tmp_path / fmt)
    x = torch.randn(5, 4)
    got, expected = ExportedModel.from_pretrained(tmp_path / fmt)(x=x), model(x)
    if not tuple_outputs:
        got, expected = (got,), (expected,)
    assert isinstance(got, tuple) and len(got) == len(expected)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


class _ModelWindowLayer(DynamicSlidingWindowLayer):
    """A model's own sliding-window layer keeping nothing beyond its keys/values (settings only)."""

    def __init__(self, sliding_window: int) -> None:
        super().__init__(sliding_window=sliding_window)
        self.prefill_length = 3


class _IndexedLayer(DynamicLayer):
    """A model's own layer keeping tensors of its own (indexer keys): exporting it as attention would drop them."""

    def __init__(self) -> None:
        super().__init__()
        self.idx_keys = torch.zeros(2, 1, 5, 4)


def _attention(layer):
    layer.update(torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8))
    return layer


def test_layer_subclasses_and_placeholders_export_as_the_kind_their_parts_make() -> None:
    """Models add their own cache layer classes (transformers registers them per model): they export as the allowed
    class their parts make; a DummyLayer (no cache: shared key/values, MLP-only layers) as itself."""
    cache = MtpCache()  # a DynamicCache subclass keeping no state of its own
    cache.layers[:] = [
        _attention(_ModelWindowLayer(sliding_window=4)),
        DummyLayer(),
        _attention(_state_layer(LinearAttentionAndSlidingWindowAttentionLayer(sliding_window=4), 2)),
    ]
    leaves: list = []
    node = flatten_value(cache, ("past_key_values",), leaves)
    assert node["class"] == "DynamicCache"
    assert [layer.get("class") for layer in node["layers"]] == [
        None,
        "DummyLayer",
        "LinearAttentionAndFullAttentionLayer",
    ]
    assert [name for name, _ in leaves] == [
        "past_key_values.0.key",
        "past_key_values.0.value",
        "past_key_values.2.conv",
        "past_key_values.2.recurrent",
        "past_key_values.2.key",
        "past_key_values.2.value",
    ]
    rebuilt = unflatten(node, [t for _, t in leaves])
    assert [type(layer) for layer in rebuilt.layers] == [DynamicLayer, DummyLayer, LinearAttentionAndFullAttentionLayer]
    assert rebuilt.layers[0].keys is cache.layers[0].keys
    assert rebuilt.layers[2].recurrent_states[0] is cache.layers[2].recurrent_states[0]


def test_a_sparse_attention_layer_carries_its_indexer_keys_and_continues_from_them() -> None:
    """DeepSeek-V3.2 / GLM-MoE-DSA keep indexer keys next to keys and values (DynamicIndexedLayer): they flatten as
    ``state`` named after the attribute, and the rebuilt layer appends the next step's indexer keys to them (its
    ``is_indexer_initialized`` flag comes back too: without it the layer would start over from empty)."""
    layer = _attention(DynamicIndexedLayer())
    layer.update_indexer(torch.randn(2, 5, 4))
    cache = DynamicCache()
    cache.layers[:] = [layer, _attention(DynamicLayer())]
    leaves: list = []
    node = flatten_value(cache, ("past_key_values",), leaves)
    assert [name for name, _ in leaves] == [
        "past_key_values.0.key",
        "past_key_values.0.value",
        "past_key_values.0.indexer_keys",
        "past_key_values.1.key",
        "past_key_values.1.value",
    ]
    assert node["layers"][0]["class"] == "DynamicIndexedLayer"
    assert [name for name, _ in node["layers"][0]["state"]] == ["indexer_keys", "is_indexer_initialized"]
    assert count_tensors(node) == len(leaves) == len(list(walk(node)))
    jsonschema.Draft202012Validator({"$defs": schema()["$defs"], "$ref": "#/$defs/node"}).validate(
        node
    )  # export.json admits it
    rebuilt = unflatten(json.loads(json.dumps(node)), [t for _, t in leaves])
    assert type(rebuilt.layers[0]) is DynamicIndexedLayer and rebuilt.layers[0].indexer_keys is layer.indexer_keys
    step = torch.randn(2, 1, 4)
    assert torch.equal(rebuilt.layers[0].update_indexer(step), torch.cat([layer.indexer_keys, step], dim=1))
    node["layers"][0]["state"][0][0] = "update_indexer"  # a method is not state
    with pytest.raises(ManifestError, match="update_indexer"):
        unflatten(node, [t for _, t in leaves])


class _OwnStateCache(DynamicCache):
    """A model's own cache keeping a tensor per layer beside its layers (MiniMax's linear-attention state)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear_cache: list = [torch.randn(2, 3, 4), []]


def test_state_of_a_models_own_cache_classes_is_carried_out_and_refused_in() -> None:
    """A model's own layer class (DeepSeek-V4's compressor buffers) or cache class (MiniMax's linear-attention state)
    keeping tensors of its own: the output carries them as ``state`` of the class its parts make, rebuilt with the
    same tensors; as an input it is refused naming it (the model would call its own class's methods on it). A layer
    with several state-space states (Inkling-2's four short convolutions) gives one item per state."""
    cache = _OwnStateCache()
    multi = LinearAttentionAndSlidingWindowAttentionLayer(sliding_window=4, number_of_states=3)
    for s in (0, 2):
        multi.update_conv_state(torch.randn(2, 6, 4), state_idx=s)
    cache.layers[:] = [_attention(_IndexedLayer()), _attention(multi)]
    leaves: list = []
    node = flatten_value(cache, ("past_key_values",), leaves)
    assert [name for name, _ in leaves] == [
        "past_key_values.0.key",
        "past_key_values.0.value",
        "past_key_values.0.idx_keys",
        "past_key_values.1.conv.0",
        "past_key_values.1.conv.2",
        "past_key_values.1.key",
        "past_key_values.1.value",
        "past_key_values.linear_cache.0",
    ]
    assert count_tensors(node) == len(leaves) == len(list(walk(node)))
    jsonschema.Draft202012Validator({"$defs": schema()["$defs"], "$ref": "#/$defs/node"}).validate(node)
    held = held_tensors(node, cache)
    assert held is not None and all(a is b for a, (_, b) in zip(held, leaves))
    rebuilt = unflatten(json.loads(json.dumps(node)), [t for _, t in leaves])
    assert rebuilt.layers[0].idx_keys is cache.layers[0].idx_keys and rebuilt.linear_cache[0] is cache.linear_cache[0]
    assert [type(layer) for layer in rebuilt.layers] == [DynamicLayer, LinearAttentionAndFullAttentionLayer]
    assert rebuilt.layers[1].conv_states[2] is multi.conv_states[2] and rebuilt.layers[1].conv_states[1] is None
    again: list = []
    flatten_value(rebuilt, ("past_key_values",), again)
    assert [name for name, _ in again] == [name for name, _ in leaves]
    with pytest.raises(ExportError, match=r"past_key_values: a _OwnStateCache keeps state of its own \(linear_cache\)"):
        refuse_own_state_input(cache, ("past_key_values",))
    cache.linear_cache = []
    with pytest.raises(ExportError, match=r"past_key_values\.0: a _IndexedLayer keeps state .*\(idx_keys\)"):
        refuse_own_state_input(cache, ("past_key_values",))
    static = DynamicCache()
    static.layers[:] = [StaticLayer(max_cache_len=4)]
    with pytest.raises(ExportError, match="a StaticLayer cache layer cannot be exported"):
        flatten_value(static, ("past_key_values",), [])

    class OwnCache:  # a model's own cache class outside transformers' hierarchy (xLSTM's xLSTMCache)
        def __init__(self) -> None:
            self.state = {0: torch.zeros(1)}

    with pytest.raises(ExportError, match=r"cache_params: cannot export a OwnCache; .* pass use_cache=False"):
        flatten_value(OwnCache(), ("cache_params",), [])


def test_a_model_with_cacheless_layers_exports_saves_and_loads_its_cache(tmp_path) -> None:
    """Nemotron-H's MLP layers keep no cache (a DummyLayer in its DynamicCache): the export returns the cache with
    the placeholder in place, export.json admits it, and the loaded export rebuilds the same layers."""
    from transformers import NemotronHConfig, NemotronHForCausalLM

    from hub_export._allowlist import LAYER_CLASSES
    from hub_export.manifest import schema_path

    config = NemotronHConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        layers_block_type=["full_attention", "mlp"],
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        pad_token_id=0,
    )
    model = seeded(NemotronHForCausalLM, config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exported = DynamoExporter().export(model, text_inputs(2, 7), config=DynamoConfig(dynamic=True))
    loaded = ExportedModel.from_pretrained(exported.save_pretrained(tmp_path / "nemotron_h"))
    inputs = text_inputs(3, 5, seed=1)
    with torch.no_grad():
        expected, got = model(**inputs), loaded(**inputs)
    assert [type(layer) for layer in got.past_key_values.layers] == [DynamicLayer, DummyLayer]
    assert torch.allclose(got.logits, expected.logits, atol=1e-4)
    assert torch.equal(got.past_key_values.layers[0].keys, expected.past_key_values.layers[0].keys)
    assert json.loads(schema_path().read_text())["$defs"]["layer_class"]["enum"] == list(LAYER_CLASSES)


class _SpatialSizes(torch.nn.Module):
    """Returns the feature map with its height and width (Python ints in eager, sizes of dynamic dims when traced),
    as MaskFormer's Swin backbone returns ``hidden_states_spatial_dimensions``, and its channel count (fixed)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 2, stride=2)

    def forward(self, pixel_values: torch.Tensor) -> dict[str, object]:
        features = self.conv(pixel_values)
        return {"features": features, "spatial": ((features.shape[2], features.shape[3]),), "channels": 4}


def test_sizes_of_dynamic_dims_are_returned_as_int_tensors(tmp_path) -> None:
    model = _SpatialSizes().eval()
    exported = DynamoExporter().export(
        model, {"pixel_values": torch.randn(2, 3, 8, 12)}, config=DynamoConfig(dynamic=True)
    )
    loaded = ExportedModel.from_pretrained(exported.save_pretrained(tmp_path / "export"))
    other = {"pixel_values": torch.randn(1, 3, 16, 6)}
    for export in (exported, loaded):
        out = export(**other)
        ((height, width),) = out["spatial"]
        assert height.dtype == torch.int64 and height.dim() == 0
        assert (int(height), int(width)) == model(**other)["spatial"][0] == (8, 3)
        assert out["channels"] == 4  # a plain constant stays one
        torch.testing.assert_close(out["features"], model(**other)["features"])


class _AppendingRunner(ModelRunner):
    """A runner whose graph is Python: it returns a sum as logits and every key, value and indexer key it is given
    with one more position (new tensors, as a decode graph returns them); it records what each call received."""

    def __init__(self, metadata: ComponentEntry) -> None:
        super().__init__(metadata)
        self.received: list[list[torch.Tensor]] = []

    def run_flat(self, tensors: list[Any]) -> list[Any]:
        self.received.append(list(tensors))
        grown = [torch.cat([t, t[:, :, -1:] if t.dim() == 4 else t[:, -1:]], dim=-2) for t in tensors]
        return [sum(t.sum() for t in tensors).reshape(1, 1), *grown]


def test_a_layer_with_state_continues_from_its_returned_cache_through_the_fast_path() -> None:
    """A runner feeds a cache it returned back as the flat tensors it built it from, without walking it again (its
    fast path), the state of a layer included (sparse attention's indexer keys); a cache whose state moved on since
    is flattened again."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    def indexed_cache() -> DynamicCache:
        layer = _attention(DynamicIndexedLayer())
        layer.update_indexer(torch.randn(2, 5, 4))
        cache = DynamicCache()
        cache.layers[:] = [layer, _attention(DynamicLayer())]
        return cache

    given: list = []
    node = flatten_value(indexed_cache(), ("past_key_values",), given)
    returned: list = []
    output = flatten_value(
        CausalLMOutputWithPast(logits=torch.zeros(1, 1), past_key_values=indexed_cache()), (), returned
    )
    signature = Signature(
        inputs=tuple(TensorSpec(f"input.{n}", "float32", tuple(f"d{i}" for i in range(t.dim()))) for n, t in given),
        outputs=tuple(TensorSpec(n, "float32", tuple(f"d{i}" for i in range(t.dim()))) for n, t in returned),
        input_structure=(("past_key_values", node),),
        output_structure=output,
    )
    runner = _AppendingRunner(ComponentEntry((), signature, "LlamaForCausalLM", "float32", "cpu"))
    first = runner(past_key_values=indexed_cache()).past_key_values
    assert type(first.layers[0]) is DynamicIndexedLayer
    assert set(runner._known({"past_key_values": first})) == {"past_key_values"}  # fed back as returned
    second = runner(past_key_values=first).past_key_values
    held = [first.layers[0].keys, first.layers[0].values, first.layers[0].indexer_keys]
    assert all(a is b for a, b in zip(runner.received[-1], [*held, first.layers[1].keys, first.layers[1].values]))
    assert torch.equal(second.layers[0].indexer_keys[:, :-1], first.layers[0].indexer_keys)  # continued from it
    assert second.layers[0].indexer_keys.shape == (2, 7, 4)
    second.layers[0].update_indexer(torch.randn(2, 1, 4))  # the state moved on outside the runner
    assert runner._known({"past_key_values": second}) == {}
    third = runner(past_key_values=second).past_key_values  # flattened as any cache: its new indexer keys count
    assert torch.equal(third.layers[0].indexer_keys[:, :-1], second.layers[0].indexer_keys)
