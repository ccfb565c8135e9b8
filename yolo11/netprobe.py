"""Whether a server answers, within a deadline: W&B and the Hub are probed before their clients' long retries.

A leaf module (the standard library, and huggingface_hub's constants when asked about the Hub): the models, the
weights and the data sources all probe the Hub, and importing it from one of them made a cycle through
``yolo11.weights``' package init."""

from __future__ import annotations

import os
import threading
import urllib.error
import urllib.request

HUB_PROBE_TIMEOUT_S = 5.0


def hub_endpoint() -> str:
    from huggingface_hub import constants

    return os.environ.get("HF_ENDPOINT", constants.ENDPOINT).rstrip("/")


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` (read now: huggingface_hub reads it once, at import)."""
    from huggingface_hub import constants

    value = os.environ.get("HF_HUB_OFFLINE", "")
    return value.upper() in ("1", "ON", "YES", "TRUE") or bool(constants.HF_HUB_OFFLINE)


def hub_reachable(timeout: float | None = None) -> bool:
    """Whether the Hub endpoint answers an HTTP request within ``timeout`` seconds (any status is an answer)."""
    return url_answers(hub_endpoint(), HUB_PROBE_TIMEOUT_S if timeout is None else timeout)


def url_answers(url: str, timeout: float) -> bool:
    """Whether ``url`` answers an HTTP HEAD request within ``timeout`` seconds (any HTTP status is an answer; an open
    TCP port alone is not, since a proxy may accept every connection).

    The name lookup has no timeout of its own, so the request runs in a daemon thread left behind after ``timeout``.
    """
    answered: list[bool] = []

    def probe() -> None:
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
            answered.append(True)
        except urllib.error.HTTPError:
            answered.append(True)
        except Exception:  # refused, timed out, no such host, malformed URL, not HTTP...
            answered.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(answered) and answered[0]
