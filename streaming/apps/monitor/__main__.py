"""``python -m streaming.apps.monitor``: what ``wm-monitor`` runs."""

from streaming.apps.monitor import main

raise SystemExit(main())
