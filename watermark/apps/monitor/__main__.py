"""``python -m watermark.apps.monitor``: what ``wm-monitor`` runs."""

from watermark.apps.monitor import main

raise SystemExit(main())
