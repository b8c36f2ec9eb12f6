"""Test set-up: tests/ on sys.path (tiny_models, hub_fixtures), Hub client env, shared fixtures."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest


def _pin_worker_to_one_core() -> None:
    """Under xdist with a worker per core, run each worker on a core of its own (before torch is imported).

    Each runtime sizes its thread pool by the cores the process may use (torch's OpenMP pool, ONNX Runtime's through
    ``available_cores``, OpenVINO's CPU plugin): unpinned, every worker would start one thread per core, and the
    workers' pools would share the cores, each thread waiting for the others'.
    """
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not worker.startswith("gw") or not count.isdigit() or not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    if int(count) >= len(cores) > 1:
        os.sched_setaffinity(0, {cores[int(worker[2:]) % len(cores)]})


_pin_worker_to_one_core()
os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
#: The folders this process made for the run (the xdist workers inherit the variables and reuse them): removed when
#: the run ends, by the process that made them.
_RUN_FOLDERS: list[str] = []
for _variable, _prefix in (
    # remembered file digests (hub_export._files) go to a folder of this run, not the user's cache
    ("HUB_EXPORT_CACHE", "hub-export-test-cache-"),
    # exports several modules read (tiny_models.embedding_head_export): made once per run, shared by the workers
    ("HUB_EXPORT_TEST_EXPORTS", "hub-export-test-exports-"),
):
    if _variable not in os.environ:
        os.environ[_variable] = tempfile.mkdtemp(prefix=_prefix)
        _RUN_FOLDERS.append(os.environ[_variable])
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hub_fixtures import HUB_TOKEN, hub_api, hub_env, hub_server  # noqa: E402,F401

#: The test modules that take longest (40 s or more of a full run's `--durations=0`, most first). Under ``--dist loadfile`` xdist hands
#: whole modules to its workers in collection order; these are collected first, so that the last modules handed out
#: are short ones and the two workers finish together (by default xdist orders modules by their number of tests).
SLOW_MODULES = (
    "test_consumers.py",
    "test_docs.py",
    "test_install.py",
    "test_hub_pages.py",
    "test_generation.py",
    "test_weights_once.py",
    "test_executorch_lowering.py",
    "test_openvino.py",
    "test_ort_fusions.py",
    "test_executorch.py",
    "test_onnx.py",
    "test_quantization.py",
    "test_pipelines.py",
    "test_dynamo_compiled.py",
    "test_zoo.py",
    "test_half_precision.py",
    "test_generation_multimodal.py",
    "test_action.py",
    "test_quantization_generation.py",
    "test_docs_examples.py",
    "test_cli.py",
    "test_on_the_fly.py",
    "test_patches_modeling.py",
    "test_generation_one_graph.py",
    "test_sync.py",
    "test_dynamo.py",
    "test_structure.py",
    "test_generation_mixin.py",
    "test_sync_tasks.py",
    "test_safety_corpus.py",
    "test_hub_download.py",
)
assert all((Path(__file__).parent / name).is_file() for name in SLOW_MODULES), "a module of SLOW_MODULES was renamed"


def pytest_unconfigure(config: pytest.Config) -> None:
    for folder in _RUN_FOLDERS:  # empty in the xdist workers: the controller made the folders
        shutil.rmtree(folder, ignore_errors=True)


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep the collection order below
        config.option.loadscopereorder = False


@pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixture parameters, which it keeps within a module
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOW_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the other modules keep their order
