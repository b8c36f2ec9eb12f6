"""``HfExporter``: the export pipeline shared by every format.

``export`` traces the model once (:func:`hub_export.export._trace.trace`), hands the ExportedProgram to
the format's ``export_program``, measures parity against eager on the sample inputs through the format's
runner, and returns an :class:`~hub_export.model.ExportedModel`. A backend package defines a subclass that
implements ``export_program`` (and, where it needs to, the hooks ``dynamic_bounds``, ``experts_forward`` and
``check_available``); its program I/O and runner are in its :class:`~hub_export.formats.Backend` record.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .._progress import stage
from .._quiet import quietly
from .._versions import warn_version_drift
from ..configs import ExportConfig
from ..errors import BackendUnavailableError, ConfigError, ParityError
from ..formats import Backend, ExportFormat, backend_for
from ..manifest import ComponentEntry
from ..model import ExportedComponent, ExportedModel
from ..patches.recurrence import recurrences_as
from ..quantization.base import find_quantizer, stage_for
from ..quantization.pt2e import quantize_traced
from ..sample_inputs import implied_inputs
from ..signature import Signature
from .size_one import check_size_one, one_size_candidates
from .trace import DimBounds, Traced, trace

__all__ = ["PARITY_RTOL", "HfExporter", "Lowered", "parity_tolerance"]

#: The parity tolerance of a half-precision model, relative to the largest output of eager on the sample inputs:
#: eager rounds every op's result to the dtype and a runtime computes in another order (or in float32), so an exact
#: export differs by units in the last place of the outputs' magnitude: 4 to 8 of them here (bfloat16 keeps 8
#: significant bits, float16 11). Measured on every format: 0 to 1.5 (``docs/precision.md``).
PARITY_RTOL: dict[str, float] = {"bfloat16": 2.0**-5, "float16": 2.0**-8}


def parity_tolerance(atol: float, dtype: str, magnitude: float) -> float:
    """The tolerance an export's parity is held to: the format's ``atol``, or for a half-precision model
    ``PARITY_RTOL[dtype]`` times the largest eager output's magnitude when that is larger."""
    rtol = PARITY_RTOL.get(dtype)
    return atol if rtol is None else max(atol, rtol * magnitude)


@dataclass(frozen=True)
class Lowered:
    """What a backend's lowering produced.

    Attributes:
        program: The format's program object.
        signature: The signature the program accepts when lowering changed it (ExecuTorch narrows dims to the
            sizes it planned memory for); None: the traced signature.
        extra: Backend-specific plain data recorded with the component (``extra`` in the manifest).
        weights: The program's stored weights by dtype (``{dtype: {"count", "bytes"}}``) when lowering stored them
            in another dtype than the traced program's (OpenVINO's ``compress_to_fp16``); None: the traced ones.
    """

    program: Any
    signature: Signature | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    weights: dict[str, dict[str, int]] | None = None


