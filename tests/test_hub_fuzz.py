"""A fuzz of the embedded hub's routes: every route of the API, LFS, git and the web pages, with hostile query
parameters, path segments and bodies (seeded, so a failure reproduces). No answer may be a 500, the server must log no
internal error, and it must still answer a plain request afterwards."""

from __future__ import annotations

import http.client
import json
import logging
import random
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
from huggingface_hub import CommitOperationAdd, HfApi

from hub_export.embedded_hub.server import HubServer

REPO = "me/model"
#: Values a parameter, a path segment or a JSON field may take.
VALUES = [
    "", "0", "-1", "1", "abc", "9" * 30, "1e9", "0x10", " ", "%ff", "%00", "..", "../..", "/", "//", "main", "refs/pr/1",
    "refs/pr/x", "a" * 5000, "true", "null", "[]", "{}", "é", "\u202e", "*", "?", "#", "\\", "<script>",
]  # fmt: skip
BODIES = [
    b"", b"{", b"[]", b"null", b"1", b'"x"', b'{"a": 1}', b"\x00\xff" * 10, b"{}" * 1000, b"x" * 70000,
    b'{"files": [{"path": 1}]}', b'{"paths": "x"}', b'{"paths": [1, null]}', b'{"title": null}', b'{"title": []}',
    b'{"status": "bogus"}', b'{"comment": {"a": 1}}', b'{"objects": "x", "operation": 1}',
    b'{"operation": "download", "objects": [{"oid": "../x", "size": -1}]}', b'{"private": "yes"}',
    b'{"fromRepo": 1, "toRepo": []}', b'{"key": "value"}\n{"key": "file", "value": 3}\n',
    b'{"key": "header", "value": {"summary": 1}}\n', b'{"name": "../x", "type": "model"}',
]  # fmt: skip
ROUTES = [
    (
        "GET",
        "/api/models",
        ["search", "author", "filter", "sort", "direction", "limit", "cursor", "full", "pipeline_tag"],
    ),
    ("GET", "/api/models/{repo}", ["blobs", "expand"]),
    ("GET", "/api/models/{repo}/revision/{rev}", ["blobs"]),
    ("GET", "/api/models/{repo}/tree/{rev}/{path}", ["recursive", "expand", "limit", "cursor"]),
    ("GET", "/api/models/{repo}/refs", ["include_prs"]),
    ("GET", "/api/models/{repo}/commits/{rev}", ["p", "limit", "expand"]),
    ("POST", "/api/models/{repo}/paths-info/{rev}", []),
    ("POST", "/api/models/{repo}/preupload/{rev}", ["create_pr"]),
    ("POST", "/api/models/{repo}/commit/{rev}", ["create_pr"]),
    ("GET", "/api/models/{repo}/discussions", ["p", "type", "status", "author"]),
    ("POST", "/api/models/{repo}/discussions", []),
    ("GET", "/api/models/{repo}/discussions/{num}", ["diff"]),
    ("POST", "/api/models/{repo}/discussions/{num}/{action}", []),
    ("PUT", "/api/models/{repo}/settings", []),
    ("POST", "/api/models/{repo}/branch/{rev}", []),
    ("DELETE", "/api/models/{repo}/tag/{rev}", []),
    ("POST", "/api/models/{repo}/super-squash/{rev}", []),
    ("POST", "/api/models/{repo}/duplicate", []),
    ("POST", "/api/repos/create", []),
    ("POST", "/api/repos/move", []),
    ("DELETE", "/api/repos/delete", []),
    ("POST", "/api/validate-yaml", []),
    ("GET", "/api/whoami-v2", []),
    ("GET", "/{repo}/resolve/{rev}/{path}", []),
    ("HEAD", "/{repo}/resolve/{rev}/{path}", []),
    ("POST", "/{repo}.git/info/lfs/objects/batch", []),
    ("GET", "/{repo}.git/info/lfs/objects/{path}", ["sig", "exp", "size", "chunk"]),
    ("PUT", "/{repo}.git/info/lfs/objects/{path}", ["sig", "exp", "size", "chunk"]),
    ("GET", "/{repo}/info/refs", ["service"]),
    ("POST", "/{repo}/git-upload-pack", []),
    ("GET", "/", ["search", "format", "task", "p"]),
    ("GET", "/{repo}", []),
    ("GET", "/{repo}/tree/{rev}/{path}", []),
    ("GET", "/{repo}/blob/{rev}/{path}", []),
    ("GET", "/{repo}/commits/{rev}", ["p"]),
    ("GET", "/{repo}/commit/{rev}", []),
    ("GET", "/{repo}/discussions/{num}", []),
    ("POST", "/{repo}/discussions/{num}/merge", []),
    ("POST", "/login", []),
    ("POST", "/logout", []),
]
REQUESTS_PER_ROUTE = 25


