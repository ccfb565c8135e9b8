"""A data YAML's ``download:`` zip, fetched once when the YAML's data is missing, as Ultralytics fetches
``coco128.yaml``'s.

Only an http(s) link to a zip is followed: Ultralytics also runs Python written in that key, and a data file never
runs code here. The zip is unpacked into ``<cache>/downloads`` (the YAML's relative ``path`` is then read there),
checked first: no member outside its folder, no links, and no more bytes than the disk has free (the download
itself stops at half the free disk, the zip and what it unpacks both having to fit). Several processes
of a launch download once (a file lock); an interrupted download leaves only a ``.part`` file, which the next try
replaces.
"""

from __future__ import annotations

import http.client
import os
import shutil
import stat
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from filelock import FileLock
from tqdm.auto import tqdm

from yolo11.data.schema import DataSourceError
from yolo11.data.sources.yolo import dataset_root

DOWNLOAD_TIMEOUT_S = 30  # per connection attempt and per read: a silent server fails instead of hanging the run
MAX_ZIP_MEMBERS = 5_000_000  # COCO's train2017 images and labels are 240,000
SKIPPED_TOP_FOLDERS = ("__MACOSX",)  # resource forks that macOS's Finder adds to the zips it makes


class _HttpRedirectsOnly(urllib.request.HTTPRedirectHandler):
    """Redirects followed to http(s) links only: urllib's own handler also follows one to ``ftp://``."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if urlparse(newurl).scheme not in ("http", "https"):
            raise urllib.error.HTTPError(newurl, code, f"redirected to {newurl[:120]!r}, not an http(s) link",
                                         headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_HttpRedirectsOnly)


def fetch_missing_data(yaml_path: Path, data: dict, downloads: Path) -> tuple[dict, str]:
    """``(data, note)``: when the YAML's data is missing, its ``path`` relative and ``download`` a zip link, the
    data as downloaded into ``downloads`` (``path`` pointing there, fetched on first use); otherwise unchanged."""
    link, relative = data.get("download"), data.get("path")
    if not isinstance(link, str) or not isinstance(relative, str) or not relative or Path(relative).is_absolute() \
            or dataset_root(yaml_path, data).exists():
        return data, ""
    # the zip unpacks at the top of downloads, as Ultralytics unpacks into its datasets folder: its YAMLs' path
    # "../datasets/coco128" (up to 8.0, relative to that folder) names coco128/ there, as "coco128" does
    name = PurePosixPath(relative.replace("\\", "/")).name
    if name in ("", ".."):
        return data, ""
    target = downloads / name
    note = f"{yaml_path}: its data ({relative}) is not here; using the copy downloaded into {target}"
    if not target.is_dir():
        url = urlparse(link.strip())
        if url.scheme not in ("http", "https") or not url.path.lower().endswith(".zip"):
            raise DataSourceError(f"{yaml_path}: its data ({dataset_root(yaml_path, data)}) does not exist, and its "
                                  f"'download' is not an http(s) link to a zip, the only kind yolo11 downloads (it "
                                  f"never runs code from a data file): {link.strip()[:120]!r}")
        downloads.mkdir(parents=True, exist_ok=True)
        with FileLock(os.fspath(downloads / f".{name}.lock")):
            if not target.is_dir():  # another process of the launch may have fetched it while this one waited
                download_zip(link.strip(), downloads, f"{yaml_path}")
                note = f"{yaml_path}: downloaded {link.strip()} into {target}"
        if not target.is_dir():
            unpacked = sorted(p.name for p in downloads.iterdir() if not p.name.startswith("."))
            raise DataSourceError(f"{yaml_path}: {link.strip()} did not unpack into {name}/ as its 'path' says "
                                  f"(found in {downloads}: {', '.join(unpacked[:5]) or 'nothing'})")
    return {**data, "path": os.fspath(target)}, note


def download_zip(url: str, into: Path, where: str) -> None:
    """Fetch ``url`` to ``into/.<name>.part`` and unpack it into ``into``; ``DataSourceError`` naming ``where``
    and the link when the network or the file fails."""
    name = PurePosixPath(urlparse(url).path).name
    part = into / f".{name}.part"
    for stale in into.glob(f".unpacking{part.name}-*"):  # left by a process killed while unpacking this zip
        shutil.rmtree(stale, ignore_errors=True)
    request = urllib.request.Request(url, headers={"User-Agent": "yolo11-accelerate"})
    free = shutil.disk_usage(into).free
    try:
        if not _fetch(request, part, name, free // 2):  # the zip and what it unpacks must both fit
            part.unlink(missing_ok=True)
            raise DataSourceError(f"{where}: {url} sends more than {free // 2:,} bytes, half the {free:,} free in "
                                  f"{into} (the zip and what it unpacks must both fit); stopped")
    # OSError: no network, a timeout, a refused link (URLError), a full disk; HTTPException: a connection cut
    # inside a chunk, or a server that does not speak HTTP
    except (OSError, http.client.HTTPException, ValueError) as err:
        part.unlink(missing_ok=True)
        reason = " ".join(str(getattr(err, "reason", None) or err).split())
        if isinstance(err, http.client.HTTPException):
            reason = f"not a complete HTTP answer: {type(err).__name__} {reason}"
        raise DataSourceError(f"{where}: cannot download {url} ({reason}); without a network, fetch it elsewhere "
                              f"and unzip it into {into} or the working folder, or set the YAML's 'path' to where "
                              "the data is") from None
    try:
        unpack_zip(part, into, f"{where}: {url}")
    finally:
        part.unlink(missing_ok=True)


def _fetch(request: urllib.request.Request, part: Path, name: str, max_bytes: int) -> bool:
    """The response's body written to ``part``; ``False`` as soon as it states or sends more than ``max_bytes`` (a
    server sending without end would fill the disk), ``ConnectionError`` when it ends before its stated length."""
    with _OPENER.open(request, timeout=DOWNLOAD_TIMEOUT_S) as response, part.open("wb") as out:
        size = int(response.headers.get("Content-Length") or 0) or None
        if size is not None and size > max_bytes:
            return False
        received = 0
        with tqdm(total=size, unit="B", unit_scale=True, desc=f"downloading {name}", file=sys.stderr) as bar:
            while chunk := response.read(1 << 20):
                received += len(chunk)
                if received > max_bytes:
                    return False
                out.write(chunk)
                bar.update(len(chunk))
    if size is not None and received < size:  # http.client ends a body cut short as if it were whole
        raise ConnectionError(f"the connection closed after {received:,} of {size:,} bytes")
    return True


def unpacked_export(archive: Path, cache_root: Path, fingerprint: str) -> Path:
    """A zip as export tools hand them out (Roboflow, CVAT, Label Studio: ``--data export.zip``), unpacked once
    into ``<cache>/unzipped/<name>-<fingerprint>`` with ``unpack_zip``'s checks, as Ultralytics unpacks a zip
    given as its data; the folder is then read as any dataset folder. Several processes of a launch unpack once
    (a file lock), and the folder appears whole or not at all (unpacked beside it, then renamed)."""
    target = cache_root / "unzipped" / f"{archive.stem}-{fingerprint}"
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(os.fspath(target.parent / f".{target.name}.lock")):
        if not target.is_dir():
            staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
            try:
                unpack_zip(archive, staging, os.fspath(archive))
                staging.rename(target)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
    return target


def unpack_zip(archive_path: Path, into: Path, where: str) -> None:
    """Unpack a zip into ``into`` after checking every member: refused whole when one would land outside it (an
    absolute path or ``..``) or is a link, when it has more than ``MAX_ZIP_MEMBERS`` members, or when its stated
    sizes exceed the free disk space (zipfile stops each member at its stated size, so a crafted zip cannot write
    more). Unpacked into a hidden folder first and moved into place, so no half-unpacked dataset is ever read."""
    staging = Path(tempfile.mkdtemp(prefix=f".unpacking{archive_path.name}-", dir=into))
    try:
        with zipfile.ZipFile(archive_path) as archive:
            members = archive.infolist()
            if len(members) > MAX_ZIP_MEMBERS:
                raise DataSourceError(f"{where}: {len(members):,} files, more than {MAX_ZIP_MEMBERS:,}; not unpacked")
            for member in members:
                parts = PurePosixPath(member.filename.replace("\\", "/")).parts
                if member.filename.startswith(("/", "\\")) or ".." in parts or (parts and ":" in parts[0]) \
                        or stat.S_ISLNK(member.external_attr >> 16):
                    raise DataSourceError(f"{where}: holds {member.filename!r}, a link or a path outside its folder; "
                                          "not unpacked")
                # unpacked as checked: "\\" a separator (PowerShell 5's Compress-Archive writes it), not part of a name
                member.filename = member.filename.replace("\\", "/")
            needed, free = sum(m.file_size for m in members), shutil.disk_usage(into).free
            if needed > free:
                raise DataSourceError(f"{where}: unpacks to {needed / 1e9:.1f} GB, more than the {free / 1e9:.1f} GB "
                                      f"free in {into}")
            for member in members:  # one by one, so that a member the file system refuses is named
                try:
                    archive.extract(member, staging)
                except OSError as err:  # a file and a folder of one name, a name too long, a full disk
                    raise DataSourceError(f"{where}: cannot unpack it ({err.strerror or err}: "
                                          f"{member.filename[:120]!r})") from None
    except zipfile.BadZipFile as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise DataSourceError(f"{where}: not a zip file, or a damaged one ({err})") from None
    # damaged compressed data (zlib), a password (RuntimeError), a method zipfile lacks (Deflate64, which Windows'
    # Explorer writes for large files: NotImplementedError), a member cut short (EOFError)
    except (zlib.error, RuntimeError, NotImplementedError, EOFError) as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise DataSourceError(f"{where}: cannot unpack it ({type(err).__name__}: {str(err)[:200]}); a damaged, "
                              "encrypted or Deflate64 zip: unpack it with another tool, or zip it again") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    try:
        for entry in staging.iterdir():
            if entry.name not in SKIPPED_TOP_FOLDERS and not (into / entry.name).exists():
                entry.rename(into / entry.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
