"""The declared hosts of ``rocmlab fleet-report --inventory``: through ``ansible-inventory`` and
through the built-in YAML/INI reading used where Ansible is not on PATH, which must agree.

The inventories are the project's own (inventory/) and small ones written here in Ansible's
documented INI and YAML forms; ``ansible-inventory`` from the dev toolchain is the reference.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest
from rocmlab_testutil import REPO, run_cli

from rocmlab.cli import main
from rocmlab.fleet.inventory import InventoryError, hosts_from_file, read_inventory

ANSIBLE_INVENTORY = shutil.which("ansible-inventory") or str(
    Path(sys.executable).with_name("ansible-inventory")
)
NO_ANSIBLE_PATH = "/usr/bin:/bin"  # Debian's own Python and tools, no Ansible

INI = """\
# hosts before any section are ungrouped; a port is not part of the name
gpu-a.lab:2222 ansible_user=admin
[workstations]
ws-[01:03].lab    # a numeric range, zero-padded
ws-[a:c]
[servers]
mi210-[1:5:2] rocm_packages_driver=dkms
[servers:vars]
rocm_repo_version=6.4.2
[lab:children]
workstations
servers
[empty]
"""
INI_HOSTS = [
    "gpu-a.lab", "mi210-1", "mi210-3", "mi210-5", "ws-01.lab", "ws-02.lab", "ws-03.lab",
    "ws-a", "ws-b", "ws-c",
]  # fmt: skip
YAML = """\
all:
  hosts:
    controller.lab:
  children:
    lab:
      children:
        workstations:
          hosts:
            ws-[08:11]:
              ansible_host: 10.0.0.8
        empty_group:
    servers:
      hosts:
        mi210-01: {rocm_packages_driver: dkms}
