"""``load_source`` under ``accelerate launch``, for tests/test_conversion.py: each rank writes what it saw.

    convert_once.py DATA_YAML CACHE_DIR OUT_DIR   # -> OUT_DIR/rank<r>.json {conversions, rows | error}
"""

import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from accelerate import PartialState  # noqa: E402
from accelerate.utils import parse_flag_from_env  # noqa: E402

from yolo11.data import DataSourceError, load_source  # noqa: E402
from yolo11.data.sources import CONVERSIONS  # noqa: E402


def digest(data: bytes) -> str:
    """Image bytes (save_to_disk embeds the files) as a short digest: the ranks compare rows, not pixels."""
    return hashlib.sha1(data).hexdigest()


def main() -> int:
    data, cache, out = sys.argv[1:4]
    # initialises the process group, as train_accelerate.py does before loading data
    state = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))
    record = {"num_processes": state.num_processes}
    try:
        record["rows"] = load_source(data, "train", cache_dir=cache).dataset.to_list()
    except DataSourceError as err:
        record["error"] = str(err)
    record["conversions"] = CONVERSIONS["yolo"]
    Path(out, f"rank{state.process_index}.json").write_text(json.dumps(record, default=digest))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
