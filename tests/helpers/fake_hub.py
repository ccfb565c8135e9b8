"""A stand-in for ``huggingface_hub.HfApi`` (the ``fake_hub`` fixture of conftest.py puts it in place): no network,
the upload lands in a local folder."""

from __future__ import annotations

import fnmatch
import shutil
from pathlib import Path


class FakeHfApi:
    """Records ``create_repo`` and copies what ``upload_folder`` would send into ``remote`` (a folder per repo)."""

    remote: Path
    calls: list = []

    def __init__(self, token=None):
        self.token = token

    def create_repo(self, repo_id, repo_type=None, private=None, exist_ok=False):
        FakeHfApi.calls.append(("create_repo", repo_id, repo_type, private, exist_ok))
        return f"https://huggingface.co/{repo_id}"

    def upload_folder(self, repo_id, folder_path, repo_type=None, allow_patterns=None, commit_message=None):
        FakeHfApi.calls.append(("upload_folder", repo_id, repo_type, commit_message))
        target = FakeHfApi.remote / repo_id
        for path in sorted(Path(folder_path).rglob("*")):
            relative = path.relative_to(folder_path).as_posix()
            if path.is_file() and any(fnmatch.fnmatch(relative, p) for p in allow_patterns):
                (target / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, target / relative)