"""
YAML_HOSTS = ["controller.lab", "mi210-01", "ws-08", "ws-09", "ws-10", "ws-11"]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """INI and YAML inventories, with and without the suffix that names their format."""
    root = tmp_path_factory.mktemp("inventories")
    files = {
        "ini": ("lab.ini", INI),
        "ini-no-suffix": ("ini/hosts", INI),
        "yaml": ("lab.yml", YAML),
        "yaml-no-suffix": ("yaml/hosts", YAML),
    }
    paths = {}
    for key, (name, text) in files.items():
        path = root / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        paths[key] = path
    return paths


def test_the_reference_is_there() -> None:
    assert Path(ANSIBLE_INVENTORY).is_file(), "the dev toolchain installs Ansible"


@pytest.mark.parametrize(
    ("inventory", "hosts"),
    [
        (
            "inventory/lab.example",
            [*(f"gpu{n:02d}.lab.example.org" for n in range(1, 9)), "mi210-01.lab.example.org"],
        ),
        ("inventory/demo/hosts.yml", ["rocmlab-demo"]),
        ("inventory/localhost.yml", ["localhost"]),
    ],
)
def test_the_projects_inventories_read_alike_both_ways(inventory: str, hosts: list[str]) -> None:
    path = REPO / inventory
    with_ansible = read_inventory(path, ANSIBLE_INVENTORY)
    built_in = read_inventory(path, None)
    assert list(with_ansible.hosts) == hosts
    assert list(built_in.hosts) == hosts
    assert with_ansible.reader == "ansible-inventory"
    assert built_in.reader == "yaml"


@pytest.mark.parametrize(
    ("key", "hosts", "reader"),
    [
        ("ini", INI_HOSTS, "ini"),
        ("ini-no-suffix", INI_HOSTS, "ini"),
        ("yaml", YAML_HOSTS, "yaml"),
        ("yaml-no-suffix", YAML_HOSTS, "yaml"),
    ],
)
def test_ranges_groups_and_ports_read_as_ansible_reads_them(
    key: str, hosts: list[str], reader: str, written: dict[str, Path]
) -> None:
    assert list(read_inventory(written[key], ANSIBLE_INVENTORY).hosts) == hosts
    built_in = read_inventory(written[key], None)
    assert list(built_in.hosts) == hosts
    assert built_in.reader == reader


def test_a_directory_is_read_from_its_hosts_file(tmp_path: Path) -> None:
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("rocm_repo_version: 6.4.2\n")
    (tmp_path / "hosts.ini").write_text("[lab]\nws-[1:3]\n")
    assert list(read_inventory(tmp_path, None).hosts) == ["ws-1", "ws-2", "ws-3"]
    assert list(read_inventory(tmp_path, ANSIBLE_INVENTORY).hosts) == ["ws-1", "ws-2", "ws-3"]


def test_a_directory_without_a_hosts_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match=r"holds none of hosts\.yml, hosts\.yaml, hosts\.ini"):
        read_inventory(tmp_path, None)


CANNOT = "ansible-inventory cannot read it"


@pytest.mark.parametrize(
    ("text", "ansible_says", "builtin_says"),
    [
        ("all:\n  children: [a, b\n", CANNOT, "not valid YAML"),
        ("all:\n  hosts:\n    - ws-1\n", CANNOT, "group 'all' has hosts: as a list"),
        # Ansible expands a backwards range to nothing; the built-in reading says why.
        ("all:\n  hosts:\n    ws-[3:1]:\n", "declares no hosts", "begin is after end"),
        ("all:\n  hosts:\n    ws-[01:100]:\n", CANNOT, "need the same number of digits"),
        ("all:\n", "declares no hosts", "declares no hosts"),
    ],
)
def test_inventories_ansible_refuses_are_refused_both_ways(
    text: str, ansible_says: str, builtin_says: str, tmp_path: Path
) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text(text)
    for ansible, says in ((ANSIBLE_INVENTORY, ansible_says), (None, builtin_says)):
        with pytest.raises(InventoryError) as refused:
            read_inventory(path, ansible)
        assert str(refused.value).startswith(f"--inventory {path}: ")
        assert says in str(refused.value)


def test_without_pyyaml_a_yaml_inventory_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "yaml", None)  # as on a Python without PyYAML
    with pytest.raises(InventoryError, match=r"needs PyYAML \(Debian: apt-get install python3-"):
        hosts_from_file(REPO / "inventory" / "lab.example" / "hosts.yml")


def test_without_pyyaml_an_ini_inventory_still_reads(
    monkeypatch: pytest.MonkeyPatch, written: dict[str, Path]
) -> None:
    monkeypatch.setitem(sys.modules, "yaml", None)
    assert hosts_from_file(written["ini-no-suffix"]) == (
        ["gpu-a.lab", *[f"ws-0{n}.lab" for n in (1, 2, 3)], "ws-a", "ws-b", "ws-c",
         "mi210-1", "mi210-3", "mi210-5"],
        "ini",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("path_env", "reader"),
    [(f"{Path(ANSIBLE_INVENTORY).parent}:{NO_ANSIBLE_PATH}", "ansible-inventory"),
     (NO_ANSIBLE_PATH, "yaml")],
)  # fmt: skip
def test_the_command_asks_ansible_when_it_is_on_path(
    path_env: str, reader: str, tmp_path: Path
) -> None:
    inventory = REPO / "inventory" / "lab.example"
    result = run_cli(
        "fleet-report", str(tmp_path), "--inventory", str(inventory), env={"PATH": path_env}
    )
    assert result.returncode == 1, result.stderr  # no host has a report
    fleet = json.loads((tmp_path / "fleet.json").read_text())
    assert fleet["declared"] == {"source": str(inventory), "reader": reader}
    assert [h["reason"] for h in fleet["hosts"]] == ["no report"] * 9


def test_the_command_refuses_a_broken_inventory_with_exit_2(tmp_path: Path) -> None:
    broken = tmp_path / "hosts.yml"
    broken.write_text("all:\n  children: [a, b\n")
    for path_env in (os.environ["PATH"], NO_ANSIBLE_PATH):
        result = run_cli(
            "fleet-report", str(tmp_path), "--inventory", str(broken), env={"PATH": path_env}
        )
        assert result.returncode == 2
        assert f"--inventory {broken}: " in result.stderr
        assert not (tmp_path / "fleet.json").exists()


# --- bounds: loops, ranges, sizes, special files (issue 17) ----------------------------------

LOOPS = {
    # a group that names its ancestor among its children
    "by-name.yml": (
        "all:\n  children:\n    a:\n      children:\n        b:\n          children:\n"
        "            a:\n              hosts:\n                h1:\n",
        "group 'a' is its own child (a > b > a)",
    ),
    # a YAML anchor that holds itself: the mapping is its own child
    "self-anchor.yml": (
        "all:\n  children:\n    a: &a\n      hosts:\n        h1:\n      children:\n        a: *a\n",
        "group 'a' is its own child (a > a)",
    ),
    "anchor-under-another-name.yml": (
        "all:\n  children:\n    a: &a\n      hosts:\n        h1:\n      children:\n        b: *a\n",
        "group 'b' is its own child (b > b)",
    ),
    # each step is a different subtree: only the groups' names make the loop
    "across-subtrees.yml": (
        "all:\n  children:\n    a:\n      children:\n        b:\n    b:\n      children:\n"
        "        a:\n          hosts:\n            h[1:3]:\n",
        "group 'a' is its own child (a > b > a)",
    ),
    "children.ini": (
        "[a:children]\nb\n[b:children]\nc\n[c:children]\na\n[a]\nh1\n",
        "group 'a' is its own child (a > b > c > a)",
    ),
}


def refused_in_time(inventory: Path, tmp_path: Path, path_env: str) -> str:
    """``fleet-report --inventory`` in a subprocess: refused (exit 2) within 60 s, outputs not
    written; its stderr."""
    started = time.monotonic()
    result = run_cli(
        "fleet-report", str(tmp_path), "--inventory", str(inventory), env={"PATH": path_env},
        timeout=120,
    )  # fmt: skip
    assert time.monotonic() - started < 60
    assert result.returncode == 2, result.stderr
    assert not (tmp_path / "fleet.json").exists()
    assert "Traceback" not in result.stderr
    return result.stderr


@pytest.mark.parametrize("name", LOOPS)
def test_a_recursive_group_is_refused_both_ways(name: str, tmp_path: Path) -> None:
    text, says = LOOPS[name]
    inventory = tmp_path / name
    inventory.write_text(text)
    built_in = refused_in_time(inventory, tmp_path, NO_ANSIBLE_PATH)
    assert built_in == (
        f"rocmlab: error: --inventory {inventory}: {says}: a recursive children loop, which "
        "Ansible refuses too\n"
    )
    with_ansible = refused_in_time(inventory, tmp_path, f"{ANSIBLE_DIR}:{NO_ANSIBLE_PATH}")
    assert f"--inventory {inventory}: ansible-inventory cannot read it" in with_ansible


ANSIBLE_DIR = Path(ANSIBLE_INVENTORY).parent

EXPLODING = {
    "web.ini": ("[web]\nweb[0:99999999]\n", "web.ini:2", "web[0:99999999]", 100_000_000),
    "web.yml": (
        "all:\n  hosts:\n    web[0:99999999].lab:\n",
        "web.yml:3",
        "web[0:99999999].lab:",
        100_000_000,
    ),
    "product.ini": ("[w]\nweb[0:999]-[0:999]\n", "product.ini:2", "web[0:999]-[0:999]", 1_000_000),
}


@pytest.mark.parametrize("name", EXPLODING)
def test_a_range_naming_too_many_hosts_is_refused_before_it_is_expanded(
    name: str, tmp_path: Path
) -> None:
    """Ansible's way: the lines of the file are checked before ansible-inventory runs. The
    built-in way: each host pattern (a YAML key has no line number)."""
    text, where, line, count = EXPLODING[name]
    inventory = tmp_path / name
    inventory.write_text(text)
    for path_env in (NO_ANSIBLE_PATH, f"{ANSIBLE_DIR}:{NO_ANSIBLE_PATH}"):
        said = refused_in_time(inventory, tmp_path, path_env)
        at, shown = where, line
        if path_env == NO_ANSIBLE_PATH and name.endswith(".yml"):
            at, shown = name, line.rstrip(":")
        assert said == (
            f"rocmlab: error: --inventory {tmp_path / at}: host range in {shown!r} names "
            f"{count} hosts: more than fleet-report takes (100000 at most)\n"
        ), path_env


def test_ranges_within_the_bound_but_too_many_hosts_together_are_refused(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[a]\na[1:60000]\n[b]\nb[1:60000]\n")
    said = refused_in_time(inventory, tmp_path, NO_ANSIBLE_PATH)
    assert said == (
        f"rocmlab: error: --inventory {inventory}: declares 120000 hosts: more than "
        "fleet-report takes (100000 at most)\n"
    )


def test_a_range_bound_with_thousands_of_digits_is_refused(tmp_path: Path) -> None:
    """int() of over 4,300 digits raises (Python's int-str limit): a message, not a traceback."""
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"[a]\nweb[1:{'9' * 5000}]\n")
    said = refused_in_time(inventory, tmp_path, NO_ANSIBLE_PATH)
    assert said.startswith(f"rocmlab: error: --inventory {inventory}:2: host range in 'web[1:99")
    assert said.endswith("': more than 18 digits\n")


