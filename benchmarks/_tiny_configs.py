"""Tiny configs and sample inputs for every architecture of transformers' auto mappings (``coverage.py --all``).

Nothing here is hand-picked per architecture except :data:`OVERRIDES` (each entry with the reason the shrinker
cannot know it):

* :func:`enumerate_architectures` lists every model type of the covered auto mappings with the head it is
  exported with (the first of :data:`HEADS` that maps the type; AutoModel, "feature-extraction", as the fallback)
  and, where the type cannot run here, the reason it is skipped.
* :func:`tiny_config` starts from the config class's defaults and shrinks every size field it recognises by name
  (hidden/intermediate sizes, layers with their per-layer type lists, heads and key/value heads kept consistent,
  head dims, vocab and the special token ids, positions, image/patch/window sizes, audio feature sizes, experts,
  LoRA ranks...), recursively through nested sub-configs (text/vision/audio/encoder/decoder/backbone...).
* :func:`build_case` builds the model with random weights and finds sample inputs from the model's main input
  name and config, using eager PyTorch as the oracle: candidate layouts are tried in order and the first one the
  model runs is kept (and the "other" inputs, another batch and length, fall back to another batch at the same
  length when the model pins its length). Placeholder token counts of image-text-to-text models are read from the
  model's own mismatch error.

The harness is split by concern: ``_tiny_enumerate`` (the types and their heads, skip reasons),
``_tiny_overrides`` (the per-type table), ``_tiny_fields`` (field names and target sizes), ``_tiny_shrink`` (the
shrinker), ``_config_backoff`` (the config classes' validators), ``_tiny_adjust`` (fixes read from the model's
errors), ``_tiny_inputs`` and ``_sample_inputs`` (sample inputs), ``_tiny_missing`` (inputs the forward asks for by
its error, built from the shapes its docstring documents); this module builds the case.

Run it directly to probe builds: ``python benchmarks/_tiny_configs.py [model_type ...]``.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

from _sample_inputs import _get
from _tiny_adjust import _SIZE_BACKOFFS, _adjustment, _is_size
from _tiny_enumerate import HEADS, Arch, BuildSkip, _one_line, arch_of, enumerate_architectures, skip_reason
from _tiny_fields import _LAYER_KEYS, _int
from _tiny_inputs import (
    _audio_feature_inputs,
    _complete,
    _decoder_inputs,
    _eager,
    _extras,
    _first_running,
    _grid_pixels,
    _Ids,
    _image_inputs,
    _image_like,
    _ones,
    _own_cache_class,
    _params,
    _patch_positions,
    _required,
    _same_layout,
    _text,
    _vlm_inputs,
    _wanted_length,
    _waveform_inputs,
    _with_decoder,
)
from _tiny_overrides import OVERRIDES
from _tiny_random import break_ties, check_finite, fix_randomness
from _tiny_shrink import _min_vocab, _remap_ids, _shrink, _special_ids

__all__ = [
    "HEADS",
    "OVERRIDES",
    "Arch",
    "BuildSkip",
    "arch_of",
    "Case",
    "build_case",
    "enumerate_architectures",
    "skip_reason",
    "tiny_config",
]


@dataclass
class Case:
    """A built architecture: the model, the inputs to export with, other inputs, notes on how they were found."""

    name: str
    model: Any
    sample: dict[str, Any]
    other: dict[str, Any]
    head: str = ""
    notes: list[str] = field(default_factory=list)


def tiny_config(
    model_type: str, adjustments: list[Any] = (), config_cls: Any = None, notes: list[str] | None = None
) -> Any:
    """The config class's defaults with every recognised size field shrunk (plus :data:`OVERRIDES`, then the
    ``adjustments``: functions of the shrunk dict that :func:`build_case` derives from the model's own errors).
    ``config_cls``: the head's own config class where it is a sub-config of the type's (MusicGen's decoder).

    The result is validated by the config class's own validators; a refusal is read and fixed by rule, or the
    fields it names are backed off to their defaults (``_config_backoff.construct``; ``notes`` receives each fix).
    """
    from _config_backoff import construct
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config_cls = config_cls or CONFIG_MAPPING[model_type]
    notes = notes if notes is not None else []
    default = _defaults(model_type, config_cls, notes)
    derived = _derived_layer_counts(config_cls, default)
    adjustments = [*derived, *adjustments]
    shrunk = _tiny_dict(default, adjustments)
    return construct(
        lambda d: config_cls.from_dict(copy.deepcopy(d)),
        shrunk,
        default=default,
        unshrunk=lambda: _tiny_dict(default, adjustments, keep_layers=True),
        notes=notes,
    )


def _defaults(model_type: str, config_cls: Any = None, notes: list[str] | None = None) -> dict[str, Any]:
    """The config class's defaults as a dict (towers the defaults leave out filled with their own defaults;
    defaults the class's own validators refuse fixed from the refusal)."""
    from _config_backoff import construct
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config_cls = config_cls or CONFIG_MAPPING[model_type]
    try:
        default = config_cls().to_dict()
    except Exception:  # noqa: BLE001 - defaults the class's own validators refuse: fix them from the refusal
        subs = {}
        specs = getattr(config_cls, "sub_configs_defaults", {}) or {}
        for key, sub_cls in getattr(config_cls, "sub_configs", {}).items():
            spec = specs.get(key)
            if getattr(spec, "model_type", None) in CONFIG_MAPPING:  # an AutoConfig slot: its default type
                sub_cls = CONFIG_MAPPING[spec.model_type]
            try:
                subs[key] = sub_cls(**(getattr(spec, "init_kwargs", None) or {})).to_dict()
            except Exception:  # noqa: BLE001 - left to the class's own default
                pass
        default = construct(lambda kwargs: config_cls(**copy.deepcopy(kwargs)), subs, notes=notes, create=True)
        default = default.to_dict()
    for key, sub_cls in getattr(config_cls, "sub_configs", {}).items():  # a tower the defaults leave out
        if default.get(key) is None and isinstance(sub_cls, type) and hasattr(sub_cls, "model_type"):
            try:
                default[key] = sub_cls().to_dict()
            except Exception:  # noqa: BLE001 - a sub-config without usable defaults stays None
                pass
    return default


#: the notes of the size back-offs (a size mismatch): the class's own derivations are tried before them
_SIZE_NOTES = {note for note, _keep in _SIZE_BACKOFFS}


def _derivable(config_cls: Any, level: dict[str, Any]) -> dict[str, bool]:
    """The keys of a config level the class derives itself, each with whether it is a dataclass field: fields
    defaulting to None (the class derives or the checkpoint sets them) and attributes that are no field at all (set
    in ``__post_init__``: Zamba 2's ``mamba_headdim``, which a value passed in would override)."""
    import dataclasses

    try:
        fields = dataclasses.fields(config_cls)
    except TypeError:  # not a dataclass config
        return {}
    names = {f.name for f in fields}
    return {**{k: False for k in level if k not in names}, **{f.name: True for f in fields if f.default is None}}


def _derived_sizes(config_cls: Any, default: dict[str, Any]) -> tuple[str, Any] | None:
    """An adjustment handing the sizes the class derives itself in ``__post_init__`` back to it (Zamba's
    ``attention_hidden_size`` = 2 x hidden): a field defaulting to None is set to None, an attribute that is no
    field is dropped, at its level and in its sub-configs, so the class derives them from the shrunk sizes; None
    when there are none."""
    levels = [((), config_cls, default)]
    for key, sub_cls in (getattr(config_cls, "sub_configs", {}) or {}).items():
        if isinstance(default.get(key), dict) and isinstance(sub_cls, type):
            levels.append(((key,), sub_cls, default[key]))
    found = [
        (path, k, is_field)
        for path, cls, level in levels
        for k, is_field in _derivable(cls, level).items()
        if _is_size(k, level.get(k)) and _int(level.get(k)) and level[k] > 0 and k not in _LAYER_KEYS
    ]
    if not found:
        return None

    def derive(d: dict[str, Any]) -> None:
        for path, k, is_field in found:
            level: Any = d
            for part in path:
                level = level.get(part) if isinstance(level, dict) else None
            if isinstance(level, dict) and k in level:
                if is_field:
                    level[k] = None
                else:
                    del level[k]

    return f"sizes the config derives left to it ({', '.join(sorted(k for _p, k, _f in found))})", derive


def _derived_layer_counts(config_cls: Any, default: dict[str, Any]) -> list[Any]:
    """Adjustments resetting the layer counts the class derives itself (a field defaulting to None that its
    ``__post_init__`` fills from the layer count, HRM's ``num_layers_per_stack``): None again, so the class derives
    them from the shrunk count instead of the shrunk count contradicting them."""
    import dataclasses

    try:
        fields = {f.name: f.default for f in dataclasses.fields(config_cls)}
    except TypeError:  # not a dataclass config
        return []
    keys = [
        k
        for k, v in default.items()
        if "layers" in k and k not in _LAYER_KEYS and _int(v) and k in fields and fields[k] is None
    ]

    def reset(d: dict[str, Any]) -> None:
        for k in keys:
            d[k] = None

    return [reset] if keys else []


def _tiny_dict(default: dict[str, Any], adjustments: list[Any] = (), keep_layers: bool = False) -> dict[str, Any]:
    """The shrunk dict of a config's defaults (see :func:`tiny_config`)."""
    shrunk = _shrink(copy.deepcopy(default), keep_layers)
    for adjust in adjustments:
        adjust(shrunk)
    for key in ("image_token_id", "image_token_index"):  # a placeholder id the checkpoint sets: a free id
        if key in shrunk and shrunk[key] is None:
            shrunk[key] = 10**6
    # special token ids beyond the shrunk vocab move to its top (the same id maps to the same new id everywhere)
    vocab = _min_vocab(shrunk)
    found: set[int] = set()
    _special_ids(shrunk, found)
    high = sorted(x for x in found if x >= vocab - 8)
    mapping = {old: vocab - 1 - i for i, old in enumerate(high)}
    _remap_ids(shrunk, mapping)
    for key in ("transformers_version", "architectures", "_name_or_path"):
        shrunk.pop(key, None)
    return shrunk


def _seeded_model(model_cls: Any, config: Any) -> Any:
    import torch

    torch.manual_seed(0)
    model = model_cls(config)
    languages = getattr(config, "languages", None)
    if hasattr(model, "set_default_language") and languages:  # X-MOD: the adapters of one language by default
        model.set_default_language(list(languages)[0])
    # every tiny model computes in float32 (precision is tested elsewhere): a default config or a buffer in
    # bfloat16 (RecurrentGemma's normalizer) would make the backends' dtype checks, not the export, the subject
    low = {t.dtype for t in [*model.parameters(), *model.buffers()] if t.is_floating_point()} - {torch.float32}
    if low:
        model = model.float()
        _set_dtype(model.config, torch.float32)
    return model.eval()


def _set_dtype(config: Any, dtype: Any) -> None:
    """Set ``dtype`` on a config and its sub-configs (what exporters read as the model's dtype)."""
    seen: set[int] = set()
    stack = [config]
    while stack:
        level = stack.pop()
        if id(level) in seen:
            continue
        seen.add(id(level))
        if hasattr(level, "dtype"):
            level.dtype = dtype
        stack += [v for v in vars(level).values() if hasattr(v, "to_dict") and hasattr(v, "model_type")]


def build_case(model_type: str, head: str | None = None) -> Case:
    """Build ``model_type`` tiny with random weights and find its sample and other inputs (eager as the oracle).

    A few sizes the config does not hold (M-RoPE sections written in the modeling code) are read from the
    model's own error and the build is retried with them.

    Raises:
        BuildSkip: The environment cannot build it (see :func:`skip_reason`).
        Exception: The tiny config or the inputs failed (the shrinker's fault, or the model's own).
    """
    import transformers

    arch = arch_of(model_type)
    if arch.skip:
        raise BuildSkip(arch.skip)
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    adjustments: list[Any] = []
    notes: list[str] = []
    model_cls = getattr(transformers, arch.model_class)
    own = getattr(model_cls, "config_class", None)
    subs = getattr(CONFIG_MAPPING[model_type], "sub_configs", {}).values()
    config_cls = own if own is not CONFIG_MAPPING[model_type] and own in subs else None
    while True:
        config_notes: list[str] = []
        try:
            config = tiny_config(model_type, adjustments, config_cls, notes=config_notes)
            model = _seeded_model(model_cls, config)
            case = Case(model_type, model, {}, {}, head=arch.head, notes=config_notes + notes)
            tied = break_ties(model)
            if tied:
                case.notes.append(f"constant weights perturbed (ties): {len(tied)}")
            _find_inputs(case, _Ids(config))
            randomness = fix_randomness(model, case.sample, case.other)
            if randomness:
                case.notes.append(randomness)
            check_finite(model, case.sample)
            _fixed_canvas(case, _Ids(config))
            return case
        except Exception as exc:
            reason = skip_reason(exc)
            if reason:
                raise BuildSkip(reason) from exc
            fix = _adjustment(exc, _defaults(model_type, config_cls), notes)
            derived = _derived_sizes(config_cls or CONFIG_MAPPING[model_type], _defaults(model_type, config_cls))
            if fix is not None and fix[0] in _SIZE_NOTES and derived is not None and derived[0] not in notes:
                fix = derived  # before backing widths off: let the class derive the sizes it derives itself
            if fix is None or fix[0] in notes or len(adjustments) >= 5:
                raise
            if fix[0].startswith("widths kept") and _parameters(model_cls, config_cls, model_type, adjustments, fix):
                raise  # the defaults' widths would not make a tiny model
            notes.append(fix[0])
            adjustments.append(fix[1])


#: the most parameters a model built with its default widths (layers shrunk) may have
MAX_PARAMETERS = 60_000_000


def _parameters(model_cls: Any, config_cls: Any, model_type: str, adjustments: list[Any], fix: Any) -> bool:
    """Whether the model with ``fix`` applied has more than :data:`MAX_PARAMETERS` (built on the meta device)."""
    import torch

    try:
        config = tiny_config(model_type, [*adjustments, fix[1]], config_cls)
        with torch.device("meta"):
            model = model_cls(config)
        return sum(p.numel() for p in model.parameters()) > MAX_PARAMETERS
    except Exception:  # noqa: BLE001 - the back-off does not even build: not worth trying
        return True


_BUILDABLE = {
    "self",
    "inputs",
    "qformer_input_ids",
    "input_ids",
    "pixel_values",
    "input_features",
    "input_values",
    "decoder_input_ids",
    "bbox",
    "grid_thw",
    "image_grid_thw",
    "hidden_states",
    "image_sizes",
    "pixel_position_ids",
    "image_position_ids",
}


def _find_inputs(case: Case, ids: _Ids) -> None:
    """Fill ``case.sample`` / ``case.other``: the first candidate inputs eager runs (the oracle)."""
    from _sample_inputs import special_inputs

    model, head = case.model, case.head
    main = getattr(model, "main_input_name", "input_ids")
    required = _required(model)
    special = special_inputs(model, _params(model), required, lambda b, n, s: _text(model, ids, b, n, s))
    if special is not None:
        case.sample, case.other, note = special
        for inputs in (case.sample, case.other):
            _eager(model, inputs)
        if note:
            case.notes.append(note)
        return
    unknown = [n for n in required if n not in _BUILDABLE and not n.endswith("_mask") and not _image_like(n)]
    if unknown:
        raise BuildSkip(
            f"forward requires {', '.join(map(repr, unknown))}, which the sample-input builder cannot build"
        )
    positions = next((n for n in ("pixel_position_ids", "image_position_ids") if n in required), None)
    if positions and head != "image-text-to-text":  # a Gemma-4-style vision tower alone: patches + positions
        import torch

        found = [
            _patch_positions(model, batch, torch.Generator().manual_seed(seed), positions)
            for batch, seed in ((2, 0), (3, 1))
        ]
        for inputs in found:
            _eager(model, inputs)
        case.sample, case.other = found
        return
    grid = next((n for n in ("grid_thw", "image_grid_thw") if n in required), None)
    if grid and head != "image-text-to-text":  # a Qwen-VL-style vision tower alone: patches + grid
        import torch

        name = next((n for n in required if n != grid), "pixel_values")
        error = None
        for layout in (0, 1, 2):
            found = []
            for batch, seed in ((2, 0), (3, 1)):
                images = _grid_pixels(model, batch, torch.Generator().manual_seed(seed), layout)
                found.append({name: images["pixel_values"], grid: images["image_grid_thw"]})
            try:
                for inputs in found:
                    _eager(model, inputs)
            except Exception as exc:  # noqa: BLE001 - the next layout
                error = error or exc
                continue
            case.sample, case.other = found
            return
        raise error
    if head == "image-text-to-text":
        sample, error = _vlm_inputs(model, ids, 2, 5, 0)
        if error is not None:
            raise error
        other, error = _vlm_inputs(model, ids, 3, 9, 1)
        if error is not None:
            case.notes.append("other: same text length (the model pinned it)")
            other, error2 = _vlm_inputs(model, ids, 3, 5, 1)
            if error2 is not None:
                raise error2
    elif main == "inputs" and head in ("masked-lm", "causal-lm", "sequence-classification", "token-classification"):
        sample = {"inputs": ids(2, 7, 0), "attention_mask": _ones(2, 7)}  # Perceiver: token ids under `inputs`
        other = {"inputs": ids(3, 11, 1), "attention_mask": _ones(3, 11)}
        for inputs in (sample, other):
            _eager(model, inputs)
    elif main == "input_ids":
        samples = [_text(model, ids, 2, seq, 0) for seq in (7, 8, 16, 32, 64)]
        sample, error = _first_running(model, samples)
        extra = sample is None
        if extra:
            sample, extra_error = _first_running(model, [_extras(model, ids, x, 0) for x in samples])
            error = extra_error if _extras(model, ids, samples[0], 0).keys() != samples[0].keys() else error
        wanted = _wanted_length(error, [x["input_ids"].shape[1] for x in samples]) if sample is None else None
        if wanted:  # the text must be as long as another input's frames (Kyutai STT): the length the error wants
            retry = _text(model, ids, 2, wanted, 0)
            sample, _error = _first_running(model, [retry])
            extra = sample is None
            if extra:
                sample, _error = _first_running(model, [_extras(model, ids, retry, 0)])
            if sample is not None:
                case.notes.append(f"text length {wanted} (the model ties it to another input's)")
        no_cache = sample is None and ("use_cache" in _params(model) or hasattr(model.config, "use_cache"))
        if no_cache:  # a forward whose own cache cannot be built from its config (BLT): without a cache
            sample, no_cache_error = _first_running(model, [{**x, "use_cache": False} for x in samples])
            if sample is not None:
                case.notes.append("use_cache=False (the model's own cache fails)")
            elif "cache" in str(error).lower() or "num_hidden_layers" in str(error):
                error = no_cache_error  # past the cache: the next error is the one to read
        if sample is None:
            raise error
        if "use_cache" not in sample and _own_cache_class(model, sample):
            sample = {**sample, "use_cache": False}
            case.notes.append("use_cache=False (an export cannot carry the model's own cache class)")
        seq = sample["input_ids"].shape[1]
        others = [_text(model, ids, 3, seq + step, 1, pad_left=2) for step in (4, seq)]
        others += [_text(model, ids, 3, seq + step, 1) for step in (4, seq)]
        others.append(_text(model, ids, 3, seq, 1))
        if extra:
            others = [_extras(model, ids, x, 1) for x in others]
        if "use_cache" in sample:
            others = [{**x, "use_cache": False} for x in others]
        other, error = _first_running(model, others)
        if other is None:
            raise error
        if "attention_mask" in other and int(other["attention_mask"].min()) == 1 and "attention_mask" in sample:
            case.notes.append("other: no left padding (the model refused a padded mask)")
        if other["input_ids"].shape[1] == seq:
            case.notes.append("other: same sequence length (the model pinned it)")
    elif main == "pixel_values":
        import torch

        candidates = _image_inputs(model, 2, 0)
        sample, error = _first_running(model, _with_decoder(model, ids, candidates, 2, 3, 0))
        extra = sample is None
        if extra:
            sample, extra_error = _first_running(model, [_extras(model, ids, x, 0) for x in candidates])
            error = extra_error if _extras(model, ids, candidates[0], 0).keys() != candidates[0].keys() else error
        if sample is None:
            raise error
        index = next(i for i, c in enumerate(candidates) if c["pixel_values"] is sample["pixel_values"])
        other = dict(_image_inputs(model, 3, 1)[index])  # the sample's layout, another batch
        if extra:
            other = _extras(model, ids, other, 1)
        _decoder_inputs(model, ids, other, 3, 5, 1)
        other = _complete(model, other, 1)
    elif main == "input_features":
        sample = other = None
        error = None
        for frames in (64, 128, 32, 100, 200, 400, 3000):
            sample, error = _first_running(
                model, _with_decoder(model, ids, _audio_feature_inputs(model, 2, frames, 0), 2, 3, 0)
            )
            if sample is not None:
                break
        if sample is None:
            raise error
        frames_axis = 2 if sample["input_features"].shape[1] != frames else 1
        frames = sample["input_features"].shape[frames_axis]
        for more in (frames + frames // 2, frames):
            cands = _audio_feature_inputs(model, 3, more, 1)
            cands = [c for c in cands if c["input_features"].shape[1:].numel() and _same_layout(c, sample, frames_axis)]
            other, _err = _first_running(model, _with_decoder(model, ids, cands, 3, 5, 1))
            if other is not None:
                if more == frames:
                    case.notes.append("other: same number of frames (the model pinned it)")
                break
        if other is None:
            raise _err
    elif main == "input_values" or main == "inputs":  # waveforms (a speech encoder-decoder names them inputs)
        main = main if main in _params(model) or not required else required[0]  # the forward's own name for it

        def waves(batch: int, samples: int, seed: int) -> list[dict[str, Any]]:
            return [
                {(main if k == "input_values" else k): v for k, v in c.items()}
                for c in _waveform_inputs(model, batch, samples, seed, latents=main == "hidden_states")
            ]

        sample = other = None
        error = None
        step = 1  # a length the model needs a multiple of, read from its refusal ("not a multiple of 1920")
        lengths = [4000, 8000, 16000]
        while lengths:
            samples = lengths.pop(0)
            sample, error = _first_running(model, _with_decoder(model, ids, waves(2, samples, 0), 2, 3, 0))
            if sample is not None:
                break
            multiple = _MULTIPLE.search(str(error))
            if multiple and step == 1:
                step = int(multiple.group(1))
                lengths = [step * max(1, -(-4000 // step))]
        if sample is None:
            raise error
        rank = sample[main].dim()
        length = sample[main].shape[-1]
        for more in (-(-(length + length // 2) // step) * step, length):
            cands = [c for c in waves(3, more, 1) if c[main].dim() == rank]
            other, _err = _first_running(model, _with_decoder(model, ids, cands, 3, 5, 1))
            if other is not None:
                if more == length:
                    case.notes.append("other: same number of samples (the model pinned it)")
                break
        if other is None:
            raise _err
    else:
        raise BuildSkip(f"main input {main!r} (no sample-input builder for it)")
    case.sample, case.other = sample, other


_MULTIPLE = re.compile(r"not a multiple of (\d+)")


def _fixed_canvas(case: Case, ids: _Ids) -> None:
    """A forward that samples its decoder canvas when ``decoder_input_ids`` is missing (block diffusion) gets one
    (``canvas_length`` random ids, seeded), so eager is a deterministic reference."""
    import torch

    length = _get(case.model.config, "canvas_length", default=None)
    if "decoder_input_ids" not in _params(case.model) or not _int(length):
        return
    for seed, inputs in enumerate((case.sample, case.other)):
        first = next(v for v in inputs.values() if torch.is_tensor(v))
        inputs.setdefault("decoder_input_ids", ids(first.shape[0], length, seed + 11))
    _eager(case.model, case.sample)


def _probe(types: list[str]) -> None:
    """Build each type and print one line: ok (the input shapes) / SKIP / FAIL with the reason."""
    import warnings

    warnings.filterwarnings("ignore")
    from transformers.utils import logging

    logging.set_verbosity_error()
    for model_type in types:
        try:
            case = build_case(model_type)
            shapes = {k: tuple(v.shape) for k, v in case.sample.items() if hasattr(v, "shape")}
            other = {k: tuple(v.shape) for k, v in case.other.items() if hasattr(v, "shape")}
            print(f"OK   {model_type:32s} {case.head:24s} {shapes} -> {other} {'; '.join(case.notes)}", flush=True)
        except BuildSkip as exc:
            print(f"SKIP {model_type:32s} {exc}", flush=True)
        except Exception as exc:  # noqa: BLE001
            print(f"FAIL {model_type:32s} {_one_line(exc)}", flush=True)


if __name__ == "__main__":
    import sys

    _probe(sys.argv[1:] or [a.model_type for a in enumerate_architectures()])
