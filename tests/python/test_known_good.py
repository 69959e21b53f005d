"""The known-good record (plugins/module_utils/known_good.py and the module rocmlab_known_good):
what it holds, that a second pass in the same state leaves it as it is, that a changed state
makes a new one, and what it refuses. The module runs in-process against this machine's real
dpkg database, a real venv (the one running these tests) and apt files written by the test."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
from ansible.module_utils import basic
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import known_good

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "rocmlab_known_good", REPO / "plugins" / "modules" / "rocmlab_known_good.py"
)
assert _spec is not None and _spec.loader is not None
module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(module)

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the module checks root's ownership")

DPKG = (
    "ii \trocm-core\t6.4.2.60402-1\n"
    "ii \trocminfo\t1.0.0.60402-1\n"
    "ii \tbash\t5.2.15-2+b7\n"
    "rc \trocm-smi\t1.0.0.60402-1\n"  # removed, its configuration kept: not installed
    "iU \trocm-hip-sdk\t6.4.2.60402-1\n"  # unpacked, not configured
)


def test_only_installed_amd_packages_are_managed():
    installed = known_good.parse_dpkg(DPKG)
    assert installed == {
        "rocm-core": "6.4.2.60402-1",
        "rocminfo": "1.0.0.60402-1",
        "bash": "5.2.15-2+b7",
    }
    assert known_good.managed_packages(installed) == {
        "rocm-core": "6.4.2.60402-1",
        "rocminfo": "1.0.0.60402-1",
    }


def test_a_freeze_is_sorted_requirements_only():
    assert known_good.parse_freeze("# note\ntorch==2.9.1+rocm6.4\n\nnumpy==2.1.0\n") == [
        "numpy==2.1.0",
        "torch==2.9.1+rocm6.4",
    ]


def test_rocmlabs_version_is_read_from_a_freeze():
    assert known_good.rocmlab_in({"/a": ["numpy==2.1.0"], "/b": ["rocmlab==0.1.0"]}) == "0.1.0"
    assert known_good.rocmlab_in({"/a": ["rocmlab-extra==1"]}) is None
    wheel = "rocmlab @ file:///var/lib/rocmlab/wheels/rocmlab-0.1.0-py3-none-any.whl"
    assert known_good.rocmlab_in({"/a": [wheel]}) == "0.1.0"


def sample(**changes) -> dict:
    fields = dict(
        installed={"rocm-core": "6.4.2.60402-1"},
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
    assert changed and first["since"] == "2026-12-01T10:00:00Z" and first["format"] == 1
    again, changed = known_good.record(first, sample(), "2026-12-02T10:00:00Z")
    assert not changed and again is first


@pytest.mark.parametrize(
    "change",
    [
        {"installed": {"rocm-core": "7.1.0.70100-1"}},
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
        (b"[]", "it is not a known-good record of format 1"),
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
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode())
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy")
    with pytest.raises(SystemExit):
        module.main()
    return json.loads(capsys.readouterr().out)


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
