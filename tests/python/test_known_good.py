"""The known-good record (plugins/module_utils/known_good.py and the module rocmlab_known_good):
what it holds, that a second pass in the same state leaves it as it is, that a changed state
makes a new one, and what it refuses. The module runs in-process against this machine's real
dpkg database, a real venv (the one running these tests) and apt files written by the test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import (
    amd_packages,
    apt_files,
    known_good,
)
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.rocm_release import release_of
from ansible_modules import load_module, run_module

REPO = Path(__file__).resolve().parents[2]
module = load_module("rocmlab_known_good")
plan_module = load_module("rocmlab_rollback_plan")

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the module checks root's ownership")

DPKG = (
    "ii \trocm-core\t6.4.2.60402-1\n"
    "ii \trocminfo\t1.0.0.60402-1\n"
    "ii \tbash\t5.2.15-2+b7\n"
    "rc \trocm-smi\t1.0.0.60402-1\n"  # removed, its configuration kept: not installed
    "iU \trocm-hip-sdk\t6.4.2.60402-1\n"  # unpacked, not configured
)


def test_installed_and_present_packages_are_read_from_dpkg():
    installed = known_good.parse_dpkg(DPKG)
    assert installed == {
        "rocm-core": "6.4.2.60402-1",
        "rocminfo": "1.0.0.60402-1",
        "bash": "5.2.15-2+b7",
    }
    # What a failed run left unpacked counts for a rollback; removed packages never do.
    assert known_good.parse_dpkg(DPKG, present=True) == {
        **installed,
        "rocm-hip-sdk": "6.4.2.60402-1",
    }


def test_rocmlabs_version_is_read_from_a_freeze():
    assert known_good.rocmlab_in({"/a": ["numpy==2.1.0"], "/b": ["rocmlab==0.1.0"]}) == "0.1.0"
    assert known_good.rocmlab_in({"/a": ["rocmlab-extra==1"]}) is None
    wheel = "rocmlab @ file:///var/lib/rocmlab/wheels/rocmlab-0.1.0-py3-none-any.whl"
    assert known_good.rocmlab_in({"/a": [wheel]}) == "0.1.0"


def sample(**changes) -> dict:
    fields = dict(
        packages={"rocm-core": "6.4.2.60402-1"},
        rocm_version="6.4.2",
        apt_files=[],
        venvs={"/opt/v": ["torch==2.9.1"]},
        gfx_override=None,
        kernel="6.1.0-28-amd64",
        rocmlab_version="0.1.0",
    )
    fields.update(changes)
    return known_good.state(**fields)


def test_the_same_state_keeps_the_record_and_its_since():
    first, changed = known_good.record(None, sample(), "2026-12-01T10:00:00Z")
    assert changed and first["since"] == "2026-12-01T10:00:00Z" and first["format"] == 2
    again, changed = known_good.record(first, sample(), "2026-12-02T10:00:00Z")
    assert not changed and again is first


@pytest.mark.parametrize(
    "change",
    [
        {"packages": {"rocm-core": "7.1.0.70100-1"}},
        {"rocm_version": "7.1.0"},
        {"venvs": {"/opt/v": ["torch==2.9.1+rocm7.1"]}},
        {"gfx_override": "HSA_OVERRIDE_GFX_VERSION=11.0.0\n"},
        {"kernel": "6.1.0-29-amd64"},
    ],
)
def test_any_changed_part_makes_a_new_record(change):
    first, _ = known_good.record(None, sample(), "2026-12-01T10:00:00Z")
    second, changed = known_good.record(first, sample(**change), "2026-12-02T10:00:00Z")
    assert changed and second["since"] == "2026-12-02T10:00:00Z"


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"not json", "it is not JSON"),
        (b"[]", "it is not a known-good record of format 1 or 2"),
        (b"[" * 100_000 + b"]" * 100_000, "it is nested too deep"),
        (json.dumps({"format": 1}).encode(), "it lacks since, rocm_version"),
        (
            known_good.dump({"format": 1, "since": "x", **sample(), "packages": {"a": 1}}),
            "its packages are not a map of names to versions",
        ),
        (b" " * (known_good.MAX_BYTES + 1), "over"),
    ],
)
def test_a_bad_record_is_refused_saying_why(content, why):
    with pytest.raises(ValueError, match=why):
        known_good.load(content)


# ---------------------------------------------------------------- the module on this machine


def run(args: dict, capsys, monkeypatch) -> dict:
    return run_module(module, args, capsys, monkeypatch)


@pytest.fixture
def host(tmp_path):
    sources = tmp_path / "rocm.sources"
    sources.write_text("Types: deb\nURIs: https://repo.radeon.com/rocm/apt/6.4.2\n")
    gfx = tmp_path / "gfx.conf"
    gfx.write_text("HSA_OVERRIDE_GFX_VERSION=11.0.0\n")
    # The framework roles' records name their venvs: here the one running these tests.
    records = tmp_path / "records"
    records.mkdir()
    (records / "pytorch.json").write_text(json.dumps({"framework": "torch", "venv": sys.prefix}))
    (records / "notes.json").write_text("not a record")
    args = {
        "path": str(tmp_path / "known-good.json"),
        "ledger": str(tmp_path / "amd-packages.json"),
        "apt_files": [str(sources)],
        "venvs": [str(tmp_path / "no-such-venv")],
        "records_dir": str(records),
        "gfx_file": str(gfx),
    }
    return tmp_path, args


@as_root
def test_the_module_records_the_state_once(host, capsys, monkeypatch):
    tmp_path, args = host
    result = run(args, capsys, monkeypatch)
    assert result["changed"] is True, result
    path = Path(args["path"])
    assert path.stat().st_mode & 0o777 == 0o600
    data = known_good.load(path.read_bytes())
    assert data["since"] == result["since"]
    assert [entry["path"] for entry in data["apt_files"]] == [str(tmp_path / "rocm.sources")]
    assert data["gfx_override"] == "HSA_OVERRIDE_GFX_VERSION=11.0.0\n"
    assert data["kernel"] == os.uname().release
    assert list(data["venvs"]) == [sys.prefix]  # the missing venv is left out
    assert any(line.startswith("pytest==") for line in data["venvs"][sys.prefix])
    assert data["rocmlab_version"] == known_good.rocmlab_in(data["venvs"])
    before = path.read_bytes()
    again = run(args, capsys, monkeypatch)
    assert again["changed"] is False and again["since"] == result["since"]
    assert path.read_bytes() == before
    # Without apt_files, the previous record's list is kept.
    again = run({**args, "apt_files": []}, capsys, monkeypatch)
    assert again["changed"] is False


@as_root
def test_a_changed_apt_file_makes_a_new_record(host, capsys, monkeypatch):
    tmp_path, args = host
    run(args, capsys, monkeypatch)
    (tmp_path / "rocm.sources").write_text(
        "Types: deb\nURIs: https://repo.radeon.com/rocm/apt/7.1\n"
    )
    result = run(args, capsys, monkeypatch)
    assert result["changed"] is True
    data = known_good.load(Path(args["path"]).read_bytes())
    assert "7.1" in __import__("base64").b64decode(data["apt_files"][0]["content"]).decode()


@as_root
def test_the_records_directory_is_made_when_missing(host, capsys, monkeypatch):
    tmp_path, args = host
    path = tmp_path / "var" / "lib" / "rocmlab" / "known-good.json"
    result = run({**args, "path": str(path)}, capsys, monkeypatch)
    assert result["changed"] is True, result
    assert path.parent.stat().st_mode & 0o777 == 0o755 and path.stat().st_uid == 0


@as_root
def test_check_mode_writes_nothing(host, capsys, monkeypatch):
    _tmp_path, args = host
    result = run({**args, "_ansible_check_mode": True}, capsys, monkeypatch)
    assert result["changed"] is True and not Path(args["path"]).exists()


@as_root
def test_a_link_among_the_apt_files_is_refused_and_nothing_written(host, capsys, monkeypatch):
    tmp_path, args = host
    (tmp_path / "link.sources").symlink_to("/etc/shadow")
    result = run({**args, "apt_files": [str(tmp_path / "link.sources")]}, capsys, monkeypatch)
    assert result["failed"] is True
    assert "the known-good record was not written" in result["msg"], result["msg"]
    assert not Path(args["path"]).exists()


@as_root
def test_a_record_that_is_a_link_is_not_read_and_is_replaced(host, capsys, monkeypatch):
    _tmp_path, args = host
    Path(args["path"]).symlink_to("/etc/passwd")
    result = run(args, capsys, monkeypatch)
    assert result["changed"] is True and result["replaced_invalid"], result
    assert not Path(args["path"]).is_symlink()
    assert Path("/etc/passwd").read_text().startswith("root:")


# ---------------------------------------------------------------- the rollback plan


def file_record(path: str, text: str, mode: int = 0o644) -> dict:
    return apt_files.Record(path, True, text.encode(), mode, 0, 0).to_dict()


SOURCES = "/etc/apt/sources.list.d/rocm.sources"
OLD_SOURCES = "Types: deb\nURIs: https://repo.radeon.com/rocm/apt/6.4.2\n"
NEW_SOURCES = "Types: deb\nURIs: https://repo.radeon.com/rocm/apt/7.1\n"
GOOD = {
    "rocm-core": "6.4.2.60402-1",
    "rocminfo": "1.0.0.60402-1",
    "rocm-smi": "1.0.0.60402-1",
}
MOVED = {
    "rocm-core": "7.1.0.70100-1",
    "rocminfo": "1.0.0.70100-1",
    "rocm-smi": "1.0.0.70100-1",
    "rocm-new-in-7": "1.0.0.70100-1",
}
# What rocmlab saw come from AMD's sources: both releases, and a user's AMD package.
LEDGER, _ = amd_packages.add({}, {**GOOD, "rocm-user-extra": "2.0.0.60402-1"})
LEDGER, _ = amd_packages.add(LEDGER, MOVED)


def known(**changes) -> dict:
    fields = {
        "packages": GOOD,
        "apt_files": [
            file_record(SOURCES, OLD_SOURCES),
            {"path": "/etc/apt/x.pref", "exists": False},
        ],
    }
    fields.update(changes)
    record, _ = known_good.record(None, sample(**fields), "2026-12-01T10:00:00Z")
    return known_good.load(known_good.dump(record))


def test_a_host_in_its_known_good_state_has_nothing_to_do():
    now = {SOURCES: file_record(SOURCES, OLD_SOURCES)}
    plan = known_good.rollback_plan(known(), {**GOOD, "bash": "5.2.15-2+b7"}, LEDGER, now)
    assert plan["apt_files"] == {"files": [], "remove": []}
    assert plan["changes"] == [] and plan["apt_names"] == [] and plan["remove_packages"] == []
    assert plan["summary"] == (
        "6.4.2 \u2192 6.4.2 (the known-good state since 2026-12-01T10:00:00Z): "
        "the host is in its known-good state already"
    )


def test_an_upgraded_host_goes_back_down_with_its_files_and_exact_versions():
    # After a move to 7.1: every package of 7.1, one new package 7.1 brought, the sources
    # rewritten, a preferences file added, a user's package of the old release not in the record.
    installed = {
        "rocm-core": "7.1.0.70100-1",
        "rocminfo": "1.0.0.70100-1",
        "rocm-smi": "1.0.0.70100-1",
        "rocm-new-in-7": "1.0.0.70100-1",
        "rocm-user-extra": "2.0.0.60402-1",
        "bash": "5.2.15-2+b7",
    }
    now = {
        SOURCES: file_record(SOURCES, NEW_SOURCES),
        "/etc/apt/x.pref": file_record("/etc/apt/x.pref", "Package: *\n"),
    }
    plan = known_good.rollback_plan(known(), installed, LEDGER, now)
    written = plan["apt_files"]["files"]
    assert [f["path"] for f in written] == [SOURCES]
    assert __import__("base64").b64decode(written[0]["content_base64"]).decode() == OLD_SOURCES
    assert (written[0]["owner"], written[0]["group"], written[0]["mode"]) == ("0", "0", "0644")
    assert plan["apt_files"]["remove"] == ["/etc/apt/x.pref"]
    assert plan["apt_names"] == [f"{name}={GOOD[name]}" for name in sorted(GOOD)]
    assert {c["action"] for c in plan["changes"]} == {"downgrade"} and plan["downgrade"]
    assert plan["remove_packages"] == ["rocm-new-in-7"]
    assert plan["unlisted"] == ["rocm-user-extra"]  # of the record's release: left alone
    assert plan["summary"].startswith(
        "6.4.2, 7.1.0 \u2192 6.4.2 (the known-good state since 2026-12-01T10:00:00Z): "
        f"apt files put back: {SOURCES}, /etc/apt/x.pref; 3 package(s) change ("
    )
    assert plan["summary"].endswith("; left as they are (not in the record): rocm-user-extra")


def test_a_removed_package_is_installed_again_and_a_rebuild_may_go_down():
    installed = {"rocm-core": "6.4.2.60402-2", "rocminfo": "1.0.0.60402-1"}
    plan = known_good.rollback_plan(
        known(), installed, LEDGER, {SOURCES: file_record(SOURCES, OLD_SOURCES)}
    )
    assert {c["name"]: c["action"] for c in plan["changes"]} == {
        "rocm-core": "rebuild",
        "rocm-smi": "install",
    }
    assert plan["downgrade"] is True


def test_a_changed_mode_is_put_back_too():
    now = {SOURCES: file_record(SOURCES, OLD_SOURCES, mode=0o600)}
    plan = known_good.rollback_plan(known(), {**GOOD}, LEDGER, now)
    assert [f["mode"] for f in plan["apt_files"]["files"]] == ["0644"]


def test_a_record_whose_file_does_not_match_its_hash_is_refused():
    bad = file_record(SOURCES, OLD_SOURCES)
    bad["sha256"] = "0" * 64
    with pytest.raises(ValueError, match="does not match its sha256"):
        known_good.rollback_plan(known(apt_files=[bad]), {**GOOD}, LEDGER, {})


# ---------------------------------------------------------------- the rollback plan module


def run_plan(args: dict, capsys, monkeypatch) -> dict:
    return run_module(plan_module, args, capsys, monkeypatch)


def test_no_record_is_refused_saying_what_writes_one(tmp_path, capsys, monkeypatch):
    result = run_plan({"path": str(tmp_path / "known-good.json")}, capsys, monkeypatch)
    assert result["failed"] is True
    assert "there is no known-good record at" in result["msg"]
    assert "a passing smoke job writes the record" in result["msg"]
    assert result["missing"] is True  # the rollout quarantines such a host, saying so


@as_root
def test_the_module_plans_from_the_record_it_wrote(host, capsys, monkeypatch):
    tmp_path, args = host
    # The ledger names one package of this machine at its installed version (as if AMD's
    # sources had served it), and one that is not installed.
    bash = known_good.parse_dpkg(
        subprocess.run(known_good.DPKG_QUERY, capture_output=True, text=True, check=True).stdout
    )["bash"]
    amd_packages.write(args["ledger"], {"bash": [bash], "rocm-core": ["6.4.2.60402-1"]})
    run(args, capsys, monkeypatch)
    assert known_good.load(Path(args["path"]).read_bytes())["packages"] == {"bash": bash}
    (tmp_path / "rocm.sources").write_text(NEW_SOURCES)
    plan_args = {"path": args["path"], "ledger": args["ledger"], "apt_dir": str(tmp_path)}
    plan = run_plan(plan_args, capsys, monkeypatch)
    assert plan["changed"] is False, plan
    assert [f["path"] for f in plan["apt_files"]["files"]] == [str(tmp_path / "rocm.sources")]
    assert plan["changes"] == [] and plan["remove_packages"] == []  # as recorded
    # The same record read with rocm_repo's own directory: its apt file is outside it.
    refused = run_plan({**plan_args, "apt_dir": "/etc/apt"}, capsys, monkeypatch)
    assert (
        refused["failed"] is True
        and "rocm_repo's apt files are below /etc/apt/" in (refused["msg"])
    ), refused


@as_root
def test_a_record_that_is_a_link_is_refused_by_the_plan(tmp_path, capsys, monkeypatch):
    path = tmp_path / "known-good.json"
    path.symlink_to("/etc/passwd")
    result = run_plan({"path": str(path)}, capsys, monkeypatch)
    assert result["failed"] is True and "is a symbolic link" in result["msg"], result


@as_root
def test_the_installed_release_is_read_from_rocm_cores_file(tmp_path):
    assert known_good.installed_rocm_version(str(tmp_path)) is None  # no ROCm
    tree = tmp_path / "opt" / "rocm-7.1.0" / ".info"
    tree.mkdir(parents=True)
    (tree / "version").write_text("7.1.0-20\n")
    (tmp_path / "opt" / "rocm").symlink_to("rocm-7.1.0")  # AMD's link: the one followed
    assert known_good.installed_rocm_version(str(tmp_path)) == "7.1.0-20"
    (tree / "version").unlink()
    (tree / "version").symlink_to("/etc/hostname")
    with pytest.raises(ValueError, match="version: a symbolic link"):
        known_good.installed_rocm_version(str(tmp_path))
    (tree / "version").unlink()
    (tree / "version").write_text("7" * 300)
    with pytest.raises(ValueError, match="over 256 bytes"):
        known_good.installed_rocm_version(str(tmp_path))


@as_root
def test_on_the_core_line_the_record_holds_the_selected_cores_release(tmp_path):
    """A host with cores 7.14 and 10.0, 7.14 selected by hand (update-alternatives' own files,
    tests/fixtures/rocm_installed): the record says 7.14.0, the line and the series."""
    fixture = REPO / "tests" / "fixtures" / "rocm_installed"
    (tmp_path / "var/lib/dpkg/alternatives").mkdir(parents=True)
    (tmp_path / "var/lib/dpkg/status").write_text((fixture / "status/cores").read_text())
    admin = (fixture / "alternatives/manual/core").read_text()
    (tmp_path / "var/lib/dpkg/alternatives/core").write_text(admin)
    (tmp_path / "etc/alternatives").mkdir(parents=True)
    (tmp_path / "etc/alternatives/core").symlink_to("/opt/rocm/core-7.14")
    for series in ("7.14", "10.0"):
        (tmp_path / f"opt/rocm/core-{series}").mkdir(parents=True)
    found = known_good.installed(str(tmp_path))
    assert (known_good.rocm_version_of(found), found["line"], found["selected"]) == (
        "7.14.0",
        "core",
        "7.14",
    )
    os.chown(tmp_path / "var/lib/dpkg/status", 1234, 0)  # not root's: refused, not read
    with pytest.raises(ValueError, match="status: owned by uid 1234, not 0"):
        known_good.installed(str(tmp_path))


def test_the_line_and_the_selected_core_are_part_of_the_state():
    core = sample(rocm_version="10.0.0", rocm_line="core", rocm_selected="10.0")
    first, _ = known_good.record(None, core, "2026-12-01T10:00:00Z")
    assert (first["rocm_line"], first["rocm_selected"]) == ("core", "10.0")
    assert known_good.load(known_good.dump(first)) == first
    again, changed = known_good.record(first, dict(core), "2026-12-02T10:00:00Z")
    assert not changed and again is first
    switched = sample(rocm_version="10.0.0", rocm_line="core", rocm_selected="7.14")
    second, changed = known_good.record(first, switched, "2026-12-02T10:00:00Z")
    assert changed and second["since"] == "2026-12-02T10:00:00Z"
    edited = {**first, "rocm_selected": "7.14"}
    with pytest.raises(ValueError, match="does not match its digest"):
        known_good.load(known_good.dump(edited))
    dropped = {k: v for k, v in first.items() if k != "rocm_line"}
    with pytest.raises(ValueError, match="does not match its digest"):
        known_good.load(known_good.dump(dropped))


def test_a_format_2_record_without_the_line_still_verifies_and_gains_it_keeping_its_since():
    """A record written before the line fields (their digest never covered them)."""
    old = {"format": 2, "since": "2026-11-01T00:00:00Z", **sample()}
    del old["rocm_line"], old["rocm_selected"]
    old["digest"] = known_good.digest(old)
    assert known_good.load(known_good.dump(old)) == old
    now = sample(rocm_line="legacy")
    again, changed = known_good.record(old, now, "2026-12-02T10:00:00Z")
    assert changed and again["since"] == old["since"] and again["rocm_line"] == "legacy"
    assert known_good.load(known_good.dump(again)) == again
    assert known_good.record(again, now, "2026-12-03T10:00:00Z") == (again, False)


# ---------------------------------------------------------------- only AMD's packages, ever

DEBIAN12 = (REPO / "tests" / "fixtures" / "dpkg_query" / "debian12.txt").read_text()
PERL = ("liberror-perl", "libjson-perl", "libmoo-perl", "librole-tiny-perl")


def test_a_rollback_never_touches_debians_packages_whatever_their_versions_look_like():
    debian = known_good.parse_dpkg(DEBIAN12)
    # Why the version cannot say whose a package is: these read as ROCm releases.
    assert all(release_of(debian[name]) for name in PERL)
    # A host on 7.1 after a failed change, its known-good record on 6.4.2, with every package
    # of a full Debian 12 installation, git and the Perl modules among them, installed after it.
    plan = known_good.rollback_plan(
        known(), {**debian, **MOVED}, LEDGER, {SOURCES: file_record(SOURCES, OLD_SOURCES)}
    )
    touched = {c["name"] for c in plan["changes"]} | set(plan["remove_packages"])
    assert touched == set(GOOD) | {"rocm-new-in-7"}
    assert not touched & set(debian) - set(GOOD)
    assert plan["unlisted"] == [] and plan["not_amd"] == []


def test_an_older_record_that_listed_debians_packages_leaves_them_alone():
    # Format 1 took any version with a release-like field for AMD's.
    old = {**known(), "format": 1, "packages": {**GOOD, "liberror-perl": "0.17029-2"}}
    del old["digest"]
    record = known_good.load(known_good.dump(old))
    installed = {**GOOD, "liberror-perl": "0.17029-2+deb12u1", "git": "1:2.39.5-0+deb12u3"}
    plan = known_good.rollback_plan(record, installed, LEDGER, {})
    assert "liberror-perl" not in {c["name"] for c in plan["changes"]}
    assert plan["remove_packages"] == [] and plan["not_amd"] == ["liberror-perl 0.17029-2"]
    assert plan["summary"].endswith(
        "; not AMD's, left as they are (an older record listed them): liberror-perl 0.17029-2"
    )


def test_a_record_that_names_a_package_rocmlab_never_saw_from_amd_is_refused():
    record = known(packages={**GOOD, "libjson-perl": "4.10000-1"})
    with pytest.raises(
        ValueError, match=r"names the package libjson-perl 4\.10000-1, which rocmlab"
    ):
        known_good.rollback_plan(record, {**GOOD}, LEDGER, {})


@pytest.mark.parametrize(
    "edit",
    [
        lambda r: r["packages"].update({"rocm-core": "6.4.1.60401-1"}),
        lambda r: r["packages"].update({"libc6": "2.36-9"}),
        lambda r: r["apt_files"].pop(),
        lambda r: r.update({"since": "2020-01-01T00:00:00Z"}),
    ],
)
def test_an_edited_record_is_refused_as_a_whole(edit):
    record = known()
    edit(record)
    with pytest.raises(ValueError, match="does not match its digest"):
        known_good.load(known_good.dump(record))


@pytest.mark.parametrize(
    "path", ["/etc/sudoers", "/etc/apt/../sudoers", "/etc/aptx/rocm.sources", "/etc/apt", None]
)
def test_an_apt_file_outside_rocm_repos_directory_is_refused(path):
    record = known(apt_files=[{"path": path, "exists": False}])
    with pytest.raises(ValueError, match="rocm_repo's apt files are below /etc/apt/"):
        known_good.checked_apt_paths(record)


def test_what_a_failed_upgrade_left_half_configured_is_moved_and_removed():
    # 7.1's rocm-core half-configured (its postinst failed), a 7.1-only package unpacked.
    dpkg = (
        "iF \trocm-core\t7.1.0.70100-1\n"
        "ii \trocminfo\t1.0.0.60402-1\n"
        "ii \trocm-smi\t1.0.0.60402-1\n"
        "iU \trocm-new-in-7\t1.0.0.70100-1\n"
    )
    installed = known_good.parse_dpkg(dpkg, present=True)
    plan = known_good.rollback_plan(known(), installed, LEDGER, {})
    assert plan["apt_names"] == ["rocm-core=6.4.2.60402-1"] and plan["downgrade"]
    assert plan["remove_packages"] == ["rocm-new-in-7"]


def test_the_changes_and_removals_are_one_apt_run():
    installed = {**MOVED}
    plan = known_good.rollback_plan(known(), installed, LEDGER, {})
    assert plan["apt_command"] == [
        "apt-get", "install", "--yes", "--quiet",
        "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold",
        "--allow-downgrades",
        "rocm-core=6.4.2.60402-1", "rocm-smi=1.0.0.60402-1", "rocminfo=1.0.0.60402-1",
        "rocm-new-in-7-",
    ]  # fmt: skip
    assert known_good.rollback_plan(known(), {**GOOD}, LEDGER, {})["apt_command"] == []


def test_a_record_of_the_older_format_is_written_anew_keeping_its_since():
    old = {**known(), "format": 1}
    del old["digest"]
    again, changed = known_good.record(old, sample(packages=GOOD, apt_files=old["apt_files"]), "x")
    assert changed and again["format"] == 2 and again["since"] == old["since"]
    assert known_good.load(known_good.dump(again)) == again
