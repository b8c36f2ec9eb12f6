"""hub_export.tasks: task names read off configs and exports, and the class that runs each task's export."""

from __future__ import annotations

import pytest
import transformers
from transformers import GenerationMixin

from hub_export import ConfigError, ExportedModel
from hub_export.model import ExportedModelForCausalLM, ExportedModelForSeq2SeqLM, exported_model_class
from hub_export.tasks import TASKS, auto_class_name, infer_task


@pytest.mark.parametrize(
    "config,architecture,task",
    [
        (transformers.LlamaConfig(), "LlamaForCausalLM", "text-generation"),
        (transformers.T5Config(), "T5ForConditionalGeneration", "text2text-generation"),
        (transformers.WhisperConfig(), "WhisperForConditionalGeneration", "automatic-speech-recognition"),
        (transformers.Wav2Vec2Config(), "Wav2Vec2ForCTC", "automatic-speech-recognition"),
        (transformers.BertConfig(), "BertForSequenceClassification", "text-classification"),
        (transformers.BertConfig(), "BertForTokenClassification", "token-classification"),
        (transformers.BertConfig(), "BertForMaskedLM", "fill-mask"),
        (transformers.BertConfig(), "BertModel", "feature-extraction"),
        (transformers.ViTConfig(), "ViTForImageClassification", "image-classification"),
        (transformers.LlavaConfig(), "LlavaForConditionalGeneration", "image-text-to-text"),
    ],
)
def test_infer_task_from_the_architecture(config, architecture, task):
    config.architectures = [architecture]
    assert infer_task(config) == task


def test_tasks_pick_loading_and_running_classes():
    assert auto_class_name("automatic-speech-recognition", transformers.WhisperConfig()) == (
        "AutoModelForSpeechSeq2Seq",
        True,
    )
    assert auto_class_name("automatic-speech-recognition", transformers.Wav2Vec2Config()) == ("AutoModelForCTC", False)
    assert exported_model_class(task="text-generation") is ExportedModelForCausalLM
    assert exported_model_class(task="text2text-generation") is ExportedModelForSeq2SeqLM
    assert exported_model_class(task="fill-mask") is ExportedModel
    assert exported_model_class({"kind": "multimodal"}) is ExportedModelForCausalLM
    assert exported_model_class({"kind": "encoder_decoder"}) is ExportedModelForSeq2SeqLM
    assert exported_model_class(None) is ExportedModel
    assert issubclass(ExportedModelForCausalLM, ExportedModel) and issubclass(ExportedModelForCausalLM, GenerationMixin)
    assert all(getattr(transformers, task.auto_class) for task in TASKS.values())
    with pytest.raises(ConfigError, match="names no architecture"):
        infer_task(transformers.BertConfig())
    with pytest.raises(ConfigError, match="Unknown generation plan kind"):
        exported_model_class({"kind": "telepathy"})
    with pytest.raises(ConfigError, match="Unknown task"):
        exported_model_class(task="summarize-everything")
