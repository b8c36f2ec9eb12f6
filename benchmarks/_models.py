"""Real-size models for benchmarks, with random weights: the published configs of Qwen2.5-0.5B, Llama-3.2-1B,
Llama-3.2-3B and Llama-3.1-8B written out here (nothing is downloaded), built on the meta device and materialized directly in the
target dtype (no float32 copy on the way to bfloat16), weights drawn from N(0, 0.02), norms at 1, biases at 0.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["MODELS", "build", "unique_weight_bytes"]

_LLAMA_32_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 32.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
}

#: name -> (config class, config kwargs): the published configs (Hugging Face model cards' config.json).
MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen2.5-0.5b": (
        "Qwen2Config",
        {
            "vocab_size": 151936,
            "hidden_size": 896,
            "intermediate_size": 4864,
            "num_hidden_layers": 24,
            "num_attention_heads": 14,
            "num_key_value_heads": 2,
            "max_position_embeddings": 32768,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
            "bos_token_id": 151643,
            "eos_token_id": 151643,
        },
    ),
    "llama-3.2-1b": (
        "LlamaConfig",
        {
            "vocab_size": 128256,
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "num_hidden_layers": 16,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 64,
            "max_position_embeddings": 131072,
            "rope_parameters": _LLAMA_32_ROPE,
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": True,
            "bos_token_id": 128000,
            "eos_token_id": 128001,
        },
    ),
    "llama-3.2-3b": (
        "LlamaConfig",
        {
            "vocab_size": 128256,
            "hidden_size": 3072,
            "intermediate_size": 8192,
            "num_hidden_layers": 28,
            "num_attention_heads": 24,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "max_position_embeddings": 131072,
            "rope_parameters": _LLAMA_32_ROPE,
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": True,
            "bos_token_id": 128000,
            "eos_token_id": 128001,
        },
    ),
    "llama-3.1-8b": (
        "LlamaConfig",
        {
            "vocab_size": 128256,
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "max_position_embeddings": 131072,
            "rope_parameters": {**_LLAMA_32_ROPE, "factor": 8.0},
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": False,
            "bos_token_id": 128000,
            "eos_token_id": 128001,
        },
    ),
}
# generation.py's historical name
MODELS["qwen2-0.5b"] = MODELS["qwen2.5-0.5b"]


def build(name: str, dtype: torch.dtype = torch.float32, seed: int = 0, layers: int | None = None) -> Any:
    """The model ``name`` of :data:`MODELS` in ``dtype``, random weights, in eval mode.

    Args:
        name: A key of :data:`MODELS`.
        dtype: The dtype the parameters are created in.
        seed: Seed of the weights.
        layers: Fewer decoder layers than the published config (quick checks of the benchmark itself).
    """
    import transformers
    from transformers import AutoModelForCausalLM

    class_name, kwargs = MODELS[name]
    kwargs = dict(kwargs)
    if layers is not None:
        kwargs["num_hidden_layers"] = layers
    config = getattr(transformers, class_name)(**kwargs)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model = model.to_empty(device="cpu")
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        seen: set[int] = set()
        for module_name, param in model.named_parameters(remove_duplicate=True):
            if id(param) in seen:
                continue
            seen.add(id(param))
            if module_name.endswith("norm.weight"):
                param.fill_(1.0)
            elif module_name.endswith(".bias"):
                param.zero_()
            else:
                param.normal_(0.0, 0.02, generator=generator)
        for module in model.modules():
            if hasattr(module, "inv_freq") and hasattr(module, "rope_type"):
                init = getattr(module, "compute_default_rope_parameters", None)
                if module.rope_type != "default":
                    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

                    init = ROPE_INIT_FUNCTIONS[module.rope_type]
                inv_freq, scaling = init(module.config)
                module.inv_freq = inv_freq.to(module.inv_freq.dtype)
                module.original_inv_freq = module.inv_freq.clone()
                module.attention_scaling = scaling
    model.tie_weights()
    return model.eval()


def unique_weight_bytes(model: Any) -> int:
    """Bytes of the model's parameters and buffers, a storage several names share (tied weights) counted once."""
    storages: dict[int, int] = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
    return sum(storages.values())
