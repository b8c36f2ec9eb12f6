# Text2TextGenerationPipeline follows what Pipeline does at run time, not its stubs (class flags typed None, narrower
# preprocess/_forward/postprocess signatures, as transformers' own task pipelines have):
# mypy: disable-error-code="assignment,override,misc,operator,union-attr"
"""``hub_export.pipeline``: ``transformers.pipeline`` for exports, plus the seq2seq text task transformers 5 removed.

``transformers.pipeline(task, model=exported, tokenizer=...)`` itself runs an export: a pipeline takes any model
object and only calls what :class:`~hub_export.model.ExportedModel` answers (``config``, ``generation_config``,
``device``, ``dtype``, ``can_generate()``, ``forward``, ``generate``). Two things still differ, and
:func:`pipeline` (same arguments as ``transformers.pipeline``) handles them:

* the task pipelines check the model's class name against the task's model classes and log an error (harmless,
  but alarming) for any other class: for an export, this one checks the architecture it was exported from;
* transformers 5 removed ``text2text-generation`` (and ``summarization`` / ``translation``): this one provides
  :class:`Text2TextGenerationPipeline` (tokenize, ``generate``, decode), which runs eager encoder-decoder models
  and their exports alike.

It also keeps an export on its own device unless ``device=`` says otherwise (a task pipeline otherwise moves its
model to the first GPU it sees, which a CPU-only runtime such as ``onnxruntime`` cannot follow).

Example::

    from transformers import AutoTokenizer
    from hub_export import ExportedModel, pipeline

    tokenizer = AutoTokenizer.from_pretrained("me/tiny-llama")
    model = ExportedModel.from_pretrained("me/tiny-llama", export="onnx")
    pipeline("text-generation", model=model, tokenizer=tokenizer)("Hello", max_new_tokens=20)
"""

from __future__ import annotations

import functools
import importlib
import os
import warnings
from typing import Any

from transformers import GenerationConfig
from transformers.pipelines.base import Pipeline

from .model import ExportedModel

__all__ = ["SEQ2SEQ_TEXT_TASKS", "Text2TextGenerationPipeline", "pipeline"]

#: The seq2seq text tasks transformers 5 removed, served by :class:`Text2TextGenerationPipeline`.
SEQ2SEQ_TEXT_TASKS = ("text2text-generation", "summarization", "translation")


def pipeline(task: str | None = None, model: Any = None, *args: Any, **kwargs: Any) -> Any:
    """``transformers.pipeline`` (same arguments), fitted to exports: see the module docstring.

    ``task`` may be omitted for an export: it is read off the export (:func:`hub_export.tasks.export_task`).
    """
    import transformers

    if isinstance(model, (str, os.PathLike)):
        model = _export_named(model, kwargs)
    exported = isinstance(model, ExportedModel)
    if task is None and exported:
        from .tasks import export_task

        task = export_task(model)
    if exported and kwargs.get("device") is None and "device_map" not in kwargs:
        kwargs["device"] = model.device
    if task is not None and (task in SEQ2SEQ_TEXT_TASKS or task.startswith("translation_")):
        return _text2text(task, model, *args, **kwargs)
    if exported and task is not None and kwargs.get("pipeline_class") is None:
        kwargs["pipeline_class"] = _checked_by_architecture(_task_pipeline_class(task))
    make: Any = transformers.pipeline
    return make(task, model, *args, **kwargs)


def _export_named(name: str | os.PathLike[str], kwargs: dict[str, Any]) -> Any:
    """The export ``model=`` names (a folder or a Hub repo holding ``export.json``, in ``subfolder=`` if given), its
    tokenizer or processor taken from the export's own files unless given; a name that holds no export is returned
    as it is, for transformers to load the model itself.

    Raises:
        ManifestError: The repo holds exports, but in other folders (the message lists them: pass ``subfolder=``).
    """
    from pathlib import Path

    from .errors import ManifestError
    from .manifest import MANIFEST_NAME

    subfolder = kwargs.pop("subfolder", "") or ""
    hub = {key: kwargs[key] for key in ("revision", "token") if kwargs.get(key) is not None}
    local = Path(name)
    if local.is_dir() and not (local / subfolder / MANIFEST_NAME).is_file():
        return name  # a model folder: transformers loads it
    try:
        model = ExportedModel.from_pretrained(os.fspath(name), subfolder=subfolder, **hub)
    except ManifestError as exc:
        if "holds no export" in str(exc):
            return name  # a model repo without exports: transformers loads it
        raise
    if kwargs.get("tokenizer") is None and (local.is_dir() or not local.exists()):
        files = set(model.preprocessing or {})  # the export's own tokenizer and processor files
        if "tokenizer_config.json" in files or "tokenizer.json" in files:
            from transformers import AutoTokenizer

            where = str(local / subfolder) if local.is_dir() else str(name)
            options = {} if local.is_dir() else {"subfolder": subfolder, **hub}
            kwargs["tokenizer"] = AutoTokenizer.from_pretrained(where, **options)
    return model


def _task_pipeline_class(task: str) -> type:
    from transformers.pipelines import PIPELINE_REGISTRY

    _, targeted, _ = PIPELINE_REGISTRY.check_task(task)
    impl = targeted["impl"]
    if isinstance(impl, str):
        module, _, name = impl.rpartition(".")
        impl = getattr(importlib.import_module(module), name)
    return impl


