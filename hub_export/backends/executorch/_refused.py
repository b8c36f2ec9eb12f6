"""Partitions XNNPACK fails to compile, left to ExecuTorch's portable kernels instead of failing the export.

XNNPACK's partitioner tags the nodes it can take, then ``XnnpackBackend.preprocess`` compiles each tagged partition
(executorch 1.5.1, ``backends/xnnpack/xnnpack_preprocess.py``). On some valid partitions that compile raises, and one
failing partition aborts the whole lowering:

- its own passes raise on a graph they do not expect ("An error occurred when running the 'ConvertToLinearPass'
  pass", also ``Conv1dUnsqueezePass``, ``RemoveGetItemPass``, ``PropagateCustomMetaPass``: D-FINE, EfficientLoFTR,
  Funnel, Ling hybrid);
- a partition's output is one of its inputs once a pair of permutes cancels ("Output node ... is already in the
  inputs ... pass through arguments, which are not supported in XNNPACK Delegate": CLVP, RecurrentGemma).

:func:`xnnpack_preprocess_watch` notices that a failure came from that compile; :func:`.exporter._to_edge` then
lowers again twice: a *survey*, in which every partition is compiled and each one that fails is recorded (by its
nodes' names) instead of raised, and the lowering whose partitioner (:func:`partitioner_without`) leaves the recorded
partitions undelegated, so that their nodes run on the portable kernels (slower, not wrong: the export's parity
check runs the program as saved). Both re-lowerings decompose every op to the core ATen opset (no op is kept whole for
XNNPACK): a kept ``linear`` left undelegated would be refused ("was not decomposed or delegated"). Lowering is
deterministic for one program and partitioner, so the survey's names are the last lowering's.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PreprocessWatch", "warn_refused", "partitioner_without", "xnnpack_preprocess_watch"]


@dataclass
class PreprocessWatch:
    """What :func:`xnnpack_preprocess_watch` saw: ``failed`` once a compile raised; with ``survey`` on, the failing
    partitions' node names (``refused``) and their errors, each compile answered with an empty placeholder."""

    failed: bool = False
    survey: bool = False
    refused: list[frozenset[str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    compiled: int = 0


@contextlib.contextmanager
def xnnpack_preprocess_watch() -> Iterator[PreprocessWatch]:
    """``XnnpackBackend.preprocess`` watched (a reversible patch): see :class:`PreprocessWatch`."""
    from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend
    from executorch.exir.backend.backend_details import PreprocessResult

    watch = PreprocessWatch()
    original = XnnpackBackend.__dict__["preprocess"]
    compile_partition = original.__func__

    def preprocess(edge_program: Any, compile_specs: Any) -> Any:
        watch.compiled += 1
        try:
            return compile_partition(edge_program, compile_specs)
        except Exception as exc:
            watch.failed = True
            if not watch.survey:
                raise
            nodes = frozenset(node.name for node in edge_program.graph.nodes if node.op == "call_function")
            watch.refused.append(nodes)
            first = str(exc).splitlines()[0][:200] if str(exc) else ""
            watch.errors.append(f"{type(exc).__name__}: {re.sub(r'_[0-9]+', '', first)}")  # node numbers dropped
            return PreprocessResult(processed_bytes=b"")  # the survey's program is discarded

    XnnpackBackend.preprocess = staticmethod(preprocess)
    try:
        yield watch
    finally:
        XnnpackBackend.preprocess = original


def partitioner_without(refused: list[frozenset[str]]) -> Any:
    """XNNPACK's partitioner, keeping no op whole, whose partitions holding a node named in ``refused`` stay
    undelegated (their nodes keep no delegation tag)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    class PartitionerWithout(XnnpackPartitioner):
        def ops_to_not_decompose(self, ep: Any) -> tuple[list[Any], None]:
            return [], None

        def partition(self, exported_program: Any) -> Any:
            result = super().partition(exported_program)
            nodes = list(result.tagged_exported_program.graph.nodes)
            for tag in list(result.partition_tags):
                tagged = [node for node in nodes if node.meta.get("delegation_tag") == tag]
                names = {node.name for node in tagged if node.op == "call_function"}
                if any(names & refused_names for refused_names in refused):
                    for node in tagged:
                        del node.meta["delegation_tag"]
                    del result.partition_tags[tag]
            return result

    return PartitionerWithout()


def warn_refused(watch: PreprocessWatch) -> None:
    """One warning naming how many partitions run on the portable kernels, and why."""
    # a warning, not a log record: hub_export's own warnings show while other libraries' output is hidden (_quiet)
    warnings.warn(
        f"XNNPACK could not compile {len(watch.refused)} of the {watch.compiled} partitions "
        f"({'; '.join(sorted(set(watch.errors)))}): they run on ExecuTorch's portable kernels.",
        UserWarning,
        stacklevel=2,
    )
