"""The built-in backends: one package per export format, each registering one :class:`hub_export.formats.Backend`.

Every sub-package here is imported by the registry the first time formats are looked up
(:func:`hub_export.formats.backends`). A package holds its format's config, exporter, runner, program I/O, safety
check and patches; nothing outside it names the format. See CONTRIBUTING.md, "Adding a backend".
"""
