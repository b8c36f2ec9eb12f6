"""The embedded hub's access rules, through the real huggingface_hub client: users, organisations, scoped tokens.

The matrix: anonymous / a read token of the owner / a write token of the owner / a write token of another user /
the server's admin token, against public and private repos, for reading, writing and deleting; an organisation's
members by role; expired and revoked tokens; an open hub refused on a non-loopback host.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from hub_fixtures import http_status
from huggingface_hub import HfApi, hf_hub_download

from hub_export.embedded_hub._accounts import Accounts
from hub_export.embedded_hub.server import HubServer
from hub_export.errors import HubError

ADMIN = "hf_server_admin"


@pytest.fixture
def team(tmp_path: Path):
    """A hub with users alice (owner) and bob, organisation ``team`` (alice write, bob read), and tokens."""
    root = tmp_path / "hub"
    accounts = Accounts(root)
    accounts.add_user("alice")
    accounts.add_user("bob")
    accounts.add_org("team")
    accounts.set_member("team", "alice", "write")
    accounts.set_member("team", "bob", "read")
    tokens = {
        "alice-write": accounts.create_token("alice", scope="write", name="ci")[1],
        "alice-read": accounts.create_token("alice", scope="read")[1],
        "bob-write": accounts.create_token("bob", scope="write")[1],
    }
    with HubServer(root, token=ADMIN) as server:
        owner = HfApi(endpoint=server.url, token=tokens["alice-write"])
        for name, private in (("alice/public", False), ("alice/private", True), ("team/private", True)):
            owner.create_repo(name, private=private)
            owner.upload_file(path_or_fileobj=b"weights", path_in_repo="w.bin", repo_id=name)
        yield server, tokens, accounts


def _api(server: HubServer, token) -> HfApi:
    return HfApi(endpoint=server.url, token=token)


@pytest.mark.parametrize(
    "who, public_read, private_read, public_write, private_write, delete",
    [
        ("anonymous", 200, 404, 401, 404, 401),
        ("alice-read", 200, 200, 403, 403, 403),
        ("alice-write", 200, 200, 200, 200, 200),
        ("bob-write", 200, 404, 403, 404, 403),
        ("admin", 200, 200, 200, 200, 200),
    ],
)
def test_the_access_matrix(team, who, public_read, private_read, public_write, private_write, delete, tmp_path):
    server, tokens, _ = team
    token = False if who == "anonymous" else ADMIN if who == "admin" else tokens[who]
    api = _api(server, token)
    cache = tmp_path / "cache"

    def read(repo: str):
        return lambda: hf_hub_download(repo, "w.bin", endpoint=server.url, token=token, cache_dir=cache)

    def write(repo: str):
        return lambda: api.upload_file(path_or_fileobj=b"new", path_in_repo="x.txt", repo_id=repo)

    assert http_status(read("alice/public")) == public_read
    assert http_status(lambda: api.model_info("alice/public")) == public_read
    assert http_status(read("alice/private")) == private_read
    assert http_status(lambda: api.list_repo_files("alice/private")) == private_read
    assert http_status(write("alice/public")) == public_write
    assert http_status(write("alice/private")) == private_write
    assert http_status(lambda: api.delete_repo("alice/public")) == delete


def test_organisation_roles_and_namespaces(team):
    server, tokens, _ = team
    alice, bob = _api(server, tokens["alice-write"]), _api(server, tokens["bob-write"])
    assert bob.list_repo_files("team/private") == [".gitattributes", "w.bin"]  # a read member reads private repos
    assert http_status(lambda: bob.upload_file(path_or_fileobj=b"x", path_in_repo="x", repo_id="team/private")) == 403
    assert http_status(lambda: bob.create_repo("team/new")) == 403
    assert http_status(lambda: bob.create_repo("alice/new")) == 403
    assert bob.create_repo("mine").repo_id == "bob/mine"  # a name without namespace: the user's own
    assert alice.create_repo("team/new").repo_id == "team/new"
    assert http_status(lambda: alice.create_repo("bob/other")) == 403
    me = alice.whoami()
    assert me["name"] == "alice" and me["auth"]["accessToken"] == {"displayName": "ci", "role": "write"}
    assert me["orgs"] == [{"type": "org", "name": "team", "roleInOrg": "write"}]
    # the commit's author is the token's user
    assert alice.list_repo_commits("team/new")[0].authors == ["system"]  # the creation commit
    alice.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id="team/new")
    assert alice.list_repo_commits("team/new")[0].authors == ["alice"]


def test_missing_invalid_expired_and_revoked_tokens(team):
    server, tokens, accounts = team
    # a missing token where one is needed: 401 with the challenge; a wrong one: 401 even for a public read
    request = urllib.request.Request(f"{server.url}/api/whoami-v2")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=10)
    assert info.value.code == 401 and info.value.headers["WWW-Authenticate"].startswith("Bearer realm=")
    assert http_status(lambda: _api(server, "hf_not_a_token").model_info("alice/public")) == 401
    expired, secret = accounts.create_token("alice", scope="write", expires_in=0.001)
    import time

    time.sleep(0.01)
    assert http_status(lambda: _api(server, secret).model_info("alice/public")) == 401
    assert any(t.id == expired.id and t.expired for t in accounts.tokens("alice"))
    api = _api(server, tokens["bob-write"])
    assert api.whoami()["name"] == "bob"
    bob_token = next(t for t in accounts.tokens("bob"))
    accounts.revoke_token(bob_token.id)  # while the server runs: it reads the file again
    assert http_status(api.whoami) == 401
    stored = (server.store.root / "accounts.json").read_text()
    assert not any(value in stored for value in tokens.values())  # only hashes are kept
    assert json.loads(stored)["users"].keys() == {"alice", "bob"}


def test_an_open_hub_serves_loopback_only(tmp_path: Path):
    with pytest.raises(HubError, match="refusing to serve a hub without users or a token on 0.0.0.0"):
        HubServer(tmp_path / "open", host="0.0.0.0").start()
    with HubServer(tmp_path / "open", host="0.0.0.0", allow_open_network=True) as server:
        assert server.bound.startswith("0.0.0.0:")
    with HubServer(tmp_path / "open", host="0.0.0.0", token=ADMIN) as server:  # a token: anonymous only reads
        assert http_status(lambda: _api(server, False).create_repo("user/x")) == 401
    accounts = Accounts(tmp_path / "users")
    accounts.add_user("alice")
    with HubServer(tmp_path / "users", host="0.0.0.0") as server:  # users: not open
        assert http_status(lambda: _api(server, False).create_repo("alice/x")) == 401
