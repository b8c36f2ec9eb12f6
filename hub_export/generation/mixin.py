"""transformers' ``GenerationMixin`` over the graphs of an ``export_for_generation`` export.

``ExportedModelForCausalLM`` (decoder-only and vision/audio-language exports) and ``ExportedModelForSeq2SeqLM``
(encoder-decoder exports: T5, Whisper, ...) are an :class:`~hub_export.model.ExportedModel` and the steps class
of this module (:class:`CausalLMSteps`, :class:`Seq2SeqLMSteps`, both a ``GenerationMixin``; ``hub_export.model``
combines them, so that this module never imports it): ``generate()`` is transformers' own, so every
decoding strategy (greedy, sampling, beam search, ...), logits processor (repetition penalty, n-gram blocking,
``min_new_tokens``, bad words, ...), stopping criterion (several EOS ids, stop strings, ...) and streamer works
as it does for the eager model. What they add is ``forward``: one step of the model on the exported graphs.

* The first call of a sequence (no cache yet) runs the prompt: through the ``prefill`` graph (a prompt shorter
  than the graph takes goes through the decode graph on an empty cache, and so does every prompt of an export
  whose plan maps the ``prefill`` stage to the decode graph; a state-space prefill of fixed length is
  fitted, see :mod:`hub_export.generation._prompt`), or through the multimodal chain (encoders, projector,
  embeddings with the features merged, language model, ``lm_head``), or the encoder then the first decoder step.
* Every later call runs the ``decode`` graph on the cache the previous call returned.

What the exports do better than a plain cache is kept:

* a static cache (``cache_implementation="static"``): ``generate()`` allocates the buffers the graphs were traced
  with (``max_cache_len`` positions) and the graphs update them in place;
* an OpenVINO stateful decode: the cache stays inside the OpenVINO infer request; ``past_key_values`` is then a
  :class:`RunnerState` handle, which beam search reorders in place (:meth:`OpenVINORunner.reorder_state`);
* a ``multi_token_decode`` graph whose query axis starts at 2: each step re-feeds the previous token against the
  cache shortened by one, which recomputes exactly the entry it dropped;
* state-space models (Mamba): conv/SSM states as ``cache_params``.

Example::

    model = ExportedModel.from_pretrained("tiny-llama-onnx")    # an ExportedModelForCausalLM
    ids = model.generate(**tokenizer(["Hi", "Hello there"], padding=True, padding_side="left",
                                     return_tensors="pt"), max_new_tokens=8, num_beams=3)
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from transformers import GenerationConfig, GenerationMixin

from .._quiet import quietly
from ..errors import HubExportError, InputError
from ._glue import TOKEN_TYPE_INPUTS
from ._processors import cheaper
from ._prompt import fit_prompt
from ._rope_index import TOKEN_TYPES, decode_positions, prompt_positions, rope_inputs
from ._threads import loop_threads
from .decompose import _empty_cache as _holds_nothing
from .loop import (
    _decode_window,
    _empty_cache,
    _fixed_length,
    _min_length,
    _multimodal_prompt,
    _prompt_in_steps,
    _select,
    _shortened,
    _static_capacity,
    encoder_outputs,
    positions_from_mask,
)

__all__ = ["CausalLMSteps", "GenerativeSteps", "RunnerState", "Seq2SeqLMSteps"]

#: What ``generate()`` passes to ``forward`` besides the traced inputs.
_GENERATION_KWARGS = frozenset(
    {
        "attention_mask",
        "position_ids",
        "past_key_values",
        "cache_params",
        "use_cache",
        "return_dict",
        "encoder_outputs",
        "decoder_input_ids",
        "decoder_attention_mask",
        "decoder_position_ids",
    }
)


class RunnerState:
    """The cache of a stateful decode runner (OpenVINO ``stateful=True``), kept inside its infer request.

    ``generate()`` holds it where it holds ``past_key_values``; it knows the cache's length and reorders the
    runner's state for beam search. It holds no tensors: the next ``forward`` passes no cache and the runner
    continues from its state.
    """

    is_compileable = False
    is_croppable = False

    def __init__(self, runner: Any, length: int) -> None:
        self.runner = runner
        self.length = int(length)

    def __repr__(self) -> str:
        return f"RunnerState(length={self.length})"

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """The number of positions the state holds."""
        return self.length

    def reorder_cache(self, beam_idx: Any) -> None:
        """Keep the state's batch rows ``beam_idx`` (beam search: each beam continues from its source beam)."""
        self.runner.reorder_state(beam_idx)


