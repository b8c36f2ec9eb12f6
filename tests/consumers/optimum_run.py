"""Run an export with optimum's own classes, as a user of optimum-onnx or optimum-intel would (run by
tests/test_consumers.py in that package's environment; prints one JSON object).

    python optimum_run.py onnx|openvino causal-lm|sequence-classification|feature-extraction REPO SUBFOLDER PROMPT
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    runtime, task, repo, subfolder, prompt = sys.argv[1:6]
    if runtime == "onnx":
        from optimum.onnxruntime import ORTModelForCausalLM as CausalLM
        from optimum.onnxruntime import ORTModelForFeatureExtraction as FeatureExtraction
        from optimum.onnxruntime import ORTModelForSequenceClassification as SequenceClassification
    else:
        from optimum.intel import OVModelForCausalLM as CausalLM
        from optimum.intel import OVModelForFeatureExtraction as FeatureExtraction
        from optimum.intel import OVModelForSequenceClassification as SequenceClassification
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(repo)
    inputs = tokenizer(prompt, return_tensors="pt")
    if task == "causal-lm":
        inputs.pop("token_type_ids", None)
        model = CausalLM.from_pretrained(repo, subfolder=subfolder)
        ids = model.generate(**inputs, max_new_tokens=20, do_sample=False)
        print(json.dumps({"ids": ids.tolist()}))
        return
    cls = SequenceClassification if task == "sequence-classification" else FeatureExtraction
    model = cls.from_pretrained(repo, subfolder=subfolder)
    out = model(**inputs)
    value = out.logits if task == "sequence-classification" else out.last_hidden_state
    print(json.dumps({"output": value.tolist(), "inputs": {k: v.tolist() for k, v in inputs.items()}}))


if __name__ == "__main__":
    main()
