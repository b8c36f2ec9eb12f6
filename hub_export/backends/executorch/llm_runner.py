"""The program ExecuTorch's own LLM runner and optimum-executorch run: ``model.pte`` beside a generation export.

A phone app loads a ``.pte`` with ExecuTorch's LLM runner (``executorch.extension.llm.runner.TextLLMRunner`` in
Python, the same C++ class in the Android and iOS apps), and Python users with optimum-executorch's
``ExecuTorchModelForCausalLM``. Both take one contract, which hub_export's own decode graph (a batch of sequences,
the cache fed in and out, an attention mask for left padding) does not meet:

* a method ``forward(input_ids: int64[1, n], cache_position: int64[n])`` returning one tensor of logits, the key /
  value cache held inside the program (mutable buffers) and written at ``cache_position``;
* constant methods describing it (the runner refuses a program without ``get_max_seq_len``): ``get_max_seq_len``,
  ``get_max_context_len`` (the cache's length), ``get_bos_id``, ``get_eos_ids``, ``get_vocab_size``,
  ``use_kv_cache``, ``enable_dynamic_shape`` (the prompt in one call), ``get_max_batch_size``;
* the weights inside the ``.pte`` (optimum-executorch never loads a ``.ptd``).

So a decoder-only generation export to ExecuTorch also carries that program, the component ``llm``, saved as
``model.pte`` (the name optimum-executorch looks for). Its module is transformers' own recipe for it
(``transformers.integrations.executorch``: a static cache registered as buffers, written where ``cache_position``
says), returning the last position's logits only, so that the memory plan holds one row of the vocabulary, not one
per prompt token. It is traced, lowered and checked against eager like any component, then run on the sample prompt
and a few greedy steps, whose tokens must be eager's; where any of that fails the export goes on without it and the
plan says why (``runtimes``). hub_export's own ``generate()`` never runs it (the plan's stages name ``decode``), and
loading an export skips it unless asked for (``components=["llm"]``).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from ...errors import HubExportError

__all__ = ["LLM_COMPONENT", "MAX_PROMPT_CHUNK", "RUNTIME", "export_llm_runner", "file_stem", "metadata", "outdated"]

#: The component holding the program, and the plan's name for the runtimes that run it.
LLM_COMPONENT = "llm"
RUNTIME = "executorch-llm-runner"
#: Greedy steps checked against eager after the prompt.
_STEPS = 4
#: The most prompt tokens one call takes (``get_max_seq_len``).
MAX_PROMPT_CHUNK = 512


def _fit_cache(module: Any, cache: Any, model: Any, probe: Any) -> None:
    """Size each layer of the recipe's static cache as the model's attention writes it.

    transformers' recipe sizes the cache from the config (``get_head_shapes``: ``num_key_value_heads``, else
    ``num_attention_heads``), which is not what every model writes: Falcon's multi-query attention keeps one
    key/value head, and a config may carry a ``num_key_value_heads`` its model never reads (GPT-NeoX). The first
    write then fails (``index_copy_(): Source/destination tensor must have same slice shapes``). A layer whose
    shape differs from an eager step's cache is allocated again from that step's keys and values, and registered
    again as the module's buffer.
    """
    import torch

    with torch.no_grad():
        seen = getattr(model(input_ids=probe, use_cache=True).past_key_values, "layers", None) or []
    for index, (layer, eager) in enumerate(zip(cache.layers, seen)):
        keys, values = getattr(eager, "keys", None), getattr(eager, "values", None)
        mine = getattr(layer, "keys", None)
        if keys is None or values is None or mine is None or keys.dim() != 4 or layer.max_cache_len == 0:
            continue
        if (mine.shape[1], mine.shape[3], layer.values.shape[3]) == (keys.shape[1], keys.shape[3], values.shape[3]):
            continue
        layer.lazy_initialization(keys, values)
        module.register_buffer(f"key_cache_{index}", layer.keys, persistent=False)
        module.register_buffer(f"value_cache_{index}", layer.values, persistent=False)


def runner_module(model: Any, max_cache_len: int, probe: Any) -> Any:
    """``forward(input_ids, cache_position) -> logits of the last position``, the cache in the module's buffers
    (transformers' ``TorchExportableModuleForDecoderOnlyLM`` picks the static or hybrid recipe for the model;
    :func:`_fit_cache` sizes its cache as ``model`` writes it on ``probe``, one token)."""
    import torch
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    class _Module(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            generation = model.generation_config
            before = generation.cache_implementation
            generation.cache_implementation = "static"  # what the static recipe asks of the model it wraps
            try:
                recipe = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=max_cache_len)
            except (AssertionError, ValueError, TypeError) as exc:
                raise HubExportError(f"transformers' ExecuTorch recipe refused the model: {exc}") from exc
            finally:
                generation.cache_implementation = before
            self.recipe = recipe.model
            self.cache: Any = getattr(self.recipe, "static_cache", None) or self.recipe.cache
            _fit_cache(self.recipe, self.cache, model, probe)
            # positions from the call, as transformers derives them by default (cache_position), not from the
            # cache's fill count: OPT computes them from `get_seq_length()`, a value read out of a buffer that
            # the trace cannot bound (a data-dependent slice)
            self.positions = "position_ids" in inspect.signature(self.recipe.model.forward).parameters

        def forward(self, input_ids: Any, cache_position: Any) -> Any:
            for layer in self.cache.layers:  # the fill position: a new sequence starts again at 0
                layer.cumulative_length.copy_(cache_position[0])
            positions = {"position_ids": cache_position.unsqueeze(0)} if self.positions else {}
            output = self.recipe.model(
                input_ids=input_ids,
                attention_mask=None,
                past_key_values=self.cache,
                use_cache=True,
                logits_to_keep=1,
                **positions,
            )
            return output.logits

    return _Module().eval()


def metadata(model: Any, max_cache_len: int, chunk: int) -> dict[str, Any]:
    """The constant methods ExecuTorch's LLM runner and optimum-executorch read: ``get_max_seq_len`` is the most
    tokens one call takes (the runner prefills a longer prompt in pieces of it), ``get_max_context_len`` the
    cache's length."""
    config = model.config.get_text_config()
    generation = getattr(model, "generation_config", None)
    eos = getattr(generation, "eos_token_id", None)
    if eos is None:
        eos = getattr(config, "eos_token_id", None)
    eos_ids = [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]) if e is not None]
    bos = getattr(generation, "bos_token_id", None)
    if bos is None:
        bos = getattr(config, "bos_token_id", None)
    found = {
        "get_max_seq_len": chunk,
        "get_max_context_len": max_cache_len,
        "get_vocab_size": int(config.vocab_size),
        "get_max_batch_size": 1,
        "use_kv_cache": True,
        "use_sdpa_with_kv_cache": False,
        "enable_dynamic_shape": True,
        "get_eos_ids": eos_ids,
    }
    if bos is not None:
        found["get_bos_id"] = int(bos)
    if eos_ids:
        found["get_eos_id"] = eos_ids[0]
    return found


