"""The embedded hub's web pages (see :mod:`._routes`): the Hub's page URLs, rendered on the server."""

from hub_export.embedded_hub.pages._routes import CONTENT_SECURITY_POLICY, PageRoutes

__all__ = ["CONTENT_SECURITY_POLICY", "PageRoutes"]
