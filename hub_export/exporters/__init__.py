"""Exporters: the shared pipeline (``base``), one module per format, and ``AutoHfExporter`` (``auto``)."""
