"""A data YAML's ``download:`` zip, as Ultralytics' coco128.yaml has one: fetched once from a local server when the
data is missing, refused when it would write outside its folder or run code, and a clear error without a network."""

from __future__ import annotations

import functools
import http.server
import os
import socket
import stat
import threading
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import user_data

from yolo11.data import DataSourceError, load_source
from yolo11.data.sources import download
from yolo11.data.sources.yolo import read_data_yaml
from yolo11.preflight import SAMPLE_DATA, resolve_data


class _Server:
    """A local HTTP server of ``folder``'s files, counting the requests."""

    def __init__(self, folder: Path):
        served = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def do_GET(self):
                served.requests += 1
                super().do_GET()

            def log_message(self, *args):
                pass

        self.requests = 0
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                      functools.partial(Handler, directory=os.fspath(folder)))
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def served(tmp_path: Path):
    server = _Server(tmp_path / "www")
    (tmp_path / "www").mkdir()
    yield server, tmp_path / "www"
    server.close()


def _tiny_zip(path: Path, extra: dict[str, bytes] | None = None) -> None:
    """``tiny/images/train2017`` and ``tiny/labels/train2017`` from coco8's 8 images, as coco128.zip is laid out,
    plus a macOS ``__MACOSX`` folder."""
    with zipfile.ZipFile(path, "w") as archive:
        for image, label in user_data.coco8_samples():
            archive.write(image, f"tiny/images/train2017/{image.name}")
            archive.write(label, f"tiny/labels/train2017/{label.name}")
        archive.writestr("__MACOSX/tiny/._x.jpg", b"resource fork")
        for name, data in (extra or {}).items():
            archive.writestr(name, data)


def _yaml(folder: Path, link: str) -> Path:
    path = folder / "tiny.yaml"
    path.write_text(f"path: tiny\ntrain: images/train2017\nval: images/train2017\nnames: {user_data.coco8_names()}\n"
                    f"download: {link}\n")
    return path


def test_missing_data_is_downloaded_once_and_read_from_the_cache(tmp_path: Path, served) -> None:
    server, www = served
    _tiny_zip(www / "tiny.zip")
    yaml_path = _yaml(tmp_path, f"{server.url}/tiny.zip")
    stale = tmp_path / "cache" / "downloads" / ".unpacking.tiny.zip.part-x1y2"  # a process killed mid-unpack
    (stale / "tiny" / "images").mkdir(parents=True)
    train = load_source(os.fspath(yaml_path), "train", cache_dir=tmp_path / "cache", workers=1)
    val = load_source(os.fspath(yaml_path), "val", cache_dir=tmp_path / "cache", workers=1)
    assert len(train.dataset) == len(val.dataset) == 8 and not train.summary.num_problems
    assert server.requests == 1
    downloads = tmp_path / "cache" / "downloads"
    assert sorted(p.name for p in downloads.iterdir() if not p.name.startswith(".")) == ["tiny"]  # no __MACOSX
    assert not list(downloads.glob(".*.part")) and not list(downloads.glob(".unpacking*")) and not stale.exists()


def test_data_already_there_is_not_downloaded(tmp_path: Path, served) -> None:
    server, _ = served
    yaml_path = _yaml(tmp_path, f"{server.url}/tiny.zip")
    _tiny_zip(tmp_path / "local.zip")
    with zipfile.ZipFile(tmp_path / "local.zip") as archive:
        archive.extractall(tmp_path)  # tiny/ beside the YAML
    source = load_source(os.fspath(yaml_path), "train", cache_dir=tmp_path / "cache", workers=1)
    assert len(source.dataset) == 8 and server.requests == 0


@pytest.mark.parametrize("member", ["../escaped.txt", "/etc/escaped.txt", "tiny/link"])
def test_a_zip_that_would_write_outside_its_folder_is_refused_whole(tmp_path: Path, served, member: str) -> None:
    server, www = served
    with zipfile.ZipFile(www / "tiny.zip", "w") as archive:
        archive.writestr("tiny/images/train2017/a.txt", b"x")
        info = zipfile.ZipInfo(member)
        if member == "tiny/link":
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(info, b"/etc/passwd" if member == "tiny/link" else b"escaped")
    yaml_path = _yaml(tmp_path, f"{server.url}/tiny.zip")
    with pytest.raises(DataSourceError, match="a link or a path outside its folder; not unpacked"):
        load_source(os.fspath(yaml_path), "train", cache_dir=tmp_path / "cache", workers=1)
    downloads = tmp_path / "cache" / "downloads"
    assert not (tmp_path / "cache" / "escaped.txt").exists() and not (downloads / "tiny").exists()
    assert [p.name for p in downloads.iterdir() if not p.name.endswith(".lock")] == []


