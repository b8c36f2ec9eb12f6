"""Running ``hub-export`` in tests: in this process through ``hub_export.cli.main.main``, or as a real process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from hub_export.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
#: A stage line on stderr: "tracing ... 2.1 s", "lowering to onnx ... 3.0 s", "uploading to me/x ... 1 min 02 s"
STAGE_LINE = r"^[^\s].* \.\.\. (\d+\.\d s|\d+ min \d\d s)$"


@pytest.fixture(autouse=True)
def outside_actions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Errors read as on a terminal, even when the suite runs in GitHub Actions (there they are annotations)."""
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)


@dataclass
class Run:
    """One command's exit code, stdout, stderr and wall time."""

    code: int
    out: str
    err: str
    seconds: float

    @property
    def err_lines(self) -> list[str]:
        return self.err.strip().splitlines()


def run_cli(capsys: pytest.CaptureFixture, *argv: str) -> Run:
    """``hub-export ARGV`` through ``main()`` in this process."""
    capsys.readouterr()
    start = time.monotonic()
    code = main([str(a) for a in argv])
    seconds = time.monotonic() - start
    captured = capsys.readouterr()
    return Run(code, captured.out, captured.err, seconds)


def run_process(*argv: str, env: dict[str, str] | None = None, timeout: float = 600, cwd: Path | None = None) -> Run:
    """``python -m hub_export.cli.main ARGV`` in a child process (the console script's entry point)."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    environment.pop("GITHUB_ACTIONS", None)
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "hub_export.cli.main", *map(str, argv)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )
    return Run(done.returncode, done.stdout, done.stderr, time.monotonic() - start)


class Tiny(torch.nn.Module):
    """A tiny model whose Dynamo export takes a second."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = torch.nn.Embedding(64, 16)
        self.head = torch.nn.Linear(16, 64)

    def forward(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"logits": self.head(torch.tanh(self.embed(input_ids)))}


def save_tiny_export(directory: Path, seed: int = 0) -> Path:
    """A saved Dynamo export folder of :class:`Tiny`."""
    from hub_export import DynamoConfig, DynamoExporter

    sample = {"input_ids": torch.tensor([[1, 5, 9, 3]])}
    return Path(DynamoExporter().export(Tiny(seed).eval(), sample, config=DynamoConfig()).save_pretrained(directory))


def save_tiny_llama(directory: Path, seed: int = 0) -> Path:
    """A transformers model folder (config.json + model.safetensors) of a one-layer Llama."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
    )
    LlamaForCausalLM(config).save_pretrained(directory)
    return directory
