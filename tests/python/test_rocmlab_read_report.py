"""Unit tests for plugins/modules/rocmlab_read_report.py and rocmlab_write_report.py: what root
reads back from a directory an unprivileged account owns (the smoke job's, the cluster check's),
and how the controller keeps it.

The account's directory is built as on a lab machine: as root, its files and directory belong
to an unprivileged account (nobody) and the directories above it to root. Run as another user,
the tests stand in with that user for both (root_uid), and skip what needs root (chown).
Every planted file is a real one: symbolic links, a FIFO, a socket, a hard link, a sparse file.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "plugins" / "modules" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


read = load("rocmlab_read_report")
write = load("rocmlab_write_report")

AS_ROOT = os.geteuid() == 0
ACCOUNT = pwd.getpwnam("nobody").pw_uid if AS_ROOT else os.geteuid()
ROOT = 0 if AS_ROOT else os.geteuid()
MIB = 1024 * 1024
needs_root = pytest.mark.skipif(not AS_ROOT, reason="needs root (files of another owner)")


@pytest.fixture
def smoke(tmp_path: Path) -> Path:
    """The account's working directory, as role smoke_test creates it (owner the account)."""
    work = tmp_path / "smoke"
    work.mkdir(mode=0o755)
    if AS_ROOT:
        os.chown(work, ACCOUNT, -1)
    return work


def own(path: Path, content: bytes = b'{"passed": true}\n') -> Path:
    """A file the account wrote."""
    path.write_bytes(content)
    if AS_ROOT:
        os.chown(path, ACCOUNT, ACCOUNT, follow_symlinks=False)
    return path


def secret(tmp_path: Path) -> Path:
    """A file only root may read, standing in for /etc/shadow."""
    target = tmp_path / "shadow"
    target.write_text("root:$y$j9T$secret:19000:0:99999:7:::\n")
    target.chmod(0o600)
    return target


def refused(path: Path, max_bytes: int = 4 * MIB) -> str:
    with pytest.raises(read.Refused) as caught:
        read.read_file(str(path), ACCOUNT, max_bytes, root_uid=ROOT)
    return str(caught.value)


def test_the_accounts_own_regular_file_is_read(smoke: Path) -> None:
    report = own(smoke / "report.json")
    assert read.read_file(str(report), ACCOUNT, 4 * MIB, root_uid=ROOT) == b'{"passed": true}\n'


def test_a_symbolic_link_to_a_secret_is_refused_naming_it(tmp_path: Path, smoke: Path) -> None:
    (smoke / "report.json").symlink_to(secret(tmp_path))
    message = refused(smoke / "report.json")
    assert message.startswith(f"{smoke}/report.json is a symbolic link (to '{tmp_path}/shadow')")
    assert "secret" not in message


def test_a_link_to_the_accounts_own_file_is_refused_too(smoke: Path) -> None:
    own(smoke / "real.json")
    (smoke / "report.trace.json").symlink_to("real.json")
    assert "is a symbolic link (to 'real.json')" in refused(smoke / "report.trace.json")


def test_a_link_to_a_device_is_refused_without_reading_it(smoke: Path) -> None:
    (smoke / "report.json").symlink_to("/dev/zero")
    assert "symbolic link (to '/dev/zero')" in refused(smoke / "report.json")


def test_a_fifo_is_refused_without_blocking(smoke: Path) -> None:
    os.mkfifo(smoke / "report.json")
    started = time.monotonic()
    assert "is a FIFO (named pipe), not a regular file" in refused(smoke / "report.json")
    assert time.monotonic() - started < 5


def test_a_socket_and_a_directory_are_refused(smoke: Path) -> None:
    listener = socket.socket(socket.AF_UNIX)
    try:
        listener.bind(str(smoke / "doctor.json"))
        assert "is a socket, not a regular file" in refused(smoke / "doctor.json")
    finally:
        listener.close()
    (smoke / "report.json").mkdir()
    assert "is a directory, not a regular file" in refused(smoke / "report.json")


@needs_root
def test_a_hard_link_to_roots_file_is_refused_by_its_owner(tmp_path: Path, smoke: Path) -> None:
    os.link(secret(tmp_path), smoke / "report.json")
    message = refused(smoke / "report.json")
    assert message == (
        f"{smoke}/report.json belongs to root, not to nobody who writes it (a hard link to "
        "another file?)"
    )


