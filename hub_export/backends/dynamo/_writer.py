"""Write a ``.pt2`` laid out entry for entry as ``torch.export.save`` lays it out, each weight streamed from its memory.

``torch.export.save`` copies every storage into a Python ``bytes`` before writing it (the largest, a tied embedding,
is most of a language model's weights), and it writes every payload: the components of one export that share
weights (:mod:`._shared`) would each write them all, to be rewritten without them. :func:`write_pt2` writes the
archive once, through torch's own archive writer and serializer:

* the weights and the constants are grouped by storage as torch groups them (``group_weights``,
  ``get_complete_tensor``), each group one payload entry written straight from the storage's memory
  (``PyTorchFileWriter.write_record`` of the storage, as ``torch.save`` writes its storages: no copy of a CPU
  tensor); pickled tensors and objects are written by torch's own code or as torch writes them;
* a group whose every tensor is in ``shared`` (``{FQN: key}``, one key for the group, of the group's size) is not
  written: its payload name stays in the configs and :data:`._shared.REFERENCES` names its key in the shared
  weights file (what :func:`._shared.read_references` checks on loading);
* the configs, ``models/model.json`` and the sample inputs are what ``torch.export.save`` writes (its
  ``serialize``), in the same order, so that a program without shared weights is byte for byte the archive
  ``torch.export.save`` writes to the same path (``tests/test_dynamo_shared.py`` checks it), and a standalone
  ``torch.export.load`` archive.
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

from ._shared import REFERENCES

__all__ = ["write_pt2"]

#: The one program name ``torch.export.save`` writes.
_MODEL = "model"


def write_pt2(
    program: Any, path: str | Path, shared: dict[str, str] | None = None, sizes: dict[str, int] | None = None
) -> dict[str, dict[str, Any]]:
    """Write ``program`` (an ``ExportedProgram``) to the ``.pt2`` at ``path``; returns the references written.

    Args:
        program: The program.
        path: The archive to write (its name, less ``.pt2``, is the archive's root folder, as torch names it).
        shared: ``{FQN: key}`` of the tensors stored in the export's shared weights file.
        sizes: ``{key: bytes}`` of that file's tensors: a payload is referenced only where its size is the key's.

    Returns:
        ``{payload entry: {"key": ..., "nbytes": ...}}``, the payloads left out of the archive.
    """
    from torch._export.serde.serialize import _dataclass_to_dict, serialize
    from torch.export.pt2_archive._package import DEFAULT_PICKLE_PROTOCOL, PT2ArchiveWriter
    from torch.export.pt2_archive.constants import (
        CONSTANTS_CONFIG_FILENAME_FORMAT,
        CONSTANTS_DIR,
        MODELS_FILENAME_FORMAT,
        SAMPLE_INPUTS_FILENAME_FORMAT,
        TENSOR_CONSTANT_FILENAME_PREFIX,
        WEIGHT_FILENAME_PREFIX,
        WEIGHTS_CONFIG_FILENAME_FORMAT,
        WEIGHTS_DIR,
    )

    refs: dict[str, dict[str, Any]] = {}
    payloads = _Payloads(shared or {}, sizes or {}, refs)
    with PT2ArchiveWriter(os.fspath(path)) as writer:
        payloads.writer = writer
        weights = payloads.write(program.state_dict, WEIGHTS_DIR, WEIGHT_FILENAME_PREFIX)
        writer.write_string(WEIGHTS_CONFIG_FILENAME_FORMAT.format(_MODEL), json.dumps(_dataclass_to_dict(weights)))
        constants = payloads.write(program.constants, CONSTANTS_DIR, TENSOR_CONSTANT_FILENAME_PREFIX)
        writer.write_string(CONSTANTS_CONFIG_FILENAME_FORMAT.format(_MODEL), json.dumps(_dataclass_to_dict(constants)))
        artifact = serialize(
            program, None, DEFAULT_PICKLE_PROTOCOL, serialize_state_dict=False, serialize_constants=False
        )
        writer.write_bytes(MODELS_FILENAME_FORMAT.format(_MODEL), artifact.exported_program)
        writer.write_bytes(SAMPLE_INPUTS_FILENAME_FORMAT.format(_MODEL), artifact.example_inputs)
        if refs:
            writer.write_string(REFERENCES, json.dumps({"payloads": refs}, sort_keys=True))
    return refs


class _Payloads:
    """Writes the payloads of one config (the weights, or the constants) and returns the config."""

    def __init__(self, shared: dict[str, str], sizes: dict[str, int], refs: dict[str, dict[str, Any]]) -> None:
        self.shared, self.sizes, self.refs = shared, sizes, refs
        self.writer: Any = None

    def write(self, values: dict[str, Any], folder: str, prefix: str) -> Any:
        """torch's order: pickled tensors, raw tensors by storage group, then (constants) objects."""
        import torch
        from torch._export.serde import schema
        from torch._library.opaque_object import is_opaque_value
        from torch.export.pt2_archive._package import (
            DEFAULT_PICKLE_PROTOCOL,
            _save_pickled_tensors,
            _should_use_pickle,
        )
        from torch.export.pt2_archive._package_weights import TensorProperties

        config: dict[str, Any] = {}
        pickled, raw, objects = [], {}, []
        for fqn, value in values.items():
            if isinstance(value, torch.Tensor):
                if _should_use_pickle(value):
                    pickled.append((fqn, value))
                else:
                    raw[fqn] = (value, TensorProperties(value))
            elif isinstance(value, torch._C.ScriptObject) or is_opaque_value(value):
                objects.append((fqn, value))
            else:
                raise TypeError(f"{fqn}: a program constant of type {type(value).__name__}, which a .pt2 cannot hold")
        index = _save_pickled_tensors(
            pickled, self.writer, config, folder, prefix, 0, pickle_protocol=DEFAULT_PICKLE_PROTOCOL
        )
        self._write_raw(raw, config, folder, prefix, index)
        self._write_objects(objects, config, folder)
        return schema.PayloadConfig(config=config)

    def _write_raw(self, raw: dict[str, Any], config: dict[str, Any], folder: str, prefix: str, index: int) -> None:
        import torch
        from torch._export.serde import schema
        from torch._export.serde.serialize import serialize_tensor_meta
        from torch.export.pt2_archive._package_weights import Weights, get_complete_tensor, group_weights

        weights = {_MODEL: Weights(raw)}
        for group in group_weights(weights):
            complete = get_complete_tensor(group, weights)
            path_name = f"{prefix}{index}"
            entry = folder + path_name
            index += 1
            keys = {self.shared.get(fqn) for _, fqn in group}
            key = keys.pop() if len(keys) == 1 else None
            storage = _storage(complete)
            nbytes = storage.nbytes() if storage is not None else 0
            if key is not None and nbytes and self.sizes.get(key) == nbytes:
                self.refs[entry] = {"key": key, "nbytes": nbytes}
            elif storage is None or not nbytes:
                self.writer.write_bytes(entry, b"")
            else:
                self.writer.archive_file.write_record(entry, storage, nbytes)  # from its memory, as torch.save does
            for _, fqn in group:
                tensor = raw[fqn][0]
                config[fqn] = schema.PayloadMeta(
                    path_name=path_name,
                    is_param=isinstance(tensor, torch.nn.Parameter),
                    use_pickle=False,
                    tensor_meta=serialize_tensor_meta(tensor),
                )

    def _write_objects(self, objects: list[tuple[str, Any]], config: dict[str, Any], folder: str) -> None:
        """TorchBind objects (torch's TorchBind pickler) and opaque values (pickle), each under its own prefix."""
        import torch
        from torch._export.serde import schema
        from torch.export.pt2_archive._package import DEFAULT_PICKLE_PROTOCOL
        from torch.export.pt2_archive.constants import CUSTOM_OBJ_FILENAME_PREFIX, OPAQUE_OBJ_FILENAME_PREFIX

        counts = {CUSTOM_OBJ_FILENAME_PREFIX: 0, OPAQUE_OBJ_FILENAME_PREFIX: 0}
        for fqn, value in objects:
            if isinstance(value, torch._C.ScriptObject):
                prefix, data = CUSTOM_OBJ_FILENAME_PREFIX, torch._C._pickle_save(value)
            else:
                prefix, data = OPAQUE_OBJ_FILENAME_PREFIX, pickle.dumps(value, protocol=DEFAULT_PICKLE_PROTOCOL)
            path_name = f"{prefix}{counts[prefix]}"
            counts[prefix] += 1
            self.writer.write_bytes(folder + path_name, data)
            config[fqn] = schema.PayloadMeta(path_name=path_name, is_param=False, use_pickle=True, tensor_meta=None)


def _storage(tensor: Any) -> Any:
    """The CPU storage whose bytes are the payload (None: a fake or empty tensor, written empty as torch does)."""
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(tensor, FakeTensor) or not tensor.data_ptr():
        return None
    return tensor.cpu().untyped_storage()
