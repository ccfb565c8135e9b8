"""Run by a 2-process CPU launch (tests/test_ddp_one_gpu.py) as ``process_group_probe.py OUT MINUTES``: make the
process group as the trainer does (``launch_state``) with its timeout set to MINUTES (gloo's default, 30, is the
trainer's own: another value shows that the asked one arrives) and in the shared-GPU mode, the CPU standing in for
``cuda:0`` (the layout check, which refuses a CPU run, left out); then an ``Accelerator`` that asks for 5 minutes, as
``build_accelerator`` asks for its own; wait in every way Accelerate offers. Writes what the group holds and which
barriers ran (caller, arguments) to ``OUT/rank<r>.json``."""

import json
import os
import sys
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import accelerate.utils  # noqa: E402
import torch  # noqa: E402
from accelerate import Accelerator, PartialState  # noqa: E402
from accelerate.state import AcceleratorState  # noqa: E402
from accelerate.utils import InitProcessGroupKwargs  # noqa: E402

from yolo11.engine import process_group  # noqa: E402

if __name__ == "__main__":
    out, minutes = Path(sys.argv[1]), float(sys.argv[2])
    process_group.COLLECTIVE_TIMEOUT = timedelta(minutes=minutes)
    os.environ[process_group.SHARE_GPU_VARIABLE] = "1"
    process_group.check_gpu_layout = lambda *args: None
    process_group.SHARED_DEVICE = torch.device("cpu")
    state = process_group.launch_state()
    accelerator = Accelerator(kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(minutes=5))])
    barriers = []
    original = torch.distributed.barrier

    def recorded(*args, **kwargs):  # who called the barrier, with which arguments
        barriers.append([sys._getframe(1).f_code.co_name, *args, *sorted(kwargs)])
        return original(*args, **kwargs)

    torch.distributed.barrier = recorded
    for wait in (accelerator.wait_for_everyone, accelerate.utils.wait_for_everyone, PartialState().wait_for_everyone,
                 AcceleratorState().wait_for_everyone):
        wait()
    record = {"timeout_s": process_group.group_timeout().total_seconds(), "backend": state.backend,
              "device": str(accelerator.device), "processes": accelerator.num_processes, "barriers": barriers,
              "bypass_device_map": os.environ.get("ACCELERATE_BYPASS_DEVICE_MAP"),
              "torch_device": os.environ.get("ACCELERATE_TORCH_DEVICE")}
    (out / f"rank{accelerator.process_index}.json").write_text(json.dumps(record))
