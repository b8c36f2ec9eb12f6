"""Failure classes of the coverage benchmark: one class per failing cell, read from its reason and traceback.

A class names the root cause the library (or its backend) would fix once for every architecture in it; the
order of :data:`RULES` matters (the first match wins, the most specific first). ``classify`` never raises: an
exception that matches no rule is ``export-error`` (or ``run-error`` when the export succeeded and a run failed).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["CLASSES", "RULES", "classify"]

#: class -> what it means (the report's legend, in this order)
CLASSES: dict[str, str] = {
    "tiny-config": "the tiny model or its sample inputs could not be built or run eagerly (the harness's side, "
    "not an export failure; not counted in the export totals)",
    "schema": "the export succeeded but export.json (hub_export's manifest schema) refused it, e.g. a symbolic "
    "size expression its pattern does not admit",
    "round-trip": "the export ran, but saving it, loading it back or running the loaded one failed",
    "hybrid-cache": "a cache with linear-attention / SSM / sliding layers that the exporter cannot flatten",
    "cache-state": "the model's own cache class (transformers adds them per model) holds tensors beyond attention "
    "keys/values and state-space states (compressed entries, indexer keys...): exports return it but cannot "
    "take it back as an input",
    "data-dependent-guard": "torch.export hit control flow or a size that depends on tensor values "
    "(GuardOnDataDependentSymNode, data-dependent expressions)",
    "pinned-sequence": "dynamic axes asked, but the model's code restricts one (pinned to the traced size, capped, "
    "or a multiple of N: the export's dims say so and the other shape is refused with InputBoundsError; an integer "
    "input whose values the model turns into sizes, such as an image grid, fixed to the sample's values; or an "
    "undeclared guard / constraint violation)",
    "unsupported-op": "the backend has no conversion for an operator (ONNX function, OpenVINO conversion "
    "rule, a custom op of transformers)",
    "openvino-shape-inference": "OpenVINO converted the graph but its shape inference failed (at compile time "
    "or at the other shape)",
    "executorch-lowering": "to_edge / XNNPACK lowering / the ExecuTorch runtime refused the program",
    "onnx-conversion": "torch.onnx could not convert or optimise the exported program (ConversionError, an "
    "onnx_ir pass error)",
    "onnx-runtime": "the ONNX model was written but onnxruntime refused to load or run it",
    "dynamo-unsupported": "torch.export could not trace a Python construct (dynamo Unsupported / UserError)",
    "output-structure": "the exported model's outputs differ in structure from eager (class, leaves, shape)",
    "parity": "the export ran but its outputs differ from eager beyond the tolerance (inf: NaN on one side only; "
    "generation: greedy tokens differ from eager generate; quantized: a chosen token outside eager's top 5)",
    "timeout": "the cell did not finish within the time limit",
    "crash": "the process died (segfault, abort, out of memory)",
    "export-error": "any other exception during the export",
    "run-error": "any other exception while running the export",
}


def _format(row: dict[str, Any]) -> str:
    """The backend's format: a generation cell ``gen-onnx`` is an ONNX cell."""
    return str(row.get("backend", "")).removeprefix("gen-")


# (class, pattern over "reason + traceback", a predicate on the row or None); the first match wins
RULES: list[tuple[str, re.Pattern[str], Any]] = [
    ("timeout", re.compile(r"timed out|TimeoutError"), None),
    ("tiny-config", re.compile(r"^\[build\]"), None),
    ("crash", re.compile(r"process died|Segmentation fault|core dumped|MemoryError|Killed"), None),
    # before "schema": the runtime's refusal message mentions export.json ("does not belong to this export.json")
    ("executorch-lowering", re.compile(r"The ExecuTorch runtime (failed to run|cannot load)"), None),
    ("schema", re.compile(r"ManifestError|export\.json"), None),
    ("round-trip", re.compile(r"^\[(save|load|run loaded)\]|^after save/load"), None),
    ("cache-state", re.compile(r"holds state exports cannot carry|keeps state of its own"), None),
    (
        "hybrid-cache",
        re.compile(
            r"cache layers .*cannot be exported|LinearAttention|Mamba.*Cache|HybridCache|"
            r"cannot be flattened|unsupported cache",
            re.IGNORECASE,
        ),
        None,
    ),
    (
        "data-dependent-guard",
        re.compile(
            r"GuardOnDataDependentSymNode|data[- ]dependent|Could not guard on|"
            r"Could not extract specialized integer|unbacked symint|u\d+ is not",
            re.IGNORECASE,
        ),
        None,
    ),
    (
        "pinned-sequence",
        re.compile(
            r"fixed to \d+|fixed this axis|Constraints violated|specialized to|were specialized|is static there|"
            r"Guard failed: .*size\(\)|Expected input at .* to be equal to|"
            r"inferred to be a constant|marked as dynamic but|Not all values of .* satisfy|"
            r"static there|pinned|outside the exported bounds|this export was built for",
            re.IGNORECASE,
        ),
        None,
    ),
    (
        "unsupported-op",
        re.compile(
            r"No ONNX function found|No conversion rule|not supported by|Unsupported operator|"
            r"OpConversionFailed|FX node .* not supported|Operator .* is not supported|"
            r"no decomposition|aten::\w+.*not (implemented|supported)|torch\.ops\.transformers|_is_all_true",
            re.IGNORECASE,
        ),
        None,
    ),
    (
        "openvino-shape-inference",
        re.compile(
            r"shape[_ ]inference|Shape inference|AvgPool node|Check '.*' failed at src/core|"
            r"src/plugins/intel_cpu",
            re.IGNORECASE,
        ),
        lambda row: _format(row) == "openvino",
    ),
    (
        "executorch-lowering",
        re.compile(
            r"executorch|XNNPACK|to_edge|edge dialect|EdgeDialect|MemoryAllocationFailed|"
            r"Missing out variants|ExportError.*lower",
            re.IGNORECASE,
        ),
        lambda row: _format(row) == "executorch",
    ),
    (
        "onnx-runtime",
        re.compile(r"onnxruntime|ONNXRuntimeError|InvalidGraph|Fail\]|\[ONNXRuntimeError\]", re.IGNORECASE),
        lambda row: _format(row) == "onnx",
    ),
    (
        "onnx-conversion",
        re.compile(r"ConversionError|PassError|Failed to decompose the FX graph|torch\.onnx\.export failed"),
        lambda row: _format(row) == "onnx",
    ),
    (
        "dynamo-unsupported",
        re.compile(r"torch\._dynamo\.exc\.(Unsupported|UserError)|(^|\n)Unsupported: |UserError: "),
        None,
    ),
    ("output-structure", re.compile(r"output class|output leaves differ|output shape mismatch"), None),
    ("parity", re.compile(r"max abs diff|greedy tokens differ|not close to eager"), None),
]


def classify(row: dict[str, Any]) -> str | None:
    """The failure class of a result row (None for a passing or skipped row)."""
    if row.get("ok") or row.get("skip"):
        return None
    text = f"{row.get('reason', '')}\n{row.get('cause', '')}\n{row.get('trace', '')}"
    for name, pattern, predicate in RULES:
        if pattern.search(text) and (predicate is None or predicate(row)):
            return name
    return "run-error" if str(row.get("reason", "")).startswith(("[run", "[generate")) else "export-error"