def test_no_network_is_a_clear_error_within_seconds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused connection and a server that never answers both end in an error naming the YAML, the link and
    what to do."""
    for silent in (False, True):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        if silent:
            listener.listen(1)
            monkeypatch.setattr(download, "DOWNLOAD_TIMEOUT_S", 1.0)
        link = f"http://127.0.0.1:{listener.getsockname()[1]}/tiny.zip"
        yaml_path = _yaml(tmp_path, link)
        started = time.monotonic()
        try:
            with pytest.raises(DataSourceError) as caught:
                load_source(os.fspath(yaml_path), "train", cache_dir=tmp_path / "cache", workers=1)
        finally:
            listener.close()
        assert time.monotonic() - started < 20
        message = str(caught.value)
        assert f"{yaml_path}: cannot download {link}" in message and "unzip it into" in message, message


def test_download_that_is_code_or_not_a_zip_link_is_never_run(tmp_path: Path) -> None:
    """Ultralytics runs Python written in ``download:``; here only an http(s) zip link is followed."""
    yaml_path = _yaml(tmp_path, "|\n  import os\n  os.system('touch pwned')")
    with pytest.raises(DataSourceError, match="never runs code from a data file"):
        load_source(os.fspath(yaml_path), "train", cache_dir=tmp_path / "cache", workers=1)
    assert not Path("pwned").exists() and not (tmp_path / "pwned").exists()


def test_coco128_by_name_is_shipped_as_ultralytics_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``data=coco128.yaml`` resolves to the shipped YAML, whose data (not shipped) comes from Ultralytics' link:
    the download is asked for with it (no network in the test) and the classes are coco8's."""
    monkeypatch.chdir(tmp_path)
    spec, note = resolve_data("coco128.yaml")
    assert spec == os.fspath(SAMPLE_DATA["coco128.yaml"]) and "shipped with yolo11" in note
    data = read_data_yaml(Path(spec))
    assert data["names"] == user_data.coco8_names()
    asked = []

    def fake_download(url: str, into: Path, where: str) -> None:
        asked.append(url)
        _tiny_zip(tmp_path / "x.zip")
        with zipfile.ZipFile(tmp_path / "x.zip") as archive:
            for member in archive.infolist():
                member.filename = member.filename.replace("tiny/", "coco128/", 1)
                archive.extract(member, into)

    monkeypatch.setattr(download, "download_zip", fake_download)
    source = load_source(spec, "train", cache_dir=tmp_path / "cache", workers=1)
    assert asked == ["https://github.com/ultralytics/assets/releases/download/v0.0.0/coco128.zip"]
    assert len(source.dataset) == 8


class _Scripted:
    """A local server answering every GET with ``respond(handler)``: what a broken or hostile server sends."""

    def __init__(self, respond):
        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                try:
                    respond(self)
                except OSError:  # the client gave up: what the test checks
                    pass
                self.close_connection = True

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _cut_chunked(handler) -> None:
    handler.send_response(200)
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    handler.wfile.write(b"400\r\n" + b"x" * 1024 + b"\r\n400\r\nxx")


def _cut_with_length(handler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Length", str(1 << 20))
    handler.end_headers()
    handler.wfile.write(b"PK\x03\x04" + b"x" * 1000)


@pytest.mark.parametrize("server", ["chunks cut", "length cut", "not http"])
def test_a_download_cut_short_or_not_http_is_named_and_leaves_nothing(tmp_path: Path, server: str) -> None:
    """A connection closed mid-way (with or without a stated length) and a server that does not speak HTTP end in
    an error naming the YAML and the link, and no ``.part`` file is left behind."""
    if server == "not http":
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)

        def answer():
            connection, _ = listener.accept()
            connection.recv(1000)
            connection.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
            connection.close()

        threading.Thread(target=answer, daemon=True).start()
        link, close = f"http://127.0.0.1:{listener.getsockname()[1]}/tiny.zip", listener.close
    else:
        scripted = _Scripted(_cut_chunked if server == "chunks cut" else _cut_with_length)
        link, close = f"{scripted.url}/tiny.zip", scripted.close
    yaml_path = _yaml(tmp_path, link)
    try:
        with pytest.raises(DataSourceError) as caught:
            load_source(os.fspath(yaml_path), "train", cache_dir=tmp_path / "cache", workers=1)
    finally:
        close()
    assert f"{yaml_path}: cannot download {link}" in str(caught.value), caught.value
    if server == "length cut":
        assert "after 1,004 of 1,048,576 bytes" in str(caught.value), caught.value
    assert list((tmp_path / "cache" / "downloads").glob(".*.part")) == []


def _endless(handler, stated: int | None = None) -> None:
    handler.send_response(200)
    if stated is not None:
        handler.send_header("Content-Length", str(stated))
    handler.end_headers()
    while True:  # until the client hangs up (an OSError the server's handler swallows)
        handler.wfile.write(b"\0" * (1 << 20))


