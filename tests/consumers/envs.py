"""The runtimes' own tools, each where it installs: created once per machine, cached, found by the consumer tests.

The optimum packages pin transformers versions of their own (optimum-onnx < 4.58, optimum-intel < 5.6,
optimum-executorch == 5.0.0rc1), so each lives in a virtual environment of its own, created from a fully pinned
list (``<name>.txt``, installed with ``--no-deps``: nothing is resolved, torch stays 2.13.0). transformers.js is an
npm project (``package.json`` and its lock file). Each environment is kept under
``$XDG_CACHE_HOME/hub-export/consumers/<name>-<hash of what defines it>`` (``~/.cache`` by default; another root
with ``HUB_EXPORT_CONSUMERS``), so a fresh checkout on the same machine reuses it and a changed pin makes a new one.
Debian's ``chromium`` and ``git-lfs`` are installed with apt-get when missing.

``python tests/consumers/envs.py`` creates whatever is missing (``make consumers``); the tests call :func:`python`,
:func:`node_modules` and :func:`chromium`, which create it too.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: The Python environments, by name (each defined by ``<name>.txt``).
PYTHON_ENVS = ("optimum-onnx", "optimum-intel", "optimum-executorch")
CHROMIUM = Path("/usr/bin/chromium")
GIT_LFS = Path("/usr/bin/git-lfs")


def root() -> Path:
    base = os.environ.get("HUB_EXPORT_CONSUMERS")
    if base:
        return Path(base)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "hub-export" / "consumers"


def _digest(*paths: Path) -> str:
    digest = hashlib.sha256(sys.version.encode())
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _ensure(target: Path, build) -> Path:
    """``target``, made by ``build(target)`` unless a complete one is there; one process builds it at a time (a
    file lock), and a failed build leaves nothing that passes for complete."""
    import fcntl

    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / ".complete").is_file():
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir()
            try:
                build(target)
            except BaseException:
                shutil.rmtree(target, ignore_errors=True)
                raise
            (target / ".complete").touch()
    return target


def python(name: str) -> Path:
    """The Python interpreter of environment ``name`` (created when missing)."""
    spec = HERE / f"{name}.txt"

    def build(folder: Path) -> None:  # a venv is built where it stays: its scripts name their folder
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
        pip = [str(folder / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, "--no-deps", "-r", str(spec)], check=True)

    return _ensure(root() / f"{name}-{_digest(spec)}", build) / "bin" / "python"


def node_modules() -> Path:
    """The ``node_modules`` folder of the transformers.js project (``npm ci``, created when missing)."""
    package, lock = HERE / "package.json", HERE / "package-lock.json"

    def build(folder: Path) -> None:
        shutil.copy(package, folder / "package.json")
        shutil.copy(lock, folder / "package-lock.json")
        env = {**os.environ, "ONNXRUNTIME_NODE_INSTALL": "skip"}  # its postinstall would download from GitHub
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=folder, check=True, env=env)

    return _ensure(root() / f"node-{_digest(package, lock)}", build) / "node_modules"


def _apt(package: str, binary: Path) -> Path:
    """``binary``, installed from Debian's ``package`` when missing."""
    if not binary.exists():
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", package], check=True, env=env)
    return binary


def chromium() -> Path:
    """Debian's Chromium (installed with apt-get when missing)."""
    return _apt("chromium", CHROMIUM)


def git_lfs() -> Path:
    """Debian's git-lfs, which ``git lfs pull`` from the embedded hub runs (installed with apt-get when missing)."""
    return _apt("git-lfs", GIT_LFS)


def main() -> int:
    for name in PYTHON_ENVS:
        print(f"{name}: {python(name)}", flush=True)
    print(f"transformers.js: {node_modules()}", flush=True)
    print(f"chromium: {chromium()}", flush=True)
    print(f"git-lfs: {git_lfs()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