class HfExporter:
    """Base class of the exporters; pick a subclass per format or use ``AutoHfExporter``.

    Class attributes:
        export_format: The format this exporter writes.
        config_class: Its config dataclass.
        parity_atol: Tolerance recorded with the measured parity of a float32 model; a half-precision model's is
            also relative to its outputs' magnitude (:data:`PARITY_RTOL`, :func:`parity_tolerance`).
        one_generation_graph: ``export_for_generation`` of a decoder-only model tries one graph for the prompt and
            every step (the decode graph, taking any number of new tokens and an empty cache), so that the runtime
            holds one copy of the weights; it falls back to ``prefill`` + ``decode`` when the check fails.
        recurrence: The control-flow operator a model's loop over time is traced with, where a patch replaces the
            loop (:mod:`hub_export.patches.recurrence`): ``"scan"`` or ``"while_loop"`` (what the format's
            converter reads).
    """

    export_format: ClassVar[ExportFormat]
    config_class: ClassVar[type[ExportConfig]]
    parity_atol: ClassVar[float] = 1e-3
    one_generation_graph: ClassVar[bool] = False
    recurrence: ClassVar[str] = "scan"

    def __init__(self) -> None:
        warn_version_drift(("torch", "transformers", *self.backend.distributions))

    @property
    def backend(self) -> Backend:
        """This format's :class:`~hub_export.formats.Backend` record."""
        return backend_for(self.export_format)

    # -- public API -------------------------------------------------------------------------------------
    @quietly
    def export(self, model: Any, sample_inputs: dict[str, Any], *, config: ExportConfig | None = None) -> Any:
        """Export ``model`` traced on ``sample_inputs`` (the kwargs of one forward call).

        Args:
            model: A transformers ``PreTrainedModel`` (or any ``torch.nn.Module`` taking kwargs).
            sample_inputs: Sample kwargs; every tensor kwarg becomes a graph input, flags are applied at trace time.
                Inputs the config implies and the sample lacks are added (BERT's ``token_type_ids``, as zeros:
                see :func:`hub_export.sample_inputs.implied_inputs`).
            config: The export config (defaults to this format's config class with its defaults).

        Returns:
            An ``ExportedModel`` with a single ``"model"`` component.

        Raises:
            ExportError: The model cannot be traced or lowered with these inputs.
            BackendUnavailableError: The backend's package is not installed.
        """
        config = self._check_config(config)
        self.check_available(config)
        component = self.export_component(
            "model", model, implied_inputs(model, dict(sample_inputs)), config, admit_size_one=True
        )
        exported = ExportedModel(
            self.export_format,
            config,
            {"model": component},
            config=getattr(model, "config", None),
            generation_config=getattr(model, "generation_config", None),
            source=getattr(model, "_hub_export_source", None),
        )
        return _with_provenance(exported, model)

    @quietly
    def export_for_generation(
        self,
        model: Any,
        inputs: dict[str, Any],
        *,
        config: ExportConfig | dict[str, ExportConfig] | None = None,
        generation_config: Any = None,
        multi_token_decode: bool = False,
    ) -> Any:
        """Export the stages ``model.generate`` runs (``prefill``, ``decode``; ``encoder`` too for seq2seq).

        The stages' inputs are captured from a real ``generate(**inputs, max_new_tokens=2)`` run (see
        :func:`hub_export.utils.decompose_for_generation`); the returned export's ``generate()`` drives them.

        Example::

            exported = DynamoExporter().export_for_generation(model, inputs, config=DynamoConfig(dynamic=True))
            exported.save_pretrained("out")
            ids = ExportedModel.from_pretrained("out").generate(**inputs, max_new_tokens=8)

        Args:
            model: A transformers generative model.
            inputs: The kwargs of ``generate`` (tokenizer/processor output); small but representative.
            config: One export config, or a dict ``{component: config}`` (``"default"`` for the rest).
            generation_config: The ``GenerationConfig`` to capture with and to save (the model's by default).
            multi_token_decode: Capture ``decode`` over two query tokens so the query axis stays symbolic.

        Returns:
            An ``ExportedModel`` with one component per stage and a ``generation`` loop description.
        """
        from ..generation.export import export_for_generation  # the generation layer builds on this one

        exported = export_for_generation(
            self,
            model,
            inputs,
            config=config,
            generation_config=generation_config,
            multi_token_decode=multi_token_decode,
        )
        return _with_provenance(exported, model)

    def export_component(
        self,
        name: str,
        module: Any,
        sample_inputs: dict[str, Any],
        config: ExportConfig,
        *,
        lower_mins: dict[str, int] | None = None,
        also_check: Callable[[Any, ComponentEntry], None] | None = None,
        admit_size_one: bool = False,
    ) -> Any:
        """Trace, lower and parity-check one component.

        ``lower_mins`` lowers the minimum of traced dims before lowering (``{"sequence": 1}``: a query axis that
        ``torch.export`` bounded below by 2); the caller checks the program at those sizes, with ``also_check``:
        it is called with the parity runner and the component's metadata (parity recorded) once parity is
        measured, so that further checks run on the runner already built (one ONNX Runtime session, one OpenVINO
        compilation of the weights per component) before it is freed. ``admit_size_one`` lowers to 1 the dims the
        trace bounded below by 2 (its 0/1 specialization) and keeps each where the program computes size 1 as eager
        does (:mod:`.size_one`).
        """
        suffix = "" if name == "model" else f" {name}"
        self.check_model(module, sample_inputs, config)
        with stage(f"tracing{suffix}"), recurrences_as(self.recurrence):
            bounds = self.dynamic_bounds(module, config) if config.dynamic else None
            experts = functools.partial(self.experts_forward, config=config)
            traced = trace(module, sample_inputs, config, bounds=bounds, experts=experts)
            ones = one_size_candidates(traced.signature, sample_inputs) if admit_size_one and config.dynamic else {}
            if lower_mins or ones:
                traced = traced.replace(signature=_with_lower_mins(traced.signature, {**ones, **(lower_mins or {})}))
            if config.quantizer is not None:  # an "fx"-stage quantizer (PT2E) rewrites the traced program
                traced = quantize_traced(traced, config)
        with stage(f"lowering{suffix} to {self.export_format.value}"), traced.lowering_patches():
            lowered = self.export_program(traced, config)
        if not isinstance(lowered, Lowered):
            lowered = Lowered(lowered)
        metadata = ComponentEntry(
            files=(),
            signature=lowered.signature or traced.signature,
            architecture=traced.architecture,
            dtype=traced.dtype,
            device=traced.device,
            quantization=config.quantizer.to_dict() if config.quantizer is not None else None,
            extra=dict(lowered.extra),
            weights=lowered.weights if lowered.weights is not None else _weights_by_dtype(traced.program),
        )
        with stage(f"checking parity{suffix}"):
            runner = self.parity_runner(lowered.program, metadata)
            produced = runner.run_flat([t.clone() for t in traced.sample])
            # the user's own sample where the trace is from a longer one: its largest difference counts too
            others = [(e, runner.run_flat([t.clone() for t in s])) for s, e in traced.checks]
            if also_check is None and not ones:
                del runner  # its memory (a compiled copy of the weights, for some runtimes) goes before the next stage
        magnitude = max([_max_abs(traced.expected), *(_max_abs(e) for e, _ in others)])
        precision = self.parity_precision(traced.dtype, config)
        parity = {
            "max_abs_diff": max([_max_abs_diff(traced.expected, produced), *(_max_abs_diff(e, p) for e, p in others)]),
            "atol": parity_tolerance(self.parity_atol, precision, magnitude),
            "inputs": {s.name: list(t.shape) for s, t in zip(metadata.signature.inputs, traced.sample)},
            "dtype": traced.dtype,
        }
        if precision in PARITY_RTOL:
            parity.update(rtol=PARITY_RTOL[precision], max_abs_expected=magnitude)
        metadata = dataclasses.replace(metadata, parity=parity)
        if ones:
            with stage(f"checking{suffix} at size 1"):
                atol = float(parity["atol"])  # type: ignore[arg-type]
                signature = check_size_one(runner, metadata.signature, module, sample_inputs, ones, atol)
                metadata = dataclasses.replace(metadata, signature=signature)
                if also_check is None:
                    del runner
        if also_check is not None:
            with stage(f"checking{suffix} further"):
                also_check(runner, metadata)
                del runner
        return ExportedComponent(name, self.export_format, lowered.program, metadata)

    # -- backend hooks ----------------------------------------------------------------------------------
    def check_available(self, config: ExportConfig) -> None:
        """Raise if the backend (or the device the config targets) is unavailable, before any tracing."""
        import importlib.util

        backend = self.backend
        for package in backend.packages:
            if importlib.util.find_spec(package) is None:
                raise BackendUnavailableError(
                    f'{type(self).__name__} needs {package!r}; install it with `pip install "hub-export[{backend.extra}]"`.'
                )
        if config.quantizer is not None:
            find_quantizer(config, "")  # type check only
            config.quantizer.check_available(stage_for(config, config.quantizer))

    def check_model(self, module: Any, sample_inputs: dict[str, Any], config: ExportConfig) -> None:
        """Raise if this format cannot run ``module`` (its dtype, say) on its runtime, before any tracing."""

    def parity_precision(self, dtype: str, config: ExportConfig) -> str:
        """The dtype whose precision the export computes in, which sets its parity tolerance
        (:func:`parity_tolerance`): the model's ``dtype``, unless the format stores or computes in a coarser one
        (OpenVINO's ``compress_to_fp16`` and ``inference_precision``)."""
        return dtype

    def dynamic_bounds(self, module: Any, config: ExportConfig) -> DimBounds | None:
        """Per-axis ``(min, max)`` for a ``dynamic=True`` trace (see :data:`DimBounds`); None leaves dims unbounded."""
        return None

    def experts_forward(self, module: Any, config: ExportConfig) -> Callable[..., Any] | None:
        """The forward a mixture-of-experts module runs while tracing for this format.

        None (the default) takes the per-expert loop of standard ops
        (:func:`hub_export.patches.tracing.experts_as_standard_ops`); a backend returns its own where its runtime
        needs another (ExecuTorch: static shapes; ONNX fused for cuda: one ``MoE`` node).
        """
        return None

    def parity_runner(self, program: Any, metadata: ComponentEntry) -> Any:
        """The runner the export's parity check runs ``program`` with, once: by default the format's runner on its
        default device. A backend returns one that holds less memory where its runtime would otherwise copy the
        weights (nothing but the check runs on it)."""
        return self.backend.runner_class.from_program(program, metadata, device=None)

    def export_program(self, traced: Traced, config: ExportConfig) -> Lowered | Any:
        """Lower the traced ExportedProgram to this format's program: the program itself, or a :class:`Lowered`
        when lowering changed the sizes the program accepts or has plain data to record in the manifest."""
        raise NotImplementedError

    # -- helpers ----------------------------------------------------------------------------------------
    def _check_config(self, config: ExportConfig | None) -> ExportConfig:
        if config is None:
            return self.config_class()
        if not isinstance(config, self.config_class) or config.export_format is not self.export_format:
            raise ConfigError(
                f"{type(self).__name__} takes a {self.config_class.__name__}, got {type(config).__name__}; "
                "use AutoHfExporter.from_config(config) to pick the matching exporter."
            )
        return config