@functools.cache
def _checked_by_architecture(cls: Any) -> type:
    """``cls`` whose model check reads an export's architecture (``config.architectures``) instead of its class."""

    def check_model_type(self: Any, supported_models: Any) -> None:
        if not isinstance(self.model, ExportedModel):
            return cls.check_model_type(self, supported_models)
        names: set[str] = set()
        for value in supported_models.values() if hasattr(supported_models, "values") else supported_models:
            names.update(value if isinstance(value, (tuple, list)) else (value,))
        architectures = list(getattr(self.model.config, "architectures", None) or [])
        if architectures and not names & set(architectures):
            warnings.warn(
                f"This export was made from {architectures[0]}, which is not a model for {self.task}.", stacklevel=3
            )
        return None

    return type(cls.__name__, (cls,), {"check_model_type": check_model_type, "__module__": cls.__module__})


def _text2text(task: str, model: Any, *args: Any, **kwargs: Any) -> Any:
    """A :class:`Text2TextGenerationPipeline`; a model or tokenizer given by name is loaded as
    ``transformers.pipeline`` would (``AutoModelForSeq2SeqLM`` / ``AutoTokenizer``)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    if args:
        raise TypeError(f"pipeline({task!r}, model, ...) takes its other arguments by keyword.")
    hub = {k: kwargs.pop(k) for k in ("revision", "token", "trust_remote_code") if k in kwargs}
    model_kwargs = kwargs.pop("model_kwargs", None) or {}
    if isinstance(model, str):
        model = AutoModelForSeq2SeqLM.from_pretrained(model, **hub, **model_kwargs)
    tokenizer = kwargs.pop("tokenizer", None)
    if tokenizer is None or isinstance(tokenizer, str):
        name = tokenizer or getattr(getattr(model, "config", None), "_name_or_path", None)
        if not name:
            raise ValueError(f"pipeline({task!r}) needs tokenizer= for this model.")
        tokenizer = AutoTokenizer.from_pretrained(name, **hub)
    for unused in ("config", "feature_extractor", "image_processor", "processor", "use_fast", "device_map"):
        kwargs.pop(unused, None)
    pipeline_class = kwargs.pop("pipeline_class", None) or Text2TextGenerationPipeline
    return pipeline_class(model=model, tokenizer=tokenizer, task=task, **kwargs)


class Text2TextGenerationPipeline(Pipeline):
    """Text in, generated text out, for encoder-decoder models (T5, BART, ...) and their exports, as
    transformers 4 did: ``pipe("translate: the cat")`` -> ``[{"generated_text": "..."}]``.

    The model's ``config.prefix`` (T5's task prefixes) goes before each input; generation arguments
    (``max_new_tokens``, ``num_beams``, ...) are ``generate()``'s; ``return_tensors=True`` returns
    ``generated_token_ids`` instead of text.
    """

    _pipeline_calls_generate = True
    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_video_processor = False
    _default_generation_config = GenerationConfig(max_new_tokens=256)

    def _sanitize_parameters(
        self,
        return_tensors: bool | None = None,
        clean_up_tokenization_spaces: bool | None = None,
        truncation: bool | None = None,
        **generate_kwargs: Any,
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        preprocess = {} if truncation is None else {"truncation": truncation}
        postprocess: dict[str, Any] = {}
        if return_tensors is not None:
            postprocess["return_tensors"] = return_tensors
        if clean_up_tokenization_spaces is not None:
            postprocess["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces
        return preprocess, generate_kwargs, postprocess

    def preprocess(self, inputs: str, truncation: bool = False) -> dict[str, Any]:
        if not isinstance(inputs, str):
            raise TypeError(f"{self.task} takes text (or a list of texts), got {type(inputs).__name__}.")
        prefix = getattr(self, "prefix", None) or ""
        return self.tokenizer(prefix + inputs, truncation=truncation, return_tensors="pt")

    def _forward(self, model_inputs: dict[str, Any], **generate_kwargs: Any) -> dict[str, Any]:
        batch = model_inputs["input_ids"].shape[0]
        output_ids = self.model.generate(**model_inputs, **self._prepare_generate_kwargs(generate_kwargs))
        if hasattr(output_ids, "sequences"):
            output_ids = output_ids.sequences
        return {"output_ids": output_ids.reshape(batch, output_ids.shape[0] // batch, *output_ids.shape[1:])}

    def postprocess(
        self, model_outputs: dict[str, Any], return_tensors: bool = False, clean_up_tokenization_spaces: bool = False
    ) -> list[dict[str, Any]]:
        records = []
        for output_ids in model_outputs["output_ids"][0]:
            if return_tensors:
                records.append({"generated_token_ids": output_ids})
            else:
                text = self.tokenizer.decode(
                    output_ids, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up_tokenization_spaces
                )
                records.append({"generated_text": text})
        return records

    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        """Generate for a text or a list of texts (one list of records per text; one record each unless
        ``num_return_sequences`` asks for more)."""
        result = super().__call__(inputs, *args, **kwargs)
        if isinstance(inputs, list) and all(isinstance(r, list) and len(r) == 1 for r in result):
            return [r[0] for r in result]  # one record per text, as transformers 4 returned
        return result
