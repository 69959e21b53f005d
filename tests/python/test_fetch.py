"""``rocmlab fetch-mnist`` against a loopback HTTP mirror (with Range support and injected faults)
and from local directories, on the real files."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from rocmlab_testutil import copy_dataset, link_dataset

from rocmlab.cli import main
from rocmlab.datasets.catalog import FASHION_MNIST, MNIST
from rocmlab.datasets.datadir import load_dataset


@dataclass
class Mirror:
    """What the loopback mirror serves, how it misbehaves, and what it was asked."""

    root: Path
    url: str = ""
    cut: dict[str, int] = field(default_factory=dict)  # name -> responses to cut short
    cut_at: float = 0.4  # fraction of the body sent before the connection drops
    ignore_range: bool = False
    requests: list[tuple[str, str | None]] = field(default_factory=list)

    def at(self, dataset: str) -> str:
        """The mirror URL of one dataset."""
        return f"{self.url}{dataset}/"


def make_handler(mirror: Mirror) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # keep test output clean
            pass

        def do_GET(self) -> None:
            name = self.path.lstrip("/")
            mirror.requests.append((name, self.headers.get("Range")))
            path = mirror.root / name
            if not path.is_file():
                self.send_error(404)
                return
            body = path.read_bytes()
            start = 0
            ranged = self.headers.get("Range")
            if ranged and not mirror.ignore_range:
                start = int(ranged.removeprefix("bytes=").split("-")[0])
                if start >= len(body):
                    self.send_error(416)
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            else:
                self.send_response(200)
            rest = body[start:]
            self.send_header("Content-Length", str(len(rest)))
            self.end_headers()
            if mirror.cut.get(name, 0) > 0:
                mirror.cut[name] -= 1
                self.wfile.write(rest[: int(len(rest) * mirror.cut_at)])
                self.close_connection = True
                return
            self.wfile.write(rest)

    return Handler


@pytest.fixture
def mirror(real_data: dict[str, Path], tmp_path: Path) -> Iterator[Mirror]:
    """Serves real MNIST (plain) at /mnist/ and Fashion-MNIST (gzipped) at /fashion-mnist/."""
    root = tmp_path / "mirror"
    for name, source in real_data.items():
        link_dataset(source, root / name, {p.name: p.name for p in source.iterdir()})
    state = Mirror(root=root)
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(state))
    state.url = f"http://127.0.0.1:{server.server_address[1]}/"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


def fetch(source: str, dest: Path, *extra: str) -> int:
    return main(
        ["fetch-mnist", "--from", source, "--dest", str(dest), "--retry-delay", "0", *extra]
    )


def test_fetch_from_mirror_prefers_gzip_and_verifies(mirror: Mirror, tmp_path: Path) -> None:
    dest = tmp_path / "fashion"
    assert fetch(mirror.at("fashion-mnist"), dest, "--dataset", "fashion-mnist") == 0
    names = sorted(f"{f.stem}.gz" for f in FASHION_MNIST.files)
    assert sorted(p.name for p in dest.iterdir()) == names
    assert load_dataset(dest, "fashion-mnist").arrays["train_images"].count == 60000 * 784


def test_fetch_falls_back_to_uncompressed_names(mirror: Mirror, tmp_path: Path) -> None:
    dest = tmp_path / "mnist"
    assert fetch(mirror.at("mnist"), dest) == 0
    # MNIST is served uncompressed: the .gz names were asked for first and answered 404.
    asked = [name for name, _ in mirror.requests]
    assert asked[:3] == [
        "mnist/train-images-idx3-ubyte.gz",
        "mnist/train-images.idx3-ubyte.gz",
        "mnist/train-images-idx3-ubyte",
    ]
    assert sorted(p.name for p in dest.iterdir()) == sorted(f.stem for f in MNIST.files)
    load_dataset(dest, "mnist")


def test_second_fetch_downloads_nothing(
    mirror: Mirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "fashion"
    assert fetch(mirror.at("fashion-mnist"), dest, "--dataset", "fashion-mnist") == 0
    mirror.requests.clear()
    assert fetch(mirror.at("fashion-mnist"), dest, "--dataset", "fashion-mnist") == 0
    assert mirror.requests == []
    assert capsys.readouterr().out.count("already staged and verified") == 4


def test_truncated_response_is_resumed_with_a_range_request(
    mirror: Mirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mirror.cut["mnist/train-images-idx3-ubyte"] = 1
    dest = tmp_path / "mnist"
    assert fetch(mirror.at("mnist"), dest) == 0
    ranges = [r for name, r in mirror.requests if name == "mnist/train-images-idx3-ubyte"]
    cut = int(47040016 * mirror.cut_at)
    assert ranges == [None, f"bytes={cut}-"]
    out = capsys.readouterr().out
    assert "short read" in out
    assert f"(resumed at byte {cut}) (verified)" in out
    assert not list(dest.glob(".*.part"))
    load_dataset(dest, "mnist")


def test_server_ignoring_range_restarts_cleanly(mirror: Mirror, tmp_path: Path) -> None:
    name = "fashion-mnist/train-labels-idx1-ubyte.gz"
    mirror.cut[name] = 2
    mirror.ignore_range = True
    dest = tmp_path / "fashion"
    assert fetch(mirror.at("fashion-mnist"), dest, "--dataset", "fashion-mnist") == 0
    assert [r for n, r in mirror.requests if n == name] == [
        None,
        "bytes=11796-",  # asked to resume, got the whole file again (200) and wrote it anew
        "bytes=11796-",
    ]
    load_dataset(dest, "fashion-mnist")


def test_persistently_truncated_download_gives_up_after_the_attempts(
    mirror: Mirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "fashion-mnist/t10k-labels-idx1-ubyte.gz"
    mirror.cut[name] = 100
    mirror.cut_at = 0.0  # headers, then nothing
    dest = tmp_path / "fashion"
    assert (
        fetch(mirror.at("fashion-mnist"), dest, "--dataset", "fashion-mnist", "--attempts", "3")
        == 3
    )
    assert [n for n, _ in mirror.requests].count(name) == 3
    err = capsys.readouterr().err
    assert f"{mirror.url}{name}: giving up after 3 attempts: short read" in err


def test_altered_file_on_the_mirror_is_refused(
    mirror: Mirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = mirror.root / "mnist" / "t10k-labels-idx1-ubyte"
    content = bytearray(bad.read_bytes())
    content[100] ^= 1
    bad.unlink()  # it was a link to the real file
    bad.write_bytes(bytes(content))
    dest = tmp_path / "mnist"
    assert fetch(mirror.at("mnist"), dest) == 3
    err = capsys.readouterr().err
    assert "t10k-labels-idx1-ubyte: downloaded file did not verify" in err
    # One fresh retry for bad content, not all five attempts.
    assert [n for n, _ in mirror.requests].count("mnist/t10k-labels-idx1-ubyte") == 2
    assert MNIST.file("test_labels").sha256 in err
    assert not (dest / "t10k-labels-idx1-ubyte").exists()


def test_file_missing_on_the_mirror(
    tmp_path: Path, mirror: Mirror, capsys: pytest.CaptureFixture[str]
) -> None:
    (mirror.root / "mnist" / "t10k-images-idx3-ubyte").unlink()
    assert fetch(mirror.at("mnist"), tmp_path / "mnist") == 3
    err = capsys.readouterr().err
    assert "t10k-images-idx3-ubyte: not found on the mirror" in err
    assert (
        "tried t10k-images-idx3-ubyte.gz, t10k-images.idx3-ubyte.gz, t10k-images-idx3-ubyte" in err
    )


def test_unreachable_mirror_is_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_address[1]
    server.server_close()  # nothing listens there any more
    assert fetch(f"http://127.0.0.1:{port}/", tmp_path / "d", "--attempts", "2") == 3
    assert "giving up after 2 attempts" in capsys.readouterr().err


def test_corrupt_file_already_in_dest_is_replaced(mirror: Mirror, tmp_path: Path) -> None:
    dest = tmp_path / "mnist"
    dest.mkdir()
    (dest / "train-labels-idx1-ubyte").write_bytes(b"\x00\x00\x08\x01" + bytes(10))
    assert fetch(mirror.at("mnist"), dest) == 0
    load_dataset(dest, "mnist")


def test_fetch_from_a_torchvision_directory(real_data: dict[str, Path], tmp_path: Path) -> None:
    source = copy_dataset(real_data["fashion-mnist"], tmp_path / "src" / "FashionMNIST" / "raw")
    assert fetch(str(tmp_path / "src"), tmp_path / "dest", "--dataset", "fashion-mnist") == 0
    assert fetch(source.as_uri(), tmp_path / "dest2", "--dataset", "fashion-mnist") == 0
    load_dataset(tmp_path / "dest", "fashion-mnist")
    load_dataset(tmp_path / "dest2", "fashion-mnist")


def test_fetch_from_a_directory_refuses_a_damaged_file(
    real_data: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = copy_dataset(real_data["mnist"], tmp_path / "src")
    victim = source / "train-images-idx3-ubyte"
    victim.write_bytes(victim.read_bytes()[:1000])
    assert fetch(str(source), tmp_path / "dest") == 3
    assert f"{victim}: truncated" in capsys.readouterr().err


def test_fetch_from_a_missing_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert fetch(str(tmp_path / "nowhere"), tmp_path / "dest") == 3
    assert "nowhere: not a directory" in capsys.readouterr().err


@pytest.mark.parametrize("how", ["same path", "symlink", "file URL", "torchvision layout"])
def test_dest_that_is_the_source_never_loses_a_file(
    real_data: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    if how == "torchvision layout":
        root = tmp_path / "src"
        data = copy_dataset(real_data["mnist"], root / "MNIST" / "raw")
        source, dest = str(root), data
    else:
        data = copy_dataset(real_data["mnist"], tmp_path / "data")
        dest = data
        if how == "symlink":
            (tmp_path / "link").symlink_to(data)
            dest = tmp_path / "link"
        source = data.as_uri() if how == "file URL" else str(data)
    # Intact: nothing is copied or removed.
    assert fetch(source, dest) == 0
    assert "already staged and verified" in capsys.readouterr().out
    # Altered in place: reported with its hash mismatch, kept as it is.
    victim = data / "train-labels-idx1-ubyte"
    altered = bytearray(victim.read_bytes())
    altered[-1] = (altered[-1] + 1) % 10
    victim.write_bytes(bytes(altered))
    assert fetch(source, dest) == 3
    err = capsys.readouterr().err
    assert "train-labels-idx1-ubyte: SHA-256" in err and "does not match" in err
    assert MNIST.file("train_labels").sha256 in err
    assert "not removed" in err and "not found" not in err
    assert victim.read_bytes() == bytes(altered)
    assert sorted(p.name for p in data.iterdir()) == sorted(f.stem for f in MNIST.files)