def _with_lower_mins(signature: Signature, mins: dict[str, int]) -> Signature:
    """``signature`` with the named symbolic dims admitting sizes down to ``mins`` (pinned dims stay pinned)."""
    dims = dict(signature.dims)
    for name, low in mins.items():
        dim = dims.get(name)
        if dim is not None and not dim.pinned and low < dim.min:
            dims[name] = dataclasses.replace(dim, min=low)
    return signature.replace(dims=dims)


def _weights_by_dtype(program: Any) -> dict[str, dict[str, int]]:
    """``{dtype: {"count", "bytes"}}`` of the program's parameters, buffers and tensor constants (a storage several
    names share, such as tied embeddings, counted once)."""
    from ..manifest import schema
    from ..signature import dtype_name

    known = set(schema()["$defs"]["dtype"]["enum"])
    seen: dict[int, tuple[str, int]] = {}
    for value in [*program.state_dict.values(), *program.constants.values()]:
        name = dtype_name(getattr(value, "dtype", ""))
        if name not in known:
            continue
        try:
            storage = value.untyped_storage()
        except (AttributeError, RuntimeError, NotImplementedError):  # a tensor subclass without one storage
            continue
        seen[storage.data_ptr() or id(value)] = (name, storage.nbytes())
    summary: dict[str, dict[str, int]] = {}
    for name, nbytes in seen.values():
        entry = summary.setdefault(name, {"count": 0, "bytes": 0})
        entry["count"] += 1
        entry["bytes"] += nbytes
    return summary


