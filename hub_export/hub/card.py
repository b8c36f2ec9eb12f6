"""The repo README ("model card"): a managed section listing the exports, and the YAML front matter.

The section lives between :data:`BEGIN` and :data:`END`; everything outside it is kept byte for byte. The front
matter gains ``library_name`` (kept when present), ``pipeline_tag`` (the exports' task), the source's ``license``,
``base_model`` (the source repo, when known) with ``base_model_relation: quantized`` when an export is quantized,
and one tag per format plus ``hub-export``; a value already present is never changed, and the front matter is
rewritten only when something is missing, so a card that already says everything is left untouched. Each export
gets a usage snippet that loads its tokenizer (or processor) and runs its task (``generate`` for generation
exports). The card is a pure function of the exports (no dates), which keeps re-publishing an identical export a
no-op.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import UnknownFormatError
from ..formats import backend_for
from ..manifest import Manifest

__all__ = ["BEGIN", "END", "LICENSE_KEYS", "CardExport", "card_metadata", "render_card", "format_tags"]

#: The front matter keys of a source card's license, copied to the card of its exports.
LICENSE_KEYS = ("license", "license_name", "license_link")
#: Tasks whose inputs come from a processor (``AutoProcessor``), not a tokenizer.
_PROCESSOR_TASKS = (
    "automatic-speech-recognition",
    "image-text-to-text",
    "image-classification",
    "audio-classification",
)

BEGIN = "<!-- hub-export:begin -->"
END = "<!-- hub-export:end -->"

_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?\r?\n)?---[ \t]*(\r?\n|\Z)", re.S)


@dataclass(frozen=True)
class CardExport:
    """One export as the card lists it.

    Attributes:
        subfolder: Its folder in the repo.
        manifest: Its manifest, or None when ``export.json`` could not be read.
        problem: Why the manifest could not be read.
    """

    subfolder: str
    manifest: Manifest | None
    problem: str | None = None


def format_tags(export_format: str) -> tuple[str, ...]:
    """The Hub tags of one export format (its backend's ``card_tags``; the format name for an unknown one)."""
    try:
        return backend_for(export_format).card_tags or (export_format,)
    except UnknownFormatError:
        return (export_format,)


def render_card(
    existing: str | None,
    exports: Mapping[str, CardExport],
    repo_id: str,
    *,
    default_library: str,
    source_meta: Mapping[str, Any] | None = None,
) -> str:
    """The README text with the managed section and front matter brought up to date.

    Args:
        existing: The current README (None when the repo has none).
        exports: Subfolder -> export, every export of the target revision.
        repo_id: The repo (used in the loading snippets).
        default_library: ``library_name`` to set when the front matter has none.
        source_meta: The source card's license fields (:data:`LICENSE_KEYS`), set when the card has no license.

    Returns:
        The new README text (identical to ``existing`` when nothing changed).
    """
    text = existing if existing is not None else f"# {repo_id.split('/')[-1]}\n"
    meta_text, body = _split_front_matter(text)
    section = _section(exports, repo_id)
    end = body.find(END)
    begin = body.rfind(BEGIN, 0, end) if end >= 0 else -1  # the BEGIN closest to the first END
    if begin >= 0:
        body = body[:begin] + section + body[end + len(END) :]
    else:
        body = (
            body + ("" if body.endswith("\n") or not body else "\n") + ("\n" if body.strip() else "") + section + "\n"
        )
    return _front_matter(meta_text, exports, repo_id, default_library, source_meta or {}) + body


def card_metadata(text: str) -> dict[str, Any]:
    """The YAML front matter of a README as a dict (empty when it has none or it does not parse)."""
    import yaml

    match = _FRONT_MATTER.match(text)
    try:
        loaded = yaml.safe_load(match.group(1) or "") if match else None
    except yaml.YAMLError:
        return {}
    return dict(loaded) if isinstance(loaded, dict) else {}


def _split_front_matter(text: str) -> tuple[str | None, str]:
    match = _FRONT_MATTER.match(text)
    if match is None:
        return None, text
    return text[: match.end()], text[match.end() :]


def _tasks(exports: Mapping[str, CardExport]) -> list[str]:
    """The exports' tasks, most common first (ties: by name)."""
    counts: dict[str, int] = {}
    for export in exports.values():
        if export.manifest is not None and export.manifest.task:
            counts[export.manifest.task] = counts.get(export.manifest.task, 0) + 1
    return sorted(counts, key=lambda t: (-counts[t], t))


def _quantized(manifest: Manifest) -> bool:
    return bool(manifest.config.get("quantizer")) or any(c.quantization for c in manifest.components.values())


def _front_matter(
    current: str | None,
    exports: Mapping[str, CardExport],
    repo_id: str,
    default_library: str,
    source_meta: Mapping[str, Any],
) -> str:
    import yaml  # here, not at module level: `import hub_export` and the format registry need no third-party package

    meta: dict[str, Any] = {}
    if current is not None:
        match = _FRONT_MATTER.match(current)
        try:
            loaded = yaml.safe_load(match.group(1) or "") if match else None
        except yaml.YAMLError:
            return current  # not ours to repair: keep it as written
        meta = dict(loaded) if isinstance(loaded, dict) else {}
    wanted = dict(meta)
    wanted.setdefault("library_name", default_library)
    tasks = _tasks(exports)
    if tasks:
        wanted.setdefault("pipeline_tag", tasks[0])
    if "license" not in wanted and source_meta.get("license"):
        wanted.update({k: source_meta[k] for k in LICENSE_KEYS if source_meta.get(k)})
    derived = [e.manifest for e in exports.values() if e.manifest and e.manifest.source]
    bases = sorted({m.source.repo_id for m in derived if m.source} - {repo_id})
    if bases and "base_model" not in wanted:
        wanted["base_model"] = bases[0] if len(bases) == 1 else bases
    if bases and "base_model_relation" not in wanted and any(_quantized(m) for m in derived):
        wanted["base_model_relation"] = "quantized"
    tags = list(wanted.get("tags") or [])
    if isinstance(wanted.get("tags"), str):
        tags = [wanted["tags"]]
    for export in exports.values():
        if export.manifest is not None:
            tags += [t for t in format_tags(export.manifest.export_format) if t not in tags]
    if "hub-export" not in tags:
        tags.append("hub-export")
    wanted["tags"] = tags
    if current is not None and wanted == meta:
        return current
    return "---\n" + yaml.safe_dump(wanted, sort_keys=False, allow_unicode=True) + "---\n"


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover - unreachable


def _parity(manifest: Manifest) -> str:
    diffs = [c.parity["max_abs_diff"] for c in manifest.components.values() if c.parity]
    return f"{max(diffs):.2e}" if diffs else "n/a"


def _source(manifest: Manifest) -> str:
    source = manifest.source
    if source is None:
        return "n/a"
    return f"`{source.repo_id}@{source.revision[:12]}`"


def _section(exports: Mapping[str, CardExport], repo_id: str) -> str:
    lines = [
        BEGIN,
        "## Exports",
        "",
        "This section is maintained by `hub-export`: edits inside it are replaced on the next publish. Each folder",
        "holds one export; its `export.json` lists every file with its size and sha256, checked on download.",
        "",
        "| Folder | Format | Components | Size | Parity (max abs diff) | Source commit |",
        "|---|---|---|---|---|---|",
    ]
    details: list[str] = []
    for sub in sorted(exports):
        export = exports[sub]
        manifest = export.manifest
        if manifest is None:
            lines.append(f"| `{sub}/` | ? | ? | ? | ? | export.json unreadable: {export.problem} |")
            continue
        files = manifest.all_listed()
        lines.append(
            f"| `{sub}/` | {manifest.export_format} | {', '.join(manifest.components)} | "
            f"{_size(sum(f.size for f in files))} | {_parity(manifest)} | {_source(manifest)} |"
        )
        details += ["", f"### `{sub}/`", ""]
        for name, component in manifest.components.items():
            listed = ", ".join(f"`{f.path}` ({_size(f.size)})" for f in component.files)
            parity = component.parity or {}
            measured = (
                f"max abs diff {parity['max_abs_diff']:.2e} (atol {parity['atol']:g})" if parity else "not measured"
            )
            details.append(f"- `{name}`: {listed}; parity {measured}")
        details += ["", *_snippet(manifest, repo_id, sub)]
    return "\n".join(lines + details + ["", END])


def _snippet(manifest: Manifest, repo_id: str, sub: str) -> list[str]:
    """Python that loads the export with its tokenizer or processor and runs its task."""
    roles = {f.role for f in manifest.side_files()}
    task = manifest.task
    processor = task in _PROCESSOR_TASKS or ("processor" in roles and "tokenizer" not in roles)
    auto = "AutoProcessor" if processor else "AutoTokenizer"
    name = "processor" if processor else "tokenizer"
    if roles & {"tokenizer", "processor"}:
        where = f'"{repo_id}", subfolder="{sub}"'
    elif manifest.source is not None:
        where = f'"{manifest.source.repo_id}", revision="{manifest.source.revision}"'
    else:
        where = None
    load = f'model = ExportedModel.from_pretrained("{repo_id}", subfolder="{sub}")'
    if where is None:
        return ["```python", "from hub_export import ExportedModel", "", load, "```"]
    code = ["```python", f"from transformers import {auto}", "", "from hub_export import ExportedModel", ""]
    code += [f"{name} = {auto}.from_pretrained({where})", load]
    if processor:
        code += [f'inputs = {name}(..., return_tensors="pt")  # your {task or "inputs"}']
    else:
        code += [f'inputs = {name}(["Hello, my name is"], return_tensors="pt")']
    if manifest.generation is not None:
        code += [
            "ids = model.generate(**inputs, max_new_tokens=32)",
            f"print({name}.batch_decode(ids, skip_special_tokens=True))",
        ]
    elif task == "feature-extraction":
        code += ["print(model(**inputs).last_hidden_state.shape)"]
    else:
        code += ["print(model(**inputs).logits.argmax(-1))"]
    return [*code, "```"]
