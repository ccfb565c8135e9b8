"""Whether a server answers, within a deadline: W&B and the Hub are probed before their clients' long retries."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request


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
