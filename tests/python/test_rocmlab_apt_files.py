"""The apt transaction of rocm_repo: plugins/modules/rocmlab_apt_files.py and
plugins/module_utils/apt_files.py.

The module runs whole (main(), with the arguments ansible-core hands it) over a temporary
directory that stands in for /etc/apt. apt itself is the one boundary replaced: `apt-get update`
becomes a small shell script that behaves like apt reading its sources - it fails while a source
file names the broken repository, printing apt's real lines and exit status
(tests/fixtures/apt_update, captured from apt 2.6.1), and succeeds otherwise. One test runs the
real apt-get with an apt configuration of its own. The file tree is compared before and after
with os.lstat and raw reads, not with the module's own reader.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import resource
import shutil
import signal
import stat
import sys
from pathlib import Path

import pytest
from ansible.module_utils import basic
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import apt_files
from ansible_modules import apt_config

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "apt_update"
# Another owner for files the rollback must give back theirs (only root can chown).
OTHER = (1234, 2345) if os.geteuid() == 0 else (os.getuid(), os.getgid())
ME = f"{os.getuid()}"
MY_GROUP = f"{os.getgid()}"
# What apt 2.6.1 said about each fixture (tests/fixtures/apt_update/PROVENANCE.md).
ERR_404 = (
    "Err:2 http://127.0.0.1:8391/rocm/apt/7.1 jammy/main amd64 Packages"
    " 404 File not found [IP: 127.0.0.1 8391]"
)
E_404 = (
    "E: Failed to fetch http://127.0.0.1:8391/rocm/apt/7.1/dists/jammy/main/binary-amd64/Packages"
    " 404 File not found [IP: 127.0.0.1 8391]"
)
E_INDEX = (
    "E: Some index files failed to download. They have been ignored, or old ones used instead."
)


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


module_under_test = load("rocmlab_apt_files", REPO / "plugins" / "modules" / "rocmlab_apt_files.py")


class FakeApt:
    """A stand-in for apt-get update: a real script that prints FIXTURE's stdout and stderr and
    exits RC while any file of WATCH holds BROKEN, and prints ok.stdout and exits 0 otherwise;
    it counts its calls. SLEEP: seconds the broken case takes (a hung repository)."""

    def __init__(self, tmp: Path, watch, broken="7.1", fixture="packages-404", rc=100, sleep=0):
        self.log = tmp / "apt-calls.log"
        self.script = tmp / "apt-get"
        watched = " ".join(f"'{path}'" for path in watch)
        self.script.write_text(
            f"""#!/bin/sh
echo "$*" >> '{self.log}'
for f in {watched}; do
  if [ -f "$f" ] && grep -q '{broken}' "$f"; then
    sleep {sleep}
    cat '{FIXTURES}/{fixture}.stdout'
    [ -f '{FIXTURES}/{fixture}.stderr' ] && cat '{FIXTURES}/{fixture}.stderr' >&2
    exit {rc}
  fi