@pytest.mark.parametrize("stated", [None, 1 << 40])
def test_a_server_sending_without_end_is_stopped_at_half_the_free_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      stated: int | None) -> None:
    """The zip and what it unpacks must both fit, so a download may take half the free disk: a server sending
    without end (or stating a size past that) is stopped there, not left to fill the disk, and its part removed."""
    free = 8 << 20
    monkeypatch.setattr(download.shutil, "disk_usage", lambda path: SimpleNamespace(free=free))
    scripted = _Scripted(functools.partial(_endless, stated=stated))
    yaml_path = _yaml(tmp_path, f"{scripted.url}/tiny.zip")
    started = time.monotonic()
    try:
        with pytest.raises(DataSourceError, match="more than 4,194,304 bytes, half the 8,388,608 free"):
            load_source(os.fspath(yaml_path), "train", cache_dir=tmp_path / "cache", workers=1)
    finally:
        scripted.close()
    assert time.monotonic() - started < 20
    assert list((tmp_path / "cache" / "downloads").glob(".*.part")) == []


def test_a_redirect_to_another_scheme_is_refused_before_it_is_followed(tmp_path: Path) -> None:
    """Only http(s) is downloaded: urllib refuses a redirect to ``file://`` but follows one to ``ftp://``; here
    that redirect is refused, naming it, and the ftp address is never contacted."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    target = f"ftp://127.0.0.1:{listener.getsockname()[1]}/tiny.zip"

    def redirect(handler) -> None:
        handler.send_response(302)
        handler.send_header("Location", target)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    scripted = _Scripted(redirect)
    yaml_path = _yaml(tmp_path, f"{scripted.url}/tiny.zip")
    try:
        with pytest.raises(DataSourceError, match=f"redirected to '{target}', not an http"):
            load_source(os.fspath(yaml_path), "train", cache_dir=tmp_path / "cache", workers=1)
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        scripted.close()
        listener.close()


@pytest.mark.parametrize("members", [["tiny/a", "tiny/a/b.txt"], ["tiny/" + "n" * 300 + ".txt"]])
def test_a_zip_whose_members_cannot_be_written_is_named(tmp_path: Path, served, members: list[str]) -> None:
    """A file and a folder of one name, or a name longer than the file system takes: an error naming the link and
    the member, nothing left half unpacked (not the bare ``NotADirectoryError`` of the extraction)."""
    server, www = served
    with zipfile.ZipFile(www / "tiny.zip", "w") as archive:
        for member in members:
            archive.writestr(member, b"x")
    yaml_path = _yaml(tmp_path, f"{server.url}/tiny.zip")
    with pytest.raises(DataSourceError, match=rf"{server.url}/tiny.zip: cannot unpack it \("):
        load_source(os.fspath(yaml_path), "train", cache_dir=tmp_path / "cache", workers=1)
    assert [p.name for p in (tmp_path / "cache" / "downloads").iterdir() if not p.name.endswith(".lock")] == []


def test_a_path_written_as_ultralytics_8_0_wrote_it_is_found_after_its_download(tmp_path: Path, served) -> None:
    """``path: ../datasets/coco128`` (Ultralytics' YAMLs up to 8.0, relative to its datasets folder, where the zip
    unpacks ``coco128/``): the download's folder is the path's last name, so it is read after one download, not
    fetched again at each run and reported missing."""
    server, www = served
    _tiny_zip(www / "tiny.zip")
    yaml_path = _yaml(tmp_path, f"{server.url}/tiny.zip")
    yaml_path.write_text(yaml_path.read_text().replace("path: tiny", "path: ../datasets/tiny"))
    for split in ("train", "val"):
        source = load_source(os.fspath(yaml_path), split, cache_dir=tmp_path / "cache", workers=1)
        assert len(source.dataset) == 8
    assert server.requests == 1


def test_a_zip_with_windows_separators_unpacks_into_folders(tmp_path: Path, served) -> None:
    """PowerShell 5's ``Compress-Archive`` writes ``tiny\\images\\x.jpg``: the checks read ``\\`` as a separator,
    and so does the unpacking (zipfile alone writes one file of that name on Linux, and the data is not found)."""
    server, www = served
    _tiny_zip(tmp_path / "posix.zip")
    with zipfile.ZipFile(tmp_path / "posix.zip") as posix, zipfile.ZipFile(www / "tiny.zip", "w") as windows:
        for member in posix.infolist():
            windows.writestr(member.filename.replace("/", "\\"), posix.read(member))
    yaml_path = _yaml(tmp_path, f"{server.url}/tiny.zip")
    source = load_source(os.fspath(yaml_path), "train", cache_dir=tmp_path / "cache", workers=1)
    assert len(source.dataset) == 8 and not source.summary.num_problems