def file_stem(component: str, entry: Any, generation: Any) -> str:
    """ExecuTorch's ``Backend.file_stem``: the ``llm`` component is ``model.pte`` (optimum-executorch's name for it);
    every other component keeps its name (``decode.pte``, ``decode.ptd``)."""
    return "model" if component == LLM_COMPONENT and generation else component


def outdated(manifest: Any) -> str | None:
    """ExecuTorch's ``Backend.outdated_layout``: a decoder-only generation export made before the ``llm`` program
    (its plan says nothing of the LLM runner)."""
    plan = manifest.generation or {}
    if (
        plan.get("kind") == "decoder_only"
        and plan.get("one_graph") is True
        and RUNTIME not in (plan.get("runtimes") or {})
    ):
        return "no model.pte for ExecuTorch's LLM runner and optimum-executorch"
    return None


def export_llm_runner(exporter: Any, model: Any, prompt: dict[str, Any], config: Any) -> Any:
    """The ``llm`` component for ``model`` (see the module docstring), checked against eager on the first row of
    ``prompt`` and ``_STEPS`` greedy steps.

    Raises:
        HubExportError: It could not be exported or does not give eager's tokens (the caller records why).
    """
    import torch

    ids = prompt["input_ids"][:1]
    if "attention_mask" in prompt:
        ids = ids[:, prompt["attention_mask"][0].bool()]
    limit = exporter.max_sequence_cap
    positions = getattr(model.config.get_text_config(), "max_position_embeddings", None) or limit
    max_cache_len = int(min(positions, limit))
    chunk = min(max_cache_len, MAX_PROMPT_CHUNK)
    module = runner_module(model, max_cache_len, ids[:, :1])
    sample = {"input_ids": ids, "cache_position": torch.arange(ids.shape[1])}
    # one sequence (the cache's batch), a prompt of up to `chunk` tokens per call: the runner feeds longer ones in
    # pieces; the attention of one call is planned for chunk x max_cache_len
    tokens = torch.export.Dim("sequence", min=1, max=chunk)
    shapes = {"input_ids": {1: tokens}, "cache_position": {0: tokens}}
    # the weights inside the .pte (optimum-executorch loads nothing else), unless a .pte could not address them
    weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    outside = weights >= exporter.external_data_min_bytes
    own = dataclasses.replace(
        config,
        # strict (TorchDynamo) tracing, as transformers' recipe exports: the cache's tensors are read through the
        # Cache object, which a non-strict trace would take for constants, losing their updates
        strict=True,
        dynamic=False,
        dynamic_shapes=shapes,
        external_data=outside,
        metadata=metadata(model, max_cache_len, chunk),
    )
    with torch.no_grad():
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=_STEPS + 1, do_sample=False)

    def check(runner: Any, entry: Any) -> None:
        """The prompt, then one token at a time: eager's greedy tokens."""
        tokens = ids[0].tolist()
        logits = runner.run_flat([ids, torch.arange(len(tokens))])[0]
        for _ in range(_STEPS + 1):
            tokens.append(int(logits[0, -1].argmax()))
            if len(tokens) == expected.shape[1]:
                break
            step = torch.tensor([[tokens[-1]]])
            logits = runner.run_flat([step, torch.tensor([len(tokens) - 1])])[0]
        if tokens != expected[0].tolist():
            raise HubExportError(f"its greedy tokens {tokens} differ from eager's {expected[0].tolist()}")

    return exporter.export_component(LLM_COMPONENT, module, sample, own, also_check=check)