done
cat '{FIXTURES}/ok.stdout'
exit 0
"""
        )
        self.script.chmod(0o755)
        self.argv = [str(self.script), "update", "-q"]

    @property
    def calls(self) -> int:
        return len(self.log.read_text().splitlines()) if self.log.exists() else 0


def tree(root: Path) -> dict[str, tuple]:
    """Every entry under ROOT: its type, mode, owner and bytes (or link target)."""
    found = {}
    for path in sorted(root.rglob("*")):
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            body = ("link", os.readlink(path))
        elif stat.S_ISDIR(st.st_mode):
            body = ("dir",)
        else:
            body = ("file", path.read_bytes())
        found[str(path.relative_to(root))] = (*body, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
    return found


def run_module(
    args: dict, capsys, monkeypatch, apt: FakeApt | None = None, check=False, diff=False
):
    """Run the module as ansible-core does; (failed, result)."""
    args = dict(args, _ansible_check_mode=check, _ansible_diff=diff)
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode())
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy")
    argv = apt.argv if apt else ["/bin/false"]
    with pytest.raises(SystemExit):
        module_under_test.main(update_argv=argv, retry_delay=0)
    result = json.loads(capsys.readouterr().out)
    return bool(result.get("failed")), result


def entry(path: Path, **kw) -> dict:
    return {"path": str(path), "owner": ME, "group": MY_GROUP, "mode": "0644", **kw}


@pytest.fixture
def etc(tmp_path: Path) -> Path:
    """A small /etc/apt: a binary keyring, a pin of another owner and mode 0640, two sources."""
    root = tmp_path / "etc" / "apt"
    for sub in ("keyrings", "preferences.d", "sources.list.d"):
        (root / sub).mkdir(parents=True)
    (root / "keyrings" / "rocm.gpg").write_bytes(bytes(range(256)) * 3)
    pin = root / "preferences.d" / "rocm-pin-600"
    pin.write_text("Package: *\nPin: release o=repo.radeon.com\nPin-Priority: 600\n")
    os.chown(pin, *OTHER)
    pin.chmod(0o640)
    (root / "sources.list.d" / "rocm.sources").write_text("URIs: http://mirror/rocm/apt/6.4.2\n")
    (root / "sources.list.d" / "amdgpu.sources").write_text(
        "URIs: http://mirror/amdgpu/6.4.2/ubuntu\n"
    )
    return root


def upgrade(etc: Path, scratch: Path) -> dict:
    """6.4.2 -> 7.1: a new keyring from a scratch file, a new pin, the rocm source rewritten,
    the graphics source and a file in a new directory added, the amdgpu source removed."""
    scratch.mkdir(exist_ok=True)
    (scratch / "keyring.gpg").write_bytes(b"\x99\x01\x0d" + bytes(range(255, -1, -1)))
    (scratch / "keyring.gpg").chmod(0o600)
    return {
        "files": [
            entry(etc / "keyrings" / "rocm.gpg", src=str(scratch / "keyring.gpg")),
            entry(etc / "preferences.d" / "rocm-pin-600", content="Pin-Priority: 700\n"),
            entry(
                etc / "sources.list.d" / "rocm.sources",
                content="URIs: http://mirror/rocm/apt/7.1\n",
            ),
            entry(
                etc / "sources.list.d" / "rocm-graphics.sources",
                content="URIs: http://mirror/graphics/7.1\n",
            ),
            entry(
                etc / "new.d" / "deeper" / "extra.conf",
                content_base64=base64.b64encode(b"\0\1x").decode(),
            ),
        ],
        "remove": [str(etc / "sources.list.d" / "amdgpu.sources")],
        "label": "rocm_repo",
        "change": "the new sources for ROCm 7.1",
        "hint": "Check that http://mirror serves ROCm 7.1, then run again.",
    }


def sources(etc: Path) -> list[Path]:
    return sorted((etc / "sources.list.d").glob("*"))


def test_a_failed_update_puts_every_path_back_byte_identical(etc, tmp_path, capsys, monkeypatch):
    args = upgrade(etc, tmp_path / "scratch")
    apt = FakeApt(tmp_path, [etc / "sources.list.d" / "rocm.sources"])
    before = tree(etc)

    failed, result = run_module(args, capsys, monkeypatch, apt)

    assert failed
    assert tree(etc) == before  # content, mode, owner; added files, directories, temp files gone
    # One failed update, the one retry, and the update after the rollback.
    assert apt.calls == 3
    assert result["rolled_back"] and result["apt_works_again"] is True
    assert result["apt_errors"] == [ERR_404, E_404, E_INDEX]
    kept = [
        str(etc / "keyrings" / "rocm.gpg"),
        str(etc / "preferences.d" / "rocm-pin-600"),
        str(etc / "sources.list.d" / "rocm.sources"),
        str(etc / "sources.list.d" / "amdgpu.sources"),
    ]
    added = [
        str(etc / "sources.list.d" / "rocm-graphics.sources"),
        str(etc / "new.d" / "deeper" / "extra.conf"),
        str(etc / "new.d" / "deeper"),
        str(etc / "new.d"),
    ]
    assert result["restored"] == kept
    assert result["discarded"] == added
    assert result["unrestored"] == []
    assert result["msg"] == (
        "rocm_repo: apt-get update failed with the new sources for ROCm 7.1: "
        f"{ERR_404} | {E_404} | {E_INDEX}. Put back as they were: {', '.join(kept)}; "
        f"removed, as this run had added them: {', '.join(added)}. apt-get update works again "
        "with the previous configuration. "
        "Check that http://mirror serves ROCm 7.1, then run again."
    )


def test_an_update_that_succeeds_keeps_the_new_files_and_a_second_run_changes_nothing(
    etc, tmp_path, capsys, monkeypatch
):
    args = upgrade(etc, tmp_path / "scratch")
    apt = FakeApt(tmp_path, [etc / "sources.list.d" / "rocm.sources"], broken="never-there")

    failed, result = run_module(args, capsys, monkeypatch, apt)

    assert not failed, result
    assert result["changed"] and result["updated"] and not result["rolled_back"]
    assert apt.calls == 1
    assert (etc / "keyrings" / "rocm.gpg").read_bytes() == (
        tmp_path / "scratch" / "keyring.gpg"
    ).read_bytes()
    pin = os.lstat(etc / "preferences.d" / "rocm-pin-600")
    assert (stat.S_IMODE(pin.st_mode), pin.st_uid, pin.st_gid) == (0o644, os.getuid(), os.getgid())
    assert (etc / "preferences.d" / "rocm-pin-600").read_text() == "Pin-Priority: 700\n"
    assert (etc / "new.d" / "deeper" / "extra.conf").read_bytes() == b"\0\1x"
    assert stat.S_IMODE(os.lstat(etc / "new.d").st_mode) == 0o755
    assert not (etc / "sources.list.d" / "amdgpu.sources").exists()
    assert [p.name for p in sources(etc)] == ["rocm-graphics.sources", "rocm.sources"]
    assert result["written"] == [f["path"] for f in args["files"]]
    assert result["created"] == [args["files"][3]["path"], args["files"][4]["path"]]
    assert result["removed"] == args["remove"]
    assert result["directories"] == [str(etc / "new.d"), str(etc / "new.d" / "deeper")]

    converged = tree(etc)
    failed, again = run_module(args, capsys, monkeypatch, apt)
    assert not failed and not again["changed"]
    assert again["written"] == again["removed"] == again["directories"] == []
    assert apt.calls == 1  # no update when nothing changed
    assert tree(etc) == converged


def test_a_mode_or_owner_difference_alone_is_a_change(etc, tmp_path, capsys, monkeypatch):
    pin = etc / "preferences.d" / "rocm-pin-600"  # owned by OTHER, mode 0640
    apt = FakeApt(tmp_path, [])
    same = {"path": str(pin), "content": pin.read_text(), "owner": str(OTHER[0])}
    args = {"files": [{**same, "group": str(OTHER[1]), "mode": "0644"}]}
    failed, result = run_module(args, capsys, monkeypatch, apt)
    assert not failed and result["written"] == [str(pin)] and apt.calls == 1
    assert stat.S_IMODE(os.lstat(pin).st_mode) == 0o644
    if os.geteuid() == 0:
        args = {"files": [{**same, "group": "0", "mode": "0644"}]}
        failed, result = run_module(args, capsys, monkeypatch, apt)
        assert not failed and result["written"] == [str(pin)] and apt.calls == 2
        assert os.lstat(pin).st_gid == 0


def test_update_always_runs_apt_without_a_change_and_never_skips_it(
    etc, tmp_path, capsys, monkeypatch
):
    apt = FakeApt(tmp_path, [])
    rocm = etc / "sources.list.d" / "rocm.sources"
    same = {"files": [entry(rocm, content=rocm.read_text())]}
    failed, result = run_module({**same, "update": "always"}, capsys, monkeypatch, apt)
    assert not failed and result["updated"] and result["written"] == [] and apt.calls == 1
    new = {
        "files": [entry(rocm, content="URIs: http://mirror/rocm/apt/6.4.3\n")],
        "update": "never",
    }
    failed, result = run_module(new, capsys, monkeypatch, apt)
    assert not failed and result["changed"] and not result["updated"] and apt.calls == 1
    assert rocm.read_text() == "URIs: http://mirror/rocm/apt/6.4.3\n"


def test_check_mode_touches_nothing_and_reports_the_diff(etc, tmp_path, capsys, monkeypatch):
    args = upgrade(etc, tmp_path / "scratch")
    apt = FakeApt(tmp_path, [])
    before = tree(etc)

    failed, result = run_module(args, capsys, monkeypatch, apt, check=True, diff=True)

    assert not failed and result["changed"]
    assert tree(etc) == before and apt.calls == 0
    assert result["written"] == [f["path"] for f in args["files"]]
    assert result["created"] == [args["files"][3]["path"], args["files"][4]["path"]]
    assert result["removed"] == args["remove"]
    assert result["directories"] == [str(etc / "new.d"), str(etc / "new.d" / "deeper")]
    by_path = {d["before_header"]: d for d in result["diff"]}
    rocm = by_path[str(etc / "sources.list.d" / "rocm.sources")]
    assert (rocm["before"], rocm["after"]) == (
        "URIs: http://mirror/rocm/apt/6.4.2\n",
        "URIs: http://mirror/rocm/apt/7.1\n",
    )
    keyring = by_path[str(etc / "keyrings" / "rocm.gpg")]
    assert keyring["before"].startswith("(768 bytes, sha256 ") and "mode 0644" in keyring["before"]
    assert keyring["after"].startswith("(259 bytes, sha256 ")
    assert by_path[args["remove"][0]]["after"] == ""

    # Once converged, check mode reports no change.
    assert not run_module(args, capsys, monkeypatch, FakeApt(tmp_path, [], broken="x"))[0]
    failed, result = run_module(args, capsys, monkeypatch, apt, check=True)
    assert not failed and not result["changed"] and result["written"] == []


def test_a_link_at_a_path_to_write_is_refused_and_neither_followed_nor_replaced(
    etc, tmp_path, capsys, monkeypatch
):
    target = tmp_path / "elsewhere.sources"
    target.write_text("the admin's own file\n")
    link = etc / "sources.list.d" / "rocm-graphics.sources"
    link.symlink_to(target)
    apt = FakeApt(tmp_path, [])
    before, outside = tree(etc), target.read_bytes()
    for args in (
        {
            "files": [
                entry(etc / "sources.list.d" / "rocm.sources", content="new\n"),
                entry(link, content="x\n"),
            ]
        },
        {"files": [entry(etc / "keyrings" / "rocm.gpg", src=str(link))]},
    ):
        failed, result = run_module(args, capsys, monkeypatch, apt)
        assert failed
        assert f"{link} is a symbolic link (to '{target}')" in result["msg"], result["msg"]
        assert result["msg"].endswith("Nothing on this host was changed.")
        assert tree(etc) == before and target.read_bytes() == outside and apt.calls == 0


def test_a_link_to_remove_is_removed_itself_and_made_again_on_a_rollback(
    etc, tmp_path, capsys, monkeypatch
):
    """As a trusted.gpg.d entry can be a link to a keyring elsewhere: the link goes, the file it
    points to stays; when apt then fails, the same link (target text, owner) is back."""
    target = tmp_path / "usr-share-keyrings-rocm.gpg"
    target.write_bytes(b"\x99keyring")
    link = etc / "trusted.gpg.d" / "rocm.gpg"
    link.parent.mkdir()
    link.symlink_to(target)
    os.lchown(link, *OTHER)
    rocm = etc / "sources.list.d" / "rocm.sources"
    args = {
        "files": [entry(rocm, content="URIs: http://mirror/rocm/apt/7.1\n")],
        "remove": [str(link)],
    }
    before = tree(etc)

    failed, result = run_module(args, capsys, monkeypatch, FakeApt(tmp_path, [rocm]))
    assert failed and tree(etc) == before and target.read_bytes() == b"\x99keyring"
    assert result["restored"] == [str(rocm), str(link)]

    failed, result = run_module(args, capsys, monkeypatch, FakeApt(tmp_path, [rocm], broken="x"))
    assert not failed and result["removed"] == [str(link)]
    assert not os.path.lexists(link) and target.read_bytes() == b"\x99keyring"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            {"files": [{"path": "etc/apt/x.sources", "content": "x"}]},
            "files[0].path: 'etc/apt/x.sources' is not an absolute, normalised path",
        ),
        (
            {"files": [{"path": "/etc/apt/../x", "content": "x"}]},
            "is not an absolute, normalised path",
        ),
        (
            {"remove": ["/etc/apt/sources.list.d/"]},
            "remove[0]: '/etc/apt/sources.list.d/' is not an absolute",
        ),
        (
            {"files": [{"path": "/P/a", "content": "x", "mode": "644x"}]},
            "files[0].mode: '644x' is not an octal file mode",
        ),
        (
            {"files": [{"path": "/P/a", "content": "x", "owner": "no-such-user-here"}]},
            "files[0].owner: 'no-such-user-here' is no owner on this host",
        ),
        (
            {"files": [{"path": "/P/a", "content_base64": "not base64!"}]},
            "files[0].content_base64 (/P/a): not base64",
        ),
        (
            {"files": [{"path": "/P/a", "src": "/P/missing"}]},
            "files[0].src: /P/missing does not exist",
        ),
        (
            {"files": [{"path": "/P/a", "content": "x"}], "remove": ["/P/a"]},
            "/P/a named twice in files and remove",
        ),
        (
            {"files": [{"path": "/P/a/b", "content": "x"}], "update_timeout": 0},
            "update_timeout: 0 is not a number of seconds",
        ),
        ({"files": [{"path": "/P/a/b", "content": "x"}]}, "/P/a/b: /P/a is not a directory"),
    ],
)
def test_bad_input_is_refused_naming_it_before_anything_changes(
    tmp_path, capsys, monkeypatch, args, expected
):
    root = tmp_path / "root"
    root.mkdir()
    (root / "a").write_text("a file where a directory is needed\n")
    args = json.loads(json.dumps(args).replace("/P/", f"{root}/"))
    expected = expected.replace("/P/", f"{root}/")
    before = tree(root)
    apt = FakeApt(tmp_path, [])
    failed, result = run_module(args, capsys, monkeypatch, apt)
    assert failed
    assert expected in result["msg"], result["msg"]
    assert result["msg"].endswith("Nothing on this host was changed.")
    assert tree(root) == before and apt.calls == 0


def test_a_directory_or_fifo_at_a_path_is_refused(etc, tmp_path, capsys, monkeypatch):
    os.mkfifo(etc / "fifo")
    for path, kind in ((etc / "keyrings", "a directory"), (etc / "fifo", "a FIFO")):
        failed, result = run_module(
            {"remove": [str(path)]}, capsys, monkeypatch, FakeApt(tmp_path, [])
        )
        assert failed and f"{path} is not a regular file ({kind})" in result["msg"]
        assert path.exists()


def test_a_write_that_fails_midway_puts_back_what_was_already_written(
    etc, tmp_path, capsys, monkeypatch
):
    """The second file cannot be written whole (the process may write only 1 MiB per file, a
    real EFBIG from the kernel, as a full disk gives ENOSPC): the first is put back."""
    rocm = etc / "sources.list.d" / "rocm.sources"
    args = {
        "files": [
            entry(rocm, content="URIs: http://mirror/rocm/apt/7.1\n"),
            entry(
                etc / "sources.list.d" / "big.sources",
                content_base64=base64.b64encode(b"#" * (2 << 20)).decode(),
            ),
        ],
        "remove": [str(etc / "sources.list.d" / "amdgpu.sources")],
        "label": "rocm_repo",
    }
    apt = FakeApt(tmp_path, [])
    before = tree(etc)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, hard))
    try:
        failed, result = run_module(args, capsys, monkeypatch, apt)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert failed
    assert tree(etc) == before and apt.calls == 0
    assert result["msg"] == (
        f"rocm_repo: writing {etc}/sources.list.d/big.sources failed: File too large. Put back as "
        f"they were: {rocm}, {etc}/sources.list.d/amdgpu.sources; removed, as this run had added "
        "them: nothing. apt-get update had not run; apt's lists still match the previous "
        "configuration. Run again once the cause is fixed."
    )


def test_a_run_stopped_during_the_update_puts_everything_back(etc, tmp_path, capsys, monkeypatch):
    """apt-get update is running when the module's process gets SIGTERM (the controller went
    away): apt's process group is killed and the files are put back."""
    args = upgrade(etc, tmp_path / "scratch")
    apt = FakeApt(tmp_path, [], sleep=0)
    apt.script.write_text(f"#!/bin/sh\necho \"$*\" >> '{apt.log}'\nkill -TERM $PPID\nsleep 60\n")
    before = tree(etc)
    failed, result = run_module(args, capsys, monkeypatch, apt)
    assert failed and tree(etc) == before and apt.calls == 1
    assert result["msg"].startswith(
        "rocm_repo: apt-get update was interrupted: interrupted by SIGTERM. Put back as they were: "
    )
    assert "apt-get update was not run again" in result["msg"]


