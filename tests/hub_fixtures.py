"""Shared pytest fixtures for tests that talk to the embedded Hub through the real huggingface_hub client.

``tests/conftest.py`` registers them (``from hub_fixtures import HUB_TOKEN, hub_api, hub_env, hub_server``):

* ``hub_server``: a started :class:`~hub_export.embedded_hub.server.HubServer` on a free loopback port, storing in a
  tmp dir, without tokens;
* ``hub_env``: ``hub_server`` made the default endpoint: ``HF_ENDPOINT``, huggingface_hub's
  already-imported constants (endpoint, URL template, Xet off, offline off) and a private ``HF_HUB_CACHE``;
* ``hub_api``: an ``HfApi`` bound to ``hub_server`` (implies ``hub_env``).

Importing this module sets ``HF_HUB_DISABLE_XET=1`` when unset, so it must be imported before
huggingface_hub for the environment variable to matter; ``hub_env`` patches the constants either way.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

from hub_export.embedded_hub.server import HubServer  # noqa: E402

__all__ = ["hub_server", "hub_env", "hub_api", "http_status", "HUB_TOKEN"]

HUB_TOKEN = "hf_embedded_hub_test_token"


@pytest.fixture
def hub_server(tmp_path: Path) -> Iterator[HubServer]:
    """A started embedded Hub on a free loopback port; stopped after the test."""
    with HubServer(tmp_path / "hub-root") as server:
        yield server


@pytest.fixture
def hub_env(hub_server: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> HubServer:
    """Point huggingface_hub (env and imported constants) at ``hub_server``, with a private cache."""
    from huggingface_hub import constants

    cache = tmp_path / "hf-cache"
    monkeypatch.setenv("HF_ENDPOINT", hub_server.url)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_TOKEN", HUB_TOKEN)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", hub_server.url)
    template = hub_server.url + "/{repo_id}/resolve/{revision}/{filename}"
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return hub_server


@pytest.fixture
def hub_api(hub_env: HubServer):
    """An ``HfApi`` talking to the embedded Hub."""
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub_env.url, token=HUB_TOKEN)


def http_status(call) -> int:  # noqa: ANN001 - any client call
    """The HTTP status a huggingface_hub client call ends with (200 when it succeeds)."""
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    try:
        call()
    except RepositoryNotFoundError:
        return 404
    except HfHubHTTPError as exc:
        return exc.response.status_code
    return 200
