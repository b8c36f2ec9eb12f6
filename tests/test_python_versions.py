"""The Python versions hub_export claims are the ones it runs on.

For every supported minor version, the pyenv interpreter of that version byte-compiles all of ``hub_export`` and
imports its stdlib-only part (the facade, the core modules, the format registry with every built-in backend, the
CLI entry point and the embedded hub) in a subprocess that sees no site-packages: nothing there may need a
third-party package at import time. pyproject.toml (requires-python, classifiers, ruff and mypy targets), the README
and CONTRIBUTING.md name the same versions.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: The supported minor versions; pyproject.toml's requires-python and classifiers must say the same.
SUPPORTED = ("3.11", "3.12", "3.13")

#: Modules that must import with the standard library alone (``ExportFormat`` listing imports every backend).
STDLIB_ONLY = (
    "hub_export",
    "hub_export.errors",
    "hub_export.formats",
    "hub_export.dims",
    "hub_export.structure",
    "hub_export.signature",
    "hub_export.manifest",
    "hub_export.configs",
    "hub_export._files",
    "hub_export._allowlist",
    "hub_export._versions",
    "hub_export.cli.main",
    "hub_export.embedded_hub",
)

BUILT_IN_FORMATS = ["dynamo", "executorch", "onnx", "openvino"]

# Runs in the interpreter under test, with no site-packages on sys.path (-S -s) and the repo on PYTHONPATH.
_PROBE = """
import importlib, json, pathlib, sys
root = pathlib.Path(sys.argv[1])
compiled = 0
for path in sorted((root / "hub_export").rglob("*.py")):
    compile(path.read_bytes(), str(path), "exec", dont_inherit=True)  # byte-compile in memory: nothing written
    compiled += 1
for name in sys.argv[2:]:
    importlib.import_module(name)
import hub_export
from hub_export import ExportFormat
result = {
    "version": list(sys.version_info[:2]),
    "compiled": compiled,
    "hub_export_file": hub_export.__file__,
    "__version__": hub_export.__version__,
    "formats": [str(f) for f in ExportFormat],
    "onnx_extra": ExportFormat.ONNX.backend.extra,
    "error_is_value_error": issubclass(hub_export.ConfigError, ValueError),
}
top_level = {m.split(".")[0] for m in sys.modules}
result["third_party"] = sorted(top_level - set(sys.stdlib_module_names) - {"hub_export", "__main__"})
print(json.dumps(result))
"""


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _interpreter(minor: str) -> Path:
    """The newest pyenv interpreter of ``minor`` (``3.12`` -> ``$PYENV_ROOT/versions/3.12.*/bin/python3``)."""
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates = [
        path / "bin" / "python3"
        for path in (pyenv / "versions").glob(f"{minor}.*")
        if re.fullmatch(rf"{re.escape(minor)}\.\d+", path.name) and (path / "bin" / "python3").is_file()
    ]
    if not candidates:
        pytest.fail(
            f"Python {minor} is not installed under {pyenv / 'versions'}: hub_export claims to support it, so the "
            f"suite checks it. Install it with `pyenv install {minor}` (or set PYENV_ROOT to where it lives)."
        )
    return max(candidates, key=lambda p: int(p.parent.parent.name.rsplit(".", 1)[1]))


@pytest.mark.parametrize("minor", SUPPORTED)
def test_compiles_and_imports_without_third_party_packages(minor: str, tmp_path: Path) -> None:
    python = _interpreter(minor)
    env = {"PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1", "PATH": os.environ.get("PATH", "")}
    proc = subprocess.run(
        [str(python), "-S", "-s", "-B", "-c", _PROBE, str(ROOT), *STDLIB_ONLY],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, (
        f"Python {minor} ({python}) cannot compile or import hub_export (a ModuleNotFoundError means a module imports "
        f"a third-party package at module level: import it inside the function that uses it):\n{proc.stderr}"
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["version"] == [int(part) for part in minor.split(".")]
    assert Path(result["hub_export_file"]) == ROOT / "hub_export" / "__init__.py"
    assert result["compiled"] == len(list((ROOT / "hub_export").rglob("*.py")))
    assert result["__version__"] == _pyproject()["project"]["version"]
    assert result["formats"] == BUILT_IN_FORMATS
    assert result["onnx_extra"] == "onnx" and result["error_is_value_error"]
    assert result["third_party"] == [], (
        f"Importing {', '.join(STDLIB_ONLY)} on Python {minor} imported {result['third_party']}: import "
        "third-party packages inside the functions that use them."
    )


@pytest.mark.parametrize("minor", SUPPORTED)
def test_probe_sees_no_site_packages(minor: str, tmp_path: Path) -> None:
    """The isolation is real: ``pip``, which the interpreter's site-packages holds, imports without ``-S`` only."""
    python = _interpreter(minor)
    env = {"PYTHONPATH": str(ROOT), "PATH": os.environ.get("PATH", "")}
    run = [str(python), "-s", "-B", "-c", "import pip"]
    assert subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, timeout=120).returncode == 0
    isolated = subprocess.run(
        [run[0], "-S", *run[1:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert isolated.returncode != 0 and "ModuleNotFoundError" in isolated.stderr


def test_pyproject_claims_the_supported_versions() -> None:
    project = _pyproject()["project"]
    assert project["requires-python"] == f">={SUPPORTED[0]}"
    claimed = {
        c.rsplit(" :: ", 1)[1]
        for c in project["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    }
    assert claimed == set(SUPPORTED)
    tools = _pyproject()["tool"]
    assert tools["ruff"]["target-version"] == "py" + SUPPORTED[0].replace(".", "")
    assert tools["mypy"]["python_version"] == SUPPORTED[0]


@pytest.mark.parametrize("page", ["README.md", "CONTRIBUTING.md"])
def test_docs_name_the_supported_versions(page: str) -> None:
    text = (ROOT / page).read_text(encoding="utf-8")
    assert f"Python {SUPPORTED[0]} to {SUPPORTED[-1]}" in text, (
        f"{page} must say 'Python {SUPPORTED[0]} to {SUPPORTED[-1]}'"
    )