def _past_length(cache: Any) -> int | None:
    """The positions ``cache`` holds; None for a cache that does not count them (state-space states)."""
    if cache is None:
        return 0
    if isinstance(cache, RunnerState):
        return cache.length
    if _holds_nothing(cache):
        return 0
    try:
        return int(cache.get_seq_length())
    except Exception:
        return None


class GenerativeSteps(GenerationMixin):
    """What the generative export classes share: transformers' ``generate()`` over :meth:`forward`.

    A mixin over :class:`~hub_export.model.ExportedModel` (placed before it), whose attributes it reads.
    """

    generation: Any
    generation_config: Any
    config: Any
    components: dict[str, Any]
    runners: dict[str, Any]
    main_input_name: str
    _named_inputs: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.generation_config is None and self.config is not None:
            self.generation_config = GenerationConfig.from_model_config(self.config)

    # -- what transformers asks -----------------------------------------------------------------------------
    @property
    def _is_stateful(self) -> bool:
        # GenerationMixin refuses assisted decoding for models whose cache cannot be rolled back
        return bool((self.generation or {}).get("stateful"))

    def can_generate(self) -> bool:
        """Whether ``generate()`` can chain this export's components."""
        plan = self.generation or {}
        return plan.get("version") == 1 and (plan.get("kind") != "multimodal" or plan.get("runnable") is True)

    @quietly
    def generate(self, *args: Any, seed: int | None = None, **kwargs: Any) -> Any:
        """transformers' ``GenerationMixin.generate`` over the exported graphs: same arguments, same outputs.

        On an export that ONNX Runtime or OpenVINO runs, the call's own torch work (logits processors, argmax) runs
        on one torch thread (``torch.set_num_threads``, restored after): see
        :mod:`hub_export.generation._threads`.

        Args:
            seed: Seed torch's random state for this call only (the global state is restored afterwards), so
                that sampling is reproducible; without it, sampling draws from the global random state, as
                transformers does.
            *args, **kwargs: As ``GenerationMixin.generate`` (``max_new_tokens``, ``do_sample``, ``num_beams``,
                ``streamer``, ``stop_strings`` with ``tokenizer``, ``generation_config``, the model's inputs).

        Raises:
            HubExportError: The plan is of an unknown version, or a multimodal plan cannot be chained.
        """
        self._check_plan()
        if self.config is None:
            raise HubExportError("generate() needs the model's config (config.json), which this export lacks.")
        with loop_threads(self.components):  # torch's pool stays idle between the runtime's steps
            if seed is None:
                return self._generate(*args, **kwargs)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                return self._generate(*args, **kwargs)

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        return GenerationMixin.generate(self, *args, **kwargs)  # type: ignore[arg-type]

    def _check_plan(self) -> None:
        plan = self.generation
        if not plan or plan.get("version") != 1:
            raise HubExportError(f"This export's generation plan is missing or of an unknown version: {plan!r}.")
        if plan["kind"] == "multimodal" and plan.get("runnable") is not True:
            raise HubExportError(
                f"generate() cannot chain this export's components: {plan.get('runnable')}. Every component still "
                "runs through exported.runners[name]."
            )

    # -- GenerationMixin hooks ------------------------------------------------------------------------------
    def _validate_model_kwargs(self, model_kwargs: dict[str, Any]) -> None:
        """Refuse inputs no graph of this export takes (transformers checks them against ``forward``)."""
        traced = {name for c in self.components.values() for name, _ in c.metadata.signature.input_structure}
        # inputs an export fixed to the sample's values (the model derived sizes from them): checked by the runner
        traced |= {name for c in self.components.values() for name in c.metadata.signature.fixed_names}
        rope = (self.generation or {}).get("rope_index")
        if rope is not None:  # read by the plan's rotary positions, computed in Python
            traced |= set(rope_inputs(rope))
        unused = [k for k, v in model_kwargs.items() if v is not None and k not in traced | _GENERATION_KWARGS]
        if unused:
            raise ValueError(
                f"The following `model_kwargs` are not used by the model: {unused} (note: typos in the generate "
                f"arguments will also show up in this list); this export's graphs take {sorted(traced)}."
            )
        asked = [k for k in ("output_attentions", "output_hidden_states") if model_kwargs.get(k)]
        if asked:
            raise ValueError(f"{asked}: the exported graphs return the logits and the cache only.")

    def _get_logits_processor(self, *args: Any, **kwargs: Any) -> Any:
        """transformers' processors, with the work they redo on every step done once (same scores; see
        :mod:`hub_export.generation._processors`)."""
        return cheaper(super()._get_logits_processor(*args, **kwargs))  # type: ignore[misc]

    def _valid_auto_compile_criteria(self, model_kwargs: dict[str, Any], generation_config: Any) -> bool:
        return False  # the graphs are compiled already: nothing for torch.compile to do

    @contextlib.contextmanager
    def _optimize_model_for_decode(self) -> Any:
        yield  # no experts implementation to switch: the graphs are fixed

    def _prepare_cache_for_generation(
        self,
        generation_config: Any,
        model_kwargs: dict[str, Any],
        generation_mode: Any,
        batch_size: int,
        max_cache_length: int,
    ) -> bool:
        """No cache before the prompt step (it returns the first one), except for a static export: the buffers
        its graphs were traced with, ``max_cache_len`` positions for the whole sequence.

        Raises:
            InputError: The sequence would not fit in the static cache.
        """
        name = self.generation["cache"]
        if model_kwargs.get(name) is not None or model_kwargs.get("past_key_values") is not None:
            return False  # the caller's own cache
        runner = self.runners[self._prompt_stage()]
        capacity = _static_capacity(runner, name)
        if capacity is None:
            return False
        if max_cache_length > capacity:
            raise InputError(
                f"generate() needs {max_cache_length} cache positions (the prompt plus max_new_tokens, less one) but "
                f"this export's static cache holds max_cache_len={capacity}; shorten them or re-export with a "
                "larger max_cache_len."
            )
        expand = max(generation_config.num_beams or 1, generation_config.num_return_sequences or 1)
        model_kwargs[name] = _empty_cache(runner, name, batch_size * expand)
        return True

    def prepare_inputs_for_generation(
        self,
        input_ids: Any,
        next_sequence_length: int | None = None,
        past_key_values: Any = None,
        attention_mask: Any = None,
        inputs_embeds: Any = None,
        is_first_iteration: bool | None = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """The ``forward`` inputs of one step: the tokens the cache does not hold yet, positions and token types
        sliced to them, the 2D mask of the whole sequence, and the other inputs as given.

        A ``multi_token_decode`` graph whose query axis starts at 2 gets the previous token again, with the cache
        shortened by one (the graph recomputes the entry it drops)."""
        plan = self.generation
        encoder_decoder = plan["kind"] == "encoder_decoder"
        name = plan["cache"]
        if inputs_embeds is not None:
            kwargs["inputs_embeds"] = inputs_embeds
        cache = past_key_values if past_key_values is not None else kwargs.pop(name, None)
        if name is None:  # generated without a cache: every step feeds the whole sequence
            next_sequence_length = None
        if next_sequence_length is None and cache is not None:
            past = _past_length(cache)
            next_sequence_length = input_ids.shape[1] - past if past else None
        ids = input_ids if next_sequence_length is None else input_ids[:, -next_sequence_length:]
        if next_sequence_length == 1 and cache is not None and self._window() == 2:
            ids = input_ids[:, -2:]
            cache = _shortened(cache)
        inputs: dict[str, Any] = {"decoder_input_ids" if encoder_decoder else "input_ids": ids}
        if cache is not None:
            inputs[name] = cache
        positions_key = "decoder_position_ids" if encoder_decoder else "position_ids"
        for key in (positions_key, *TOKEN_TYPE_INPUTS):
            value = kwargs.pop(key, None)
            if value is not None:
                inputs[key] = value[..., -ids.shape[1] :]
        if attention_mask is not None:
            inputs["attention_mask"] = attention_mask
        for key, value in kwargs.items():
            if key not in inputs and key not in ("labels", "next_sequence_length", "return_dict"):
                inputs[key] = value
        return inputs

    # -- one step on the graphs -----------------------------------------------------------------------------
    def _prompt_stage(self) -> str:
        stages = self.generation["stages"]
        return stages["language_model" if self.generation["kind"] == "multimodal" else "prefill"]

    def _window(self) -> int:
        plan = self.generation
        decode = self.runners[plan["stages"]["decode"]]
        return _decode_window(plan, decode, bool(plan.get("stateful")))

    def _stateful_runners(self) -> list[Any]:
        return [self.runners[name] for name in self.generation.get("stateful") or ()]

    def _pad_token(self) -> int:
        config = self.generation_config
        pad = getattr(config, "pad_token_id", None)
        if pad is None:
            eos = getattr(config, "eos_token_id", None)
            pad = (eos[0] if isinstance(eos, (list, tuple)) and eos else eos) or 0
        return int(pad)

    def _decode_step(self, step: dict[str, Any], cache: Any, constant: dict[str, Any]) -> Any:
        """The decode graph on ``step`` against ``cache`` (a ``RunnerState`` continues a stateful decode)."""
        plan = self.generation
        name = plan["cache"]
        decode = self.runners[plan["stages"]["decode"]]
        step = {**constant, **step}
        if not isinstance(cache, RunnerState):
            step[name] = cache
        outputs = decode(**_select(decode, step))
        if getattr(decode, "stateful", False):
            # seeded by the cache it was given, or continued from its state: later steps pass no cache
            past = _past_length(cache) or 0
            outputs[name] = RunnerState(decode, past + step[plan["token_input"]].shape[1])
        return outputs


def _mask_and_positions(plan: dict[str, Any], ids: Any, mask: Any, positions: Any, past: int | None) -> tuple[Any, Any]:
    """The 2D mask over the whole sequence and the positions of ``ids`` a step feeds, made up as the model
    would when the caller gave none (``generate()`` drops an all-ones mask)."""
    batch, length = ids.shape[0], ids.shape[1]
    if mask is None and plan.get("attention_mask") == "extend" and past is not None:
        mask = torch.ones((batch, past + length), dtype=torch.int64, device=ids.device)
    if positions is None and plan.get("position_ids"):
        if mask is not None:
            positions = positions_from_mask(mask)[:, -length:]
        elif past is not None:
            positions = torch.arange(past, past + length, device=ids.device).expand(batch, -1)
    return mask, positions


class CausalLMSteps(GenerativeSteps):
    """A decoder-only (or vision/audio-language) generation export with transformers' ``generate()``.

    ``forward(input_ids, attention_mask, position_ids, past_key_values)`` is one step of the model: the prompt
    when there is no cache yet (logits of its last position only, as ``generate()`` asks), else the new tokens
    against the cache; it returns the model's output class with the logits and the next cache.
    """

    #: a multimodal rotary (M-RoPE) plan: the per-row deltas of the prompt last run, which its decode steps add
    rope_deltas: Any = None

    def forward(
        self,
        input_ids: Any = None,
        attention_mask: Any = None,
        position_ids: Any = None,
        past_key_values: Any = None,
        **kwargs: Any,
    ) -> Any:
        """One step on the exported graphs (see the class docstring); other inputs (``pixel_values``, ...) by
        keyword."""
        plan = self.generation
        name = plan["cache"]
        cache = past_key_values if past_key_values is not None else kwargs.pop(name, None)
        token_input = plan["token_input"]
        if input_ids is None:
            input_ids = kwargs.pop(token_input, None)
        if input_ids is None:
            raise InputError(f"forward() needs {token_input}= (the prompt token ids).")
        input_ids = torch.as_tensor(input_ids).long()
        constant = {k: v for k, v in kwargs.items() if k not in ("use_cache", "return_dict")}
        past = _past_length(cache)
        mask, positions = _mask_and_positions(plan, input_ids, attention_mask, position_ids, past)
        if cache is None or (not isinstance(cache, RunnerState) and past == 0):
            return self._prompt(input_ids, mask, positions, cache, constant)
        step = {token_input: input_ids}
        if mask is not None:
            step["attention_mask"] = mask
        if positions is not None:
            step["position_ids"] = positions
        rope = plan.get("rope_index")
        if rope is not None:  # the prompt's multimodal rotary deltas on the text positions; new tokens are text
            if self.rope_deltas is None or positions is None:
                raise InputError("This export's decode steps continue a prompt run by generate() (rotary deltas).")
            step["position_ids"] = decode_positions(rope, positions, self.rope_deltas)
            step.update({name: torch.zeros_like(input_ids) for name in TOKEN_TYPES if name in constant})
        return self._decode_step(step, cache, constant)

    def _prompt(self, prompt: Any, mask: Any, positions: Any, cache: Any, constant: dict[str, Any]) -> Any:
        """The prompt step; ``cache`` is None or an empty (static) cache to fill."""
        plan = self.generation
        name, token_input = plan["cache"], plan["token_input"]
        runners = self.runners
        for runner in self._stateful_runners():
            runner.reset()  # a new sequence: the cache kept inside the runner starts empty
        batch = prompt.shape[0]
        if plan["kind"] == "multimodal":
            user = {**constant, "input_ids": prompt}
            return _output(_multimodal_prompt(self, plan, user, prompt, mask, positions))
        if plan.get("encoder_outputs"):  # the prompt step takes the features generate() makes first
            constant = {**constant, "mm_encoder_outputs": encoder_outputs(runners, plan["encoder_outputs"], constant)}
            if plan.get("rope_index") is not None and positions is not None:  # as the split chain computes them
                user = {**constant, "input_ids": prompt, "attention_mask": mask}
                positions, self.rope_deltas = prompt_positions(plan["rope_index"], self.config, user)
        prefill, decode = runners[plan["stages"]["prefill"]], runners[plan["stages"]["decode"]]
        fitted, mask_fitted, start = fit_prompt(prefill, decode, token_input, prompt, mask, self._pad_token())
        if fitted.shape[1] != prompt.shape[1]:  # left-padded to the prefill's length: positions follow the mask
            positions = positions_from_mask(mask_fitted) if positions is not None else None
        prompt, mask = fitted, mask_fitted
        step = {**constant, token_input: prompt[:, :start]}
        if mask is not None:
            step["attention_mask"] = mask[:, :start]
        if positions is not None:
            step["position_ids"] = positions[:, :start]
        runner = prefill
        if name is None:  # no cache: the prompt's graph runs the whole sequence at every step
            return prefill(**_select(prefill, step))
        if _static_capacity(prefill, name) is not None:  # the graphs fill preallocated buffers
            step[name] = cache if cache is not None else _empty_cache(prefill, name, batch)
        elif prefill is decode or prompt.shape[1] < _min_length(prefill, token_input):
            # one graph serving prompt and steps (the plan maps the prefill stage to decode), or a prompt shorter
            # than torch.export let the prefill's axis be (it bounds a traced axis below by 2): the decode graph
            # on an empty cache
            return self._decode_step(step, _empty_cache(decode, name, batch), {})
        if start < prompt.shape[1]:
            return _prompt_in_steps(runners, plan, step, constant, prompt, mask, start)
        return runner(**_select(runner, step))


def _decoder_slice(step: dict[str, Any], token_input: str, start: int, end: int) -> dict[str, Any]:
    """The decoder ids (and positions) ``start:end`` of ``step``, with its decoder mask up to ``end``."""
    sliced = {token_input: step[token_input][:, start:end]}
    if step.get("decoder_position_ids") is not None:
        sliced["decoder_position_ids"] = step["decoder_position_ids"][:, start:end]
    if step.get("decoder_attention_mask") is not None:
        sliced["decoder_attention_mask"] = step["decoder_attention_mask"][:, :end]
    return sliced


def _output(values: dict[str, Any]) -> Any:
    """The multimodal prompt step's ``{logits, past_key_values}`` as the output class ``generate()`` reads."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    return CausalLMOutputWithPast(**values)


class _Encoder:
    """The encoder component as ``GenerationMixin`` calls it: ``encoder(**kwargs)`` -> the encoder's output."""

    def __init__(self, model: Seq2SeqLMSteps) -> None:
        self._model = model

    @property
    def main_input_name(self) -> str:
        return self._model.main_input_name

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the encoder graph on the inputs it traced (flags such as ``return_dict`` are dropped)."""
        model = self._model
        kwargs = model._named_inputs(args, kwargs)
        runner = model.runners[model.generation["stages"]["encoder"]]
        traced = dict(runner.metadata.signature.input_structure)
        if "attention_mask" in traced and kwargs.get("attention_mask") is None:
            main = kwargs.get(model.main_input_name)
            if main is not None:
                kwargs["attention_mask"] = torch.ones(main.shape[:2], dtype=torch.int64)
        return runner(**{k: v for k, v in kwargs.items() if k in traced})

    __call__ = forward


class Seq2SeqLMSteps(GenerativeSteps):
    """An encoder-decoder generation export (T5, BART, Whisper, ...) with transformers' ``generate()``.

    ``get_encoder()`` runs the encoder graph; ``forward`` is one decoder step: the first one (no cache yet)
    through the ``prefill`` graph, which also fills the cross-attention cache, later ones through ``decode``.
    """

    def get_encoder(self, modality: str | None = None) -> _Encoder:
        """The encoder, callable with the encoder's inputs as ``GenerationMixin`` calls it."""
        return _Encoder(self)

    def forward(
        self,
        *args: Any,
        attention_mask: Any = None,
        decoder_input_ids: Any = None,
        encoder_outputs: Any = None,
        past_key_values: Any = None,
        **kwargs: Any,
    ) -> Any:
        """One decoder step (the encoder first when ``encoder_outputs`` is not given); the encoder's main input
        may be positional."""
        plan = self.generation
        name, token_input = plan["cache"], plan["token_input"]
        kwargs = self._named_inputs(args, kwargs)
        if encoder_outputs is None:
            encoder_outputs = self.get_encoder()(attention_mask=attention_mask, **kwargs)
        if decoder_input_ids is None:
            batch = int(next(iter(encoder_outputs.values())).shape[0])
            decoder_input_ids = torch.full((batch, 1), int(plan["decoder_start_token_id"]), dtype=torch.int64)
        step: dict[str, Any] = {plan["encoder_output"]: encoder_outputs, token_input: decoder_input_ids}
        if plan.get("attention_mask") == "fixed":
            if attention_mask is None:
                hidden = next(iter(encoder_outputs.values()))
                attention_mask = torch.ones(hidden.shape[:2], dtype=torch.int64)
            step["attention_mask"] = attention_mask
        for key in ("decoder_attention_mask", "decoder_position_ids"):
            if kwargs.get(key) is not None:
                step[key] = kwargs[key]
        cache = past_key_values if past_key_values is not None else kwargs.get(name)
        # other inputs the decoder's graphs traced (T5Gemma 2's pixel_values), as given
        constant = {k: v for k, v in kwargs.items() if k not in step and k not in (name, "use_cache", "return_dict")}
        if name is None and decoder_input_ids.shape[1] > 1:  # no cache: each step runs the whole decoder sequence
            decode = self.runners[plan["stages"]["decode"]]
            return decode(**_select(decode, {**constant, **step}))
        if cache is None or (not isinstance(cache, RunnerState) and _past_length(cache) == 0):
            for runner in self._stateful_runners():
                runner.reset()
            prefill = self.runners[plan["stages"]["prefill"]]
            traced = _fixed_length(prefill, token_input)
            if traced is not None and decoder_input_ids.shape[1] > traced:
                return self._decoder_prompt_in_steps(step, traced, constant)
            return prefill(**_select(prefill, {**constant, **step}))
        return self._decode_step(step, cache, constant)

    def _decoder_prompt_in_steps(self, step: dict[str, Any], traced: int, constant: dict[str, Any]) -> Any:
        """A decoder prompt longer than the first decoder step's graph takes (it was traced on ``traced`` tokens):
        that graph on its first tokens, then the decode graph on each other token against the cache; the last
        step's outputs (its logits are the prompt's last position's)."""
        plan = self.generation
        name, token_input = plan["cache"], plan["token_input"]
        ids = step[token_input]
        prefill = self.runners[plan["stages"]["prefill"]]
        outputs = prefill(**_select(prefill, {**constant, **step, **_decoder_slice(step, token_input, 0, traced)}))
        for end in range(traced + 1, ids.shape[1] + 1):
            one = {**step, **_decoder_slice(step, token_input, end - 1, end)}
            outputs = self._decode_step(one, outputs[name], constant)
        return outputs

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        """transformers' ``generate``, then the decoder prompt dropped when the model's own ``generate`` drops it
        (Whisper's: the plan's ``returns_prompt``)."""
        given = kwargs.get("decoder_input_ids")
        result: Any = GenerationMixin.generate(self, *args, **kwargs)  # type: ignore[arg-type]
        if self.generation.get("returns_prompt", True):
            return result
        prompt = int(given.shape[1]) if given is not None else 1
        if isinstance(result, torch.Tensor):
            return result[:, prompt:]
        result.sequences = result.sequences[:, prompt:]
        return result
