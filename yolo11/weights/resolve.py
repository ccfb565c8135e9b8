"""Where a weights reference points: a local file or folder, a Hugging Face Hub file or repo, an official name.

``resolve_weights(ref) -> Path`` accepts

- a local ``.safetensors`` / ``.pt`` file or a ``save_pretrained`` folder (always tried first);
- ``hf://owner/repo/path/in/repo.pt`` (one file of a Hub repo) or ``hf://owner/repo`` (the whole repo);
- ``owner/repo``: a Hub repo written by ``yolo11.hub.push_to_hub`` (``model.safetensors`` + ``config.json``);
- an official Ultralytics name, ``yolo11n.pt`` ... ``yolo11x.pt`` from the ``Ultralytics/YOLO11`` Hub repo,
  ``yolo26n.pt`` ... ``yolo26x.pt`` from ``Ultralytics/YOLO26``.

Downloads go through ``huggingface_hub`` and its cache. The Hub is probed first with a short timeout, because
``hf_hub_download`` retries an unreachable host for about 20 s: offline (``HF_HUB_OFFLINE=1``, or no answer), a
cached copy is used, else ``WeightsNotFoundError`` says which file, where to download it and where to put it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from huggingface_hub import hf_hub_download, snapshot_download
from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

# the probe lives in netprobe (a leaf: the models use it too); its names here are the ones this module's callers
# (the Hub tools, the data sources) and tests reach
from yolo11.netprobe import hub_endpoint, hub_offline, hub_reachable

# Per family: the Hub repo of Ultralytics' official checkpoints, and the same files as GitHub release assets of
# ultralytics/assets, where Ultralytics itself downloads them from (8.4.190's attempt_download_asset: tag v8.4.0,
# yolo26?.pt among its GITHUB_ASSETS_NAMES; the YOLO11 files were published under v8.3.0).
OFFICIAL_REPOS = {"yolo11": "Ultralytics/YOLO11", "yolo26": "Ultralytics/YOLO26"}
RELEASE_URLS = {"yolo11": "https://github.com/ultralytics/assets/releases/download/v8.3.0/{name}",
                "yolo26": "https://github.com/ultralytics/assets/releases/download/v8.4.0/{name}"}
OFFICIAL_NAMES = tuple(f"{family}{scale}.pt" for family in OFFICIAL_REPOS for scale in "nsmlx")
# The files of a repo written by yolo11.hub.save_pretrained (README.md is the model card).
HUB_FILES = ["model.safetensors", "config.json", "README.md"]
_HF_URI = re.compile(r"hf:/+(?P<repo>[\w.-]+/[\w.-]+)(?:/(?P<file>.+))?")
_REPO_ID = re.compile(r"[\w.-]+/[\w.-]+")


class WeightsNotFoundError(FileNotFoundError):
    """The weights are neither local nor reachable; the message says where to get them and where to put them."""


def resolve_weights(ref: str | Path) -> Path:
    """The local path of the weights ``ref`` names (downloading them if needed); see the module docstring."""
    text = str(ref)
    local = Path(text).expanduser()
    if local.exists():
        return local
    uri = _HF_URI.fullmatch(text)
    if uri is not None:
        repo, file = uri.group("repo"), uri.group("file")
        if file:
            return _fetch_file(repo, file, text)
        return _fetch_repo(repo, text, allow_patterns=None)
    if local.name in OFFICIAL_NAMES and local.parent == Path("."):
        family = local.name[:-len("n.pt")]
        return _fetch_file(OFFICIAL_REPOS[family], local.name, text,
                           release_url=RELEASE_URLS[family].format(name=local.name))
    if _REPO_ID.fullmatch(text) and not local.suffix:
        return _fetch_repo(text, text, allow_patterns=HUB_FILES)
    raise FileNotFoundError(
        f"no such weights file or folder: {text} (expected a local .safetensors/.pt file or save_pretrained folder, "
        f"hf://owner/repo/file, a Hub repo owner/name, or one of {', '.join(OFFICIAL_NAMES)})")


def _fetch_file(repo: str, file: str, ref: str, release_url: str | None = None) -> Path:
    url = f"{hub_endpoint()}/{repo}/resolve/main/{file}"
    where = [url] + ([release_url] if release_url else [])
    put = Path.cwd() / Path(file).name
    advice = (f"download it from {' or '.join(where)} and put it at {put} (or pass its path), or fetch it into the "
              f"Hugging Face cache where a connection exists: `hf download {repo} {file}`")
    return _download(lambda **kw: hf_hub_download(repo, file, **kw), ref, advice)


def _fetch_repo(repo: str, ref: str, allow_patterns: list[str] | None) -> Path:
    url = f"{hub_endpoint()}/{repo}"
    files = allow_patterns or ["every file"]
    advice = (f"download {', '.join(files)} from {url} into a folder and pass that folder, or fetch the repo into "
              f"the Hugging Face cache where a connection exists: `hf download {repo}`")
    return _download(lambda **kw: snapshot_download(repo, allow_patterns=allow_patterns, **kw), ref, advice)


def _download(fetch: Callable[..., str], ref: str, advice: str) -> Path:
    """``fetch()`` from the Hub when it answers, else from the cache; a clear error when neither has it."""
    offline = hub_offline()
    reason = "HF_HUB_OFFLINE is set" if offline else None
    if not offline and not hub_reachable():
        reason = f"the Hugging Face Hub ({hub_endpoint()}) does not answer"
    try:
        return Path(fetch(local_files_only=reason is not None))
    except LocalEntryNotFoundError:
        raise WeightsNotFoundError(f"weights {ref}: no such local file or folder, not in the Hugging Face cache, "
                                   f"and {reason}; {advice}") from None
    except HfHubHTTPError as err:  # no such repo or file, private without a token...
        first_line = str(err).splitlines()[0]
        raise WeightsNotFoundError(f"weights {ref}: no such local file or folder, and the Hub refused the download "
                                   f"({first_line})") from None
