"""Package versions: what an export was created with, and the warning when they drift from the tested ones."""

from __future__ import annotations

import warnings
from importlib import metadata

__all__ = ["TESTED_VERSIONS", "__version__", "created_with", "warn_version_drift"]

#: The version of hub_export (the facade re-exports it).
__version__ = "0.2.0"

# Keep equal to constraints.txt (a test checks it).
TESTED_VERSIONS: dict[str, str] = {
    "torch": "2.13.0",
    "transformers": "5.23.0",
    "huggingface_hub": "2.4.0",
    "safetensors": "0.8.0",
    "onnx": "1.23.2",
    "onnxscript": "0.7.2",
    "onnx-ir": "1.1.0",
    "onnxruntime": "1.32.0",
    "executorch": "1.5.1",
    "torchao": "0.18.0",
    "openvino": "2026.4.1",
    "openvino-tokenizers": "2026.4.1.0",
    "nncf": "3.4.0",
    "jsonschema": "4.26.0",
}

_warned: set[str] = set()


def installed_version(package: str) -> str | None:
    """The installed version of a distribution, or None."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _base(version: str) -> str:
    return version.split("+", 1)[0]


def created_with(distributions: tuple[str, ...] = ()) -> dict[str, str]:
    """``{package: version}`` of hub_export, torch, transformers and a format's backend distributions."""
    versions = {"hub_export": __version__}
    for package in ("torch", "transformers", *distributions):
        version = installed_version(package)
        if version is not None:
            versions[package] = version
    return versions


def warn_version_drift(packages: tuple[str, ...]) -> None:
    """Warn once per process and package when an installed version differs from the tested one."""
    for package in packages:
        if package in _warned or package not in TESTED_VERSIONS:
            continue
        _warned.add(package)
        version = installed_version(package)
        if version is not None and _base(version) != TESTED_VERSIONS[package]:
            warnings.warn(
                f"{package} {version} is installed but hub_export is tested with {package}=={TESTED_VERSIONS[package]}; "
                f"exports may fail or differ. Install the tested versions with `pip install -c constraints.txt ...`.",
                UserWarning,
                stacklevel=3,
            )
