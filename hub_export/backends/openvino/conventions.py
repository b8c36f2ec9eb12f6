"""What OpenVINO's own runtimes and tools read in an export folder, in one place.

* **File names.** optimum-intel's ``OVModelFor...`` and OpenVINO GenAI's pipelines load ``openvino_model.xml`` (+
  ``.bin``): a plain export's ``model`` component and the one graph of a decoder-only generation export are saved
  so (:func:`hub_export.formats.one_graph_stem`).
* **Tokenizer IRs.** OpenVINO GenAI takes text in and out through ``openvino_tokenizer.xml`` and
  ``openvino_detokenizer.xml`` (+ ``.bin``), which openvino-tokenizers converts from the model's tokenizer files:
  :func:`write_runtime_files` writes them for an export that carries a tokenizer.
* **Precision.** An export's inference precision is recorded in the IR (``rt_info/runtime_options``), which
  hub_export's runner applies, but OpenVINO's CPU plugin does not read that hint when someone else compiles the
  file: on a CPU with bfloat16 units it would compute a float32 export in bfloat16 (2.4e-3 off a tiny Llama's logits
  instead of 1e-7). Every operation of an export that promises float32 is therefore marked as OpenVINO's own
  conversion marks what must stay precise (the ``DisablePrecisionConversion`` runtime attribute, no conversion to
  bf16 or f16): :func:`mark_precise`.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import Any

from ...manifest import Manifest

__all__ = ["TOKENIZER_FILES", "mark_precise", "write_runtime_files"]

#: The tokenizer IRs OpenVINO GenAI reads, with their weights.
TOKENIZER_FILES = (
    "openvino_tokenizer.xml",
    "openvino_tokenizer.bin",
    "openvino_detokenizer.xml",
    "openvino_detokenizer.bin",
)
#: The runtime attribute OpenVINO's conversion gives an operation that must keep its precision (``precise`` in IR
#: written before 2025), disabling its conversion from any type to bf16 and f16.
_PRECISE = '<attribute name="DisablePrecisionConversion" version="0" value="dynamic:bf16,f16" />'
_PRECISE_NAME = '<attribute name="DisablePrecisionConversion"'
_LAYER = re.compile(r'^(\s*)<layer id="[^"]*" name="[^"]*" type="([^"]*)"[^>]*[^/]>\s*$')
_UNMARKED = frozenset({"Parameter", "Result"})


def mark_precise(xml: Path) -> int:
    """Mark every operation of a saved IR precise (see the module docstring), in place; returns how many.

    The XML is rewritten line by line as OpenVINO's serializer writes it (a layer's start tag on its own line, its
    ``rt_info`` a direct child, one attribute a line), so memory stays bounded whatever its size. An operation
    OpenVINO already marked (weights compressed to fp16 keep some in f32) gets the attribute's value widened.
    """
    xml = Path(xml)
    marked = 0
    partial = xml.with_name(xml.name + ".precise")
    try:
        with open(xml, encoding="utf-8") as source, open(partial, "w", encoding="utf-8") as target:
            indent: str | None = None  # the indentation of the open layer's children, while it may get rt_info
            inside = found = False  # within that layer's rt_info; whether it had the attribute
            for line in source:
                if inside:
                    if line.strip().startswith(_PRECISE_NAME):
                        line = line[: len(line) - len(line.lstrip())] + _PRECISE + "\n"
                        found = True
                    elif line.strip() == "</rt_info>":
                        if not found:
                            target.write(f"{indent}\t{_PRECISE}\n")
                        indent, inside, marked = None, False, marked + 1
                    target.write(line)
                    continue
                match = _LAYER.match(line)
                if match is not None and match.group(2) not in _UNMARKED:
                    target.write(line)
                    indent = match.group(1) + "\t"
                    continue
                if indent is not None:
                    stripped = line.strip()
                    if stripped == "<rt_info>" and line.startswith(indent + "<"):
                        inside, found = True, False
                    elif not stripped.startswith("<data"):  # the layer's first child after <data>: no rt_info
                        target.write(f"{indent}<rt_info>\n{indent}\t{_PRECISE}\n{indent}</rt_info>\n")
                        indent, marked = None, marked + 1
                target.write(line)
        os.replace(partial, xml)
    finally:
        partial.unlink(missing_ok=True)
    return marked


def write_runtime_files(directory: Path, manifest: Manifest) -> list[str]:
    """OpenVINO GenAI's tokenizer IRs, converted with openvino-tokenizers from the export's tokenizer files (none
    when the export has no tokenizer). A tokenizer openvino-tokenizers cannot convert is left out with a warning: the
    export still runs from token ids."""
    directory = Path(directory)
    if not (directory / "tokenizer.json").is_file() and not (directory / "tokenizer_config.json").is_file():
        return []
    try:
        tokenizer, detokenizer = _convert(directory)
    except Exception as exc:  # noqa: BLE001 - openvino-tokenizers raises many types for what it cannot convert
        warnings.warn(
            f"openvino-tokenizers could not convert this tokenizer ({type(exc).__name__}: {str(exc)[:200]}); the "
            "export has no openvino_tokenizer.xml, so OpenVINO GenAI runs it from token ids only.",
            stacklevel=2,
        )
        return []
    import openvino

    for model, name in ((tokenizer, "openvino_tokenizer.xml"), (detokenizer, "openvino_detokenizer.xml")):
        openvino.save_model(model, str(directory / name))
    return list(TOKENIZER_FILES)


def _convert(directory: Path) -> tuple[Any, Any]:
    """The tokenizer and detokenizer models of the folder's tokenizer files (data only: the export's preprocessing
    files refuse remote code)."""
    from openvino_tokenizers import convert_tokenizer
    from transformers import AutoTokenizer

    hf_tokenizer = AutoTokenizer.from_pretrained(str(directory), trust_remote_code=False)
    return convert_tokenizer(hf_tokenizer, with_detokenizer=True)