def test_a_file_over_the_bound_is_refused_before_it_is_read(smoke: Path) -> None:
    huge = own(smoke / "report.json", b"")
    os.truncate(huge, 64 << 30)  # sparse: 64 GiB long, no blocks; reading it would never end
    started = time.monotonic()
    message = refused(huge)
    assert time.monotonic() - started < 5
    assert message == f"{huge} is {64 << 30} bytes, more than the limit of {4 * MIB}"
    os.truncate(huge, 5 * MIB)
    assert "more than the limit" in refused(huge)
    assert read.read_file(str(huge), ACCOUNT, 16 * MIB, root_uid=ROOT) == bytes(5 * MIB)


def test_a_symbolic_link_on_the_way_is_not_followed(tmp_path: Path, smoke: Path) -> None:
    own(smoke / "report.json")
    (tmp_path / "work").symlink_to(smoke)
    message = refused(tmp_path / "work" / "report.json")
    assert message.startswith(f"{tmp_path}/work is a symbolic link (to '{smoke}')")


@needs_root
def test_below_the_accounts_directory_nothing_is_read(smoke: Path) -> None:
    (smoke / "sub").mkdir()
    own(smoke / "sub" / "report.json")
    os.chown(smoke / "sub", ACCOUNT, -1)
    assert refused(smoke / "sub" / "report.json") == f"{smoke} is owned by nobody, not by root"


@needs_root
def test_a_directory_of_a_third_account_on_the_way_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    os.chown(other, 4242, 4242)
    work = other / "smoke"
    work.mkdir()
    os.chown(work, ACCOUNT, -1)
    message = refused(own(work / "report.json"))
    assert message == f"{other} is owned by uid 4242, not by root"


def test_a_file_root_wrote_in_roots_directories_is_read_with_owner_root(tmp_path: Path) -> None:
    # The health timer's tier 0 writes its report as root, in root's directory.
    health = tmp_path / "health"
    health.mkdir(mode=0o755)
    (health / "tier0.json").write_bytes(b'{"tier": 0}\n')
    assert read.read_file(str(health / "tier0.json"), ROOT, MIB, root_uid=ROOT) == b'{"tier": 0}\n'


@needs_root
def test_with_owner_root_an_accounts_file_or_directory_is_refused(
    tmp_path: Path, smoke: Path
) -> None:
    own(smoke / "tier0.json")
    with pytest.raises(read.Refused) as caught:
        read.read_file(str(smoke / "tier0.json"), ROOT, MIB, root_uid=ROOT)
    assert str(caught.value) == f"{smoke} is owned by nobody, not by root"
    planted = own(tmp_path / "tier0.json")
    with pytest.raises(read.Refused) as caught:
        read.read_file(str(planted), ROOT, MIB, root_uid=ROOT)
    assert str(caught.value).startswith(f"{planted} belongs to nobody, not to root who writes it")


def test_a_missing_file_is_missing_not_refused(smoke: Path) -> None:
    with pytest.raises(read.Missing, match=f"^{smoke}/report.json does not exist$"):
        read.read_file(str(smoke / "report.json"), ACCOUNT, MIB, root_uid=ROOT)


@pytest.mark.parametrize("path", ["report.json", "/var/lib/../../etc/shadow", "/var//x", "/"])
def test_a_path_that_is_not_absolute_and_normalised_is_refused(path: str) -> None:
    with pytest.raises(read.Refused, match="absolute path"):
        read.read_file(path, ACCOUNT, MIB, root_uid=ROOT)


