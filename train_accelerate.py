"""Train YOLO11 with Hugging Face Accelerate: the repository's script for ``yolo11.train``.

    accelerate launch --config_file accelerate_configs/4gpu.yaml train_accelerate.py --model yolo11n \
        --data datasets/coco128.yaml --epochs 100 --batch-size 64

After a plain ``pip install`` the same trainer runs as ``accelerate launch -m yolo11.train ...`` or
``yolo11-train ...`` (one process). ``python train_accelerate.py --help`` lists every flag.
"""

from yolo11.program_exit import exit_process
from yolo11.train import main

if __name__ == "__main__":
    exit_process(main())
