"""The export pipeline every format shares: tracing (:mod:`.trace`), the :class:`~.exporter.HfExporter` base and
``AutoHfExporter`` (:mod:`.auto`). Formats build on it in ``hub_export/backends/<format>/``."""
