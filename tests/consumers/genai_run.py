"""Run an ONNX generation export with onnxruntime-genai, as its users do: ``og.Model`` on the folder (run by
tests/test_consumers.py; prints one JSON object).

    python genai_run.py FOLDER PROMPT_IDS_JSON
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    import onnxruntime_genai as og

    folder, prompt = sys.argv[1], json.loads(sys.argv[2])
    model = og.Model(folder)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + 20, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(prompt)
    ids = list(prompt)
    while not generator.is_done():
        generator.generate_next_token()
        ids.append(int(generator.get_next_tokens()[0]))
    tokenizer = og.Tokenizer(model)
    print(json.dumps({"ids": ids, "text": tokenizer.decode(ids[len(prompt) :])}))


if __name__ == "__main__":
    main()
