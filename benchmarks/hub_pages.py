"""Server time per web page of the embedded hub with 1,000 repos and 10,000 commits.

Not a test. Builds a hub root directly with the store (``--repos`` repos of ``--commits`` commits each, every commit
changing a model card and an ONNX ``export.json``; every fifth repo private), starts the server and times, over HTTP
on loopback, each page kind: the first request (cold: nothing cached) and the median of ``--iters`` more (warm: a
commit's exports and a card's HTML are cached per object id). Prints the machine's load average and the versions.

Usage::

    python benchmarks/hub_pages.py [--repos 1000] [--commits 10] [--iters 20]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import urllib.request
from importlib.metadata import version
from pathlib import Path

from hub_export.embedded_hub._gitstore import HubStore
from hub_export.embedded_hub.server import HubServer


def _manifest(step: int) -> bytes:
    return json.dumps(
        {
            "schema_version": 2,
            "export_format": "onnx",
            "task": "text-generation",
            "created_with": {"hub_export": "0.2.0", "torch": "2.13.0"},
            "source": {"repo_id": "org/source", "revision": f"{step:040x}"},
            "config": {"export_format": "onnx"},
            "components": {"model": {"parity": {"max_abs_diff": 1e-6 * (step + 1), "atol": 1e-4, "inputs": {}}}},
            "files": [{"path": "model.onnx", "size": 1000 + step, "sha256": f"{step:064x}", "role": "program"}],
        }
    ).encode()


def build(root: Path, repos: int, commits: int) -> list[str]:
    """A hub root holding ``repos`` repos of ``commits`` commits each; returns the repo ids."""
    store = HubStore(root)
    ids = []
    for r in range(repos):
        repo_id = f"org{r % 20}/model-{r:04d}"
        repo = store.create("model", repo_id, {".gitattributes": b"*.onnx filter=lfs diff=lfs merge=lfs -text\n"},
                            private=r % 5 == 4)  # fmt: skip
        head = repo.resolve("main")[0]
        files = repo.files(repo.read_commit(head).tree)
        for c in range(commits - 1):
            card = f"---\npipeline_tag: text-generation\n---\n# {repo_id}\n\nRevision {c}: **tiny** model.\n"
            files["README.md"] = repo.write_object("blob", card.encode())
            files["onnx/export.json"] = repo.write_object("blob", _manifest(c))
            files["onnx/model.onnx"] = repo.write_object("blob", os.urandom(256))
            head = repo.create_commit(repo.write_tree(files), [head], f"Export {c}", "", "bench")
        repo.write_ref("refs/heads/main", head)
        ids.append(repo_id)
    return ids


def _get(url: str) -> float:
    start = time.perf_counter()
    with urllib.request.urlopen(url) as response:
        response.read()
        assert response.status == 200, url
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repos", type=int, default=1000)
    parser.add_argument("--commits", type=int, default=10)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        ids = build(Path(tmp), args.repos, args.commits)
        built = time.perf_counter() - start
        with HubServer(tmp) as hub:
            repo = next(i for n, i in enumerate(ids) if n % 5 != 4)
            head = json.loads(urllib.request.urlopen(f"{hub.url}/api/models/{repo}").read())["sha"]
            pages = {
                "/ (all repos)": "/",
                "/?search=model-09": "/?search=model-09",
                "/?format=onnx&p=10": "/?format=onnx&p=10",
                "/{repo}": f"/{repo}",
                "/{repo}/tree/main/onnx": f"/{repo}/tree/main/onnx",
                "/{repo}/blob/main/onnx/export.json": f"/{repo}/blob/main/onnx/export.json",
                "/{repo}/commits/main": f"/{repo}/commits/main",
                "/{repo}/commit/{sha}": f"/{repo}/commit/{head}",
                "/{repo}/discussions": f"/{repo}/discussions",
            }
            rows = []
            for name, path in pages.items():
                cold = _get(hub.url + path)
                warm = statistics.median(_get(hub.url + path) for _ in range(args.iters))
                rows.append((name, cold, warm))
    print(f"# Embedded hub pages: {args.repos} repos, {args.repos * args.commits} commits (built in {built:.0f} s)")
    print(
        f"python {platform.python_version()}, jinja2 {version('jinja2')}, markdown-it-py {version('markdown-it-py')},"
        f" nh3 {version('nh3')}; load average {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPUs"
    )
    print()
    print("| page | first request (ms) | median of the next (ms) |")
    print("|---|---:|---:|")
    for name, cold, warm in rows:
        print(f"| `{name}` | {cold * 1000:.1f} | {warm * 1000:.1f} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