def _fill(template: str, rng: random.Random) -> str:
    pieces = {
        "repo": rng.choice([REPO, REPO, "me/nope", "x", "a/b/c", "..%2f..", "me/" + "m" * 300]),
        "rev": rng.choice(["main", "main", "refs/pr/1", "refs%2Fpr%2F1", *VALUES]),
        "path": rng.choice(["a.txt", "onnx/export.json", "", *VALUES]),
        "num": rng.choice(["1", "2", "0", "999999999", "abc", "-1", "1" * 20]),
        "action": rng.choice(["comment", "status", "title", "merge", "comment/abc/edit", "x", "comment/zz/hide"]),
    }
    for key, value in pieces.items():
        safe = "/%" if key in ("repo", "rev", "path") else ""
        template = template.replace("{" + key + "}", quote(value, safe=safe))
    return template


@pytest.fixture
def hub(tmp_path: Path):
    with HubServer(tmp_path / "hub", token="hf_admin") as server:
        api = HfApi(endpoint=server.url, token="hf_admin")
        api.create_repo(REPO)
        api.upload_file(path_or_fileobj=b"hello", path_in_repo="a.txt", repo_id=REPO)
        api.create_commit(REPO, [CommitOperationAdd("b.txt", b"b")], commit_message="PR", create_pr=True)
        yield server


def test_no_route_answers_500_to_hostile_input(hub: HubServer, caplog: pytest.LogCaptureFixture) -> None:
    rng = random.Random(20261207)
    address = urlsplit(hub.url)
    answers: dict[int, int] = {}
    failures = []
    with caplog.at_level(logging.ERROR):
        for method, template, params in ROUTES:
            for _ in range(REQUESTS_PER_ROUTE):
                path = _fill(template, rng)
                query = "&".join(
                    f"{quote(name)}={quote(rng.choice(VALUES), safe='%')}" for name in rng.sample(params, len(params))
                    if rng.random() < 0.6
                )  # fmt: skip
                body = rng.choice(BODIES) if method in ("POST", "PUT", "DELETE") else b""
                headers = {"Content-Type": rng.choice(["application/json", "application/x-www-form-urlencoded",
                                                       "application/x-ndjson", "text/plain"])}  # fmt: skip
                roll = rng.random()  # mostly the admin (past the access checks), some anonymous, some garbage
                if roll < 0.7:
                    headers["Authorization"] = "Bearer hf_admin"
                elif roll < 0.8:
                    headers["Authorization"] = rng.choice(["Bearer nope", "Basic !!", "Basic " + "a" * 9, "Bearer "])
                if rng.random() < 0.2:
                    headers["Cookie"] = rng.choice(["hub_session=x; hub_csrf=y", "=;;=", "a" * 9000])
                if rng.random() < 0.2:
                    headers["Range"] = rng.choice(["bytes=5-1", "bytes=-0", "bytes=0-", "bytes=x", "bytes=1-2,3-4"])
                connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
                try:
                    connection.request(method, path + (f"?{query}" if query else ""), body=body, headers=headers)
                    response = connection.getresponse()
                    response.read()
                finally:
                    connection.close()
                answers[response.status] = answers.get(response.status, 0) + 1
                if response.status >= 500 and response.status != 501:
                    failures.append((method, path, query, body[:80], response.status))
    assert failures == [], failures[:10]
    assert not [r for r in caplog.records if "Internal error" in r.getMessage()], caplog.text[-3000:]
    assert sum(answers.values()) == len(ROUTES) * REQUESTS_PER_ROUTE
    assert answers.get(200, 0) > 50 and answers.get(400, 0) > 100  # both past the checks and stopped by them
    info = json.loads(__import__("urllib.request").request.urlopen(f"{hub.url}/api/models/{REPO}").read())
    assert info["id"] == REPO  # still serving