# --- the controller's side ----------------------------------------------------------------
def test_the_report_is_written_whole_with_its_mode(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    assert write.write_report(str(reports), "ws-01.json", b"{}\n", 0o644, check=False)
    assert (reports / "ws-01.json").read_bytes() == b"{}\n"
    assert (reports / "ws-01.json").stat().st_mode & 0o777 == 0o644
    assert not write.write_report(str(reports), "ws-01.json", b"{}\n", 0o644, check=False)
    assert sorted(p.name for p in reports.iterdir()) == ["ws-01.json"]  # no temporary left


def test_a_link_planted_where_the_report_goes_is_replaced_not_written_through(
    tmp_path: Path,
) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    (reports / "ws-01.json").symlink_to(victim)
    assert write.write_report(str(reports), "ws-01.json", b"{}\n", 0o644, check=False)
    assert victim.read_text() == "keep me\n"
    assert not (reports / "ws-01.json").is_symlink()
    assert (reports / "ws-01.json").read_bytes() == b"{}\n"


def test_a_linked_directory_below_the_reports_dir_is_refused(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (reports / "fleet").symlink_to(outside)
    with pytest.raises(write.Refused, match="fleet is a symbolic link"):
        write.write_report(str(reports), "fleet/cluster/allreduce/a.json", b"{}", 0o644, False)
    assert list(outside.iterdir()) == []


def test_missing_directories_below_the_reports_dir_are_created(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    write.write_report(str(reports), "fleet/cluster/allreduce/a.json", b"{}", 0o644, False)
    assert (reports / "fleet" / "cluster" / "allreduce" / "a.json").read_bytes() == b"{}"


def test_a_directory_where_the_report_goes_is_refused(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    (reports / "ws-01.json").mkdir(parents=True)
    with pytest.raises(write.Refused, match=r"ws-01\.json is a directory, not a report"):
        write.write_report(str(reports), "ws-01.json", b"{}", 0o644, False)
    assert [p.name for p in reports.iterdir()] == ["ws-01.json"]


@pytest.mark.parametrize("name", ["../x.json", ".hidden", "a//b.json", "", "a/./b", "x\n.json"])
def test_a_name_that_would_leave_the_reports_dir_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(write.Refused, match="is not a relative path of names"):
        write.write_report(str(tmp_path), name, b"{}", 0o644, False)
    assert list(tmp_path.iterdir()) == []


def test_check_mode_writes_nothing_and_says_whether_it_would(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    assert write.write_report(str(reports), "fleet/a.json", b"{}", 0o644, check=True)
    assert not reports.exists()
    write.write_report(str(reports), "a.json", b"{}", 0o644, check=False)
    assert not write.write_report(str(reports), "a.json", b"{}", 0o644, check=True)
    assert write.write_report(str(reports), "a.json", b"[]", 0o644, check=True)
    assert (reports / "a.json").read_bytes() == b"{}"


# --- both modules as Ansible runs them ----------------------------------------------------
@needs_root
@pytest.mark.skipif(shutil.which("ansible-playbook", path=str(Path(sys.executable).parent)) is None,
                    reason="needs ansible-playbook")  # fmt: skip
def test_through_ansible_a_planted_link_fails_the_task_naming_it_and_nothing_arrives(
    tmp_path: Path,
) -> None:
    work = tmp_path / "smoke"
    work.mkdir()
    os.chown(work, ACCOUNT, -1)
    own(work / "report.json", b'{"passed": true}\n')
    (work / "report.trace.json").symlink_to(secret(tmp_path))
    reports = tmp_path / "reports"

    def pair(name: str) -> list[dict]:
        return [
            {
                "name": f"Read {name}",
                "rocmlab.rocmlab.rocmlab_read_report": {
                    "path": str(work / name),
                    "owner": "nobody",
                    "missing_ok": True,
                },
                "register": "got",
                "ignore_errors": True,
            },
            {
                "name": f"Keep {name}",
                "rocmlab.rocmlab.rocmlab_write_report": {
                    "dir": str(reports),
                    "name": f"ws-01.{name}",
                    "content": "{{ got.content }}",
                },
                "when": "got is succeeded and got.found",
            },
        ]

    playbook = tmp_path / "read.yml"
    playbook.write_text(
        json.dumps(
            [
                {
                    "hosts": "localhost",
                    "connection": "local",
                    "gather_facts": False,
                    "vars": {"ansible_python_interpreter": sys.executable},
                    "tasks": pair("report.json") + pair("report.trace.json"),
                }
            ]
        )
    )
    env = {key: value for key, value in os.environ.items() if key != "ANSIBLE_CONFIG"}
    env.update(
        ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
        ANSIBLE_STDOUT_CALLBACK="json",
        ANSIBLE_NOCOLOR="1",
    )
    run = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(playbook)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    tasks = json.loads(run.stdout)["plays"][0]["tasks"]
    results = {t["task"]["name"]: t["hosts"]["localhost"] for t in tasks}
    trace = results["Read report.trace.json"]
    assert trace["failed"] and trace["msg"] == (
        f"Refused to read {work}/report.trace.json, which nobody writes: {work}/report.trace.json"
        f" is a symbolic link (to '{tmp_path}/shadow'), which root does not follow. Nothing of it"
        " was read."
    )
    assert trace["content"] == ""
    assert base64.b64decode(results["Read report.json"]["content"]) == b'{"passed": true}\n'
    assert sorted(p.name for p in reports.iterdir()) == ["ws-01.report.json"]
    assert (reports / "ws-01.report.json").read_bytes() == b'{"passed": true}\n'