def test_an_update_that_hangs_is_killed_and_counted_as_failed(etc, tmp_path, capsys, monkeypatch):
    args = {**upgrade(etc, tmp_path / "scratch"), "update_timeout": 1, "update_retries": 0}
    apt = FakeApt(tmp_path, [etc / "sources.list.d" / "rocm.sources"], sleep=30)
    before = tree(etc)
    failed, result = run_module(args, capsys, monkeypatch, apt)
    assert failed and tree(etc) == before and apt.calls == 2
    assert result["apt_errors"] == [f"E: {apt.script} did not finish within 1 s"]
    assert result["apt_works_again"] is True


def test_a_proxy_apt_cannot_reach_is_a_failure_although_apt_exits_0(tmp_path, capsys, monkeypatch):
    conf = tmp_path / "apt.conf.d"
    conf.mkdir()
    proxy = conf / "80rocmlab-lab-cache"
    apt = FakeApt(tmp_path, [proxy], broken="Proxy", fixture="proxy-refused", rc=0)
    args = {
        "files": [entry(proxy, content='Acquire::http::Proxy "http://head01:3142/";\n')],
        "label": "rocm_repo",
        "change": "the lab cache head01 (http://head01:3142/) as its proxy",
    }
    failed, result = run_module(args, capsys, monkeypatch, apt)
    assert failed and not proxy.exists() and list(conf.iterdir()) == []
    assert result["apt_errors"] == [
        "Err:1 http://127.0.0.1:8391/rocm/apt/7.1 jammy InRelease Could not connect to 127.0.0.1:9"
        " (127.0.0.1). - connect (111: Connection refused)",
        "W: Failed to fetch http://127.0.0.1:8391/rocm/apt/7.1/dists/jammy/InRelease Could not"
        " connect to 127.0.0.1:9 (127.0.0.1). - connect (111: Connection refused)",
        "W: Some index files failed to download. They have been ignored, or old ones used instead.",
    ]
    assert (
        "apt-get update failed with the lab cache head01 (http://head01:3142/) as its proxy: Err:1"
        in result["msg"]
    )
    assert (
        f"Put back as they were: nothing; removed, as this run had added them: {proxy}."
        in result["msg"]
    )


