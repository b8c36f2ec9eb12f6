"""The embedded Hub: a Hugging Face Hub-protocol server that the unmodified ``huggingface_hub`` client talks to.

A product of its own: ``hub-export hub serve --root DIR`` (or :func:`serve`, or :class:`HubServer` in a test)
runs an offline hub on loopback for air-gapped set-ups, demos and tests. The package imports nothing from
hub_export but :mod:`hub_export.errors`.

Modules:
    * :mod:`~hub_export.embedded_hub.server`: :class:`HubServer`, :func:`serve` and the HTTP layer;
    * ``_routes``: the Hub's REST routes; ``_uploads``: upload rules and commit payloads;
    * ``_gitstore``: on-disk storage (bare git repositories plus an LFS object store).
"""

from hub_export.embedded_hub.server import FaultRule, HubServer, RequestRecord, serve

__all__ = ["HubServer", "serve", "FaultRule", "RequestRecord"]
