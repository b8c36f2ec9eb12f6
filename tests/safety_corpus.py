"""A corpus of hostile exports: each variant is a copy of a real export with something altered, re-sealed.

Re-sealing recomputes every listed file's size and sha256 in ``export.json`` (as an attacker who controls the repo
would), so only the safety layer stands between the variant and the runtime. Variants are grouped by the four root
causes of issue #21:

1. ``code``: a file that runs code or native code when loaded (pickles, symbolic sizes, guards, node targets,
   AOTInductor entries, torch's loader fallbacks, custom operator domains, extension opsets);
2. ``roles``: checks and loaders disagreeing about which file is which (case, unknown or unlisted files, roles);
3. ``bounds``: a check that would read, allocate or scan without bound (bombs, huge declared sizes, deep nesting);
4. ``side``: side files and the manifest itself (symlinks out of the folder, unlisted configs, malformed manifests).

Each variant's payload, if it ever ran, would create ``sentinels/<id>``; each file outside the export that a variant
points at is ``outside/<id>.<name>``, so an open of it is attributed to its variant. ``build(folder, ctx)`` edits a
fresh copy of the base export of its format; the corpus test loads each one in a child process
(``safety_corpus_child.py``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import shutil
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CAUSES = ("code", "roles", "bounds", "side")


@dataclass
class Context:
    """Where a variant's payload writes (``sentinel``) and the files outside the export it may point at."""

    vid: str
    sentinel: Path
    outside: Path  # the folder of files outside every export

    def out(self, name: str, data: bytes | None = None) -> Path:
        """``outside/<id>.<name>``, created with ``data`` (a copy of a secret by default)."""
        path = self.outside / f"{self.vid}.{name}"
        if not path.exists():
            path.write_bytes(b"s" * 4096 if data is None else data)
        return path


@dataclass
class Variant:
    """One hostile export: ``build`` edits a copy of the base export of ``fmt``."""

    vid: str
    fmt: str
    cause: str
    build: Callable[[Path, Context], None]
    may_load: bool = False  # a benign edit: loading (and running) it is fine
    load: dict[str, Any] = field(default_factory=dict)  # extra from_pretrained kwargs
    reseal: bool = True


class Payload:
    """Unpickling this creates the sentinel file: what a hostile pickle would do, harmlessly."""

    def __init__(self, sentinel: Path) -> None:
        self.sentinel = str(sentinel)

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.sentinel, "w"))


def code(sentinel: Path) -> str:
    """A Python expression that creates the sentinel when evaluated."""
    return f"__import__('pathlib').Path({str(sentinel)!r}).touch()"


# -- re-sealing ---------------------------------------------------------------------------------------------------
def _sha256(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def reseal(folder: Path) -> None:
    """Recompute the size and sha256 of every listed file that exists (following symlinks) in export.json."""
    manifest_path = folder / "export.json"
    if manifest_path.is_symlink() or not manifest_path.is_file():
        return
    try:
        manifest = json.loads(manifest_path.read_text())
    except ValueError:
        return
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        return
    for entry in manifest["files"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            continue
        path = folder / entry["path"]
        if os.path.isfile(path):
            entry["size"], entry["sha256"] = _sha256(path)
    manifest_path.write_text(json.dumps(manifest, indent=1))


def edit_manifest(folder: Path, edit: Callable[[dict[str, Any]], Any]) -> None:
    manifest = json.loads((folder / "export.json").read_text())
    edit(manifest)
    (folder / "export.json").write_text(json.dumps(manifest, indent=1))


def list_file(folder: Path, name: str, role: str, component: str | None = None) -> None:
    """Add ``name`` to export.json's files (and to a component's files)."""

    def edit(manifest: dict[str, Any]) -> None:
        manifest["files"].append({"path": name, "size": 0, "sha256": "0" * 64, "role": role})
        if component:
            manifest["components"][component]["files"].append(name)

    edit_manifest(folder, edit)


def rename(folder: Path, old: str, new: str) -> None:
    """Rename a file and every mention of it in export.json."""
    os.rename(folder / old, folder / new)
    text = (folder / "export.json").read_text().replace(f'"{old}"', f'"{new}"')
    (folder / "export.json").write_text(text)


def symlink_out(folder: Path, name: str, ctx: Context, data: bytes | None = None) -> None:
    """Replace ``name`` by a symlink to a file outside the export holding the same bytes (or ``data``)."""
    original = (folder / name).read_bytes() if (folder / name).exists() else b""
    target = ctx.out(name.replace("/", "_"), original if data is None else data)
    (folder / name).unlink(missing_ok=True)
    os.symlink(target, folder / name)


# -- .pt2 archives ------------------------------------------------------------------------------------------------
ROOT = "model/"
MODEL_NAME = "model"  # the program's name inside the archive (models/model.json)


def pt2_entries(folder: Path) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(folder / "model.pt2") as archive:
        return [(info.filename, archive.read(info)) for info in archive.infolist()]


def write_zip(path: Path, entries: list[tuple[str, bytes]], method: int = zipfile.ZIP_STORED) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=method) as archive:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            info.compress_type = method
            archive.writestr(info, data)
    path.write_bytes(buffer.getvalue())


def edit_pt2(folder: Path, edit: Callable[[list[tuple[str, bytes]]], list[tuple[str, bytes]] | None]) -> None:
    entries = pt2_entries(folder)
    result = edit(entries)
    write_zip(folder / "model.pt2", entries if result is None else result)


def set_entry(entries: list[tuple[str, bytes]], name: str, data: bytes) -> None:
    for i, (existing, _) in enumerate(entries):
        if existing == ROOT + name:
            entries[i] = (existing, data)
            return
    entries.append((ROOT + name, data))


def get_entry(entries: list[tuple[str, bytes]], name: str) -> bytes:
    return next(data for existing, data in entries if existing == ROOT + name)


def edit_json_entry(name: str, edit: Callable[[Any], Any]) -> Callable[[Path, Context], None]:
    def build(folder: Path, ctx: Context) -> None:
        def change(entries: list[tuple[str, bytes]]) -> None:
            value = json.loads(get_entry(entries, name))
            result = edit(value) if edit.__code__.co_argcount == 1 else edit(value, ctx)
            set_entry(entries, name, json.dumps(value if result is None else result).encode())

        edit_pt2(folder, change)

    return build


def program(edit: Callable[..., Any]) -> Callable[[Path, Context], None]:
    return edit_json_entry("models/model.json", edit)


def torch_save_zip(pickle_bytes: bytes, storages: dict[str, bytes] | None = None) -> bytes:
    """A ``torch.save``-shaped zip holding ``pickle_bytes`` as its data.pkl."""
    entries = [
        ("archive/data.pkl", pickle_bytes),
        ("archive/.format_version", b"1"),
        ("archive/.storage_alignment", b"64"),
        ("archive/byteorder", b"little"),
        *((f"archive/data/{k}", v) for k, v in (storages or {}).items()),
        ("archive/version", b"3\n"),
        ("archive/.data/serialization_id", b"1234"),
    ]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in entries:
            archive.writestr(zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0)), data)
    return buffer.getvalue()


def sample_inputs_pickle(pickle_bytes: bytes) -> Callable[[Path, Context], None]:
    def build(folder: Path, ctx: Context) -> None:
        edit_pt2(folder, lambda e: set_entry(e, "data/sample_inputs/model.pt", torch_save_zip(pickle_bytes)))

    return build


def payload_pickle(protocol: int) -> Callable[[Path, Context], None]:
    def build(folder: Path, ctx: Context) -> None:
        data = pickle.dumps(Payload(ctx.sentinel), protocol=protocol)
        edit_pt2(folder, lambda e: set_entry(e, "data/sample_inputs/model.pt", torch_save_zip(data)))

    return build