def test_apt_still_failing_after_the_rollback_is_said_with_its_lines(
    etc, tmp_path, capsys, monkeypatch
):
    args = upgrade(etc, tmp_path / "scratch")
    # A source this run does not touch is unsigned: apt fails before and after.
    apt = FakeApt(
        tmp_path, [etc / "preferences.d" / "rocm-pin-600"], broken="Pin", fixture="not-signed"
    )
    before = tree(etc)
    failed, result = run_module(args, capsys, monkeypatch, apt)
    assert failed and tree(etc) == before
    unsigned = [
        "Err:1 http://127.0.0.1:8391/rocm/apt/6.4.2 jammy InRelease The following signatures"
        " couldn't be verified because the public key is not available: NO_PUBKEY CE0318C9B4E37C3B",
        "W: GPG error: http://127.0.0.1:8391/rocm/apt/6.4.2 jammy InRelease: The following"
        " signatures couldn't be verified because the public key is not available:"
        " NO_PUBKEY CE0318C9B4E37C3B",
        "E: The repository 'http://127.0.0.1:8391/rocm/apt/6.4.2 jammy InRelease' is not signed.",
    ]
    assert result["apt_works_again"] is False and result["apt_errors_after"] == unsigned
    assert (
        "apt-get update still fails (exit 100) with the previous configuration: "
        f"{' | '.join(unsigned)}. That is not this run's files: run `apt-get update` on the host"
        " and fix the source it names."
    ) in result["msg"]


