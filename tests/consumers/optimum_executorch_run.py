"""Run an ExecuTorch generation export with optimum-executorch, as its users do: ``ExecuTorchModelForCausalLM`` on
the repo and subfolder (run by tests/test_consumers.py in its environment; prints one JSON object).

    python optimum_executorch_run.py REPO SUBFOLDER PROMPT_IDS_JSON NEW_TOKENS
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    from optimum.executorch import ExecuTorchModelForCausalLM

    repo, subfolder, prompt, new = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
    model = ExecuTorchModelForCausalLM.from_pretrained(repo, subfolder=subfolder)
    ids = model.generate(prompt, echo=True, max_seq_len=len(prompt) + new)
    print(json.dumps({"ids": ids}))


if __name__ == "__main__":
    main()