def _with_provenance(exported: Any, model: Any) -> Any:
    """Record where ``model`` came from on the export: its Hub source (also for a model loaded with transformers'
    ``from_pretrained(repo_id)``), the task its architecture serves, and its preprocessing files (tokenizer,
    processor configs), which ``save_pretrained`` writes beside the programs. A single graph of a generative
    model (a causal LM's forward) records no task: it cannot generate, so it does not claim ``text-generation``."""
    from ..hub.source import preprocessing_of, source_of
    from ..tasks import auto_class_name, infer_task

    exported.source = exported.source or source_of(model)
    if exported.task is None and getattr(model, "config", None) is not None:
        try:
            exported.task = infer_task(model.config)
        except ConfigError:
            exported.task = None
        if exported.task is not None and not exported.generation and auto_class_name(exported.task, model.config)[1]:
            exported.task = None  # one graph of a generative model cannot serve text-generation: no label claims it
    exported.preprocessing = preprocessing_of(model, exported.source)
    return exported


def _max_abs(tensors: list[Any]) -> float:
    """The largest finite magnitude among the floating-point ``tensors`` (0.0 when none)."""
    import torch

    worst = 0.0
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel():
            for chunk in _chunks(t.detach()):
                worst = max(worst, float(chunk.double().abs().nan_to_num(nan=0.0, posinf=0.0).max()))
    return worst


def _chunks(tensor: Any, size: int = 1 << 20) -> Any:
    """``tensor`` flattened, in slices of ``size`` elements: a comparison in float64 holds a few of them at a time,
    not copies of a whole output (a language model's logits are tens of MB)."""
    flat = tensor.reshape(-1)
    return (flat[start : start + size] for start in range(0, flat.numel(), size))


def _max_abs_diff(expected: list[Any], produced: list[Any]) -> float:
    import torch

    if len(expected) != len(produced):
        raise ParityError(f"The exported program returned {len(produced)} outputs, eager returned {len(expected)}.")
    worst = 0.0
    for a, b in zip(expected, produced):
        b = torch.as_tensor(b).to(a.device)
        if a.shape != b.shape:
            raise ParityError(f"Output shape {tuple(b.shape)} differs from eager {tuple(a.shape)}.")
        for x, y in zip(_chunks(a), _chunks(b)):
            worst = max(worst, float((x.double() - y.double()).abs().max()))
    return worst
