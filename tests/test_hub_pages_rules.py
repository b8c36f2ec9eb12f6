"""The web pages' rules without a browser: the card sanitizer against a list of known attacks, export.json read as
untrusted data, an open hub's forms still needing the CSRF token, bad URLs and parameters, and when an export was made.
(tests/test_hub_pages.py drives the same pages in Chromium.)"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from huggingface_hub import CommitOperationAdd, HfApi

from hub_export.embedded_hub._gitstore import HubStore
from hub_export.embedded_hub.pages._cards import render_card
from hub_export.embedded_hub.pages._exports import exports_of
from hub_export.embedded_hub.pages._views import Cache, exported_at
from hub_export.embedded_hub.server import HubServer

ATTACKS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "<IMG SRC=JaVaScRiPt:alert(1)>",
    "<a href=' javascript:alert(1)'>x</a>",
    "<a href='jav&#x09;ascript:alert(1)'>x</a>",
    "<a href='&#106;avascript:alert(1)'>x</a>",
    "[x](javascript:alert(1))",
    "[x](JAVASCRIPT:alert(1))",
    "[x](vbscript:msgbox(1))",
    "![x](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+)",
    "<svg onload=alert(1)>",
    "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
    "<iframe srcdoc='<script>alert(1)</script>'></iframe>",
    "<object data=javascript:alert(1)>",
    "<embed src=javascript:alert(1)>",
    "<form><button formaction=javascript:alert(1)>x</button></form>",
    "<meta http-equiv=refresh content='0;url=javascript:alert(1)'>",
    "<style>@import 'http://evil.example/x.css';</style>",
    "<div style='background:url(javascript:alert(1))'>x</div>",
    "<base href='http://evil.example/'>",
    "<link rel=stylesheet href=http://evil.example/x.css>",
    "<details open ontoggle=alert(1)>",
    "<video><source onerror=alert(1)></video>",
    "<audio src=x onerror=alert(1)>",
    "<body onload=alert(1)>",
    "<input autofocus onfocus=alert(1)>",
    "<img src='http://169.254.169.254/latest/meta-data/'>",
    "<img src='//evil.example/x.png'>",
    "<img src='/api/models'>",
    "<img src='../../../other/repo/x.png'>",
    "<img srcset='http://evil.example/x.png 1x'>",
    "<a href='x' target=_blank>x</a>",
    "<!--<img src=x onerror=alert(1)>-->",
    "<noscript><p title='</noscript><img src=x onerror=alert(1)>'>",
]
_ACTIVE = re.compile(r"<(script|iframe|object|embed|form|button|meta|style|base|link|svg|math|video|audio|input|body)\b",
                     re.I)  # fmt: skip
_URL = re.compile(r"""(?:href|src|srcset|action|formaction|data)\s*=\s*["']?([^"'\s>]*)""", re.I)


@pytest.mark.parametrize("attack", ATTACKS)
def test_a_card_renders_without_anything_active(attack: str) -> None:
    html = render_card(f"# Card\n\n{attack}\n\ntext after\n", files_url="/o/r/blob/abc", resolve_url="/o/r/resolve/abc")
    assert not _ACTIVE.search(html), html
    assert not re.search(r"\son\w+\s*=", html, re.I), html
    assert "style=" not in html.lower() and "srcset" not in html.lower(), html
    for url in _URL.findall(html):
        lowered = url.strip().lower()
        assert not lowered.startswith(("javascript:", "vbscript:", "data:")), html
        if re.search(r"<img", html):
            assert all(src.startswith("/o/r/resolve/abc/") for src in re.findall(r'<img[^>]*src="([^"]*)"', html))


def test_a_card_keeps_markdown_and_points_relative_links_at_the_repo() -> None:
    html = render_card(
        "---\nlicense: mit\n---\n# Title\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n[cfg](onnx/config.json) "
        "[site](https://example.org) ![plot](images/plot.png) `code`\n",
        files_url="/o/r/blob/abc",
        resolve_url="/o/r/resolve/abc",
    )
    assert "license" not in html and "<h1>Title</h1>" in html and "<table>" in html
    assert 'href="/o/r/blob/abc/onnx/config.json"' in html and 'src="/o/r/resolve/abc/images/plot.png"' in html
    assert 'href="https://example.org"' in html and 'rel="noopener noreferrer nofollow"' in html


def _store_with(tmp_path: Path, files: dict[str, bytes]) -> tuple[object, str]:
    store = HubStore(tmp_path)
    repo = store.create("model", "o/r", {".gitattributes": b""})
    tree = repo.write_tree({path: repo.write_object("blob", data) for path, data in files.items()})
    return repo, tree


def test_export_json_is_read_as_untrusted_data(tmp_path: Path) -> None:
    hostile = {
        "export_format": ["onnx"],
        "task": "<b>x</b>",
        "components": {"a": {"parity": {"max_abs_diff": float("inf"), "atol": 1e-4}}, "b": [], "c": {"parity": 3}},
        "files": [{"path": "m.onnx", "size": -5}, {"path": 3, "size": 1}, "x"],
        "source": {"repo_id": "a/b" * 100, "revision": "HEAD"},
        "created_with": {"torch": {"nested": 1}, "hub_export": "0.2.0"},
        "generation": "yes",
    }
    repo, tree = _store_with(
        tmp_path,
        {
            "good/export.json": json.dumps({"export_format": "onnx", "task": "text-generation"}).encode(),
            "bad/export.json": b"{not json",
            "list/export.json": b"[1, 2]",
            "deep/export.json": b"[" * 100_000 + b"]" * 100_000,
            "hostile/export.json": json.dumps(hostile).replace("Infinity", "1e999").encode(),
        },
    )
    rows = {row.folder: row for row in exports_of(repo, tree)}  # type: ignore[arg-type]
    assert rows["good"].format == "onnx" and rows["good"].task == "text-generation" and rows["good"].problem is None
    assert rows["bad"].problem == "export.json is not valid JSON" and rows["deep"].problem
    assert rows["list"].problem == "export.json is not a JSON object"
    evil = rows["hostile"]
    assert evil.format is None and evil.task is None and evil.parity == [] and not evil.generation
    assert evil.files == [("m.onnx", 0, "")] and evil.source_repo is None and evil.source_revision is None
    assert evil.versions == [("hub_export", "0.2.0")]


def test_when_an_export_was_made_is_when_its_export_json_last_changed(tmp_path: Path) -> None:
    store = HubStore(tmp_path)
    repo = store.create("model", "o/r", {".gitattributes": b""})
    head = repo.resolve("main")[0]
    files = repo.files(repo.read_commit(head).tree)
    stamps = []
    for step, manifest in enumerate([b"{}", b'{"a": 1}', b'{"a": 1}']):  # made, changed, unchanged
        files["onnx/export.json"] = repo.write_object("blob", manifest)
        files["README.md"] = repo.write_object("blob", str(step).encode())
        head = repo.create_commit(repo.write_tree(files), [head], f"step {step}", "", "me")
        stamps.append(repo.read_commit(head).timestamp)
        time.sleep(1.05)  # commit times are whole seconds
    when = exported_at(Cache(), repo, repo.read_commit(head), ["onnx"])
    assert when == {"onnx": stamps[1]}


def _answer(url: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_bad_urls_and_an_open_hubs_forms(tmp_path: Path) -> None:
    with HubServer(tmp_path / "hub") as hub:  # open: every visitor acts as its default user
        api = HfApi(endpoint=hub.url)
        api.create_repo("me/model")
        api.create_commit("me/model", [CommitOperationAdd("a.txt", b"a")], commit_message="PR", create_pr=True)
        status, body = _answer(f"{hub.url}/me/model/discussions/1")
        assert status == 200 and 'action="/me/model/discussions/1/merge"' in body
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', body)[1]
        # another site's form: no cookie, or a token without its cookie, or a foreign Origin
        merge = f"{hub.url}/me/model/discussions/1/merge"
        assert _answer(merge, b"")[0] == 403
        assert _answer(merge, f"csrf={csrf}".encode())[0] == 403
        assert _answer(merge, b"csrf=x", {"Cookie": "hub_csrf=" + "a" * 32})[0] == 403
        assert "a.txt" not in api.list_repo_files("me/model")  # nothing merged
        for path, expected in [
            ("/me/model/blob/main/../../../etc/passwd", 404),
            ("/me/model/tree/main/nope", 404),
            ("/me/model/blob/main", 404),
            ("/me/model/commits/main?p=x", 400),
            ("/me/model/commits/nope", 404),
            ("/me/model/commit/" + "0" * 40, 404),
            ("/me/model/discussions/99", 404),
            ("/me/model/discussions/abc", 404),
            ("/%ff/x", 400),
            ("/me/nope", 404),
        ]:
            status, body = _answer(hub.url + path)
            assert status == expected, (path, status, body[:300])
            if status != 400 or "%ff" not in path:
                assert body.lstrip().startswith("<!doctype html>"), (path, body[:200])
        status, body = _answer(f"{hub.url}/api/models/me/nope")  # the API keeps its JSON errors
        assert status == 404 and json.loads(body)["error"]
