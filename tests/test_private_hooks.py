"""The private torch, torchvision, numpy, Accelerate and argparse hooks the package leans on, one test each: the
attribute exists, takes what we pass and behaves as the code that uses it expects. A failure here after an upgrade
names the hook and the file of ours that has to change, before a run goes wrong in a subtler way."""

from __future__ import annotations

import argparse
import inspect
import io
import pickle
import pickletools
import warnings
import zipfile

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

cuda = pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"))


def pickle_globals(data: bytes) -> set[str]:
    """The ``module name`` of every GLOBAL a pickle imports."""
    return {arg for op, arg, _ in pickletools.genops(data) if op.name == "GLOBAL"}


# --- torch.utils.data: the loader's iterator (yolo11/data/loader.py, yolo11/data/workers.py) ------------------

def test_dataloader_iterators_come_from_get_iterator():
    """``DetectionDataLoader._get_iterator`` registers each iterator so that its workers stop at exit: torch's
    ``DataLoader.__iter__`` must build every iterator through it."""
    from yolo11.data.loader import DetectionDataLoader

    built = []

    class Counting(DataLoader):
        def _get_iterator(self):
            built.append(super()._get_iterator())
            return built[-1]

    loader = Counting(list(range(5)), batch_size=2)
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3], [4]]
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3], [4]]
    assert len(built) == 2, "DataLoader.__iter__ no longer calls _get_iterator (yolo11/data/loader.py relies on it)"
    assert "_get_iterator" in vars(DetectionDataLoader)


def test_worker_iterators_stop_with_shutdown_workers():
    """``stop_workers_at_exit`` stops a multi-process iterator with ``_shutdown_workers()`` (no arguments) and
    recognises a single-process one by its lack of it."""
    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

    assert not hasattr(iter(DataLoader(list(range(4)), num_workers=0)), "_shutdown_workers")
    assert list(inspect.signature(_MultiProcessingDataLoaderIter._shutdown_workers).parameters) == ["self"]
    iterator = iter(DataLoader(list(range(4)), batch_size=2, num_workers=1))
    assert next(iterator).tolist() == [0, 1]
    assert isinstance(iterator, _MultiProcessingDataLoaderIter)
    iterator._shutdown_workers()
    assert not any(worker.is_alive() for worker in iterator._workers), "_shutdown_workers left a worker running"


# --- fused optimizers: found_inf (yolo11/engine/guard.py) ---------------------------------------------------------

@pytest.mark.parametrize("device", ["cpu", cuda])
@pytest.mark.parametrize("name", ["SGD", "AdamW"])
def test_fused_optimizers_skip_the_step_on_their_found_inf_attribute(name, device):
    """``NonFiniteGuard`` sets ``optimizer.found_inf`` to a device flag; the fused kernels (SGD and AdamW, what
    ``build_optimizer`` makes) must read it from the attribute and leave the weights as they were when it is 1."""
    weight = torch.nn.Parameter(torch.ones(8, device=device))
    optimizer = getattr(torch.optim, name)([weight], lr=0.1, fused=True, **({"momentum": 0.9} if name == "SGD"
                                                                             else {}))

    def step():
        weight.grad = torch.full_like(weight, 0.5)
        optimizer.step()
        return weight.detach().clone()

    first = step()  # the state is made by a step without the flag (as the guard does)
    optimizer.found_inf = torch.ones((), device=device)
    assert torch.equal(step(), first), f"fused {name} ignored optimizer.found_inf = 1: the guard cannot skip a step"
    optimizer.found_inf = torch.zeros((), device=device)
    assert not torch.equal(step(), first), f"fused {name} did not step with optimizer.found_inf = 0"


# --- torch.compile: inductor options and dynamic marks (yolo11/engine/compile.py) ---------------------------------

def test_inductor_mode_options_and_our_option_exist():
    import torch._inductor

    from yolo11.engine.compile import MODEL_INDUCTOR_OPTIONS

    assert torch._inductor.list_mode_options("reduce-overhead") == {"triton.cudagraphs": True}
    assert torch._inductor.list_mode_options("default") == {}
    for key in MODEL_INDUCTOR_OPTIONS:
        assert hasattr(torch._inductor.config, key), f"inductor has no option {key} (MODEL_INDUCTOR_OPTIONS)"
    # MODEL_INDUCTOR_OPTIONS's comment reasons from the default of 4 reads
    assert torch._inductor.config.realize_reads_threshold == 4


