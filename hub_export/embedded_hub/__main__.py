"""``python -m hub_export.embedded_hub --root DIR [--host H] [--port P] [--token T]``: serve until Ctrl-C."""

from hub_export.embedded_hub.server import main

raise SystemExit(main())
