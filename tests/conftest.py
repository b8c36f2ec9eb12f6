"""Test set-up: tests/ on sys.path (tiny_models, hub_fixtures), Hub client env, shared fixtures."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# remembered file digests (hub_export._files) go to a folder of this run, not the user's cache
os.environ.setdefault("HUB_EXPORT_CACHE", tempfile.mkdtemp(prefix="hub-export-test-cache-"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hub_fixtures import HUB_TOKEN, hub_api, hub_env, hub_server  # noqa: E402,F401