def test_dynamo_maybe_mark_dynamic_takes_a_tensor_and_a_dimension():
    import torch._dynamo

    assert list(inspect.signature(torch._dynamo.maybe_mark_dynamic).parameters) == ["t", "index"]
    torch._dynamo.maybe_mark_dynamic(torch.zeros(2, 5, 4), 1)  # CompiledLoss marks the box rows so


# --- TorchDispatchMode and op names (yolo11/engine/capture_contract.py) -------------------------------------------

def test_dispatch_mode_sees_the_ops_the_capture_contract_forbids():
    """``CaptureChecker`` is a ``TorchDispatchMode`` that tells ops apart by ``func._overloadpacket.__name__`` and
    ``func._overloadname``: the host sync, data-dependent shapes and host-built tensors must reach it by the names
    in ``FORBIDDEN_OPS``, boolean-mask indexing as ``index`` and a tensor-repeated ``repeat_interleave`` by an
    overload other than ``self_int``."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from yolo11.engine.capture_contract import FORBIDDEN_OPS

    seen = []

    class Recording(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append((func._overloadpacket.__name__, func._overloadname))
            return func(*args, **(kwargs or {}))

    x = torch.arange(4.0)
    with Recording():
        x.sum().item()
        torch.nonzero(x)
        torch.masked_select(x, x > 1)
        torch.unique(x)
        torch.tensor([1.0, 2.0])
        x[x > 1]
        x.repeat_interleave(torch.tensor([1, 2, 1, 1]))
    names = {name for name, _ in seen}
    assert {"_local_scalar_dense", "nonzero", "masked_select", "_unique2", "lift_fresh", "index"} <= names, seen
    assert ("repeat_interleave", "self_int") not in seen and "repeat_interleave" in names
    missing = [name for name in FORBIDDEN_OPS if not hasattr(torch.ops.aten, name)]
    assert not missing, f"aten has no ops {missing} any more (capture_contract.FORBIDDEN_OPS)"


# --- torchvision's compiled NMS loaded by path (yolo11/postprocess.py) ---------------------------------------------

def test_nms_comes_from_torchvisions_library_without_the_package():
    """``_nms_kernel`` loads torchvision's ``_C_stable`` (or ``_C``) library and calls ``torch.ops.torchvision.nms``;
    when that fails it falls back to importing torchvision (a second slower) without a word."""
    from yolo11.postprocess import _nms_kernel

    _nms_kernel.cache_clear()
    kernel = _nms_kernel()
    assert isinstance(kernel, torch._ops.OpOverloadPacket), f"fell back to {kernel}: torchvision's library moved"
    assert kernel._qualified_op_name == "torchvision::nms"
    boxes = torch.tensor([[0.0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30]])
    assert kernel(boxes, torch.tensor([0.9, 0.8, 0.7]), 0.5).tolist() == [0, 2]


# --- torch._foreach_* (yolo11/engine/ema.py, musgd.py, yolo11/weights/safetensors_io.py) -------------------------

def test_foreach_ops_equal_their_per_tensor_forms():
    a = [torch.tensor([1.0, -2.0]), torch.tensor([[3.0], [4.0]])]
    b = [torch.tensor([0.5, 0.5]), torch.tensor([[1.0], [-1.0]])]

    def close(got, expected):
        assert all(torch.allclose(g, e) for g, e in zip(got, expected, strict=True))

    close(torch._foreach_mul(a, 2.0), [t * 2 for t in a])
    close(torch._foreach_add(a, b, alpha=0.5), [x + 0.5 * y for x, y in zip(a, b, strict=True)])
    close(torch._foreach_sub(a, b), [x - y for x, y in zip(a, b, strict=True)])
    close(torch._foreach_norm(a), [t.norm() for t in a])
    for op, expected in (("_foreach_mul_", [t * 3 for t in a]),
                         ("_foreach_add_", [x - 2 * y for x, y in zip(a, b, strict=True)]),
                         ("_foreach_lerp_", [x + 0.25 * (y - x) for x, y in zip(a, b, strict=True)]),
                         ("_foreach_copy_", b)):
        target = [t.clone() for t in a]
        args = {"_foreach_mul_": (3.0,), "_foreach_add_": (b,), "_foreach_lerp_": (b, 0.25),
                "_foreach_copy_": (b,)}[op]
        kwargs = {"alpha": -2.0} if op == "_foreach_add_" else {}
        getattr(torch, op)(target, *args, **kwargs)
        close(target, expected)


# --- torch.save's pickle: the names the loading gate allows (yolo11/weights/safe_pickle.py, torch_zip.py) ---------

def test_torch_save_pickles_tensors_through_the_rebuild_functions_we_allow():
    from yolo11.weights.safe_pickle import _ALLOWED, _STATE_ALLOWED

    file = io.BytesIO()
    torch.save({"tensor": torch.arange(4.0), "param": torch.nn.Parameter(torch.ones(2))}, file)
    archive = zipfile.ZipFile(io.BytesIO(file.getvalue()))
    data = archive.read(next(name for name in archive.namelist() if name.endswith("data.pkl")))
    used = {tuple(name.split(" ")) for name in pickle_globals(data)} - {("torch", "FloatStorage")}
    assert used <= set(_ALLOWED), f"torch.save now pickles {sorted(used - set(_ALLOWED))}"
    for module, name in _ALLOWED:
        assert callable(getattr(__import__(module, fromlist=[name]), name)), f"{module}.{name} is gone"
    assert callable(torch._utils.set_tensor_metadata)
    numpy_names = {tuple(name.split(" ")) for name in pickle_globals(pickle.dumps(np.arange(3.0), protocol=2))}
    assert numpy_names <= set(_STATE_ALLOWED), f"numpy now pickles arrays with {sorted(numpy_names)}"


def test_tensors_and_typed_storages_keep_the_attributes_the_gate_reads():
    tensor = torch.arange(4.0)
    assert tensor._backward_hooks is None and tensor.__dict__ == {}  # torch_zip's check of a plain tensor
    with warnings.catch_warnings():  # TypedStorage is deprecated; torch.load still makes them (persistent_load)
        warnings.simplefilter("ignore")
        storage = torch.storage.TypedStorage(4, dtype=torch.float32)
    assert storage._untyped_storage.nbytes() == 16 and storage._untyped_storage.data_ptr() != 0


# --- Accelerate's process-wide state (tests/helpers/engine_helpers.py: reset_accelerate_state) ------------------

def test_accelerate_state_resets_so_that_the_next_accelerator_is_built_afresh(fresh_accelerate_state):
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState, PartialState

    assert "reset_partial_state" in inspect.signature(AcceleratorState._reset_state).parameters
    Accelerator(cpu=True)
    assert AcceleratorState._shared_state and PartialState._shared_state
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    assert AcceleratorState._shared_state == {} and PartialState._shared_state == {}
    assert GradientState._shared_state == {}
    assert Accelerator(cpu=True, gradient_accumulation_steps=3).gradient_accumulation_steps == 3


# --- argparse: the parser's actions (yolo11/preflight.py, yolo11/engine/ultralytics_args.py) ---------------------

def test_argparse_lists_its_actions_with_option_strings_and_dest():
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("data")
    assert [(a.dest, a.option_strings) for a in parser._actions] == [("batch_size", ["--batch-size"]),
                                                                     ("data", [])]


def test_a_worker_stuck_in_a_long_sample_does_not_hold_the_exit(tmp_path):
    """A loader worker (SIGTERM ignored, as ``seed_worker`` sets) busy with a 120 s sample when the program ends:
    the exit must not wait for it. The loader's own shutdown gives up after its joins (~10 s) and multiprocessing's
    exit handler would then wait forever (``yolo11 val`` was seen hanging so); ``end_stray_workers`` kills it. The
    worker is torch's ``_worker_loop`` (``multiprocessing.Process._target``), which is how it is told apart."""
    import subprocess
    import sys
    import textwrap
    import time

    script = tmp_path / "stuck.py"
    script.write_text(textwrap.dedent('''
        import time
        import torch
        from yolo11.data.loader import DetectionDataLoader
        from yolo11.data.workers import seed_worker

        class Slow(torch.utils.data.Dataset):
            def __len__(self):
                return 4

            def __getitem__(self, index):
                time.sleep(120 if index == 0 else 0)
                return index

        iterator = iter(DetectionDataLoader(Slow(), batch_size=1, num_workers=2, worker_init_fn=seed_worker))
        time.sleep(1.0)  # worker 0 is in its long sample
        print("ending", flush=True)
    '''))
    started = time.monotonic()
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "ending" in result.stdout and time.monotonic() - started < 40