def test_on_failure_keep_leaves_the_new_files(etc, tmp_path, capsys, monkeypatch):
    rocm = etc / "sources.list.d" / "rocm.sources"
    apt = FakeApt(tmp_path, [rocm])
    args = {
        "files": [entry(rocm, content="URIs: http://mirror/rocm/apt/7.1\n")],
        "on_failure": "keep",
        "update_retries": 0,
    }
    failed, result = run_module(args, capsys, monkeypatch, apt)
    assert failed and not result["rolled_back"] and apt.calls == 1
    assert rocm.read_text() == "URIs: http://mirror/rocm/apt/7.1\n"
    assert (
        f"Kept as this run wrote them (on_failure: keep): {rocm}; removed: nothing."
        in result["msg"]
    )


def test_records_restore_byte_identical_from_their_json_form(etc, tmp_path):
    """What a rollback to a known-good state needs: records that survive JSON, and restore()."""
    paths = [str(p) for p in sorted(etc.rglob("*")) if p.is_file()] + [
        str(etc / "sources.list.d" / "gone.sources")
    ]
    (etc / "sources.list.d" / "linked.sources").symlink_to("rocm.sources")
    paths.insert(-1, str(etc / "sources.list.d" / "linked.sources"))
    saved = json.dumps([apt_files.read_record(p, links=True).to_dict() for p in paths])
    before = tree(etc)
    (etc / "keyrings" / "rocm.gpg").write_bytes(b"other")
    os.chmod(etc / "sources.list.d" / "rocm.sources", 0o600)
    (etc / "sources.list.d" / "amdgpu.sources").unlink()
    (etc / "sources.list.d" / "linked.sources").unlink()
    (etc / "sources.list.d" / "linked.sources").symlink_to("amdgpu.sources")
    (etc / "sources.list.d" / "gone.sources").write_text("added later\n")

    done = apt_files.restore([apt_files.Record.from_dict(r) for r in json.loads(saved)])

    assert tree(etc) == before
    assert done.restored == paths[:-1] and done.removed == paths[-1:] and done.failed == []


