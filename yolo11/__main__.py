"""``python -m yolo11 <command>``: the ``yolo11`` command (``yolo11/cli.py``)."""

from yolo11.cli import main
from yolo11.program_exit import exit_process

exit_process(main())