def first_sym_expr(value: Any) -> dict[str, Any]:
    """The first ``{"expr_str": ...}`` object in a program."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if "expr_str" in item:
                return item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    raise AssertionError("the base .pt2 has no symbolic expression: export it with dynamic=True")


def nodes(program_json: dict[str, Any]) -> list[dict[str, Any]]:
    return program_json["graph_module"]["graph"]["nodes"]


def _pt2_code_variants() -> list[Variant]:  # noqa: C901 - one list of small edits
    out: list[Variant] = []

    def add(name: str, build: Callable[[Path, Context], None], **kw: Any) -> None:
        out.append(Variant(f"pt2-{name}", "pt2", kw.pop("cause", "code"), build, **kw))

    for protocol in range(6):
        add(f"pickle-p{protocol}-sample-inputs", payload_pickle(protocol))

    def stack_global(folder: Path, ctx: Context) -> None:
        path = str(ctx.sentinel).encode()
        data = (
            b"\x80\x04\x8c\x02io\x94\x8c\x04open\x94\x93\x94\x8c"
            + bytes([len(path)])
            + path
            + b"\x94\x8c\x01w\x94\x86R."
        )
        sample_inputs_pickle(data)(folder, ctx)

    add("pickle-stack-global-from-memo", stack_global)

    def eval_pickle(folder: Path, ctx: Context) -> None:
        sample_inputs_pickle(b"cbuiltins\neval\n(V" + code(ctx.sentinel).encode() + b"\ntR.")(folder, ctx)

    add("pickle-p0-builtins-eval", eval_pickle)

    def weights_only_fallback(folder: Path, ctx: Context) -> None:
        # allow-listed globals only, so the walk passes; torch.load(weights_only=True) then fails on it. torch's own
        # deserialize_torch_artifact would retry with weights_only=False: this loader must not.
        sample_inputs_pickle(b"\x80\x02ccollections\nOrderedDict\nK\x05\x85R.")(folder, ctx)

    add("pickle-weights-only-failure-not-retried", weights_only_fallback)

    def sympify(where: str) -> Callable[[Path, Context], None]:
        def edit(value: Any, ctx: Context) -> None:
            if where == "first":
                first_sym_expr(value)["expr_str"] = code(ctx.sentinel)
            else:
                value["graph_module"]["graph"]["sym_int_values"]["evil"] = {
                    "as_expr": {"expr_str": code(ctx.sentinel), "hint": None}
                }

        return program(edit)

    add("sympify-first-expression", sympify("first"))
    add("sympify-new-sym-int", sympify("new"))
    add(
        "sympify-symbol-name-injection",
        program(
            lambda v, c: first_sym_expr(v).__setitem__(
                "expr_str", f"Symbol('s0' if {code(c.sentinel)} else 's1', integer=True)"
            )
        ),
    )
    add(
        "sympify-power-bomb",
        program(lambda v: first_sym_expr(v).__setitem__("expr_str", "Pow(Integer(10), Integer(1000000000000))")),
        cause="bounds",
    )
    add(
        "sympify-nesting-bomb",
        program(lambda v: first_sym_expr(v).__setitem__("expr_str", "Add(" * 5000 + "Integer(1)" + ")" * 5000)),
        cause="bounds",
    )

    def guards(text: Callable[[Context], str]) -> Callable[[Path, Context], None]:
        return program(lambda v, c: v.__setitem__("guards_code", [*v.get("guards_code", []), text(c)]))

    add("guards-exec-call", guards(lambda c: f"{code(c.sentinel)} or True"))
    add("guards-string-breakout", guards(lambda c: f'1", {code(c.sentinel)}, "'))
    add("guards-attribute-walk", guards(lambda c: "L['tensors'].__class__.__init__.__globals__ == 1"))
    add("guards-lambda", guards(lambda c: f"(lambda: {code(c.sentinel)})() or True"))
    add("guards-newline", guards(lambda c: f"True\n{code(c.sentinel)}"))
    add("guards-power-bomb", guards(lambda c: "L['tensors'][0].size()[0] ** 100000000000 > 0"), cause="bounds")

    def target(name: str, args: list[dict[str, Any]] | None = None) -> Callable[[Path, Context], None]:
        def edit(value: Any, ctx: Context) -> None:
            node = nodes(value)[0]
            node["target"] = name
            if args is not None:
                node["inputs"] = [
                    {"name": "", "arg": {"as_string": arg.get("s", "").replace("SENTINEL", str(ctx.sentinel))}}
                    if "s" in arg
                    else {"name": "", "arg": arg}
                    for arg in args
                ]

        return program(edit)

    add("target-torch-os-system", target("torch.os.system", [{"s": "touch SENTINEL"}]))
    add("target-builtins-exec", target("builtins.exec", [{"s": "open('SENTINEL','w')"}]))
    add("target-operator-attrgetter", target("_operator.attrgetter"))
    add("target-torch-ops-load-library", target("torch.ops.load_library", [{"s": "/tmp/evil.so"}]))
    add("target-torch-ops-import-module", target("torch.ops.import_module", [{"s": "os"}]))
    add("target-aten-from-file", target("torch.ops.aten.from_file.default", [{"s": "SENTINEL"}]))
    add("target-aten-save", target("torch.ops.aten.save.default"))
    add("target-extension-operator", target("#evil:run"))
    add("target-higher-order-unknown", target("torch.ops.higher_order.triton_kernel_wrapper_mutation"))
    add("target-math-any-attribute", target("math.__loader__"))
    # torch.vmap's functorch calls are admitted by name; one that opens a level and never closes it would leave
    # every later torch call of the process batched, and the other functorch wrappers (forward-mode AD) are refused
    predispatch = "torch._functorch.predispatch."
    add("vmap-level-left-open", target(predispatch + "_vmap_increment_nesting", [{"as_int": 2}, {"s": "error"}]))
    add("vmap-close-unopened", target(predispatch + "_vmap_decrement_nesting", []))
    add("functorch-jvp-nesting", target(predispatch + "_jvp_increment_nesting", []))

    def custom_obj(value: Any) -> None:
        nodes(value)[0]["inputs"].append(
            {"name": "x", "arg": {"as_custom_obj": {"name": "obj", "class_fqn": "os.system"}}}
        )

    add("argument-custom-object", program(custom_obj))
    add(
        "argument-operator-value",
        program(lambda v: nodes(v)[0]["inputs"].append({"name": "x", "arg": {"as_operator": "torch.os.system"}})),
    )
    add(
        "graph-custom-obj-values",
        program(
            lambda v: v["graph_module"]["graph"].__setitem__(
                "custom_obj_values", {"obj": {"name": "obj", "class_fqn": "__torch__.evil"}}
            )
        ),
    )
    add(
        "forward-arg-name-injection",
        program(
            lambda v, c: v["graph_module"]["module_call_graph"][0]["signature"].__setitem__(
                "forward_arg_names", [f"x=({code(c.sentinel)})"]
            )
        ),
    )
    add("node-name-injection", program(lambda v, c: nodes(v)[0].__setitem__("name", f"x; {code(c.sentinel)}")))
    add(
        "treespec-unknown-type",
        program(
            lambda v: v["graph_module"]["module_call_graph"][0]["signature"].__setitem__(
                "in_spec", json.dumps([1, {"type": "os.system", "context": "null", "children_spec": []}])
            )
        ),
    )

    def treespec_key(value: Any, ctx: Context) -> None:
        spec = [1, {"type": "builtins.dict", "context": json.dumps([f"x'] or {code(ctx.sentinel)} or L['x"])}]
        spec[1]["children_spec"] = [{"type": None, "context": None, "children_spec": []}]
        value["graph_module"]["module_call_graph"][0]["signature"]["in_spec"] = json.dumps(spec)

    add("treespec-dict-key-injection", program(treespec_key))
    add("metadata-unknown-key", program(lambda v: nodes(v)[0]["metadata"].__setitem__("eval_me", '{"a": 1}')))
    # "custom" and "from_node" are JSON torch parses: nested past the depth bound, or a node source with other fields
    add("metadata-custom-deep", program(lambda v: nodes(v)[0]["metadata"].__setitem__("custom", "[" * 200 + "]" * 200)))
    add(
        "metadata-from-node-field",
        program(lambda v: nodes(v)[0]["metadata"].__setitem__("from_node", json.dumps([{"name": "x", "code": "1"}]))),
    )
    add(
        "metadata-source-fn-injection",
        program(lambda v, c: nodes(v)[0]["metadata"].__setitem__("source_fn_stack", f"x,{code(c.sentinel)}")),
    )
    add(
        "range-constraint-name",
        program(lambda v, c: v["range_constraints"].__setitem__(code(c.sentinel), {"min_val": 0, "max_val": 4})),
    )
    add("verifier-unknown", program(lambda v: v.__setitem__("verifiers", ["os.system"])))
    add("schema-major-version", program(lambda v: v["schema_version"].__setitem__("major", 99)))
    add("unknown-field", program(lambda v: v["graph_module"].__setitem__("evil", 1)))

    def sample_key(folder: Path, ctx: Context) -> None:
        import torch

        buffer = io.BytesIO()
        torch.save(((torch.zeros(1, 4, dtype=torch.long),), {f"x'] or {code(ctx.sentinel)} or L['x": 1}), buffer)
        edit_pt2(folder, lambda e: set_entry(e, "data/sample_inputs/model.pt", buffer.getvalue()))

    add("sample-inputs-key-injection", sample_key)

    # -- torch.export.load's other paths: entries it would read that this check does not allow ----------------------
    def aoti(name: str, data: bytes = b"\x7fELF" + b"\0" * 60) -> Callable[[Path, Context], None]:
        def build(folder: Path, ctx: Context) -> None:
            edit_pt2(folder, lambda e: e.append((ROOT + name.replace("SENTINEL", str(ctx.sentinel)), data)))

        return build

    add("aoti-shared-library", aoti("data/aotinductor/model/model.so"))
    add("aoti-zip-slip", aoti("data/aotinductor/model/" + "../" * 12 + "SENTINEL"))
    add("aoti-absolute-name", aoti("data/aotinductor/model/SENTINEL"))
    add("aoti-with-trust-pickles", aoti("data/aotinductor/model/model.so"), load={"trust_pickles": True})

    def native_package(folder: Path, ctx: Context) -> None:
        """A compiled component's AOTInductor package (role native): a library whose loading would run the payload."""
        (folder / "model.aoti.pt2").write_bytes(b"\x7fELF" + code(ctx.sentinel).encode())
        list_file(folder, "model.aoti.pt2", "native", "model")
        edit_manifest(folder, lambda m: m["components"]["model"].setdefault("extra", {}).update(compile="aoti"))

    add("native-package", native_package)
    add("native-package-with-trust-pickles", native_package, load={"trust_pickles": True})

    def legacy(name: str) -> Callable[[Path, Context], None]:
        def build(folder: Path, ctx: Context) -> None:
            data = torch_save_zip(pickle.dumps(Payload(ctx.sentinel), protocol=2))
            edit_pt2(folder, lambda e: e.append((ROOT + name, data)))

        return build

    add("legacy-weights-model-pt", legacy("data/weights/model.pt"))
    add("legacy-constants-model-pt", legacy("data/constants/model.pt"))

    def pre_28_layout(folder: Path, ctx: Context) -> None:
        payload = torch_save_zip(pickle.dumps(Payload(ctx.sentinel), protocol=2))

        def change(entries: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
            kept = [(n, d) for n, d in entries if not n.endswith("archive_format")]
            return [
                *kept,
                ("version", b"8.20"),
                ("serialized_exported_program.json", b"{}"),
                ("serialized_state_dict.pt", payload),
                ("serialized_constants.pt", payload),
            ]

        edit_pt2(folder, change)

    add("fallback-pre-2.8-layout", pre_28_layout)

    def wrong_format(folder: Path, ctx: Context) -> None:
        legacy("serialized_state_dict.pt")(folder, ctx)
        edit_pt2(folder, lambda e: set_entry(e, "archive_format", b"pt1"))

    add("fallback-archive-format-pt1", wrong_format)

    def config_path_name(path_name: str, pickled: bool = True) -> Callable[[Path, Context], None]:
        def edit(value: Any) -> None:
            meta = next(iter(value["config"].values()))
            meta["path_name"], meta["use_pickle"] = path_name, pickled

        return edit_json_entry("data/weights/model_weights_config.json", edit)

    add("path-name-absolute", config_path_name("/model/data/sample_inputs/model.pt"))
    add("path-name-traversal", config_path_name("../sample_inputs/model.pt"))
    add("path-name-other-entry", config_path_name("../../models/model.json", pickled=False))

    def pickled_weight(folder: Path, ctx: Context) -> None:
        data = torch_save_zip(pickle.dumps(Payload(ctx.sentinel), protocol=2))

        def change(entries: list[tuple[str, bytes]]) -> None:
            set_entry(entries, "data/weights/weight_0", data)
            config = json.loads(get_entry(entries, "data/weights/model_weights_config.json"))
            for meta in config["config"].values():
                if meta["path_name"] == "weight_0":
                    meta["use_pickle"] = True
            set_entry(entries, "data/weights/model_weights_config.json", json.dumps(config).encode())

        edit_pt2(folder, change)

    add("pickled-weight-payload", pickled_weight)

    def constant_object(prefix: str) -> Callable[[Path, Context], None]:
        def build(folder: Path, ctx: Context) -> None:
            def change(entries: list[tuple[str, bytes]]) -> None:
                set_entry(entries, f"data/constants/{prefix}0", pickle.dumps(Payload(ctx.sentinel)))
                config = {
                    "config": {
                        "obj": {"path_name": f"{prefix}0", "is_param": False, "use_pickle": True, "tensor_meta": None}
                    }
                }
                set_entry(entries, "data/constants/model_constants_config.json", json.dumps(config).encode())

            edit_pt2(folder, change)

        return build

    add("constant-opaque-object", constant_object("opaque_obj_"))
    add("constant-torchbind-object", constant_object("custom_obj_"))
    add("extra-file", lambda f, c: edit_pt2(f, lambda e: e.append((ROOT + "extra/evil.txt", b"x"))))
    add(
        "unknown-pickle-entry",
        lambda f, c: edit_pt2(f, lambda e: e.append((ROOT + "data/evil.pkl", pickle.dumps(Payload(c.sentinel))))),
    )
    add("executorch-entry", lambda f, c: edit_pt2(f, lambda e: e.append((ROOT + "data/executorch/x.pte", b"ET12"))))

    def second_program(folder: Path, ctx: Context) -> None:
        """torch.export.load loads every ``models/<name>.json``: a second program whose sample inputs run code."""
        payload = torch_save_zip(pickle.dumps(Payload(ctx.sentinel), protocol=2))

        def change(entries: list[tuple[str, bytes]]) -> None:
            copies = {
                f"models/{MODEL_NAME}.json": "models/other.json",
                f"data/weights/{MODEL_NAME}_weights_config.json": "data/weights/other_weights_config.json",
                f"data/constants/{MODEL_NAME}_constants_config.json": "data/constants/other_constants_config.json",
            }
            for name, data in list(entries):
                if name.removeprefix(ROOT) in copies:
                    entries.append((ROOT + copies[name.removeprefix(ROOT)], data))
            entries.append((ROOT + "data/sample_inputs/other.pt", payload))

        edit_pt2(folder, change)

    add("second-program", second_program)

    def not_a_zip(folder: Path, ctx: Context) -> None:
        (folder / "model.pt2").write_bytes(pickle.dumps(Payload(ctx.sentinel), protocol=0))

    add("pickle-named-pt2", not_a_zip)
    return out


def _pt2_zip_variants() -> list[Variant]:
    out: list[Variant] = []

    def add(name: str, build: Callable[[Path, Context], None], cause: str = "code", **kw: Any) -> None:
        out.append(Variant(f"pt2-{name}", "pt2", cause, build, **kw))

    add("control-rebuilt-archive", lambda f, c: edit_pt2(f, lambda e: None), may_load=True)

    def duplicate(name: str, data: Callable[[Context], bytes]) -> Callable[[Path, Context], None]:
        def build(folder: Path, ctx: Context) -> None:
            edit_pt2(folder, lambda e: e.append((ROOT + name, data(ctx))))

        return build

    add("duplicate-model-json", duplicate("models/model.json", lambda c: b"{}"))
    add(
        "duplicate-sample-inputs",
        duplicate("data/sample_inputs/model.pt", lambda c: torch_save_zip(pickle.dumps(Payload(c.sentinel), 2))),
    )
    add("name-backslash", duplicate("..\\..\\evil", lambda c: b"x"))
    add("name-absolute", lambda f, c: edit_pt2(f, lambda e: e.append((str(c.sentinel), b"x"))))
    add("name-second-root", lambda f, c: edit_pt2(f, lambda e: e.append(("other/archive_format", b"pt2"))))
    add("name-dot-dot", duplicate("data/../../evil", lambda c: b"x"))
    add("deflated-entries", lambda f, c: write_zip(f / "model.pt2", pt2_entries(f), zipfile.ZIP_DEFLATED))

    def deflate_bomb(folder: Path, ctx: Context) -> None:
        import zlib

        compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
        zeros = bytes(1 << 20)
        block = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)  # 1 MiB of zeros, no history after
        assert compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH) == block
        bomb = block * 4095 + compressor.flush()  # 4095 MiB of zeros in about 4 MiB
        entries = pt2_entries(folder)
        write_zip(folder / "model.pt2", entries)
        data = (folder / "model.pt2").read_bytes()
        # splice a deflated "models/model.json" declaring 1 GiB in front of the central directory
        name = (ROOT + "models/bomb.json").encode()
        local = struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 8, 0, 0, 0, len(bomb), 4095 << 20, len(name), 0)
        cd_offset = struct.unpack_from("<I", data, len(data) - 6)[0]
        central = struct.pack(
            "<4sHHHHHHIIIHHHHHII",
            b"PK\x01\x02",
            20,
            20,
            0,
            8,
            0,
            0,
            0,
            len(bomb),
            4095 << 20,
            len(name),
            0,
            0,
            0,
            0,
            0,
            cd_offset,
        )
        count = struct.unpack_from("<H", data, len(data) - 12)[0]
        head, directory = data[:cd_offset], data[cd_offset : len(data) - 22]
        new_cd_offset = cd_offset + len(local) + len(name) + len(bomb)
        directory += central + name
        eocd = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, count + 1, count + 1, len(directory), new_cd_offset, 0)
        (folder / "model.pt2").write_bytes(head + local + name + bomb + directory + eocd)

    add("deflate-bomb-4gib", deflate_bomb, cause="bounds")

    def declared_huge(folder: Path, ctx: Context) -> None:
        edit_pt2(folder, lambda e: None)
        data = bytearray((folder / "model.pt2").read_bytes())
        cd_offset = struct.unpack_from("<I", data, len(data) - 6)[0]
        # the first central record's sizes: 4 GiB - 1 each
        struct.pack_into("<II", data, cd_offset + 20, 0xFFFFFFFE, 0xFFFFFFFE)
        (folder / "model.pt2").write_bytes(bytes(data))

    add("declared-size-4gib", declared_huge, cause="bounds")

    def overlapping(folder: Path, ctx: Context) -> None:
        edit_pt2(folder, lambda e: None)
        data = bytearray((folder / "model.pt2").read_bytes())
        cd_offset = struct.unpack_from("<I", data, len(data) - 6)[0]
        first_local = struct.unpack_from("<I", data, cd_offset + 42)[0]
        second = cd_offset + 46 + struct.unpack_from("<H", data, cd_offset + 28)[0]
        struct.pack_into("<I", data, second + 42, first_local)  # the second entry points at the first's bytes
        (folder / "model.pt2").write_bytes(bytes(data))

    add("overlapping-entries", overlapping)

    def local_name_mismatch(folder: Path, ctx: Context) -> None:
        edit_pt2(folder, lambda e: None)
        data = bytearray((folder / "model.pt2").read_bytes())
        data[30] ^= 0x20  # the first local header's name differs from the central directory's
        (folder / "model.pt2").write_bytes(bytes(data))

    add("local-header-name-mismatch", local_name_mismatch)
    add("trailing-bytes", lambda f, c: (f / "model.pt2").write_bytes((f / "model.pt2").read_bytes() + b"\0" * 100))
    add("prepended-bytes", lambda f, c: (f / "model.pt2").write_bytes(b"\0" * 100 + (f / "model.pt2").read_bytes()))
    add("truncated", lambda f, c: (f / "model.pt2").write_bytes((f / "model.pt2").read_bytes()[:-300]))
    add("empty-file", lambda f, c: (f / "model.pt2").write_bytes(b""))

    def json_bomb(text: bytes) -> Callable[[Path, Context], None]:
        def build(folder: Path, ctx: Context) -> None:
            edit_pt2(folder, lambda e: set_entry(e, "models/model.json", text))

        return build

    add("model-json-deep-nesting", json_bomb(b"[" * 200_000 + b"]" * 200_000), cause="bounds")
    add("model-json-container-bomb", json_bomb(b"[" + b"{}," * 3_000_000 + b"{}]"), cause="bounds")
    add("model-json-huge-int", json_bomb(b"[" + b"9" * 100_000 + b"]"), cause="bounds")
    add("model-json-nan", json_bomb(b'{"a": NaN}'))
    add("model-json-not-utf8", json_bomb(b'{"a": "\xff\xfe"}'))

    def raw_view(sizes: list[int], nbytes: int | None = None) -> Callable[[Path, Context], None]:
        def build(folder: Path, ctx: Context) -> None:
            def change(entries: list[tuple[str, bytes]]) -> None:
                config = json.loads(get_entry(entries, "data/weights/model_weights_config.json"))
                meta = next(m for m in config["config"].values() if m["path_name"] == "weight_0")
                meta["tensor_meta"]["sizes"] = [{"as_int": s} for s in sizes]
                meta["tensor_meta"]["strides"] = [{"as_int": 1}] * len(sizes)
                set_entry(entries, "data/weights/model_weights_config.json", json.dumps(config).encode())
                if nbytes is not None:
                    set_entry(entries, "data/weights/weight_0", bytes(nbytes))

            edit_pt2(folder, change)

        return build

    add("raw-view-past-storage", raw_view([1 << 40]), cause="bounds")
    add("raw-empty-storage-huge-zeros", raw_view([1 << 20, 1 << 20], nbytes=0), cause="bounds")
    add("pickle-over-size-limit", sample_inputs_pickle(b"\x80\x02" + b"N0" * (1 << 20) + b"N."), cause="bounds")
    add(
        "pickle-deep-nesting",
        sample_inputs_pickle(b"\x80\x02" + b"(" * 100_000 + b"N" + b"t" * 100_000 + b"."),
        cause="bounds",
    )
    return out


