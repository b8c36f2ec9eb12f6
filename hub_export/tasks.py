"""Tasks: what a model is exported for, and which ``ExportedModel`` class runs the export.

The task names are those of transformers pipelines and optimum (``text-generation``, ``text-classification``, ...).
Each task says which transformers auto class loads the source model for it and whether the export is made by
``export_for_generation`` (then ``generate()`` works). :func:`infer_task` reads the task off a model config's
architecture, as the Hub does. Each task and each generation plan names the class that runs its exports
(:func:`hub_export.model.exported_model_class` builds it)::

    TASKS["text-generation"]  # Task(name='text-generation', auto_class='AutoModelForCausalLM', generative=True, ...)
    infer_task(BertConfig(architectures=["BertForMaskedLM"]))  # 'fill-mask'
    plan_class_name({"kind": "encoder_decoder", ...})  # 'ExportedModelForSeq2SeqLM'

This module imports only the standard library at import time (transformers when a task is inferred).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

__all__ = [
    "TASKS",
    "Task",
    "auto_class_name",
    "export_task",
    "infer_task",
    "plan_class_name",
    "tasks_for",
]


@dataclass(frozen=True)
class Task:
    """One task.

    Attributes:
        name: The pipeline task name.
        auto_class: The transformers auto class that loads a model for it.
        generative: Exported by ``export_for_generation`` (its export runs ``generate()``).
        exported_class: The name of the class running its exports (``ExportedModelForCausalLM`` /
            ``ExportedModelForSeq2SeqLM`` for generative tasks, else ``ExportedModel``; see
            :func:`hub_export.model.exported_model_class`).
        non_generative_class: For a task served by two kinds of model (speech recognition: seq2seq models
            generate, CTC models do not), the auto class of the non-generative kind.
    """

    name: str
    auto_class: str
    generative: bool = False
    exported_class: str = "ExportedModel"
    non_generative_class: str | None = None


#: Task name -> :class:`Task`, in the order :func:`infer_task` tries them (heads before bare encoders).
TASKS: dict[str, Task] = {
    task.name: task
    for task in (
        Task("text-generation", "AutoModelForCausalLM", True, "ExportedModelForCausalLM"),
        Task("image-text-to-text", "AutoModelForImageTextToText", True, "ExportedModelForCausalLM"),
        Task("text2text-generation", "AutoModelForSeq2SeqLM", True, "ExportedModelForSeq2SeqLM"),
        Task(
            "automatic-speech-recognition",
            "AutoModelForSpeechSeq2Seq",
            True,
            "ExportedModelForSeq2SeqLM",
            non_generative_class="AutoModelForCTC",
        ),
        Task("text-classification", "AutoModelForSequenceClassification"),
        Task("token-classification", "AutoModelForTokenClassification"),
        Task("question-answering", "AutoModelForQuestionAnswering"),
        Task("fill-mask", "AutoModelForMaskedLM"),
        Task("image-classification", "AutoModelForImageClassification"),
        Task("audio-classification", "AutoModelForAudioClassification"),
        Task("feature-extraction", "AutoModel"),
    )
}

#: The generation plan's ``kind`` -> the class that runs it.
_PLAN_CLASSES = {
    "decoder_only": "ExportedModelForCausalLM",
    "multimodal": "ExportedModelForCausalLM",
    "encoder_decoder": "ExportedModelForSeq2SeqLM",
}


def _task(name: str) -> Task:
    if name not in TASKS:
        raise ConfigError(f"Unknown task {name!r}; known tasks: {', '.join(TASKS)}.")
    return TASKS[name]


def plan_class_name(plan: dict[str, Any]) -> str:
    """The name of the class running an export with this generation plan (``export.json``'s ``generation``).

    Raises:
        ConfigError: The plan's kind is unknown.
    """
    kind = plan.get("kind")
    if kind not in _PLAN_CLASSES:
        raise ConfigError(f"Unknown generation plan kind {kind!r}; known: {sorted(_PLAN_CLASSES)}.")
    return _PLAN_CLASSES[kind]


def auto_class_name(task: str, config: Any = None) -> tuple[str, bool]:
    """The auto class loading a model of ``config`` for ``task``, and whether its export is generative.

    Speech recognition is generative for encoder-decoder models (Whisper) and a single graph for CTC ones.
    """
    spec = _task(task)
    if spec.non_generative_class and config is not None and not getattr(config, "is_encoder_decoder", False):
        return spec.non_generative_class, False
    return spec.auto_class, spec.generative


def infer_task(config: Any, architecture: str | None = None) -> str:
    """The task of a model config: the first task whose auto class maps ``architecture`` (default: the config's
    first architecture) for this config class.

    Raises:
        ConfigError: No architecture is known, or no task's auto class loads it.
    """
    import transformers

    architectures = list(getattr(config, "architectures", None) or [])
    wanted = architecture or (architectures[0] if architectures else None)
    if not wanted:
        raise ConfigError(
            f"The {type(config).__name__} names no architecture (config.architectures); pass task= "
            f"(one of {', '.join(TASKS)})."
        )
    names = [(task.name, task.auto_class) for task in TASKS.values()]
    names += [(task.name, task.non_generative_class) for task in TASKS.values() if task.non_generative_class]
    for task, auto in names:
        mapping = getattr(getattr(transformers, auto, None), "_model_mapping", None)
        if mapping is None:
            continue
        try:
            found = mapping[type(config)]
        except KeyError:
            continue
        for candidate in found if isinstance(found, (tuple, list)) else (found,):
            if getattr(candidate, "__name__", None) == wanted:
                return task
    raise ConfigError(f"No task's auto class loads architecture {wanted!r}; pass task= (one of {', '.join(TASKS)}).")


def tasks_for(folder: Any) -> list[str]:
    """The tasks whose auto class loads the model config in ``folder`` (its class has a head for them)."""
    import transformers

    try:
        config = transformers.AutoConfig.from_pretrained(str(folder), trust_remote_code=False)
    except (OSError, ValueError):
        return []
    found = []
    for task in TASKS.values():
        for auto in filter(None, (task.auto_class, task.non_generative_class)):
            mapping = getattr(getattr(transformers, auto, None), "_model_mapping", None)
            if mapping is not None and type(config) in mapping and task.name not in found:
                found.append(task.name)
    return found


def export_task(exported: Any) -> str:
    """The task of an export: from its generation plan (decoder-only: ``text-generation``, vision/audio-language:
    ``image-text-to-text``, encoder-decoder: ``automatic-speech-recognition`` for audio inputs, else
    ``text2text-generation``), else from the architecture it was exported from (``config.architectures``, or
    the one its graph recorded).

    Raises:
        ConfigError: No task fits.
    """
    plan = exported.generation
    if plan:
        kind = plan.get("kind")
        if kind == "multimodal":
            return "image-text-to-text"
        if kind == "encoder_decoder":
            audio = exported.main_input_name in ("input_features", "input_values")
            return "automatic-speech-recognition" if audio else "text2text-generation"
        return "text-generation"
    config = exported.config
    architectures = list(getattr(config, "architectures", None) or [])
    recorded = next(iter(exported.components.values())).metadata.architecture if exported.components else None
    return infer_task(config, architectures[0] if architectures else recorded)
