"""train_accelerate.py with deterministic cuDNN and, with COLLECTIVE_AUDIT=<folder>, every ``torch.distributed``
collective called from Python recorded (for the end-to-end tests of tests/test_ddp_one_gpu.py; through accelerate
launch).

Each process writes ``<folder>/rank<r>.json`` at exit: ``{name: [device types of the tensors it was called with]}``
for every collective called through the ``torch.distributed`` module (Accelerate's operations, SyncBatchNorm, the
trainer's own). DDP's reducer calls its process group from C++ (all_reduce of the buckets, broadcast of the buffers):
those are not seen here. cuDNN's deterministic algorithms make two runs of the same work equal to the bit, as the
tests compare runs with each other.
"""

import atexit
import functools
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from yolo11 import train as train_accelerate  # noqa: E402

COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "all_gather_single", "reduce",
               "gather", "scatter", "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single",
               "barrier", "all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list",
               "send", "recv", "isend", "irecv", "monitored_barrier")


def tensor_devices(value) -> set[str]:
    if isinstance(value, torch.Tensor):
        return {value.device.type}
    if isinstance(value, (list, tuple)):
        return set().union(*(tensor_devices(item) for item in value)) if value else set()
    return set()


def audit(folder: Path) -> None:
    calls: dict[str, set[str]] = {}

    def recorded(name, function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            devices = tensor_devices(list(args) + list(kwargs.values()))
            calls.setdefault(name, set()).update(devices or {"-"})
            return function(*args, **kwargs)
        return wrapper

    for name in COLLECTIVES:
        if hasattr(dist, name):
            setattr(dist, name, recorded(name, getattr(dist, name)))

    def write():
        folder.mkdir(parents=True, exist_ok=True)
        rank = os.environ.get("RANK", "0")
        (folder / f"rank{rank}.json").write_text(json.dumps({k: sorted(v) for k, v in sorted(calls.items())}))

    atexit.register(write)


if __name__ == "__main__":
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    if os.environ.get("COLLECTIVE_AUDIT"):
        audit(Path(os.environ["COLLECTIVE_AUDIT"]))
    sys.exit(train_accelerate.main())
