"""rocmlab.common: the one implementation of what several commands used to write each for
itself. Text made safe for a terminal or markup, bounded reads of hostile files (links followed
or not, a file replaced while it is read), and outputs written whole or not at all. The commands'
own tests (test_doctor_hostile, test_fleet_hostile, test_allreduce_hostile) prove their wording."""

from __future__ import annotations

import json
import os
import stat
import sys
import unicodedata
from pathlib import Path

import pytest

from rocmlab.common import hostread
from rocmlab.common.hostread import (
    FileReplaced,
    FileTooLarge,
    NotRegularFile,
    read_bounded,
    read_regular,
)
from rocmlab.common.outputs import atomic_file, finite, umask, write_atomic
from rocmlab.common.textsafe import for_terminal
from rocmlab.fleet.bounded import read_record
from rocmlab.fleet.fields import RecordError

# --- text ----------------------------------------------------------------------------------


def test_a_line_shows_every_control_and_markup_keeps_its_white_space() -> None:
    text = "a\tb\nc\rd\x1b[31m\u202eE\x85\ud800"
    assert for_terminal(text) == "a\\tb\\nc\\rd\\x1b[31m\\u202eE\\x85\\ud800"
    assert for_terminal(text, markup=True) == "a\tb\nc\rd\\x1b[31m\\u202eE\\x85\\ud800"
    assert for_terminal("plain text, ünïcode ✓") == "plain text, ünïcode ✓"


def test_every_invisible_format_character_is_shown_as_an_escape() -> None:
    """Unicode's format characters (category Cf: zero-width space U+200B, word joiner U+2060,
    byte order mark U+FEFF, the tag characters, the bidi controls...) hide in a name on a
    terminal: each is written as its escape, in a line and in markup, whatever surrounds it."""
    every = [chr(code) for code in range(sys.maxunicode + 1)]
    formats = [char for char in every if unicodedata.category(char) == "Cf"]
    assert {"\u200b", "\u2060", "\ufeff", "\u00ad", "\U000e0041"} <= set(formats)
    for char in formats:
        code = ord(char)
        escape = (
            f"\\x{code:02x}"
            if code <= 0xFF
            else (f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        )
        for markup in (False, True):
            assert for_terminal(f"web{char}1", markup) == f"web{escape}1", hex(code)
    assert for_terminal("ws\u200b-01 \u2060\ufeffok") == "ws\\u200b-01 \\u2060\\ufeffok"
    # What is printable, in any script, is left as it is.
    assert for_terminal("Größe 東京 \u00a0x") == "Größe 東京 \u00a0x"


# --- bounded reads -------------------------------------------------------------------------


def test_a_link_is_followed_only_when_the_caller_says(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"ID=ubuntu\n")
    (tmp_path / "os-release").symlink_to("real")  # as /etc/os-release is on most systems
    assert read_regular(tmp_path / "os-release", 100) == b"ID=ubuntu\n"
    assert read_bounded(tmp_path / "os-release", 100).data == b"ID=ubuntu\n"
    with pytest.raises(NotRegularFile) as refused:
        read_regular(tmp_path / "os-release", 100, follow_links=False)
    assert stat.S_ISLNK(refused.value.mode)
    assert str(refused.value) == "a symbolic link, not a regular file"


def test_a_file_larger_than_it_may_be_is_not_opened_when_the_caller_says(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"x" * 101)
    assert read_regular(tmp_path / "big", 100) == b"x" * 101  # the bound, plus one: "more"
    with pytest.raises(FileTooLarge) as refused:
        read_regular(tmp_path / "big", 100, refuse_larger=True)
    assert refused.value.size == 101


def record_in(directory: Path, name: str) -> bytes | None:
    """fleet-report's read of the record ``name`` in ``directory``."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return read_record(fd, name)
    finally:
        os.close(fd)


@pytest.fixture
def swap_before_open(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """os.open that first replaces the file it is asked for: what another account can do
    between the reader's look (stat) and its open. Returns the names swapped."""
    real_open, swapped = os.open, []

    def open_after_swap(path, flags, mode=0o777, *, dir_fd=None):
        target = Path(path) if dir_fd is None else Path(f"/proc/self/fd/{dir_fd}") / path
        if target.name.endswith(".json") or target.name == "status":
            planted = target.with_name(f".{target.name}.planted")
            planted.write_text('{"planted": true}')
            os.replace(planted, target.resolve())
            swapped.append(target.name)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(hostread.os, "open", open_after_swap)
    return swapped


def test_a_file_replaced_between_the_look_and_the_open_is_refused(
    tmp_path: Path, swap_before_open: list[str]
) -> None:
    (tmp_path / "status").write_text("Package: rocm\n")
    read = read_bounded(tmp_path / "status", 4096)
    assert (read.data, read.refused) == (None, True)
    assert read.error == "replaced by another file while it was read"
    (tmp_path / "web1.json").write_text("{}")
    with pytest.raises(RecordError, match=r"^replaced by another file while it was read: not"):
        record_in(tmp_path, "web1.json")
    assert swap_before_open == ["status", "web1.json"]
    with pytest.raises(FileReplaced):
        read_regular(tmp_path / "web1.json", 100)


def test_a_link_made_between_the_look_and_the_open_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "web1.json").write_text("{}")
    (tmp_path / "secret").write_text("root's")
    real_open = os.open

    def open_after_link(path, flags, mode=0o777, *, dir_fd=None):
        if path == "web1.json":
            os.unlink(path, dir_fd=dir_fd)
            os.symlink("secret", path, dir_fd=dir_fd)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(hostread.os, "open", open_after_link)
    with pytest.raises(RecordError, match=r"^a symbolic link, not followed"):
        record_in(tmp_path, "web1.json")


# --- outputs -------------------------------------------------------------------------------


def test_an_output_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    write_atomic(path, json.dumps(finite({"a": [float("nan"), float("inf"), 1.5]})))
    assert json.loads(path.read_text()) == {"a": [None, None, 1.5]}
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask()
    with pytest.raises(RuntimeError), atomic_file(path, mode=0o644) as tmp:
        tmp.write_text("half")
        raise RuntimeError("interrupted")
    assert json.loads(path.read_text()) == {"a": [None, None, 1.5]}  # the previous one, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # no temporary left
    write_atomic(path, "{}", mode=0o644)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_the_directory_is_never_created(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "missing" / "r.json", "{}")
    assert not (tmp_path / "missing").exists()
