"""The program's graph is recompiled once after its partitions are cut out, not once per partition (a reversible patch).

ExecuTorch 1.5.1's ``to_backend`` cuts each partition the partitioner tagged out of the program's graph
(``exir/backend/backend_api.py``, ``_create_partitions_in_graph_module``), one partition at a time, with
``create_submodule_from_nodes`` (``exir/lowered_backend_module.py``). That ends with ``legalize_graph(gm)``, which
sorts the whole graph again into a new ``Graph`` and assigns it to ``gm.graph``; the assignment recompiles the graph
module: it generates and compiles the Python source of the whole program, once per partition. With P partitions of
a graph of N nodes that is P recompiles of N nodes, nothing reading the source between them. At Qwen2.5-0.5B's full
depth (24 layers, dynamic shapes), py-spy put 13.6% of the export's samples in these recompiles (``GraphModule.graph``'s
setter under ``legalize_graph``), more than in XNNPACK's own preprocessing. No upstream issue is known to us (the
code carries ``TODO: T153794167`` about skipping ``legalize_graph`` there).

:func:`partition_graphs_recompiled_once` makes ``recompile`` a no-op on the graph module being partitioned while its
partitions are cut out, and recompiles it once at the end: the sort and the graph it builds are upstream's, so the
lowered program is the same bytes (``tests/test_executorch_lowering.py``); only the source of the intermediate graphs
is not generated.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ...patches import patch_attribute

__all__ = ["partition_graphs_recompiled_once"]


def _no_recompile() -> None:
    """The graph module's ``recompile`` while its partitions are cut out: the source is generated once after."""


@contextlib.contextmanager
def partition_graphs_recompiled_once() -> Iterator[None]:
    """Inside the block, ``to_backend`` recompiles a graph module once after cutting out its partitions (see the
    module)."""
    from executorch.exir.backend import backend_api

    create = backend_api._create_partitions_in_graph_module

    def create_then_recompile(tagged_graph_module: Any, *args: Any, **kwargs: Any) -> Any:
        if "recompile" in vars(tagged_graph_module):  # already deferred by an outer call: leave it to that one
            return create(tagged_graph_module, *args, **kwargs)
        tagged_graph_module.recompile = _no_recompile  # the instance's, before the class's method
        try:
            result = create(tagged_graph_module, *args, **kwargs)
        except BaseException:
            del tagged_graph_module.recompile
            with contextlib.suppress(Exception):  # the graph as upstream would leave it; its own error is the one
                tagged_graph_module.recompile()
            raise
        del tagged_graph_module.recompile
        tagged_graph_module.recompile()
        return result

    reason = "to_backend recompiling the whole program once per partition it cuts out (executorch 1.5.1)"
    with patch_attribute(backend_api, "_create_partitions_in_graph_module", create_then_recompile, reason=reason):
        yield
