"""The package installs as README.md says: from a checkout with its extras, from a git URL, and as the wheel and the
sdist that the release workflow (.github/workflows/release.yml) builds, checks and publishes on a version tag."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# a tiny export in the fresh environment: the extras' runtimes import and run
_SMOKE = """
import torch
from transformers import BertConfig, BertModel
from hub_export import ExportedModel, OnnxConfig, OnnxExporter
torch.manual_seed(0)
model = BertModel(BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)).eval()
inputs = {"input_ids": torch.randint(0, 64, (2, 5)), "attention_mask": torch.ones(2, 5, dtype=torch.int64)}
OnnxExporter().export(model, inputs, config=OnnxConfig(dynamic=True)).save_pretrained("bert-onnx")
out = ExportedModel.from_pretrained("bert-onnx")(**inputs).last_hidden_state
assert torch.allclose(out, model(**inputs).last_hidden_state, atol=1e-4)
print("ok")
"""


def _run(*command: str, cwd: Path | None = None) -> str:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"{' '.join(command)}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def _venv(path: Path) -> Path:
    _run(sys.executable, "-m", "venv", str(path))
    return path / "bin"


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m build`` of the checkout, as the release workflow runs it, and ``twine check --strict``."""
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--outdir", str(out), str(ROOT))
    _run(sys.executable, "-m", "twine", "check", "--strict", *map(str, out.iterdir()))
    return out


def _sees_this_environment(bin_dir: Path) -> None:
    """Let a fresh venv import what this environment installed (a ``.pth`` file, read after its own packages)."""
    import sysconfig

    (site_packages,) = (bin_dir.parent / "lib").glob("python3*/site-packages")
    ours = sysconfig.get_paths()["purelib"]
    (site_packages / "zz-test-environment.pth").write_text(ours + "\n")


def test_the_wheel_installs_with_its_extras_and_exports(dist: Path, tmp_path: Path) -> None:
    """pip resolves the wheel with its extras under constraints.txt (``--dry-run``: the runtimes it would install are
    the ones asked for), and the wheel's own code, installed in a fresh venv, exports and loads with them (the
    runtimes themselves are this environment's, rather than a second copy of torch and the runtimes)."""
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert {"hub_export/schemas/export.schema.json", "hub_export/schemas/sync-config.schema.json"} <= names
    bin_dir = _venv(tmp_path / "venv")
    constraints = str(ROOT / "constraints.txt")
    report = tmp_path / "report.json"
    pip = (sys.executable, "-m", "pip", "--python", str(bin_dir / "python"))
    _run(*pip, "install", "--quiet", "--dry-run", "--ignore-installed", "--report", str(report), "-c", constraints,
         f"{wheel}[onnx,openvino]")  # fmt: skip
    resolved = {
        item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line)
    for name in ("torch", "transformers", "huggingface_hub", "onnx", "onnxruntime", "onnxscript", "openvino"):
        assert (resolved.get(name.lower().replace("_", "-")) or "").split("+")[0] == pins[name], (name, resolved)
    assert "executorch" not in resolved and "hub-export" in resolved  # only the extras asked for
    _run(*pip, "install", "--quiet", "--no-deps", str(wheel))
    _sees_this_environment(bin_dir)
    assert "hub-export" in _run(str(bin_dir / "hub-export"), "--version")
    where = _run(str(bin_dir / "python"), "-c", "import hub_export; print(hub_export.__file__)", cwd=tmp_path)
    assert where.startswith(str(tmp_path / "venv")), where  # the wheel's code, not this checkout's
    assert _run(str(bin_dir / "python"), "-c", _SMOKE, cwd=tmp_path).strip().endswith("ok")


def test_the_sdist_and_a_git_url_install(dist: Path, tmp_path: Path) -> None:
    """The sdist holds what the wheel is built from; ``pip install "hub-export @ git+<url>"`` builds from a clone
    (here the checkout's own repository, by a file URL). Their dependencies are the wheel's: not installed again."""
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"pyproject.toml", "README.md", "schemas/export.schema.json", "hub_export/__init__.py"} <= names
    bin_dir = _venv(tmp_path / "venv")
    _run(str(bin_dir / "pip"), "install", "--quiet", "--no-deps", str(sdist))
    assert _run(str(bin_dir / "python"), "-c", "import hub_export; print(hub_export.__version__)", cwd=tmp_path)
    _run(str(bin_dir / "pip"), "uninstall", "--quiet", "-y", "hub-export")
    # a git+file URL has no host, which the pip that a new venv carries (23.x) refuses as an invalid requirement: the
    # checkout's own pip installs into the venv (a git+https URL, as README gives it, works with either)
    pip = (sys.executable, "-m", "pip", "--python", str(bin_dir / "python"))
    _run(*pip, "install", "--quiet", "--no-deps", f"hub-export @ git+file://{ROOT}")
    assert _run(str(bin_dir / "python"), "-c", "import hub_export; print(hub_export.__version__)", cwd=tmp_path)


def test_the_release_workflow_is_a_valid_workflow() -> None:
    workflow = ROOT / ".github" / "workflows" / "release.yml"
    _run(sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", str(workflow))
    text = workflow.read_text()
    assert "pypa/gh-action-pypi-publish" in text and "id-token: write" in text  # trusted publishing, no token
