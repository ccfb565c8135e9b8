"""What the tests share and are not tests themselves: builders of inputs (datasets on disk, pickles, checkpoints),
readers of outputs (W&B streams), and scripts the tests run by path in subprocesses (``faulty_train.py``,
``convert_once.py``, the Ultralytics runners). Fixtures built on them are in ``tests/conftest.py``."""
