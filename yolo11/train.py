"""Train YOLO11 with Hugging Face Accelerate.

    accelerate launch --config_file accelerate_configs/4gpu.yaml -m yolo11.train --model yolo11n \
        --data datasets/coco128.yaml --epochs 100 --batch-size 64

(``train_accelerate.py`` at the repository's root is the same entry point as a script; ``yolo11-train`` runs it
as one process.)

``--batch-size`` (``--batch``) is the global batch, split evenly over the processes. ``python -m yolo11.train
--help`` lists every flag. The Accelerate config file (or ``accelerate config``) chooses devices, process count
and mixed precision; the trainer (``yolo11/engine/trainer.py``) wires the parts of ``yolo11`` together:
parse -> plan -> build -> fit -> finish.
"""

from __future__ import annotations

import sys

from yolo11.engine.config import parse_command_line


def main(argv: list[str] | None = None) -> int:
    config, typed = parse_command_line(argv)  # first: --help and flag errors answer before torch loads
    try:
        from yolo11.engine.trainer import train
    except KeyboardInterrupt:  # Ctrl-C while torch loads (seconds): nothing started, nothing to say but that
        print("interrupted while starting: nothing to save", file=sys.stderr)
        return 130
    return train(config, typed)


if __name__ == "__main__":
    from yolo11.program_exit import exit_process

    exit_process(main())
