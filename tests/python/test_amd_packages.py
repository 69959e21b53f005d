"""rocmlab's ledger of AMD's packages (plugins/module_utils/amd_packages.py): what it keeps,
what it refuses, and that only the versions it holds make an installed package AMD's."""

from __future__ import annotations

import json
import os

import pytest
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import amd_packages

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the ledger must be root's")

R642 = {"rocm-core": "6.4.2.60402-1", "rocminfo": "1.0.0.60402-1"}


def test_only_the_versions_seen_from_amds_sources_are_amds():
    ledger, added = amd_packages.add({}, R642)
    assert added == ["rocm-core=6.4.2.60402-1", "rocminfo=1.0.0.60402-1"]
    installed = {
        **R642,
        "rocm-smi": "1.0.0.60402-1",  # never seen from AMD's sources
        "liberror-perl": "0.17029-2",  # Debian's, a release-like version
    }
    assert amd_packages.amd_of(installed, ledger) == R642
    # Debian's rocminfo in place of AMD's: the same name, another version.
    assert amd_packages.amd_of({"rocminfo": "5.2.3-2"}, ledger) == {}


def test_a_package_keeps_every_release_it_went_through_up_to_a_bound():
    ledger, _ = amd_packages.add({}, R642)
    ledger, added = amd_packages.add(ledger, {"rocm-core": "7.1.0.70100-1"})
    assert added == ["rocm-core=7.1.0.70100-1"]
    assert ledger["rocm-core"] == ["6.4.2.60402-1", "7.1.0.70100-1"]
    assert amd_packages.add(ledger, R642)[1] == []  # seen before: nothing added
    for n in range(40):
        ledger, _ = amd_packages.add(ledger, {"rocm-core": f"7.{n}.0.7{n:02d}00-1"})
    assert len(ledger["rocm-core"]) == amd_packages.MAX_VERSIONS
    assert ledger["rocm-core"][-1] == "7.39.0.73900-1"


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"{", "it is not JSON"),
        (b"[" * 100_000, "it is not JSON|nested"),
        (b"[]", "not a ledger of AMD's packages"),
        (json.dumps({"format": 1, "packages": []}).encode(), "not a map"),
        (
            json.dumps({"format": 1, "packages": {"libc6; rm -rf /": ["1"]}}).encode(),
            "not a package name",
        ),
        (json.dumps({"format": 1, "packages": {"a": ["1 2"]}}).encode(), "not a list of"),
        (json.dumps({"format": 1, "packages": {"a": ["1"] * 17}}).encode(), "not a list of"),
        (b" " * (amd_packages.MAX_BYTES + 1), "over"),
    ],
)
def test_a_ledger_rocmlab_did_not_write_is_refused_saying_why(content, why):
    with pytest.raises(ValueError, match=why):
        amd_packages.load(content)


def test_what_is_written_reads_back_the_same(tmp_path):
    ledger, _ = amd_packages.add({}, R642)
    assert amd_packages.load(amd_packages.dump(ledger)) == ledger
    assert amd_packages.load(None) == {}


@as_root
def test_note_writes_a_root_only_ledger_and_nothing_in_check_mode(tmp_path):
    path = str(tmp_path / "lib" / "amd-packages.json")
    assert amd_packages.note(path, R642, check_mode=True)[1] and not os.path.exists(path)
    ledger, added = amd_packages.note(path, R642, check_mode=False)
    assert added and amd_packages.read(path) == ledger
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert amd_packages.note(path, R642, check_mode=False)[1] == []


@as_root
def test_a_ledger_that_is_a_link_or_not_roots_is_refused(tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to("/etc/passwd")
    with pytest.raises(ValueError, match="symbolic link"):
        amd_packages.read(str(link))
    other = tmp_path / "other.json"
    other.write_bytes(amd_packages.dump({}))
    os.chown(other, 1000, 1000)
    with pytest.raises(ValueError, match="is not root's"):
        amd_packages.read(str(other))
    assert amd_packages.read(str(tmp_path / "absent.json")) == {}
