"""A tiny random model as a deterministic, tie-free reference (``coverage.py --all``).

Two harness artefacts would otherwise count as parity failures:

* **Exact ties.** A weight the model's ``_init_weights`` sets to one constant (a zero-initialised MoE router, which
  scores every expert alike; zero sampling-offset / attention-weight projections of deformable attention, which
  rank every proposal alike) makes a top-k, argmax or sort choose between equal values, and torch and ONNX Runtime
  break ties differently. A trained checkpoint has no such ties, so :func:`break_ties` adds seeded noise (std
  0.02) to every floating parameter of at least 2 dimensions whose elements are all equal. Norm weights and biases
  (1-D) keep their values; buffers are untouched.
* **Randomness inside forward.** A forward that draws random numbers (ViT-MAE's random masking, UnivNet's noise
  sequence, a VAE's latent sampling) is not a function of its inputs, so no export can match eager.
  :func:`fix_randomness` records the draws of one eager call; a forward parameter named ``noise*`` receives a
  seeded tensor of the shape the model drew, and a boolean ``sample`` parameter defaulting to True is turned off;
  a module's float ``noise_scale*`` attribute (VITS's sampling temperatures, which scale every draw of its duration
  predictor and prior: the knob a user turns to 0 for deterministic speech) is set to 0.

Ties the weights do not make remain: a top-k over scores that are exactly equal by construction (the ReLU'd
indexer scores of DeepSeek-V3.2's sparse attention, zero for every key no head attends to) may keep any of the tied
keys. ONNX's TopK keeps the lower index (its specification); torch's CPU top-k does not say which it keeps. Under
:func:`lower_index_ties` eager keeps the lower index too: a second, equally valid reference for such a model.

A reference whose outputs overflowed or vanished through the random stack is refused by :func:`check_finite`.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

__all__ = ["break_ties", "check_finite", "fix_randomness", "lower_index_ties"]

#: the std of the noise added to a constant-initialised weight (the usual initializer_range)
TIE_NOISE = 0.02
_DRAWS = ("rand", "randn", "rand_like", "randn_like", "randint", "bernoulli", "multinomial", "normal")


def break_ties(model: Any, seed: int = 0) -> list[str]:
    """Add seeded noise to every constant floating parameter of >= 2 dims; return their names."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    changed = []
    with torch.no_grad():
        for name, param in model.named_parameters():
            if not param.is_floating_point() or param.dim() < 2 or param.numel() < 2 or param.device.type == "meta":
                continue
            flat = param.detach().reshape(-1)
            if bool((flat == flat[0]).all()):
                noise = torch.randn(param.shape, generator=gen, dtype=torch.float32) * TIE_NOISE
                param.add_(noise.to(param.dtype))
                changed.append(name)
    return changed


@contextlib.contextmanager
def _recording(draws: list[tuple[str, tuple[int, ...]]]) -> Iterator[None]:
    """Record the shapes of the random tensors torch's sampling functions return inside the block."""
    import torch

    originals = {name: getattr(torch, name) for name in _DRAWS if hasattr(torch, name)}

    def wrap(name: str, fn: Any) -> Any:
        def drawing(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            if torch.is_tensor(out):
                draws.append((name, tuple(out.shape)))
            return out

        return drawing

    try:
        for name, fn in originals.items():
            setattr(torch, name, wrap(name, fn))
        yield
    finally:
        for name, fn in originals.items():
            setattr(torch, name, fn)


def _draws(model: Any, inputs: dict[str, Any]) -> list[tuple[str, tuple[int, ...]]]:
    import torch

    draws: list[tuple[str, tuple[int, ...]]] = []
    with _recording(draws), torch.no_grad():
        model(**inputs)
    return draws


def fix_randomness(model: Any, sample: dict[str, Any], other: dict[str, Any]) -> str | None:
    """Make ``sample`` and ``other`` deterministic inputs of ``model`` (in place); return a note, or None when the
    forward draws nothing."""
    import torch

    if not _draws(model, sample):
        return None
    params = inspect.signature(model.forward).parameters
    noise = [n for n in params if n.startswith("noise") and n not in sample]
    fixed = []
    for seed, inputs in enumerate((sample, other)):
        draws = _draws(model, inputs)
        for name, (how, shape) in zip(noise, draws, strict=False):
            gen = torch.Generator().manual_seed(100 + seed)  # drawn as the model draws it (uniform or normal)
            draw = torch.randn if how.startswith(("randn", "normal")) else torch.rand
            inputs[name] = draw(shape, generator=gen)
            fixed.append(name)
    flag = params.get("sample")
    if flag is not None and flag.default is True:
        sample["sample"] = other["sample"] = False
        fixed.append("sample=False")
    fixed += _zero_noise_scales(model)
    if not fixed:
        return "the forward draws random numbers (no input to fix them)"
    still = _draws(model, sample)
    return f"random draws fixed: {', '.join(dict.fromkeys(fixed))}" + (" (some remain)" if still else "")


def _zero_noise_scales(model: Any) -> list[str]:
    """Set every module's positive float ``noise_scale*`` attribute to 0 (the draws it scales then add nothing);
    return the attribute names."""
    found = []
    for module in model.modules():
        for name, value in list(vars(module).items()):
            if name.startswith("noise_scale") and type(value) is float and value > 0:
                setattr(module, name, 0.0)
                found.append(name)
    return found


@contextlib.contextmanager
def lower_index_ties() -> Iterator[list[int]]:
    """Within the block, ``torch.topk`` / ``Tensor.topk`` keep the lower index among equal values (as ONNX's TopK
    specifies), through a stable sort; yields a list that receives one item per call."""
    import torch

    calls: list[int] = []
    original, own = torch.topk, torch.Tensor.__dict__.get("topk")

    def topk(input: Any, k: int, dim: int = -1, largest: bool = True, sorted: bool = True, **kwargs: Any) -> Any:
        calls.append(1)
        values, indices = torch.sort(input, dim=dim, descending=largest, stable=True)
        return torch.return_types.topk((values.narrow(dim, 0, k), indices.narrow(dim, 0, k)))

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return topk(self, *args, **kwargs)

    torch.topk = topk  # type: ignore[assignment]
    torch.Tensor.topk = method  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        torch.topk = original  # type: ignore[assignment]
        if own is None:
            del torch.Tensor.topk  # the C method of the base class shows through again
        else:
            torch.Tensor.topk = own  # type: ignore[method-assign]


#: a floating output whose largest magnitude is below this (and not exactly zero) has vanished through the stack
VANISHED = 1e-12


def check_finite(model: Any, inputs: dict[str, Any]) -> None:
    """Raise when eager's floating outputs on ``inputs`` are not all finite, or have vanished (all below
    :data:`VANISHED` but not zero: then every score a top-k ranks is its bias alone, an exact tie): a degenerate
    reference. The build then retries with a wider ``initializer_range`` (``_tiny_adjust``)."""
    import torch

    with torch.no_grad():
        out = model(**inputs)
    stack = [out]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack += list(value.values())
        elif isinstance(value, (tuple, list)):
            stack += list(value)
        elif torch.is_tensor(value) and value.is_floating_point() and value.numel():
            if not bool(torch.isfinite(value).all()):
                raise ValueError("eager output is not finite (the tiny random model overflows or vanishes)")
            largest = float(value.abs().max())
            if 0.0 < largest < VANISHED:
                raise ValueError(
                    f"eager output vanishes (max {largest:.1e}: the tiny random model's activations vanish)"
                )
