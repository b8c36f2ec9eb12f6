"""hub_export's own cache: one folder for everything hub_export keeps between runs.

Two things live there: the digests of verified files (``verified/``, see :mod:`hub_export._files`) and the exports
made on the fly by ``ExportedModel.from_pretrained(model_repo, export=...)`` (``models--<org>--<name>/``, see
:mod:`hub_export.on_the_fly`). The folder is, in order of precedence:

1. ``$HUB_EXPORT_CACHE``;
2. ``<cache_dir>/hub_export`` when a Hugging Face cache directory is given (``cache_dir=``);
3. ``hub_export/`` beside the Hugging Face hub cache (``$HF_HUB_CACHE/../hub_export``, by default
   ``~/.cache/huggingface/hub_export``), so that moving ``HF_HOME`` moves it too.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CACHE_ENV", "cache_root"]

#: Environment variable naming hub_export's cache folder.
CACHE_ENV = "HUB_EXPORT_CACHE"


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """hub_export's cache folder (see the module docstring for the order of precedence).

    Args:
        cache_dir: A Hugging Face cache directory the caller was given; the cache goes in its ``hub_export/``.
    """
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    if cache_dir is not None:
        return Path(cache_dir) / "hub_export"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE).parent / "hub_export"
