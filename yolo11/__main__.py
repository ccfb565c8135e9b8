"""``python -m yolo11 <command>``: the ``yolo11`` command (``yolo11/cli.py``)."""

from yolo11.cli import main

raise SystemExit(main())
