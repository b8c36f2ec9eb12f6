"""The embedded hub's web pages in a real browser (Debian's Chromium driven by Playwright), against a hub holding a
published ONNX export, an open pull request adding a torch.export one, a private repo and a repo with a hostile card.

Screenshots of each page are kept in ``test-artifacts/hub-pages/`` at the repository's root.
"""

from __future__ import annotations

import http.server
import json
import re
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from huggingface_hub import HfApi
from tiny_models import bert

from hub_export import DynamoConfig, DynamoExporter, OnnxConfig, OnnxExporter, publish
from hub_export.embedded_hub._accounts import Accounts
from hub_export.embedded_hub.server import HubServer

sys.path.insert(0, str(Path(__file__).resolve().parent / "consumers"))
import envs  # noqa: E402

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts" / "hub-pages"
MODEL, PRIVATE, HOSTILE = "alice/tiny-bert", "alice/secret-model", "alice/hostile-card"


class _Trap(http.server.BaseHTTPRequestHandler):
    """A server standing for an internal address: any request to it is a request the card must not cause."""

    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        _Trap.hits.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.end_headers()

    do_POST = do_GET  # noqa: N815

    def log_message(self, *args: Any) -> None:
        pass


def _hostile_card(trap: str) -> str:
    return f"""---
pipeline_tag: text-classification
---
# A hostile card

<script>window.pwned = 1; alert(1)</script>
<img src="x" onerror="window.pwned = 2">
<img src="{trap}/raw-img.png">
![tracker]({trap}/markdown-img.png)
[click me](javascript:window.pwned=3)
<a href="javascript:alert(1)">raw js link</a>
<a href="{trap}/link" onclick="window.pwned=5">an onclick link</a>
<iframe src="{trap}/frame"></iframe>
<div style="background-image: url({trap}/css.png)">styled</div>
<svg><script>window.pwned = 4</script><image href="{trap}/svg.png"/></svg>
<form action="{trap}/steal" method="post"><input name="x" value="1"><button>send</button></form>
<meta http-equiv="refresh" content="0;url={trap}/refresh">
<link rel="stylesheet" href="{trap}/style.css">
<object data="{trap}/object"></object>
<base href="{trap}/">
<details open ontoggle="window.pwned=6"><summary>toggle</summary>x</details>
![data](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+)

A fine [external link](https://example.org/page) and a [file of the repo](config.json).
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("hub")
    accounts = Accounts(root)
    accounts.add_user("alice")
    accounts.add_user("bob")
    tokens = {
        "alice": accounts.create_token("alice", scope="write")[1],
        "bob": accounts.create_token("bob", scope="write")[1],
    }
    trap = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Trap)
    threading.Thread(target=trap.serve_forever, daemon=True).start()
    trap_url = f"http://127.0.0.1:{trap.server_address[1]}"
    case = bert()
    with HubServer(root) as hub:
        common = {"token": tokens["alice"], "endpoint": hub.url}
        onnx = OnnxExporter().export(case.model, case.sample, config=OnnxConfig(dynamic=True))
        publish(MODEL, {"onnx": onnx}, **common)
        api = HfApi(endpoint=hub.url, token=tokens["alice"])
        api.upload_file(path_or_fileobj=b"# tiny-bert\n\nA **tiny** BERT.\n", path_in_repo="README.md", repo_id=MODEL)
        with torch.no_grad():
            pt2 = DynamoExporter().export(case.model, case.sample, config=DynamoConfig(dynamic=True))
        pr = publish(MODEL, {"pt2": pt2}, create_pr=True, **common)
        api.create_repo(PRIVATE, private=True)
        api.upload_file(path_or_fileobj=b"# secret\n", path_in_repo="README.md", repo_id=PRIVATE)
        api.create_repo(HOSTILE)
        api.upload_file(path_or_fileobj=_hostile_card(trap_url).encode(), path_in_repo="README.md", repo_id=HOSTILE)
        hostile_manifest = {
            "export_format": "<script>alert(1)</script>",
            "task": "javascript:alert(1)",
            "components": {"model": {"parity": {"max_abs_diff": "1e309", "atol": -1}}, "x": "y"},
            "files": [{"path": "<img src=x onerror=alert(1)>", "size": 10**30, "role": "<b>"}, 7],
            "source": {"repo_id": "javascript:alert(1)", "revision": "../../x"},
            "created_with": {"<script>": "1", "torch": "<img src=x>"},
        }
        api.upload_file(
            path_or_fileobj=json.dumps(hostile_manifest).encode(), path_in_repo="evil/export.json", repo_id=HOSTILE
        )
        yield {"hub": hub, "tokens": tokens, "api": api, "pr": pr, "trap": trap_url}
    trap.shutdown()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(envs.chromium()),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"],
        )
        yield chromium
        chromium.close()


def _shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def _sign_in(page: Any, hub: HubServer, token: str) -> None:
    page.goto(f"{hub.url}/login")
    page.fill("#token", token)
    page.click("form.login button[type=submit]")
    page.wait_for_url(f"{hub.url}/")


def test_every_page_renders_its_content(site, browser) -> None:
    hub, number = site["hub"], int(site["pr"].pr_ref.rsplit("/", 1)[1])
    page = browser.new_page()
    response = page.goto(hub.url + "/")
    assert response.status == 200 and "default-src 'none'" in response.headers["content-security-policy"]
    assert page.locator("table.repos").get_by_role("link", name=MODEL).is_visible()
    assert page.locator("table.repos").get_by_role("link", name=PRIVATE).count() == 0  # anonymous: not listed
    _shot(page, "index")
    page.select_option("select[name=format]", "onnx")
    page.click("form.filters button")
    assert page.locator("table.repos").get_by_role("link", name=MODEL).is_visible()
    assert page.locator("table.repos").get_by_role("link", name=HOSTILE).count() == 0  # no onnx export there

    page.goto(f"{hub.url}/{MODEL}")
    row = page.locator("tr.export[data-format=onnx]")
    assert row.count() == 1 and row.locator("td").nth(1).inner_text() == "onnx"
    assert re.search(r"\d\.\d\de-\d\d / 1e-0\d", row.inner_text())  # parity: max abs diff / atol
    assert "hub_export" in row.inner_text() and "torch 2." in row.inner_text()
    assert page.locator(".parity-row .badge.ok").count() == 1
    assert page.locator("article.markdown strong").inner_text() == "tiny"
    assert page.get_by_role("link", name=re.compile(f"#{number} ")).is_visible()  # the open pull request
    _shot(page, "repo")

    page.goto(f"{hub.url}/{MODEL}/tree/main/onnx")
    names = page.locator("table.files td:first-child").all_inner_texts()
    assert "export.json" in names and "model.onnx" in names
    _shot(page, "tree")
    page.click("text=export.json")
    assert '"export_format": "onnx"' in page.locator("pre.blob").inner_text()
    _shot(page, "blob")
    page.goto(f"{hub.url}/{MODEL}/blob/main/onnx/model.onnx")
    assert re.fullmatch(r"[0-9a-f]{64}", page.locator("dl.binary dd code").inner_text())
    page.goto(f"{hub.url}/{MODEL}/commits/main")
    titles = page.locator("table.commits td:first-child").all_inner_texts()
    assert len(titles) >= 2
    _shot(page, "commits")
    page.locator("table.commits a").nth(len(titles) - 2).click()  # the publish (the last is the repo's creation)
    assert page.locator("table.changes").get_by_text("onnx/export.json").is_visible()
    _shot(page, "commit")
    page.goto(f"{hub.url}/{MODEL}/discussions")
    assert page.locator("table.discussions").get_by_text(f"#{number}").is_visible()
    _shot(page, "discussions")
    page.goto(f"{hub.url}/{MODEL}/discussions/{number}")
    assert page.locator(".review .badge.fmt").all_inner_texts() == ["pt2"]
    assert page.locator("table.changes").get_by_text("pt2/export.json").is_visible()
    assert page.locator(".review tr.export[data-format=dynamo]").count() == 1  # the export it adds, with parity
    assert re.search(r"\d\.\d\de[-+]\d\d / 1e-0\d", page.locator(".review tr.export").inner_text())
    assert page.locator(".event .markdown table").count() == 1  # publish's exports table, rendered
    assert page.locator("form.merge").count() == 0  # anonymous: no merge button
    _shot(page, "pull-request")
    page.close()


def test_a_hostile_card_and_manifest_run_nothing_and_load_nothing(site, browser) -> None:
    hub = site["hub"]
    page = browser.new_page()
    dialogs, requests = [], []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.on("request", lambda request: requests.append(request.url))
    _Trap.hits.clear()
    response = page.goto(f"{hub.url}/{HOSTILE}")
    assert response.status == 200
    page.wait_for_timeout(500)
    assert page.evaluate("window.pwned") is None and dialogs == []
    assert [u for u in requests if not u.startswith(hub.url)] == [] and _Trap.hits == []
    found = page.evaluate(
        """() => [...document.querySelectorAll("article.markdown *")].map(e => [e.tagName.toLowerCase(),
            [...e.attributes].map(a => [a.name, a.value])])"""
    )
    tags = {tag for tag, _ in found}
    assert not tags & {"script", "iframe", "form", "object", "meta", "link", "base", "svg", "image", "input", "style"}
    attributes = [(name, value) for _, pairs in found for name, value in pairs]
    assert not [name for name, _ in attributes if name.startswith("on") or name == "style"]
    urls = [value for name, value in attributes if name in ("href", "src")]
    assert not [u for u in urls if u.lower().startswith(("javascript:", "data:"))], urls
    sources = [value for name, value in attributes if name == "src"]  # what loads by itself: the repo's files only
    assert sources and all(u.startswith(f"/{HOSTILE}/resolve/") for u in sources), sources
    assert page.get_by_role("link", name="external link").get_attribute("href") == "https://example.org/page"
    assert page.get_by_role("link", name="file of the repo").get_attribute("href").endswith("/config.json")
    page.get_by_text("toggle").click()
    page.get_by_text("click me").click()  # its javascript: URL is gone: nothing happens
    assert page.evaluate("window.pwned") is None and dialogs == [] and _Trap.hits == []
    evil = page.locator("tr.export")
    assert evil.count() == 1 and "<script>" not in evil.inner_html() and "javascript" not in evil.inner_html()
    _shot(page, "hostile-card")
    page.close()


def _status(url: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


def test_a_private_repo_is_a_404_page_until_its_owner_signs_in(site, browser) -> None:
    hub = site["hub"]
    context = browser.new_context()
    page = context.new_page()
    for path in ("", "/tree/main", "/blob/main/README.md", "/commits/main", "/discussions"):
        response = page.goto(f"{hub.url}/{PRIVATE}{path}")
        assert response.status == 404 and page.locator("h1").inner_text() == "404"
        assert "secret" not in page.content().replace(PRIVATE, "")
    nowhere = page.goto(f"{hub.url}/alice/no-such-model")
    assert nowhere.status == 404 and page.locator("p.error").inner_text() == "Not found."  # the same page
    _shot(page, "private-anonymous")
    page.goto(f"{hub.url}/login")
    page.fill("#token", "hf_not_a_token")
    page.click("form.login button[type=submit]")
    assert page.locator("p.error").is_visible()
    _sign_in(page, hub, site["tokens"]["bob"])  # another user: still a 404
    assert page.goto(f"{hub.url}/{PRIVATE}").status == 404
    context.close()
    context = browser.new_context()
    page = context.new_page()
    _sign_in(page, hub, site["tokens"]["alice"])
    cookie = next(c for c in context.cookies() if c["name"] == "hub_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and site["tokens"]["alice"] not in cookie["value"]
    assert page.locator("table.repos").get_by_role("link", name=PRIVATE).is_visible()
    assert page.goto(f"{hub.url}/{PRIVATE}").status == 200 and "secret" in page.locator("article").inner_text()
    _shot(page, "private-signed-in")
    page.click("header form button")  # sign out
    assert page.goto(f"{hub.url}/{PRIVATE}").status == 404
    context.close()


def test_forms_need_the_csrf_token_and_only_owners_merge(site, browser) -> None:
    hub, number = site["hub"], int(site["pr"].pr_ref.rsplit("/", 1)[1])
    merge_url = f"{hub.url}/{MODEL}/discussions/{number}/merge"
    bob = browser.new_context()
    page = bob.new_page()
    _sign_in(page, hub, site["tokens"]["bob"])
    page.goto(f"{hub.url}/{MODEL}/discussions/{number}")
    assert page.locator("form.merge").count() == 0  # bob does not own the repo
    csrf = page.locator("header input[name=csrf]").get_attribute("value")
    assert bob.request.post(merge_url, form={"csrf": csrf}, max_redirects=0).status == 403
    bob.close()
    alice = browser.new_context()
    page = alice.new_page()
    _sign_in(page, hub, site["tokens"]["alice"])
    assert alice.request.post(merge_url, form={}, max_redirects=0).status == 403  # no token
    assert alice.request.post(merge_url, form={"csrf": "0" * 64}, max_redirects=0).status == 403  # a wrong one
    csrf = page.locator("header input[name=csrf]").get_attribute("value")
    elsewhere = {"Origin": "http://evil.example"}
    assert alice.request.post(merge_url, form={"csrf": csrf}, headers=elsewhere, max_redirects=0).status == 403
    assert _status(merge_url, b"csrf=" + csrf.encode()) == 403  # the token without the browser's cookies
    head = site["api"].model_info(MODEL).sha
    assert "pt2/export.json" not in site["api"].list_repo_files(MODEL)

    page.goto(f"{hub.url}/{MODEL}/discussions/{number}")
    _shot(page, "pull-request-owner")
    page.fill("form.merge #comment", "Looks right")
    page.click("form.merge button")
    page.wait_for_url(re.compile(r".*merged=1$"))
    assert page.get_by_text("Merged into main.").is_visible()
    assert page.locator("h2 .badge").last.inner_text() == "merged"
    _shot(page, "pull-request-merged")
    info = site["api"].model_info(MODEL)
    assert info.sha != head and "pt2/export.json" in site["api"].list_repo_files(MODEL)
    page.goto(f"{hub.url}/{MODEL}")
    assert page.locator("tr.export").count() == 2  # onnx and pt2
    alice.close()
