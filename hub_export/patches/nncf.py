"""Workarounds applied while NNCF quantizes an export; each names the upstream behaviour it works around.

* :func:`fx_integer_edges_typed_integer` — NNCF 3.4's TorchFX graph builder types every edge float.
* :func:`large_weights_compressed_in_row_slices` — NNCF 3.4 compresses each OpenVINO weight whole, with a transient
  of several times its size.
* :func:`compressed_weights_mapped` — NNCF 3.4 keeps every compressed OpenVINO weight in memory.
"""

from __future__ import annotations

from typing import Any

from ._base import patch_attribute

__all__ = ["compressed_weights_mapped", "fx_integer_edges_typed_integer", "large_weights_compressed_in_row_slices"]

#: Weights of more elements than this are compressed a slice of rows at a time (:func:`large_weights_compressed_in_row_slices`).
SLICED_MIN_ELEMENTS = 1 << 26
#: The rows of one slice.
SLICE_ROWS = 8192
#: Compressed constants of at least this many bytes are written to a file and read back mapped (:func:`compressed_weights_mapped`).
MAPPED_MIN_BYTES = 1 << 20


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


def large_weights_compressed_in_row_slices() -> Any:
    """Compress a large 2-D OpenVINO weight whose statistics are per row (per output channel, or per group of a row)
    a slice of :data:`SLICE_ROWS` rows at a time, with NNCF's own ``compress_weight``, and join the slices.

    NNCF 3.4's OpenVINO backend compresses each weight whole (``compress_weight`` in ``transform_model``), and its
    compression function holds several float32 copies of the weight meanwhile: for Llama-3.1-8B's 128256 x 4096
    embedding and output projection (int8, per channel), a peak of 5.8 GB above the model (measured on its config
    cut to 2 layers; with :func:`compressed_weights_mapped`, what an 8B export needed to fit in 24 GB). Rows are
    compressed independently (the reduction is along the row), so the joined slices are the whole weight's
    compression, byte for byte; sliced, the transient is that of one slice.
    """
    import numpy as np
    import openvino
    from nncf.quantization.algorithms.weight_compression import openvino_backend
    from nncf.quantization.algorithms.weight_compression.weight_lowering import CompressedWeight
    from nncf.tensor import Tensor

    original = openvino_backend.compress_weight

    def joined(parts: list[Any]) -> Any:
        return Tensor(np.concatenate([part.as_numpy_tensor().data for part in parts], axis=0))

    def compress_weight(weight: Any, reduction_axes: Any, config: Any, precomputed: Any = None) -> Any:
        shape = tuple(weight.shape)
        sliced = (
            precomputed is None
            and len(shape) == 2
            and tuple(reduction_axes) == (1,)
            and shape[0] * shape[1] > SLICED_MIN_ELEMENTS
            and shape[0] > SLICE_ROWS
            and config.is_integer
        )
        if not sliced:
            return original(weight, reduction_axes, config, precomputed)
        data, parts = weight.data, []
        for start in range(0, shape[0], SLICE_ROWS):
            end = min(shape[0], start + SLICE_ROWS)
            # a region of the OpenVINO tensor (or a numpy view): the rows, not a copy of them
            rows = (
                openvino.Tensor(data, [start, 0], [end, shape[1]])
                if isinstance(data, openvino.Tensor)
                else data[start:end]
            )
            parts.append(original(Tensor(rows), reduction_axes, config, None))
        zero_points = [part.zero_point for part in parts]
        return CompressedWeight(
            joined([part.tensor for part in parts]),
            joined([part.scale for part in parts]),
            None if zero_points[0] is None else joined(zero_points),
        )

    return patch_attribute(
        openvino_backend,
        "compress_weight",
        compress_weight,
        reason="NNCF's OpenVINO backend compressing each weight whole",
    )


def compressed_weights_mapped(held: list[Any]) -> Any:
    """Write each large constant NNCF's OpenVINO backend makes (a compressed weight, its scales) to a temporary file
    as it is made, and give the graph a constant over the file mapped read-only instead (the same type, shape and
    bytes); the mappings are appended to ``held``, which the caller keeps with the model (the constant does not
    keep the memory it reads alive).

    NNCF 3.4 keeps every compressed weight in memory until the model is saved (1.96 GB for Llama-3.1-8B's config cut
    to 8 layers, about 4.7 GB for the whole model), on top of the bfloat16 weights the export holds: an 8B export was
    killed out of memory on a 24 GB machine. A mapped file's pages are the kernel's to drop and read again. The files
    are unlinked from the start (removed when the last mapping goes).
    """
    import tempfile

    import numpy as np
    import openvino
    from nncf.quantization.algorithms.weight_compression import openvino_backend

    original = openvino_backend.create_ov_const_from_tensor

    def create_ov_const_from_tensor(x: Any, dtype: Any, name: str | None = None) -> Any:
        constant = original(x, dtype, name=name)
        if constant.get_byte_size() < MAPPED_MIN_BYTES:
            return constant
        data = constant.get_tensor_view().data  # the packed bytes (two int4 values a byte)
        with tempfile.TemporaryFile(prefix="hub_export_nncf_") as spill:
            np.ascontiguousarray(data).tofile(spill)
            spill.flush()
            mapped = np.memmap(spill, dtype=np.uint8, mode="r", shape=(data.nbytes,))
        held.append(mapped)
        tensor = openvino.Tensor(mapped, list(constant.get_output_shape(0)), constant.get_output_element_type(0))
        out = openvino.op.Constant(tensor, shared_memory=True)
        out.set_friendly_name(constant.get_friendly_name())
        return out

    return patch_attribute(
        openvino_backend,
        "create_ov_const_from_tensor",
        create_ov_const_from_tensor,
        reason="NNCF's OpenVINO backend keeping every compressed weight in memory",
    )