# -- a .pt2 reading its weights from the export's shared.safetensors -------------------------------------------------
SHARED = "shared.safetensors"
_REFERENCES = "data/shared/model.json"


def share_weights(
    folder: Path,
    header_edit: Callable[[dict[str, Any]], Any] | None = None,
    refs_edit: Callable[[dict[str, Any]], Any] | None = None,
    listed: bool = True,
) -> None:
    """Move the base ``.pt2``'s raw weight payloads into a ``shared.safetensors`` listed for its component, the
    archive naming them in ``data/shared/model.json``, as a save of several components writes them; then let
    ``header_edit`` / ``refs_edit`` alter the safetensors header / the references."""
    entries = pt2_entries(folder)
    config = json.loads(get_entry(entries, "data/weights/model_weights_config.json"))
    header: dict[str, Any] = {}
    refs: dict[str, Any] = {}
    blobs = []
    for fqn, meta in config["config"].items():
        entry = "data/weights/" + meta["path_name"]
        if entry in refs or meta["use_pickle"]:
            continue
        data = get_entry(entries, entry)
        assert meta["tensor_meta"]["dtype"] == 7  # float32
        start = sum(len(b) for b in blobs)
        header[fqn] = {"dtype": "F32", "shape": [len(data) // 4], "data_offsets": [start, start + len(data)]}
        refs[entry] = {"key": fqn, "nbytes": len(data)}
        blobs.append(data)
    assert refs, "the base .pt2 has no raw weights"
    kept = [(name, data) for name, data in entries if name[len(ROOT) :] not in refs]
    refs = (refs_edit(refs) or refs) if refs_edit else refs
    kept.append((ROOT + _REFERENCES, json.dumps({"payloads": refs}).encode()))
    write_zip(folder / "model.pt2", kept)
    header = (header_edit(header) or header) if header_edit else header
    text = json.dumps(header).encode()
    text += b" " * (-(8 + len(text)) % 8)
    (folder / SHARED).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    if listed:
        list_file(folder, SHARED, "weights", "model")


def _first(value: dict[str, Any]) -> Any:
    return value[next(iter(value))]


def _pt2_shared_variants() -> list[Variant]:
    out: list[Variant] = []

    def add(name: str, build: Callable[[Path, Context], None], cause: str = "code", **kw: Any) -> None:
        out.append(Variant(f"pt2-shared-{name}", "pt2", cause, build, **kw))

    add("control", lambda f, c: share_weights(f), may_load=True)
    add("not-listed", lambda f, c: share_weights(f, listed=False), cause="roles")
    add("key-missing", lambda f, c: share_weights(f, refs_edit=lambda r: _first(r).update(key="no.such.key")))
    add("reference-size", lambda f, c: share_weights(f, refs_edit=lambda r: _first(r).update(nbytes=1 << 40)))
    add("reference-unused", lambda f, c: share_weights(f, refs_edit=lambda r: r.update({"data/weights/weight_99": _first(r)})))  # fmt: skip
    add("reference-bad-entry", lambda f, c: share_weights(f, refs_edit=lambda r: r.update({"../../x": _first(r)})))
    add("wrong-dtype", lambda f, c: share_weights(f, header_edit=lambda h: _first(h).update(dtype="I32")))

    def wrong_shape(header: dict[str, Any]) -> None:
        _first(header)["shape"] = [_first(header)["shape"][0] * 2]

    add("wrong-shape", lambda f, c: share_weights(f, header_edit=wrong_shape), cause="bounds")

    def overlap(header: dict[str, Any]) -> None:
        first = _first(header)
        header["alias"] = {**first, "data_offsets": list(first["data_offsets"])}

    add("overlapping-ranges", lambda f, c: share_weights(f, header_edit=overlap), cause="bounds")

    def past_end(header: dict[str, Any]) -> None:
        end = max(v["data_offsets"][1] for v in header.values())
        header["past"] = {"dtype": "F32", "shape": [1 << 28], "data_offsets": [end, end + (1 << 30)]}

    add("range-past-end", lambda f, c: share_weights(f, header_edit=past_end), cause="bounds")

    def larger(folder: Path, ctx: Context) -> None:  # bytes no tensor covers, after the listed ones (resealed)
        share_weights(folder)
        with open(folder / SHARED, "ab") as handle:
            handle.write(b"\0" * 4096)

    add("larger-than-its-tensors", larger, cause="bounds")

    def unlisted_size(folder: Path, ctx: Context) -> None:  # grown after the manifest was sealed
        share_weights(folder)
        reseal(folder)
        with open(folder / SHARED, "ab") as handle:
            handle.write(b"\0" * 4096)

    add("larger-than-listed", unlisted_size, cause="bounds", reseal=False)

    def huge_header(folder: Path, ctx: Context) -> None:
        share_weights(folder)
        data = (folder / SHARED).read_bytes()
        (folder / SHARED).write_bytes(struct.pack("<Q", 1 << 40) + data[8:])

    add("header-length-huge", huge_header, cause="bounds")
    add("header-nested", lambda f, c: share_weights(f, header_edit=lambda h: h.update(__metadata__={"a": [[[]]]})))

    def escape(folder: Path, ctx: Context) -> None:
        share_weights(folder)
        symlink_out(folder, SHARED, ctx)

    add("symlink-out", escape, cause="side")

    def both(folder: Path, ctx: Context) -> None:  # a payload kept in the archive and named as shared
        entries = pt2_entries(folder)
        share_weights(folder)
        shared = pt2_entries(folder)
        shared.extend(e for e in entries if e[0].startswith(ROOT + "data/weights/weight_"))
        write_zip(folder / "model.pt2", shared)

    add("also-in-archive", both)
    return out


# -- ONNX -------------------------------------------------------------------------------------------------------
def edit_onnx(edit: Callable[..., Any]) -> Callable[[Path, Context], None]:
    def build(folder: Path, ctx: Context) -> None:
        import onnx

        model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
        result = edit(model) if edit.__code__.co_argcount == 1 else edit(model, ctx)
        (folder / "model.onnx").write_bytes((result or model).SerializeToString())

    return build


def set_external(**values: Callable[[Context], str | None] | str | None) -> Callable[[Path, Context], None]:
    def edit(model: Any, ctx: Context) -> None:
        tensor = next(t for t in model.graph.initializer if t.external_data)
        for item in list(tensor.external_data):
            if item.key in values:
                value = values[item.key]
                value = value(ctx) if callable(value) else value
                if value is None:
                    tensor.external_data.remove(item)
                else:
                    item.value = value

    return edit_onnx(edit)


def _onnx_variants() -> list[Variant]:
    out: list[Variant] = []

    def add(name: str, build: Callable[[Path, Context], None], cause: str = "code", **kw: Any) -> None:
        out.append(Variant(f"onnx-{name}", "onnx", cause, build, **kw))

    add("external-parent-dir", set_external(location=lambda c: f"../../outside/{c.vid}.secret"))
    add("external-absolute", set_external(location=lambda c: str(c.out("secret"))))
    add("external-unlisted-file", set_external(location="config.json"))
    add("external-offset-past-end", set_external(offset="98000"))
    add("external-length-past-end", set_external(length="10000000"))
    add("external-no-length-past-end", set_external(offset="12000", length=None))
    add("external-negative-offset", set_external(offset="-5"))
    add("external-not-a-number", set_external(offset="1e3"))
    add("external-backslash", set_external(location=lambda c: "..\\..\\outside\\secret"))
    add("external-windows-drive", set_external(location="C:secret"))

    def symlinked_data(folder: Path, ctx: Context) -> None:
        (folder / "evil.data").symlink_to(ctx.out("secret"))
        set_external(location="evil.data")(folder, ctx)

    add("external-unlisted-symlink", symlinked_data)

    def subgraph_external(model: Any, ctx: Context) -> None:
        import onnx
        from onnx import TensorProto, helper

        tensor = helper.make_tensor("leak", TensorProto.FLOAT, [4], [0.0] * 4)
        tensor.data_location = TensorProto.EXTERNAL
        tensor.ClearField("float_data")
        for key, value in (("location", f"../outside/{ctx.vid}.secret"), ("offset", "0"), ("length", "16")):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        then = helper.make_graph([helper.make_node("Constant", [], ["c"], value=tensor)], "then", [], [])
        then.output.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, [4]))
        cond = helper.make_tensor("cond", TensorProto.BOOL, [], [True])
        model.graph.initializer.append(cond)
        model.graph.node.append(helper.make_node("If", ["cond"], ["if_out"], then_branch=then, else_branch=then))
        onnx.checker  # noqa: B018 - keep the import used

    add("external-inside-subgraph-constant", edit_onnx(subgraph_external))

    def leak_tensor(name: str, location: str, dims: list[int], data_type: int = 1) -> Any:
        from onnx import helper

        tensor = helper.make_tensor(name, data_type, dims, [0] * dims[0])
        tensor.ClearField("float_data")
        tensor.ClearField("int64_data")
        tensor.data_location = tensor.EXTERNAL
        for key, value in (("location", location), ("offset", "0"), ("length", str(4 * dims[0]))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        return tensor

    def sparse(where: str) -> Callable[[Path, Context], None]:
        def build(folder: Path, ctx: Context) -> None:
            from onnx import TensorProto, helper

            (folder / "evil.data").symlink_to(ctx.out("secret"))

            def edit(model: Any) -> None:
                values = leak_tensor("leak", "evil.data", [2])
                indices = helper.make_tensor("leak_indices", TensorProto.INT64, [2], [1, 3])
                tensor = helper.make_sparse_tensor(values, indices, [4])
                if where == "initializer":
                    model.graph.sparse_initializer.append(tensor)
                    model.graph.node.append(helper.make_node("Identity", ["leak"], ["leak_out"]))
                else:
                    model.graph.node.append(helper.make_node("Constant", [], ["leak_out"], sparse_value=tensor))

            edit_onnx(edit)(folder, ctx)

        return build

    add("external-sparse-initializer", sparse("initializer"))
    add("external-sparse-constant", sparse("constant"))
    add(
        "external-ort-memory-address",
        set_external(location="*/_ORT_MEM_ADDR_/*", offset="4096"),  # ONNX Runtime's tag for a raw address
    )

    def training_info(model: Any, ctx: Context) -> None:
        from onnx import helper

        info = model.training_info.add()
        info.initialization.CopyFrom(helper.make_graph([], "init", [], [], [leak_tensor("t", "evil.data", [4])]))

    add("training-info-graph", edit_onnx(training_info))

    def custom_domain(model: Any) -> None:
        from onnx import helper

        model.opset_import.append(helper.make_opsetid("evil.ops", 1))
        model.graph.node.append(helper.make_node("Run", [], ["unused"], domain="evil.ops"))

    add("custom-domain", edit_onnx(custom_domain))

    def function_domain(model: Any) -> None:
        from onnx import helper

        function = helper.make_function(
            "local",
            "f",
            [],
            ["y"],
            [helper.make_node("Run", [], ["y"], domain="evil.ops")],
            [helper.make_opsetid("evil.ops", 1)],
        )
        model.functions.append(function)
        model.opset_import.append(helper.make_opsetid("local", 1))
        model.graph.node.append(helper.make_node("f", [], ["unused2"], domain="local"))

    add("custom-domain-in-function", edit_onnx(function_domain))
    add("garbage-protobuf", lambda f, c: (f / "model.onnx").write_bytes(b"\x0a\xff\xff\xff\xff\x0f" + os.urandom(64)))
    add("truncated-protobuf", lambda f, c: (f / "model.onnx").write_bytes((f / "model.onnx").read_bytes()[:300]))
    add("empty-graph-file", lambda f, c: (f / "model.onnx").write_bytes(b""))

    def nested_graphs(model: Any) -> None:
        from onnx import TensorProto, helper

        empty = helper.make_graph([], "e", [], [])
        graph = empty
        for _ in range(30):  # each level holds the previous one once; 3 messages a level: near protobuf's limit
            graph = helper.make_graph(
                [helper.make_node("If", ["cond"], ["o"], then_branch=graph, else_branch=empty)], "g", [], []
            )
        model.graph.node.append(helper.make_node("If", ["cond"], ["deep"], then_branch=graph, else_branch=empty))
        model.graph.initializer.append(helper.make_tensor("cond", TensorProto.BOOL, [], [True]))

    add("nested-graphs-deep", edit_onnx(nested_graphs), cause="bounds")

    def big_graph(folder: Path, ctx: Context) -> None:
        with open(folder / "model.onnx", "r+b") as handle:
            handle.truncate(300 * 1024 * 1024)  # sparse: 300 MiB of zeros after the graph

    add("graph-file-300mib", big_graph, cause="bounds")
    add("rename-upper-case", lambda f, c: rename(f, "model.onnx", "model.ONNX"), cause="roles")
    add("rename-data-upper-case", lambda f, c: rename(f, "model.onnx_data", "model.onnx.DATA"), cause="roles")

    def data_first(manifest: dict[str, Any]) -> None:
        manifest["components"]["model"]["files"].reverse()
        manifest["files"].reverse()

    add("files-listed-in-other-order", lambda f, c: edit_manifest(f, data_first), cause="roles", may_load=True)

    def role_swap(manifest: dict[str, Any]) -> None:
        for entry in manifest["files"]:
            entry["role"] = {"program": "weights", "weights": "program"}.get(entry["role"], entry["role"])

    add("roles-swapped", lambda f, c: edit_manifest(f, role_swap), cause="roles")

    def extra_listed(folder: Path, ctx: Context) -> None:
        (folder / "evil.py").write_text(f"open({str(ctx.sentinel)!r}, 'w')")
        list_file(folder, "evil.py", "program", "model")

    add("unknown-file-listed", extra_listed, cause="roles")
    add(
        "unlisted-file-present",
        lambda f, c: (f / "model.onnx_data.bak").write_bytes(b"x"),
        cause="roles",
        may_load=True,
    )
    add("data-symlink-out", lambda f, c: symlink_out(f, "model.onnx_data", c), cause="side")
    add("graph-symlink-out", lambda f, c: symlink_out(f, "model.onnx", c), cause="side")
    return out


# -- OpenVINO ---------------------------------------------------------------------------------------------------
def edit_xml(edit: Callable[..., str]) -> Callable[[Path, Context], None]:
    def build(folder: Path, ctx: Context) -> None:
        text = (folder / "openvino_model.xml").read_text()
        new = edit(text) if edit.__code__.co_argcount == 1 else edit(text, ctx)
        assert new != text
        (folder / "openvino_model.xml").write_text(new)

    return build


def _respell_constants(spelling: str) -> Callable[[str], str]:
    """Every ``Const`` layer's type spelled ``spelling``, and the first one's data moved past the ``.bin``."""

    def edit(text: str) -> str:
        text = text.replace('type="Const"', f'type="{spelling}"')
        return text.replace('offset="0" size="8192"', 'offset="100000" size="8192"', 1)

    return edit


def _openvino_variants() -> list[Variant]:
    out: list[Variant] = []

    def add(name: str, build: Callable[[Path, Context], None], cause: str = "code", **kw: Any) -> None:
        out.append(Variant(f"openvino-{name}", "openvino", cause, build, **kw))

    prolog = '<?xml version="1.0"?>'
    add(
        "xxe-external-entity",
        edit_xml(
            lambda t, c: t.replace(
                prolog, f'{prolog}\n<!DOCTYPE net [<!ENTITY x SYSTEM "file://{c.out("secret")}">]>'
            ).replace('name="Model0"', 'name="&x;"')
        ),
    )
    add(
        "billion-laughs",
        edit_xml(
            lambda t: t.replace(
                prolog,
                prolog
                + '\n<!DOCTYPE net [<!ENTITY a "aaaaaaaaaa">'
                + "".join(f'<!ENTITY {chr(98 + i)} "{("&" + chr(97 + i) + ";") * 10}">' for i in range(9))
                + "]>",
            ).replace('name="Model0"', 'name="&j;"')
        ),
        cause="bounds",
    )
    add("doctype-lower-case", edit_xml(lambda t: t.replace(prolog, prolog + "\n<!doctype net>")))
    add("extension-opset", edit_xml(lambda t: t.replace('version="opset1"', 'version="my_extension_opset"', 1)))
    add("ir-version-99", edit_xml(lambda t: t.replace('version="11">', 'version="99">', 1)))
    add(
        "utf16-encoding",
        lambda f, c: (f / "openvino_model.xml").write_bytes(
            (f / "openvino_model.xml")
            .read_text()
            .replace('<?xml version="1.0"?>', '<?xml version="1.0" encoding="UTF-16"?>')
            .encode("utf-16")
        ),
    )
    add(
        "utf8-byte-order-mark",
        lambda f, c: (f / "openvino_model.xml").write_bytes(b"\xef\xbb\xbf" + (f / "openvino_model.xml").read_bytes()),
    )
    add("not-xml", lambda f, c: (f / "openvino_model.xml").write_bytes(b"\x00\x01garbage<net"))
    add("two-roots", edit_xml(lambda t: t + '<net version="11"><layers/></net>'))
    add(
        "const-offset-past-bin",
        edit_xml(lambda t: t.replace('offset="0" size="8192"', 'offset="100000" size="8192"', 1)),
        cause="bounds",
    )
    add(
        "const-shape-larger-than-size",
        edit_xml(lambda t: t.replace('shape="64, 32" offset="0"', 'shape="640000, 32" offset="0"', 1)),
        cause="bounds",
    )
    add(
        "const-negative-offset",
        edit_xml(lambda t: t.replace('offset="0" size="8192"', 'offset="-8" size="8192"', 1)),
        cause="bounds",
    )
    add("const-non-integer", edit_xml(lambda t: t.replace('offset="0" size="8192"', 'offset="0x10" size="8192"', 1)))
    add(
        "const-string-type",
        edit_xml(lambda t: t.replace('element_type="f32" shape="64, 32"', 'element_type="string" shape="64, 32"', 1)),
    )
    add(
        "const-no-data",
        edit_xml(lambda t: t.replace('<data element_type="f32" shape="64, 32" offset="0" size="8192" />', "", 1)),
    )
    add(
        "truncated-bin",
        lambda f, c: (f / "openvino_model.bin").write_bytes((f / "openvino_model.bin").read_bytes()[:4000]),
        cause="bounds",
    )
    for label, spelling in (("lower-case", "const"), ("constant", "Constant")):  # types are found regardless of case
        add(
            f"const-type-{label}",
            edit_xml(_respell_constants(spelling)),
            cause="roles",
        )
    add(
        "runtime-option-cache-dir",
        edit_xml(
            lambda t, c: t.replace(
                '<INFERENCE_PRECISION_HINT value="f32" />',
                f'<INFERENCE_PRECISION_HINT value="f32" /><CACHE_DIR value="{c.sentinel}" />',
            )
        ),
    )
    add(
        "runtime-option-threads",
        edit_xml(
            lambda t: t.replace(
                '<INFERENCE_PRECISION_HINT value="f32" />',
                '<INFERENCE_PRECISION_HINT value="f32" /><INFERENCE_NUM_THREADS value="100000" />',
            )
        ),
    )
    add(
        "deep-nesting",
        edit_xml(lambda t: t.replace("<layers>", "<layers>" + "<x>" * 100_000 + "</x>" * 100_000, 1)),
        cause="bounds",
    )

    def many_layers(text: str) -> str:
        layer = '<layer id="9999" name="n" type="Const" version="opset1"><data element_type="f32" shape="1" offset="0" size="4" /></layer>'
        return text.replace("<layers>", "<layers>" + layer * 100_000, 1)

    add("hundred-thousand-layers", edit_xml(many_layers), cause="bounds", may_load=True)  # checked in bounded memory
    add("rename-xml-upper-case", lambda f, c: rename(f, "openvino_model.xml", "openvino_model.XML"), cause="roles")

    def unlisted_bin(folder: Path, ctx: Context) -> None:
        rename(folder, "openvino_model.xml", "openvino_model.XML")
        symlink_out(folder, "openvino_model.bin", ctx)

    add("upper-xml-with-bin-symlink-out", unlisted_bin, cause="roles")

    def bin_unlisted(folder: Path, ctx: Context) -> None:
        def edit(manifest: dict[str, Any]) -> None:
            manifest["files"] = [f for f in manifest["files"] if f["path"] != "openvino_model.bin"]
            manifest["components"]["model"]["files"] = ["openvino_model.xml"]

        edit_manifest(folder, edit)
        symlink_out(folder, "openvino_model.bin", ctx)

    add("bin-unlisted-and-symlinked-out", bin_unlisted, cause="roles")
    add("bin-symlink-out", lambda f, c: symlink_out(f, "openvino_model.bin", c), cause="side")
    add("xml-symlink-out", lambda f, c: symlink_out(f, "openvino_model.xml", c), cause="side")
    return out


# -- ExecuTorch -------------------------------------------------------------------------------------------------
def flip(position: int, mask: int = 0xFF, name: str = "model.pte") -> Callable[[Path, Context], None]:
    def build(folder: Path, ctx: Context) -> None:
        data = bytearray((folder / name).read_bytes())
        data[position % len(data)] ^= mask
        (folder / name).write_bytes(bytes(data))

    return build


#: Bit flips that pass flatbuffer verification but put bytes that are not UTF-8 into a runtime log line
#: (operator names, XNNPACK fields): executorch 1.5's bindings then abort the process.
ET_LOG_FLIPS = (572, 624, 9893, 10023, 10075, 10127, 10179)


def plan_index(slot: int, value: int) -> Callable[[Path, Context], None]:
    """Set the first index of vector field ``slot`` of the program's first execution plan (3: inputs, 4: outputs)."""

    def build(folder: Path, ctx: Context) -> None:
        from hub_export.backends.executorch._plan import _Buffer

        data = bytearray((folder / "model.pte").read_bytes())
        buf = _Buffer(bytes(data))
        plan = buf.tables(buf.table(buf.indirect(0)), 1)[0]
        start, count = buf.vector(plan, slot)
        assert count > 0
        struct.pack_into("<i", data, start, value)
        (folder / "model.pte").write_bytes(bytes(data))

    return build


def kernel_call_args(edit: Callable[[bytearray, int, int], None]) -> Callable[[Path, Context], None]:
    """Edit the arguments of the program's first kernel call: ``edit(data, start of the indices, count)``."""

    def build(folder: Path, ctx: Context) -> None:
        from hub_export.backends.executorch._plan import _Buffer

        data = bytearray((folder / "model.pte").read_bytes())
        buf = _Buffer(bytes(data))
        plan = buf.tables(buf.table(buf.indirect(0)), 1)[0]
        calls = [i for chain in buf.tables(plan, 5) for i in buf.tables(chain, 2) if buf.scalar(i, 0, "<B") == 1]
        body = buf.child(calls[0], 1)
        assert body is not None
        start, count = buf.vector(body, 1)
        edit(data, start, count)
        (folder / "model.pte").write_bytes(bytes(data))

    return build


def _swap_tensor_and_int(data: bytearray, start: int, count: int) -> None:
    """The first argument (a tensor) passed where the third (an int) was: a kernel's toInt() aborts on it."""
    first = struct.unpack_from("<i", data, start)[0]
    struct.pack_into("<i", data, start + 8, first)


def _fewer_arguments(data: bytearray, start: int, count: int) -> None:
    """The call passes 3 arguments: a kernel reads past them."""
    struct.pack_into("<I", data, start - 4, 3)


def _executorch_variants() -> list[Variant]:
    out: list[Variant] = []

    def add(name: str, build: Callable[[Path, Context], None], cause: str = "code", **kw: Any) -> None:
        out.append(Variant(f"executorch-{name}", "executorch", cause, build, **kw))

    add("identifier-flip", flip(4, 0x7F))
    add(
        "identifier-flip-renamed-upper",
        lambda f, c: (flip(4, 0x7F)(f, c), rename(f, "model.pte", "model.PTE")),
        cause="roles",
    )
    add("root-offset-past-end", flip(3, 0x7F), cause="bounds")
    add("extended-header-program-size", flip(20, 0x7F), cause="bounds")
    add("extended-header-segment-base", flip(28, 0x7F), cause="bounds")
    add("extended-header-segment-size", flip(36, 0x7F), cause="bounds")
    for position in ET_LOG_FLIPS:
        add(f"log-line-not-utf8-{position}", flip(position), may_load=True)
    for position in (64, 100, 200, 400, 800, 1200, 1600):
        add(f"flatbuffer-flip-{position}", flip(position), may_load=True)

    def rename_forward(folder: Path, ctx: Context) -> None:
        data = (folder / "model.pte").read_bytes()
        assert b"forward" in data
        (folder / "model.pte").write_bytes(data.replace(b"forward", b"gorward", 1))

    add("plan-without-forward", rename_forward)
    add("kernel-argument-of-another-kind", kernel_call_args(_swap_tensor_and_int))
    add("kernel-call-with-fewer-arguments", kernel_call_args(_fewer_arguments), cause="bounds")
    for slot, what in ((3, "input"), (4, "output")):  # the runtime aborts on an input index past the plan's values
        add(f"plan-{what}-index-past-values", plan_index(slot, 254), cause="bounds")
        add(f"plan-{what}-index-negative", plan_index(slot, -1), cause="bounds")
    add(
        "truncated-half",
        lambda f, c: (f / "model.pte").write_bytes((f / "model.pte").read_bytes()[:9600]),
        cause="bounds",
    )
    add(
        "truncated-header",
        lambda f, c: (f / "model.pte").write_bytes((f / "model.pte").read_bytes()[:30]),
        cause="bounds",
    )
    add("random-bytes", lambda f, c: (f / "model.pte").write_bytes(os.urandom(19200)))
    add("zeros", lambda f, c: (f / "model.pte").write_bytes(bytes(19200)))
    add("rename-upper-case", lambda f, c: rename(f, "model.pte", "model.PTE"), cause="roles")
    add(
        "role-mislabelled",
        lambda f, c: edit_manifest(f, lambda m: m["files"][0].__setitem__("role", "weights")),
        cause="roles",
    )
    add("program-symlink-out", lambda f, c: symlink_out(f, "model.pte", c), cause="side")
    return out


# -- side files and the manifest ------------------------------------------------------------------------------------
def _side_variants(fmt: str) -> list[Variant]:
    out: list[Variant] = []

    def add(name: str, build: Callable[[Path, Context], None], cause: str = "side", **kw: Any) -> None:
        out.append(Variant(f"{fmt}-side-{name}", fmt, cause, build, **kw))

    def manifest_symlink(folder: Path, ctx: Context) -> None:
        symlink_out(folder, "export.json", ctx)

    add("export-json-symlink-out", manifest_symlink, reseal=False)
    add("config-symlink-out", lambda f, c: symlink_out(f, "config.json", c))
    add("generation-config-symlink-out", lambda f, c: symlink_out(f, "generation_config.json", c))

    def tokenizer_symlink(folder: Path, ctx: Context) -> None:
        (folder / "tokenizer.json").symlink_to(ctx.out("tokenizer.json", b"{}"))
        list_file(folder, "tokenizer.json", "tokenizer")

    add("tokenizer-symlink-out", tokenizer_symlink)

    def export_json_sparse(folder: Path, ctx: Context) -> None:
        with open(folder / "export.json", "r+b") as handle:
            handle.seek(0, 2)
            handle.truncate(4_500_000_000)  # sparse

    add("export-json-4-5-gb-sparse", export_json_sparse, cause="bounds", reseal=False)
    add(
        "export-json-deep",
        lambda f, c: (f / "export.json").write_text("[" * 100_000 + "]" * 100_000),
        cause="bounds",
        reseal=False,
    )
    add("export-json-not-json", lambda f, c: (f / "export.json").write_bytes(b"\xff\xfe{"), reseal=False)
    add("export-json-array", lambda f, c: (f / "export.json").write_text("[]"), reseal=False)
    add(
        "export-json-nan-size",
        lambda f, c: edit_manifest(f, lambda m: m["files"][0].__setitem__("size", float("nan"))),
        reseal=False,
    )
    add(
        "export-json-negative-size",
        lambda f, c: edit_manifest(f, lambda m: m["files"][0].__setitem__("size", -1)),
        reseal=False,
    )
    add(
        "export-json-huge-int",
        lambda f, c: (f / "export.json").write_text(
            (f / "export.json").read_text().replace('"size": ', '"size": 9' + "9" * 5000, 1)
        ),
        reseal=False,
    )
    add(
        "export-json-unknown-format",
        lambda f, c: edit_manifest(f, lambda m: m.__setitem__("export_format", "os.system")),
    )
    add("export-json-newer-schema", lambda f, c: edit_manifest(f, lambda m: m.__setitem__("schema_version", 99)))
    add(
        "export-json-output-class",
        lambda f, c: edit_manifest(
            f,
            lambda m: m["components"]["model"]["output_structure"].update(
                {"type": "model_output", "class": "os.system"}
            ),
        ),
    )
    add(
        "export-json-dim-expression",
        lambda f, c: edit_manifest(
            f, lambda m: m["components"]["model"]["outputs"][0]["shape"].__setitem__(0, code(c.sentinel))
        ),
    )
    add(
        "export-json-path-traversal",
        lambda f, c: edit_manifest(
            f,
            lambda m: m["files"].append(
                {"path": f"../outside/{c.vid}.secret", "size": 4096, "sha256": "0" * 64, "role": "config"}
            ),
        ),
    )
    add(
        "export-json-absolute-path",
        lambda f, c: edit_manifest(
            f,
            lambda m: m["files"].append(
                {"path": str(c.out("secret")), "size": 4096, "sha256": "0" * 64, "role": "config"}
            ),
        ),
    )
    add("export-json-missing-components", lambda f, c: edit_manifest(f, lambda m: m.pop("components")))
    add(
        "export-json-component-missing-file",
        lambda f, c: edit_manifest(f, lambda m: m["components"]["model"].__setitem__("files", [])),
        cause="roles",
    )
    add("export-json-duplicate-path", lambda f, c: edit_manifest(f, lambda m: m["files"].append(dict(m["files"][0]))))
    add("config-upper-case", lambda f, c: rename(f, "config.json", "Config.json"), cause="roles")
    add(
        "config-unlisted",
        lambda f, c: edit_manifest(
            f, lambda m: m.__setitem__("files", [e for e in m["files"] if e["path"] != "config.json"])
        ),
        may_load=True,
    )
    add(
        "config-remote-code",
        lambda f, c: _edit_config(
            f, lambda d: d.update({"auto_map": {"AutoConfig": "evil.EvilConfig"}, "model_type": "evil"})
        ),
    )
    add("config-unknown-model-type", lambda f, c: _edit_config(f, lambda d: d.update({"model_type": "no_such_model"})))
    add("config-array", lambda f, c: (f / "config.json").write_text("[1, 2]"))
    add(
        "config-deep",
        lambda f, c: (f / "config.json").write_text('{"a": ' + "[" * 50_000 + "]" * 50_000 + "}"),
        cause="bounds",
    )
    add(
        "config-20-mib",
        lambda f, c: (f / "config.json").write_text('{"model_type": "llama", "pad": "' + "x" * (20 << 20) + '"}'),
        cause="bounds",
    )
    add(
        "generation-config-bad-value",
        lambda f, c: (f / "generation_config.json").write_text('{"temperature": "hot", "top_k": -5}'),
        may_load=True,  # transformers keeps the values as they are; nothing runs
    )
    return out


def _edit_config(folder: Path, edit: Callable[[dict[str, Any]], Any]) -> None:
    data = json.loads((folder / "config.json").read_text())
    edit(data)
    (folder / "config.json").write_text(json.dumps(data))


def variants() -> list[Variant]:
    """Every variant of the corpus."""
    return [
        *_pt2_code_variants(),
        *_pt2_zip_variants(),
        *_pt2_shared_variants(),
        *_onnx_variants(),
        *_openvino_variants(),
        *_executorch_variants(),
        *_side_variants("onnx"),
        *[v for v in _side_variants("pt2") if v.vid.endswith(("symlink-out", "4-5-gb-sparse", "config-remote-code"))],
    ]


def add_side_configs(folder: Path) -> None:
    """Give a base export a config.json and a generation_config.json (a tiny Llama's), listed in export.json."""
    from transformers import GenerationConfig, LlamaConfig

    LlamaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=4).to_json_file(
        str(folder / "config.json")
    )
    GenerationConfig(max_new_tokens=4).to_json_file(str(folder / "generation_config.json"))
    list_file(folder, "config.json", "config")
    list_file(folder, "generation_config.json", "generation_config")
    reseal(folder)


def build_variant(variant: Variant, base: Path, root: Path, outside: Path, sentinels: Path) -> Path:
    """Copy ``base`` to ``root/<id>``, apply the variant and re-seal it; returns the folder."""
    folder = root / variant.vid
    shutil.copytree(base, folder, symlinks=True)
    ctx = Context(variant.vid, sentinels / variant.vid, outside)
    variant.build(folder, ctx)
    if variant.reseal:
        reseal(folder)
    return folder