def test_yaml_anchors_that_repeat_groups_are_read_once(tmp_path: Path) -> None:
    """30 levels, each group holding the previous one twice under two names: 2**30 paths
    through the groups, 31 mappings. Read in well under a second."""
    lines = ["all:", "  children:", "    g0: &g0", "      hosts:", "        h[1:3]:"]
    for level in range(1, 31):
        below = f"*g{level - 1}"
        lines += [f"    g{level}: &g{level}", "      children:",
                  f"        a{level}: {below}", f"        b{level}: {below}"]  # fmt: skip
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("\n".join(lines) + "\n")
    started = time.monotonic()
    assert list(read_inventory(inventory, None).hosts) == ["h1", "h2", "h3"]
    assert time.monotonic() - started < 5


def test_deep_yaml_is_refused_not_a_traceback(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts: " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(InventoryError, match="nested too deep for an inventory"):
        read_inventory(inventory, None)


@pytest.mark.parametrize("path_env", [NO_ANSIBLE_PATH, f"{ANSIBLE_DIR}:{NO_ANSIBLE_PATH}"])
def test_special_and_huge_inventory_files_are_refused_without_blocking(
    path_env: str, tmp_path: Path
) -> None:
    fifo = tmp_path / "fifo.yml"
    os.mkfifo(fifo)
    said = refused_in_time(fifo, tmp_path, path_env)
    assert said == (
        f"rocmlab: error: --inventory {fifo}: a FIFO (named pipe), not a regular file: not read\n"
    )
    zero = tmp_path / "zero.yml"
    zero.symlink_to("/dev/zero")  # the admin's inventory may be a link; what it is counts
    said = refused_in_time(zero, tmp_path, path_env)
    assert said == (
        f"rocmlab: error: --inventory {zero}: a character device, not a regular file: not read\n"
    )
    huge = tmp_path / "huge.yml"
    with open(huge, "wb") as out:
        out.truncate(1024**3)
    said = refused_in_time(huge, tmp_path, path_env)
    assert said == (
        f"rocmlab: error: --inventory {huge}: {1024**3} bytes: larger than an inventory "
        f"({16 * 1024 * 1024} bytes at most)\n"
    )


def test_a_fifo_in_an_inventory_directory_does_not_block_ansible(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    (inventory / "hosts.ini").write_text("[a]\nws-1\n")
    os.mkfifo(inventory / "extra")
    said = refused_in_time(inventory, tmp_path, f"{ANSIBLE_DIR}:{NO_ANSIBLE_PATH}")
    assert f"--inventory {inventory / 'extra'}: a FIFO (named pipe), not a regular file" in said


def test_a_host_name_with_control_characters_is_refused(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text('all:\n  hosts:\n    "ws-1\\e[31m":\n')
    with pytest.raises(InventoryError, match=r"host name 'ws-1\\x1b\[31m' cannot name a report"):
        read_inventory(inventory, None)


def test_too_many_hosts_on_the_command_line_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    names = ",".join(f"h{n}" for n in range(100_001))
    assert main(["fleet-report", str(tmp_path), "--hosts", names]) == 2
    assert capsys.readouterr().err == (
        "rocmlab: error: --hosts: more than 100000 host names (the most it takes)\n"
    )


def test_host_names_with_thousands_of_digits_are_ordered_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    long = f"ws-{'9' * 5000}"
    assert main(["fleet-report", str(tmp_path), "--hosts", f"{long},ws-10,ws-2,ws-02"]) == 1
    fleet = json.loads((tmp_path / "fleet.json").read_text())
    assert [h["host"] for h in fleet["hosts"]] == ["ws-02", "ws-2", "ws-10", long]
