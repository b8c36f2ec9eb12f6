"""Every failure a user can cause ends in one line saying what to do: exit code 1 (2 for usage), within 15 s.

Each case runs the real entry point (``hub_export.cli.main.main``; the unreachable Hub also as a process) and
asserts the line, the exit code and the time bound. ``--verbose`` / ``HUB_EXPORT_DEBUG=1`` add the traceback.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest
from cli_run import Run, outside_actions, run_cli, run_process, save_tiny_export
from huggingface_hub import HfApi

from hub_export.embedded_hub.server import HubServer
from hub_export.hub.publish import publish

__all__ = ["outside_actions"]  # an autouse fixture, used by importing it

REPO = "me/tiny-errors"
BOUND_S = 15


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    return save_tiny_export(tmp_path_factory.mktemp("saved") / "pt2")


@pytest.fixture
def published(saved: Path, hub_env: HubServer) -> HubServer:
    """REPO with the export in pt2/, tagged v1."""
    publish(REPO, {"pt2": saved}, tag="v1")
    return hub_env


@pytest.fixture
def closed_port() -> str:
    """An endpoint on a loopback port nothing listens on (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _one_line(run: Run, command: str, code: int = 1) -> str:
    """The error line; asserts the exit code, the time bound, and that it is the only line of stderr."""
    assert run.code == code, (run.code, run.err)
    assert run.seconds < BOUND_S, run.seconds
    assert len(run.err_lines) == 1, run.err
    prefix = f"hub-export {command}: error: "
    assert run.err_lines[0].startswith(prefix), run.err
    return run.err_lines[0][len(prefix) :]


@pytest.mark.parametrize(
    "argv",
    [
        ["pull", "me/x", "--subfolder", "onnx"],
        ["validate", "me/x", "--subfolder", "onnx"],
        ["sync", "me/x", "-f", "onnx", "--dry-run"],
        ["export", "me/x", "-f", "dynamo", "-o", "out"],
        ["push", "me/x", "SAVED"],
    ],
    ids=lambda argv: argv[0],
)
def test_an_unreachable_hub_is_one_line_within_seconds(argv, saved: Path, closed_port: str, tmp_path: Path, capsys):
    argv = [str(saved) if a == "SAVED" else str(tmp_path / a) if a == "out" else a for a in argv]
    message = _one_line(run_cli(capsys, *argv, "--endpoint", closed_port), argv[0])
    assert message.startswith(f"cannot reach the Hub at {closed_port} (connection refused). Check HF_ENDPOINT")


def test_an_unreachable_hub_as_a_process_from_hf_endpoint(closed_port: str, tmp_path: Path):
    """The installed command, with the endpoint from the environment (what `pull` took 98 s and 45 lines for)."""
    env = {"HF_ENDPOINT": closed_port, "HF_HUB_CACHE": str(tmp_path / "cache")}
    message = _one_line(run_process("pull", "me/x", "--subfolder", "onnx", env=env, timeout=60), "pull")
    assert message.startswith(f"cannot reach the Hub at {closed_port} (connection refused)")


def test_a_wrong_token_names_hf_token_and_the_flag(saved: Path, tmp_path: Path, capsys):
    with HubServer(tmp_path / "root", token="hf_right", read_tokens=["hf_read_only"]) as server:
        HfApi(endpoint=server.url, token="hf_right").create_repo(REPO)
        common = ["--endpoint", server.url]
        message = _one_line(run_cli(capsys, "pull", REPO, "--token", "hf_wrong", *common), "pull")
        assert message.startswith(f"the Hub at {server.url} refused the --token given (401 Unauthorized)")
        assert "pass --token or set HF_TOKEN" in message
        message = _one_line(run_cli(capsys, "push", REPO, saved, "--token", "hf_read_only", *common), "push")
        assert message.startswith(f"the Hub at {server.url} refused the --token given for {REPO} (403 Forbidden)")
        assert "write access" in message and "HF_TOKEN" in message


def test_a_missing_repo_revision_or_subfolder_lists_what_exists(published: HubServer, capsys):
    message = _one_line(run_cli(capsys, "pull", "me/nothing-here", "--subfolder", "pt2"), "pull")
    assert message.startswith(f"repository me/nothing-here not found at {published.url}. Check the name")
    message = _one_line(run_cli(capsys, "pull", REPO, "--subfolder", "pt2", "--revision", "nope"), "pull")
    assert message == f"{REPO} has no revision 'nope'. Branches: main; tags: v1 (or pass a commit sha)."
    message = _one_line(run_cli(capsys, "validate", REPO, "--subfolder", "onnx"), "validate")
    assert message == f"{REPO}@main has no onnx/export.json. Exports in this repo: pt2/; choose one with --subfolder."
    message = _one_line(run_cli(capsys, "export", REPO, "-f", "dynamo", "-o", "x", "--revision", "nope"), "export")
    assert message.startswith(f"{REPO} has no revision 'nope'. Branches: main; tags: v1")


def test_a_bad_local_path(tmp_path: Path, capsys):
    message = _one_line(run_cli(capsys, "export", "./typo", "-f", "onnx", "-o", tmp_path / "out"), "export")
    assert message.startswith("no folder ./typo: MODEL is an existing model folder")
    message = _one_line(run_cli(capsys, "validate", "./typo"), "validate")
    assert message.startswith("no folder ./typo")
    message = _one_line(run_cli(capsys, "push", "me/x", tmp_path / "nowhere"), "push")
    assert message.startswith(f"no folder {tmp_path / 'nowhere'}")
    message = _one_line(run_cli(capsys, "validate", tmp_path), "validate")  # a folder, but not an export
    assert message == f"no export.json in {tmp_path}; is this a hub_export export folder?"  # no "$:" JSON path


def test_a_folder_without_config_json(saved: Path, tmp_path: Path, capsys):
    weights = tmp_path / "weights-only"
    weights.mkdir()
    (weights / "model.safetensors").write_bytes(b"\0" * 16)
    message = _one_line(run_cli(capsys, "export", weights, "-f", "dynamo", "-o", tmp_path / "out"), "export")
    assert message.startswith(f"{weights} has no config.json, so it is not a transformers model folder")
    message = _one_line(run_cli(capsys, "push", "me/x", weights), "push")
    assert "has no export.json, so it is not an export folder" in message


def test_the_folder_first_order_is_detected(saved: Path, tmp_path: Path, capsys):
    run = run_cli(capsys, "push", saved, "me/tiny-llama")
    assert run.code == 2 and run.seconds < BOUND_S
    assert run.err.startswith("usage: hub-export push ")
    assert run.err_lines[-1] == (
        f"hub-export push: error: REPO {str(saved)!r} looks like a local folder and DIR 'me/tiny-llama' is not one; "
        "usage is hub-export push REPO DIR (the repo first, as in `hf upload`)"
    )
    other = shutil.copytree(saved, tmp_path / "onnx")
    run = run_cli(capsys, "publish", saved, other, "me/tiny-llama")
    assert run.code == 2 and "usage is hub-export publish REPO DIR [DIR ...]" in run.err_lines[-1]


def test_verbose_and_hub_export_debug_show_the_traceback(published: HubServer, capsys, monkeypatch):
    run = run_cli(capsys, "pull", "me/nothing-here", "--verbose")
    assert run.code == 1 and "Traceback (most recent call last)" in run.err
    assert run.err_lines[-1].startswith("hub-export pull: error: repository me/nothing-here not found")
    monkeypatch.setenv("HUB_EXPORT_DEBUG", "1")
    run = run_cli(capsys, "pull", "me/nothing-here")
    assert run.code == 1 and "Traceback (most recent call last)" in run.err


def test_an_unexpected_error_says_so_and_how_to_see_more(monkeypatch, capsys):
    from hub_export.cli import validate

    def boom(args):
        raise RuntimeError("simulated bug\nsecond line")

    monkeypatch.setattr(validate, "_source", boom)
    message = _one_line(run_cli(capsys, "validate", "me/x"), "validate")
    assert message == (
        "RuntimeError: simulated bug (unexpected: run again with --verbose for the traceback, and report it)"
    )