def test_a_record_whose_content_does_not_match_its_hash_is_refused(etc):
    data = apt_files.read_record(str(etc / "sources.list.d" / "rocm.sources")).to_dict()
    data["content"] = base64.b64encode(b"URIs: http://evil/\n").decode()
    with pytest.raises(ValueError, match="does not match its sha256"):
        apt_files.Record.from_dict(data)


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs apt-get")
def test_with_the_real_apt_get_a_missing_repository_is_rolled_back(tmp_path, capsys, monkeypatch):
    """apt-get itself, with an APT_CONFIG of the test's own (its own lists, status and source
    directory): a flat file: repository that does not exist fails, the one that does passes."""
    root = tmp_path / "apt"
    apt_config(root, REPO / "tests" / "fixtures" / "dpkg_status" / "status")
    monkeypatch.setenv("APT_CONFIG", str(root / "apt.conf"))
    source = root / "parts" / "fixture.list"
    good = f"deb [trusted=yes] file:{REPO}/tests/fixtures/dpkg_status ./\n"
    source.write_text(good)
    broken = {
        "files": [entry(source, content=f"deb [trusted=yes] file:{tmp_path}/no-repo ./\n")],
        "update_retries": 0,
    }

    args = dict(broken, _ansible_check_mode=False, _ansible_diff=False)
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode())
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy")
    with pytest.raises(SystemExit):
        module_under_test.main(retry_delay=0)  # apt-get update -q, as on a host
    result = json.loads(capsys.readouterr().out)

    assert result["failed"] and source.read_text() == good
    assert f"E: Failed to fetch file:{tmp_path}/no-repo/./Packages File not found" in " ".join(
        result["apt_errors"]
    )
    assert result["apt_works_again"] is True
