"""Structure trees: how a model's kwargs and outputs map to the flat tensors of a graph, as plain data.

A model is called with kwargs that hold tensors, caches and flags, and returns a ``ModelOutput`` holding
tensors, caches and tuples. Every backend sees one flat graph instead: a tuple of named tensors in, a tuple of
named tensors out. :func:`flatten_value` writes the conversion down as a JSON "structure" tree (no code paths:
classes are bare names resolved through :mod:`hub_export._allowlist`) and :func:`unflatten` rebuilds the value.
:func:`children` is the one place that knows the node grammar; :func:`walk` visits every tensor leaf.

Structure nodes::

    {"type": "tensor", "index": i}                       # position in the flat input or output tuple
    {"type": "none"} | {"type": "constant", "value": v}
    {"type": "tuple" | "list", "items": [node, ...]}
    {"type": "dict", "items": [[key, node], ...]}
    {"type": "model_output", "class": "CausalLMOutputWithPast", "fields": [[key, node], ...]}
    {"type": "cache", "class": "DynamicCache", "layers": [{"key": node, "value": node}, ...]}
    {"type": "cache", "class": "StaticCache", "max_cache_len": n, "layers": [{"key": node, "value": node, "length": node}, ...]}
    {"type": "cache", "class": "EncoderDecoderCache", "layers": [{"decoder": {...}, "encoder": {...}}, ...]}
    {"type": "cache", "class": "DynamicCache", "layers": [{"conv": node, "recurrent": node}, ...]}  # state-space
    {"type": "cache", "class": "DynamicCache", "layers": [{"conv": {"type": "list", "items": [node, ...]}, ...}]}
                                                           # a state-space layer with several states, one item each
    {"type": "cache", "class": "DynamicCache", "layers": [{"key": node, "value": node, "class": "DynamicIndexedLayer",
                                                           "state": [["indexer_keys", node], ...]}, ...]}

A layer's ``state`` holds the tensors (and flags) its class keeps beyond attention keys/values and state-space
conv/recurrent states, by attribute name: the indexer keys of sparse-attention layers, for instance, or the
compressor buffers a model's own layer class declares (rebuilt on the allowed class its parts make). A cache node's
``state`` holds the tensors a model's own ``DynamicCache`` subclass keeps beside its layers (MiniMax's per-layer
linear-attention state), by attribute name too.

Flat tensors are named after their path: ``logits``, ``past_key_values.0.key``, ``hidden_states.2``,
``past_key_values.0.encoder.value``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ._allowlist import IDENTIFIER, LAYER_CLASSES, cache_class, is_model_output, layer_class, resolve_output_class
from .errors import ExportError, ManifestError

__all__ = [
    "CONSTANT_TYPES",
    "children",
    "count_tensors",
    "flatten_value",
    "held_tensors",
    "refuse_own_state_input",
    "unflatten",
    "walk",
]

#: Python values a structure keeps as constants (flags such as ``use_cache``).
CONSTANT_TYPES = (bool, int, float, str, type(None))
#: The parts of one cache layer, by kind: attention, state-space, static (with its fill length).
_LAYER_PARTS = ("key", "value", "length", "conv", "recurrent")


def children(node: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The child nodes of a structure node, each with its key in the path (``items[0]``, ``logits``,
    ``layers[1].decoder.key``). Leaves (tensor, none, constant) have none."""
    kind = node.get("type")
    if kind in ("tuple", "list"):
        return [(f"items[{i}]", n) for i, n in enumerate(node["items"])]
    if kind == "dict":
        return [(str(k), n) for k, n in node["items"]]
    if kind == "model_output":
        return [(str(k), n) for k, n in node["fields"]]
    if kind == "cache":
        found = []
        for i, layer in enumerate(node["layers"]):
            parts = [(p, layer[p]) for p in ("decoder", "encoder")] if "decoder" in layer else [("", layer)]
            for part, entry in parts:
                prefix = f"layers[{i}]" + (f".{part}" if part else "")
                found += [(f"{prefix}.{key}", entry[key]) for key in _LAYER_PARTS if key in entry]
                found += [(f"{prefix}.state.{name}", child) for name, child in entry.get("state", [])]
        return found + [(f"state.{name}", child) for name, child in node.get("state", [])]
    return []


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every tensor leaf of a structure tree, with its path, depth first in flat order."""
    if node.get("type") == "tensor":
        yield path, node
        return
    for key, child in children(node):
        yield from walk(child, f"{path}.{key}" if path else key)


def count_tensors(node: dict[str, Any]) -> int:
    """How many flat tensors a structure node stands for."""
    return sum(1 for _ in walk(node))


#: A layer part of a cache node -> where a transformers cache layer holds its tensor (attribute, state index or None).
_PART_PLACES: dict[str, tuple[str, int | None]] = {
    "key": ("keys", None),
    "value": ("values", None),
    "length": ("cumulative_length", None),
    "conv": ("conv_states", 0),
    "recurrent": ("recurrent_states", 0),
}


def held_tensors(node: dict[str, Any], cache: Any) -> list[Any] | None:
    """The tensors a cache object holds at the tensor leaves of its structure ``node``, in flat order: what
    :func:`flatten_value` would give for it, read without walking it (a runner's fast path for the cache it returned).

    Returns None when ``cache`` no longer has the node's shape (another layer count, a part or state missing).
    """
    try:
        if node["class"] == "EncoderDecoderCache":
            sources = {
                "decoder": cache.self_attention_cache.layers,
                "encoder": cache.cross_attention_cache.layers,
            }
        else:
            sources = {"": cache.layers}
        if any(len(layers) != len(node["layers"]) for layers in sources.values()):
            return None
        found: list[tuple[int, Any]] = []
        for i, entry in enumerate(node["layers"]):
            parts = [(p, entry[p]) for p in ("decoder", "encoder")] if "decoder" in entry else [("", entry)]
            for part, layer_node in parts:
                layer = sources[part][i]
                for key in _LAYER_PARTS:
                    if layer_node.get(key, {"type": "none"})["type"] != "none":
                        attribute, index = _PART_PLACES[key]
                        held = getattr(layer, attribute)
                        if index is not None:  # one state, or a list node of several (by state index)
                            several = layer_node[key]["type"] == "list"
                            held = [held[s] for s in range(len(layer_node[key]["items"]))] if several else held[index]
                        _held_leaves(layer_node[key], held, found)
                for name, child in layer_node.get("state", []):
                    _held_leaves(child, getattr(layer, name), found)
        for name, child in node.get("state", []):
            _held_leaves(child, getattr(cache, name), found)
    except (AttributeError, IndexError, KeyError, TypeError):
        return None
    return [tensor for _, tensor in sorted(found, key=lambda item: item[0])]


def _held_leaves(node: dict[str, Any], value: Any, found: list[tuple[int, Any]]) -> None:
    """Append ``(flat index, tensor)`` for each tensor leaf of ``node`` in ``value`` (dicts of a layer's state are
    keyed by int state indices, recorded as strings)."""
    kind = node.get("type")
    if kind == "tensor":
        found.append((node["index"], value))
    elif kind in ("tuple", "list"):
        if len(value) != len(node["items"]):
            raise IndexError
        for child, item in zip(node["items"], value):
            _held_leaves(child, item, found)
    elif kind == "dict":
        for key, child in node["items"]:
            _held_leaves(child, value[int(key)] if key.isdigit() and int(key) in value else value[key], found)


def _join(path: tuple[str, ...]) -> str:
    return ".".join(path)


def flatten_value(
    value: Any, path: tuple[str, ...], leaves: list[tuple[str, Any]], sizes: set[str] | None = None
) -> dict[str, Any]:
    """Encode ``value`` as a structure node, appending its tensors to ``leaves``.

    ``sizes`` (a model's outputs only): a size the traced code computed from a dynamic dim (a ``SymInt``, such as
    the feature-map height and width some vision models return) is returned as a 0-d int64 tensor, since a graph
    returns tensors; its path is added to ``sizes``, and a plain ``int`` at a path already in ``sizes`` becomes a
    tensor too, so that eager outputs and the traced graph's have the same leaves. Other ints stay constants.

    Raises:
        ExportError: The value holds something that is neither a tensor, a cache, a container nor a constant.
    """
    import torch

    if isinstance(value, torch.Tensor):
        leaves.append((_join(path), value))
        return {"type": "tensor", "index": len(leaves) - 1}
    if sizes is not None and (isinstance(value, torch.SymInt) or (type(value) is int and _join(path) in sizes)):
        sizes.add(_join(path))
        leaves.append((_join(path), torch.scalar_tensor(value, dtype=torch.int64)))  # type: ignore[arg-type]
        return {"type": "tensor", "index": len(leaves) - 1}
    if value is None:
        return {"type": "none"}
    if isinstance(value, CONSTANT_TYPES):
        return {"type": "constant", "value": value}
    if is_model_output(value):
        fields = [[key, flatten_value(item, (*path, key), leaves, sizes)] for key, item in value.items()]
        return {"type": "model_output", "class": type(value).__name__, "fields": fields}
    cls_name = type(value).__name__
    if cls_name == "EncoderDecoderCache":
        decoder, encoder = value.self_attention_cache, value.cross_attention_cache
        layers = []
        for i in range(max(len(decoder.layers), len(encoder.layers))):
            layers.append(
                {
                    "decoder": _flatten_layer(decoder.layers, i, (*path, str(i), "decoder"), leaves),
                    "encoder": _flatten_layer(encoder.layers, i, (*path, str(i), "encoder"), leaves),
                }
            )
        return {"type": "cache", "class": cls_name, "layers": layers}
    if cls_name == "StaticCache":
        return _flatten_static_cache(value, path, leaves)
    if _extends(value, "DynamicCache"):  # a model's own subclass too: the tensors it keeps beside its layers as state
        node = _flatten_dynamic_cache(value, path, leaves)
        state = _own_state(value, {"layers"})
        if state:
            node["state"] = [[name, flatten_value(getattr(value, name), (*path, name), leaves)] for name in state]
        return node
    if isinstance(value, (tuple, list)):
        items = [flatten_value(item, (*path, str(i)), leaves, sizes) for i, item in enumerate(value)]
        return {"type": type(value).__name__ if type(value) in (tuple, list) else "tuple", "items": items}
    if isinstance(value, dict):
        return {
            "type": "dict",
            "items": [[str(k), flatten_value(v, (*path, str(k)), leaves, sizes)] for k, v in value.items()],
        }
    way_out = (  # a model's own cache class (xLSTM's xLSTMCache), outside transformers' Cache hierarchy
        " pass use_cache=False in the sample inputs to export the model without its cache."
        if "cache" in cls_name.lower()
        else ""
    )
    raise ExportError(
        f"{_join(path) or 'value'}: cannot export a {cls_name}; exports take and return tensors, "
        f"DynamicCache/EncoderDecoderCache caches, tuples and constants.{way_out}"
    )


def _flatten_layer(layers: list[Any], i: int, path: tuple[str, ...], leaves: list[tuple[str, Any]]) -> dict[str, Any]:
    layer = layers[i] if i < len(layers) else None
    keys = getattr(layer, "keys", None)
    values = getattr(layer, "values", None)
    if keys is None or values is None or getattr(layer, "is_initialized", True) is False:
        return {"key": {"type": "none"}, "value": {"type": "none"}}
    return {
        "key": flatten_value(keys, (*path, "key"), leaves),
        "value": flatten_value(values, (*path, "value"), leaves),
    }


def _flatten_static_cache(cache: Any, path: tuple[str, ...], leaves: list[tuple[str, Any]]) -> dict[str, Any]:
    """A ``StaticCache``: per layer its preallocated ``key``/``value`` buffers ``[batch, heads, max_cache_len, dim]``
    and ``length`` (the 0-d count of filled positions, ``cumulative_length``); the graph updates all in place."""
    kinds = sorted({type(layer).__name__ for layer in cache.layers} - {"StaticLayer"})
    if kinds:
        raise ExportError(
            f"{_join(path)}: StaticCache layers of type {kinds} cannot be exported; only full-attention StaticLayer."
        )
    lengths = {int(layer.max_cache_len) for layer in cache.layers}
    if len(lengths) != 1:
        raise ExportError(
            f"{_join(path)}: StaticCache layers with different max_cache_len {sorted(lengths)} cannot be exported."
        )
    layers = []
    for i, layer in enumerate(cache.layers):
        node = _flatten_layer(cache.layers, i, (*path, str(i)), leaves)
        if node["key"]["type"] != "none":
            node["length"] = flatten_value(layer.cumulative_length, (*path, str(i), "length"), leaves)
        layers.append(node)
    return {"type": "cache", "class": "StaticCache", "max_cache_len": lengths.pop(), "layers": layers}


def _extends(value: Any, name: str) -> bool:
    """True when ``value`` is an instance of the ``transformers.cache_utils`` class ``name`` or of a subclass of it
    (compared by name and module: the core imports no transformers)."""
    return any(c.__name__ == name and c.__module__ == "transformers.cache_utils" for c in type(value).__mro__)


def _holds_tensor(value: Any, depth: int = 0) -> bool:
    import torch

    if isinstance(value, torch.Tensor):
        return True
    if depth < 3 and isinstance(value, dict):
        return any(_holds_tensor(v, depth + 1) for v in value.values())
    if depth < 3 and isinstance(value, (list, tuple)):
        return any(_holds_tensor(v, depth + 1) for v in value)
    return False


def _own_state(value: Any, kept: set[str]) -> list[str]:
    """The attributes of a cache or cache layer holding tensors outside the parts an export knows (``kept``): the
    state a model's own class declares (compressed entries, buffers, indexer keys, a per-layer linear-attention
    state...), sorted. Plain settings (window sizes, counters, flags) are not state the graph returns."""
    return sorted(
        k for k, v in vars(value).items() if k not in kept and _holds_tensor(v) and not k.endswith(_DERIVED_STATE)
    )


def refuse_own_state_input(value: Any, path: tuple[str, ...]) -> None:
    """Refuse a cache given as an input whose class is a model's own and keeps state of its own: an export returns
    that state (rebuilt on transformers' generic classes) but cannot take it back, since the model's code calls the
    methods of its own class on it.

    Raises:
        ExportError: Naming the class, its state and the way out.
    """
    if not _extends(value, "DynamicCache"):
        return
    found = [(path, value, _own_state(value, {"layers"}))]
    found += [((*path, str(i)), layer, []) for i, layer in enumerate(value.layers)]
    for where, owner, state in found:
        if owner is not value and type(owner).__name__ not in LAYER_CLASSES and not _extends(owner, "DummyLayer"):
            state = _own_state(owner, _KEPT_LAYER_STATE)
        if state:
            raise ExportError(
                f"{_join(where)}: a {type(owner).__name__} keeps state of its own ({', '.join(state)}) that an export "
                "can return but not take back (the model calls its own class's methods on it); export the prompt "
                "step without a cache input."
            )


#: The tensors of a cache layer an export carries (attention keys/values, state-space conv/recurrent states) or
#: that a sliding-window layer derives from its setting (``_sliding_window_tensor``, the window as a tensor).
_KEPT_LAYER_STATE = {"keys", "values", "conv_states", "recurrent_states", "_sliding_window_tensor"}


def _layer_kind(layer: Any, where: tuple[str, ...]) -> str:
    """The layer class an export records for ``layer``: its own when allowed, else the one its parts make (a
    model's own layer class that extends attention or state-space layers without keeping other state).

    Raises:
        ExportError: The layer is static or of an unknown kind.
    """
    kind = type(layer).__name__
    if _extends(layer, "DummyLayer"):
        return "DummyLayer"
    attention, state = _extends(layer, "DynamicLayer"), _extends(layer, "LinearAttentionLayer")
    if _extends(layer, "StaticLayer") or not (attention or state):
        raise ExportError(
            f"{_join(where)}: a {kind} cache layer cannot be exported; exports take dynamic attention layers, "
            "state-space (linear attention) layers and both in one layer."
        )
    if kind in LAYER_CLASSES:
        return kind  # its further state is carried (:func:`_layer_state`)
    # a model's own class: its further state is carried too (:func:`_layer_state`), set on the class its parts make
    if attention and state:
        return "LinearAttentionAndFullAttentionLayer"
    return "DynamicLayer" if attention else "LinearAttentionLayer"


def _flatten_dynamic_cache(cache: Any, path: tuple[str, ...], leaves: list[tuple[str, Any]]) -> dict[str, Any]:
    """A ``DynamicCache``, layer by layer: attention layers give ``key``/``value``; state-space layers
    (``LinearAttentionLayer``: Mamba, linear attention, short convolutions) give their ``conv`` state
    ``[batch, channels, kernel]`` and ``recurrent`` state, of fixed size, updated in place by the graph; hybrid layers
    (``LinearAttentionAndFullAttentionLayer``) give both; a ``DummyLayer`` (a layer keeping no cache) none. A layer
    whose kind its parts do not tell records its class (a hybrid model mixes kinds in one cache: Qwen3-Next, Bamba,
    Jamba, LFM2, Falcon-H1...). A model's own layer class is recorded as the allowed class its parts make
    (:func:`_layer_kind`), with the state its class keeps beyond those parts: the rebuilt cache holds the same
    tensors. A state-space layer with several states (``number_of_states``) gives one ``conv``/``recurrent`` item
    per state."""
    layers = []
    for i, layer in enumerate(cache.layers):
        where = (*path, str(i))
        kind = _layer_kind(layer, where)
        node: dict[str, Any] = {}
        if hasattr(layer, "recurrent_states"):
            count = int(layer.number_of_states)
            for part in ("conv", "recurrent"):
                held = getattr(layer, f"{part}_states")
                states = [held[s] if layer.has_previous_state[s] else None for s in range(count)]
                if count == 1:
                    node[part] = flatten_value(states[0], (*where, part), leaves)
                else:  # several states (Inkling-2's short convolutions): one item per state index
                    items = [flatten_value(t, (*where, part, str(s)), leaves) for s, t in enumerate(states)]
                    node[part] = {"type": "list", "items": items}
        if hasattr(layer, "keys") or not node:
            node.update(_flatten_layer(cache.layers, i, where, leaves))
        state = _layer_state(layer, where, leaves)
        if kind != _default_layer_class(node) or state:
            node["class"] = kind
        if state:
            node["state"] = state
        layers.append(node)
    return {"type": "cache", "class": "DynamicCache", "layers": layers}


#: attributes of a layer's own state a rebuilt layer derives (types and devices)
_DERIVED_STATE = ("dtype", "device")
#: the flags of the attention and state-space parts, which the rebuild sets from those parts
_PART_FLAGS = {"is_initialized", "record_past"}


def _layer_state(layer: Any, where: tuple[str, ...], leaves: list[tuple[str, Any]]) -> list[list[Any]]:
    """The state an allowed layer class keeps beyond its attention and state-space parts, as ``[name, node]``
    pairs: the attributes holding tensors (``indexer_keys``), and the flags that differ from a fresh layer's
    (``is_indexer_initialized``), so that the rebuilt layer continues where the graph left it."""
    extra = {k: getattr(layer, k) for k in _own_state(layer, _KEPT_LAYER_STATE)}
    if not extra:
        return []
    try:
        fresh = vars(type(layer)())
    except TypeError:  # a class whose constructor needs settings: its flags are not recorded
        fresh = {}
    flags = {
        k: v
        for k, v in vars(layer).items()
        if type(v) is bool and k in fresh and fresh[k] != v and k not in _PART_FLAGS
    }
    state = {**extra, **flags}
    return [[name, flatten_value(state[name], (*where, name), leaves)] for name in sorted(state)]


def _set_layer_state(layer: Any, entry: dict[str, Any], tensors: list[Any], where: str) -> None:
    """Set a rebuilt layer's (or cache's) recorded ``state`` (dicts keyed by state index get their int keys back).

    Raises:
        ManifestError: A name is not a public data attribute of the class (a method, a private name, its layers).
    """
    for name, child in entry.get("state", []):
        if (
            not (isinstance(name, str) and IDENTIFIER.match(name))
            or name.startswith("_")
            or name in _KEPT_LAYER_STATE
            or name == "layers"
            or callable(getattr(type(layer), name, None))
            or isinstance(getattr(type(layer), name, None), property)
        ):
            raise ManifestError(f"{where}.state: {name!r} is not a cache attribute an export may set.")
        value = unflatten(child, tensors)
        if isinstance(value, dict):
            value = {int(k) if k.isdigit() else k: v for k, v in value.items()}
        setattr(layer, name, value)


def _default_layer_class(node: dict[str, Any]) -> str:
    """The layer class a cache layer node stands for when it records none: its parts tell (a node with both
    attention and state parts always records its class)."""
    if "conv" in node and "key" in node:
        return ""
    return "LinearAttentionLayer" if "conv" in node else "DynamicLayer"


def _dynamic_cache_from(node: dict[str, Any], tensors: list[Any], where: str) -> Any:
    """Rebuild a ``DynamicCache`` whose layers (of the recorded kinds) hold the given tensors themselves.

    Keys and values are set as they are: ``update`` would copy every key and value (a ``torch.cat`` whose OpenMP
    threads keep spinning and slow the runtime's next call).
    """
    from transformers import DynamicCache

    layers = []
    classes: dict[str, type] = {}  # resolved once per call: a decode step rebuilds the cache each time
    for i, entry in enumerate(node["layers"]):
        name = entry.get("class") or _default_layer_class(entry)
        if name not in classes:
            classes[name] = layer_class(name, f"{where}.layers[{i}].class")
        several = "conv" in entry and entry["conv"].get("type") == "list"
        layer = classes[name](number_of_states=len(entry["conv"]["items"])) if several else classes[name]()
        if "conv" in entry:
            convs, recurrents = unflatten(entry["conv"], tensors), unflatten(entry["recurrent"], tensors)
            if not several:
                convs, recurrents = [convs], [recurrents]
            if not isinstance(convs, list) or not isinstance(recurrents, list) or len(convs) != len(recurrents):
                raise ManifestError(f"{where}.layers[{i}]: conv and recurrent list one item per state.")
            for s, (conv, recurrent) in enumerate(zip(convs, recurrents)):
                if conv is not None:
                    layer.dtype, layer.device = conv.dtype, conv.device
                    layer.conv_states[s], layer.conv_kernel_size[s] = conv, conv.shape[-1]
                    layer.is_conv_states_initialized[s] = True
                if recurrent is not None:
                    layer.recurrent_states[s], layer.is_recurrent_states_initialized[s] = recurrent, True
                layer.has_previous_state[s] = conv is not None or recurrent is not None
        if "key" in entry:
            key, value = unflatten(entry["key"], tensors), unflatten(entry["value"], tensors)
            if key is not None:
                layer.dtype, layer.device = key.dtype, key.device
                layer.keys, layer.values, layer.is_initialized = key, value, True
        _set_layer_state(layer, entry, tensors, f"{where}.layers[{i}]")
        layers.append(layer)
    cache = DynamicCache()  # layers appended on demand past the recorded ones, as a fresh cache does
    cache.layers[:] = layers
    _set_layer_state(cache, node, tensors, where)  # what a model's own cache subclass kept beside its layers
    return cache


def _static_cache(cls: Any, node: dict[str, Any], tensors: list[Any]) -> Any:
    """Rebuild a ``StaticCache`` whose layers hold the given tensors themselves (no copy: in-place updates of
    the graph land in the caller's buffers)."""
    from transformers.cache_utils import Cache, StaticLayer

    cache = cls.__new__(cls)  # StaticCache.__init__ needs the model config only to choose the layer types
    Cache.__init__(cache, layers=[StaticLayer(max_cache_len=int(node["max_cache_len"])) for _ in node["layers"]])
    for layer, entry in zip(cache.layers, node["layers"]):
        key, value = unflatten(entry["key"], tensors), unflatten(entry["value"], tensors)
        if key is None:
            continue
        layer.dtype, layer.device = key.dtype, key.device
        layer.batch_size, layer.num_heads = key.shape[:2]
        layer.k_head_dim, layer.v_head_dim = key.shape[-1], value.shape[-1]
        layer.keys, layer.values = key, value
        layer.cumulative_length = unflatten(entry["length"], tensors)
        layer.is_initialized = True
    return cache


def unflatten(
    node: dict[str, Any], tensors: list[Any], architecture: str | None = None, where: str = "structure"
) -> Any:
    """Rebuild a value from its structure node and flat tensors.

    Raises:
        ManifestError: The node names a class outside the allow-list or is malformed.
    """
    kind = node.get("type")
    if kind == "tensor":
        return tensors[node["index"]]
    if kind == "none":
        return None
    if kind == "constant":
        return node["value"]
    if kind in ("tuple", "list"):
        items = [unflatten(n, tensors, architecture, f"{where}.items[{i}]") for i, n in enumerate(node["items"])]
        return tuple(items) if kind == "tuple" else items
    if kind == "dict":
        return {k: unflatten(n, tensors, architecture, f"{where}.{k}") for k, n in node["items"]}
    if kind == "model_output":
        cls = resolve_output_class(node["class"], architecture, where=f"{where}.class")
        return cls(**{k: unflatten(n, tensors, architecture, f"{where}.{k}") for k, n in node["fields"]})
    if kind == "cache":
        return _unflatten_cache(node, tensors, where)
    raise ManifestError(f"{where}: unknown structure node type {kind!r}.")


def _unflatten_cache(node: dict[str, Any], tensors: list[Any], where: str) -> Any:
    cls = cache_class(str(node.get("class")), where=f"{where}.class")
    if cls.__name__ == "EncoderDecoderCache":
        parts = [{"layers": [layer[part] for layer in node["layers"]]} for part in ("decoder", "encoder")]
        decoder, encoder = (
            _dynamic_cache_from(p, tensors, f"{where}.{n}") for p, n in zip(parts, ("decoder", "encoder"))
        )
        return cls(decoder, encoder)
    if cls.__name__ == "DynamicCache":
        return _dynamic_cache_from(node, tensors, where)
    if cls.__name__ == "StaticCache":
        return _static_cache(cls, node, tensors)
    raise ManifestError(f"{where}: rebuilding a {cls.__name__} from flat tensors is not supported.")
