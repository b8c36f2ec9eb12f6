"""Workarounds applied while NNCF quantizes an export; each names the upstream behaviour it works around.

* :func:`fx_integer_edges_typed_integer` — NNCF 3.4's TorchFX graph builder types every edge float.
"""

from __future__ import annotations

from typing import Any

from ._base import patch_attribute

__all__ = ["fx_integer_edges_typed_integer"]


def fx_integer_edges_typed_integer() -> Any:
    """Type the edges that carry no float tensor (symbolic sizes, integer/bool tensors) as integer in NNCF's FX graph.

    Works around NNCF 3.4's TorchFX graph builder (``GraphConverter.create_nncf_graph``), which types every edge
    float. On a dynamic export ``nncf.quantize`` then propagates an activation quantizer onto the size operand of
    ``expand(x, [s0, 2, 2, s1, 32])`` (a GQA ``repeat_kv``) and fails inserting it ("IndexError: tuple index out of
    range" in ``get_input_node``), and calibrates one on the bool attention mask ("mean(): could not infer output
    dtype ... Got: Bool"). NNCF places no quantizer on integer edges.
    """
    import torch
    from nncf.common.graph.layer_attributes import Dtype
    from nncf.experimental.torch.fx.nncf_graph_builder import GraphConverter

    original = GraphConverter.create_nncf_graph
    symbolic = (torch.SymInt, torch.SymFloat, torch.SymBool)

    def create_nncf_graph(model: Any) -> Any:
        graph = original(model)
        for node in model.graph.nodes:
            value = node.meta.get("val")
            if not isinstance(value, symbolic) and not (
                isinstance(value, torch.Tensor) and not value.is_floating_point()
            ):
                continue
            source = graph.get_node_by_name(node.name)
            for target in graph.get_next_nodes(source):
                for edge in graph.get_nx_edges(source, target).values():
                    edge[graph.DTYPE_EDGE_ATTR] = Dtype.INTEGER
        return graph

    return patch_attribute(
        GraphConverter,
        "create_nncf_graph",
        staticmethod(create_nncf_graph),
        reason="NNCF's FX graph builder typing integer edges float",
    )
