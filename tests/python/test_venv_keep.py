"""The frameworks' venvs in a rollback (plugins/module_utils/venv_keep.py, the module
rocmlab_venv_keep): the policy over its cases, then the module in-process on real venvs made by
this machine's Python (pip and setuptools from ensurepip, changed by their own pip)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import known_good, venv_keep
from ansible_modules import load_module, run_module

module = load_module("rocmlab_venv_keep")
known_good_module = load_module("rocmlab_known_good")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the module checks root's ownership")

VENV = "/opt/rocmlab/venvs/pytorch"
GOOD = ["numpy==2.1.0", "rocmlab @ file:///var/lib/rocmlab/wheels/rocmlab-0.1.0-py3-none-any.whl"]
GOOD += ["torch==2.9.1+rocm6.4"]
MOVED = ["numpy==2.1.0", "rocmlab @ file:///var/lib/rocmlab/wheels/rocmlab-0.1.0-py3-none-any.whl"]
MOVED += ["torch==2.10.0+rocm7.1"]


def test_the_kept_copy_lives_beside_the_venv():
    assert venv_keep.kept_path(VENV) == "/opt/rocmlab/venvs/.pytorch.rocmlab-kept"
    assert venv_keep.keeping_path(VENV) == "/opt/rocmlab/venvs/.pytorch.rocmlab-keeping"
    assert venv_keep.trash_path(VENV) == "/opt/rocmlab/venvs/.pytorch.rocmlab-trash"


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("opt/venv", "not an absolute path"),
        ("/opt/venv\0x", "not an absolute path"),
        (None, "not an absolute path"),
        ("/opt/../etc", "not a normalized path"),
        ("/opt/venv/", "not a normalized path"),
        ("/", "not a normalized path"),
        ("/opt/venvs/.pytorch.rocmlab-kept", "a kept copy's name"),
    ],
)
def test_a_bad_venv_path_is_refused_naming_it(path, says):
    with pytest.raises(ValueError, match=says) as err:
        venv_keep.check_venv_path(path)
    assert repr(path) in str(err.value)


KEEP_CASES = [
    # recorded, now, kept -> action
    (None, GOOD, None, "none", "has not frozen"),
    (GOOD, GOOD, None, "keep", "has the known-good freeze"),
    (GOOD, GOOD, MOVED, "keep", "replacing an older kept copy"),
    (GOOD, MOVED, GOOD, "none", "kept copy has the known-good freeze already"),
    (GOOD, GOOD, GOOD, "none", "kept copy has the known-good freeze already"),
    (GOOD, None, None, "none", "no venv to keep"),
    (GOOD, MOVED, None, "stale", "torch==2.9.1+rocm6.4"),
    (GOOD, MOVED, MOVED, "stale", "the venv has torch==2.10.0+rocm7.1 instead"),
]


@pytest.mark.parametrize(("recorded", "now", "kept", "action", "says"), KEEP_CASES)
def test_what_is_kept_before_a_run_alters_a_venv(recorded, now, kept, action, says):
    got, why = venv_keep.keep_decision(recorded, now, kept)
    assert got == action
    assert says in why


def test_a_rollback_puts_back_the_kept_copy_that_has_the_recorded_freeze():
    recorded = {VENV: GOOD, "/opt/rocmlab/venvs/tensorflow": ["tensorflow-rocm==2.18.1"]}
    now = {VENV: MOVED, "/opt/rocmlab/venvs/tensorflow": ["tensorflow-rocm==2.18.1"]}
    plan = venv_keep.restore_plan(recorded, now, {VENV: GOOD})
    assert [(entry["path"], entry["action"]) for entry in plan] == [
        (VENV, "restore"),
        ("/opt/rocmlab/venvs/tensorflow", "in_state"),
    ]
    assert "/opt/rocmlab/venvs/.pytorch.rocmlab-kept has the recorded freeze" in plan[0]["why"]
    assert "the record has torch==2.9.1+rocm6.4" in plan[0]["why"]


@pytest.mark.parametrize(
    ("now", "kept", "found"),
    [
        (MOVED, None, "there is no kept copy to put back"),
        (None, None, "the venv is missing; there is no kept copy"),
        (MOVED, MOVED, "a kept copy of another freeze (the record has torch==2.9.1+rocm6.4"),
        (MOVED, ["# unreadable kept copy: pip freeze failed"], "unreadable kept copy"),
    ],
)
def test_without_a_copy_to_put_back_the_message_names_the_venv_what_differs_and_the_fix(
    now, kept, found
):
    (entry,) = venv_keep.restore_plan({VENV: GOOD}, {VENV: now}, {VENV: kept})
    assert entry["action"] == "fail"
    why = entry["why"]
    assert why.startswith(f"{VENV} differs from its known-good freeze: ")
    assert found in why, why
    assert (
        f"run: {VENV}/bin/python -m pip install --no-deps 'numpy==2.1.0' 'torch==2.9.1+rocm6.4'"
        " (and, from where they came, rocmlab @ file:///var/lib/rocmlab/wheels/" in why
    ), why


def test_a_long_difference_is_cut_short():
    many = [f"pkg{n:02}==1.0" for n in range(30)]
    text = venv_keep.differs(many, [])
    assert text.startswith("the record has pkg00==1.0, pkg01==1.0") and text.endswith("and 18 more")


def test_a_freeze_read_back_is_bounded_and_printable():
    assert venv_keep.parse_freeze("# comment\n\nb==1\n  a==2  \n", VENV) == ["a==2", "b==1"]
    with pytest.raises(ValueError, match=f"pip freeze in {VENV}: line 2 is over 1000"):
        venv_keep.parse_freeze("a==1\n" + "b" * 1001 + "\n", VENV)
    with pytest.raises(ValueError, match="line 1 holds characters outside printable ASCII"):
        venv_keep.parse_freeze("a==1\x1b[2J\n", VENV)
    with pytest.raises(ValueError, match="over 5000 requirement lines"):
        venv_keep.parse_freeze("".join(f"p{n}==1\n" for n in range(5001)), VENV)
    assert venv_keep.parse_freeze("# note\ntorch==2.9.1+rocm6.4\n\nnumpy==2.1.0\n", VENV) == [
        "numpy==2.1.0",
        "torch==2.9.1+rocm6.4",
    ]


def test_the_records_venvs_are_checked():
    assert venv_keep.recorded_venvs({"venvs": {VENV: ["b==1", "a==1"]}}) == {VENV: ["a==1", "b==1"]}
    assert venv_keep.recorded_venvs(None) == {}
    with pytest.raises(ValueError, match="not a list of lines"):
        venv_keep.recorded_venvs({"venvs": {VENV: "torch==2.9.1"}})
    with pytest.raises(ValueError, match="not an absolute path"):
        venv_keep.recorded_venvs({"venvs": {"venv": []}})


# rocmlab's ledger of AMD's packages (amd_packages): the one package these records hold.
AMD = {"rocm-core": ["6.4.2.60402-1"]}


def test_the_rollback_summary_says_which_venvs_are_put_back():
    record, _ = known_good.record(
        None,
        known_good.state(
            packages={"rocm-core": "6.4.2.60402-1"},
            rocm_version="6.4.2",
            apt_files=[],
            venvs={VENV: GOOD},
            gfx_override=None,
            kernel="6.1.0-28-amd64",
            rocmlab_version="0.1.0",
        ),
        "2026-12-01T10:00:00Z",
    )
    venvs = venv_keep.restore_plan({VENV: GOOD}, {VENV: MOVED}, {VENV: GOOD})
    plan = known_good.rollback_plan(record, {"rocm-core": "6.4.2.60402-1"}, AMD, {}, venvs)
    assert plan["venvs"] == venvs
    assert plan["summary"].endswith(f": venvs put back from their kept copies: {VENV}")
    in_state = venv_keep.restore_plan({VENV: GOOD}, {VENV: GOOD}, {})
    plan = known_good.rollback_plan(record, {"rocm-core": "6.4.2.60402-1"}, AMD, {}, in_state)
    assert plan["summary"].endswith("the host is in its known-good state already")
    failing = venv_keep.restore_plan({VENV: GOOD}, {VENV: MOVED}, {VENV: None})
    plan = known_good.rollback_plan(record, {"rocm-core": "6.4.2.60402-1"}, AMD, {}, failing)
    assert "with no kept copy to put back (the rollback stops there): " + VENV in plan["summary"]


# ---------------------------------------------------------------- the module, on real venvs


def pip(venv: Path, *args: str) -> None:
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", *args],
        check=True,
        capture_output=True,
    )


def freeze(venv: Path) -> list[str]:
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-I", "-m", "pip", "freeze", "--all"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return venv_keep.parse_freeze(out, str(venv))


@pytest.fixture(scope="module")
def made_venv(tmp_path_factory) -> Path:
    """One venv of this machine's Python (pip and setuptools), copied for each test (its scripts
    name where it was made; the tests run its pip as `python -m pip`)."""
    path = tmp_path_factory.mktemp("venv-template") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return path


def recorded(tmp_path: Path, venv: Path) -> Path:
    """A known-good record in TMP_PATH that froze VENV as it is now."""
    record_path = tmp_path / "known-good.json"
    state = known_good.state(
        packages={},
        rocm_version="6.4.2",
        apt_files=[],
        venvs={str(venv): freeze(venv)},
        gfx_override=None,
        kernel="6.1.0-28-amd64",
        rocmlab_version=None,
    )
    record, _ = known_good.record(None, state, "2026-12-01T10:00:00Z")
    record_path.write_bytes(known_good.dump(record))
    return record_path


@pytest.fixture
def host(made_venv, tmp_path):
    """A venv in a root-owned directory and a known-good record that froze it."""
    venvs = tmp_path / "venvs"
    venvs.mkdir(mode=0o755)
    venv = venvs / "pytorch"
    subprocess.run(["cp", "-a", str(made_venv), str(venv)], check=True)
    record_path = recorded(tmp_path, venv)
    return venv, str(record_path), freeze(venv)


def run(args, capsys, monkeypatch) -> dict:
    return run_module(module, args, capsys, monkeypatch)


def ours(venv: Path) -> list[str]:
    return sorted(p.name for p in venv.parent.iterdir() if p.name != venv.name)


@as_root
def test_kept_before_pip_changes_it_and_put_back_by_the_rollback(host, capsys, monkeypatch):
    venv, record, good = host
    python = venv / "bin" / "python"
    kept = run({"state": "kept", "venv": str(venv), "path": record}, capsys, monkeypatch)
    assert kept["changed"] is True and kept["action"] == "keep", kept
    copy = Path(kept["kept"])
    assert copy == venv.parent / ".pytorch.rocmlab-kept"
    assert ours(venv) == [".pytorch.rocmlab-kept"]
    # Owned and moded as the venv; its files are the venv's own (hard links), so it costs no room.
    for name in ("", "bin", "pyvenv.cfg", "bin/activate"):
        a, b = (venv / name).lstat(), (copy / name).lstat()
        assert (a.st_mode, a.st_uid, a.st_gid) == (b.st_mode, b.st_uid, b.st_gid), name
    assert (venv / "pyvenv.cfg").stat().st_ino == (copy / "pyvenv.cfg").stat().st_ino

    # The run changes the venv with its own pip: the copy keeps the recorded freeze.
    pip(venv, "uninstall", "--yes", "setuptools")
    assert freeze(venv) != good and freeze(copy) == good
    # A second change in the same run (the smoke job's wheel after torch): the copy stays.
    again = run({"state": "kept", "venv": str(venv), "path": record}, capsys, monkeypatch)
    assert again["changed"] is False and again["action"] == "none", again

    check = run(
        {"state": "restored", "path": record, "_ansible_check_mode": True}, capsys, monkeypatch
    )
    assert check["changed"] is True and freeze(venv) != good
    assert [(v["path"], v["action"]) for v in check["venvs"]] == [(str(venv), "restore")]

    copy_inode = copy.stat().st_ino
    restored = run({"state": "restored", "path": record}, capsys, monkeypatch)
    assert restored["changed"] is True, restored
    assert freeze(venv) == good
    assert venv.stat().st_ino == copy_inode  # the copy itself, renamed into place
    assert ours(venv) == []  # the changed venv removed, no copy left
    assert python.exists()
    again = run({"state": "restored", "path": record}, capsys, monkeypatch)
    assert again["changed"] is False and again["venvs"][0]["action"] == "in_state"


@as_root
def test_the_gate_passing_removes_the_copy(host, capsys, monkeypatch):
    venv, record, good = host
    run({"state": "kept", "venv": str(venv), "path": record}, capsys, monkeypatch)
    # A copy stopped half-way by an earlier run lies there too.
    (venv.parent / ".pytorch.rocmlab-keeping").mkdir()
    check = run(
        {"state": "released", "venvs": [str(venv)], "_ansible_check_mode": True},
        capsys,
        monkeypatch,
    )
    assert check["changed"] is True and len(ours(venv)) == 2
    released = run({"state": "released", "venvs": [str(venv)]}, capsys, monkeypatch)
    assert released == {**released, "changed": True, "released": [str(venv)]}
    assert ours(venv) == [] and freeze(venv) == good
    again = run({"state": "released", "venvs": [str(venv)]}, capsys, monkeypatch)
    assert again["changed"] is False


@as_root
def test_recording_the_state_removes_the_copy(host, capsys, monkeypatch, tmp_path):
    # What the passing gate runs (roles/rocmlab/tasks/known-good.yml): the record of the new
    # state, and with it the kept copy gone, in one module call.
    venv, record, _good = host
    run({"state": "kept", "venv": str(venv), "path": record}, capsys, monkeypatch)
    pip(venv, "uninstall", "--yes", "setuptools")
    records = tmp_path / "records"
    records.mkdir()
    args = {
        "path": record,
        "venvs": [str(venv)],
        "records_dir": str(records),
        "gfx_file": str(tmp_path / "no-gfx.conf"),
    }
    without = run_module(known_good_module, args, capsys, monkeypatch)
    assert without["changed"] is True and without["released"] == []
    assert ours(venv) == [".pytorch.rocmlab-kept"]  # release_kept is off by default
    check = run_module(
        known_good_module,
        {**args, "release_kept": True, "_ansible_check_mode": True},
        capsys,
        monkeypatch,
    )
    assert check["changed"] is True and check["released"] == [str(venv)]
    assert ours(venv) == [".pytorch.rocmlab-kept"]
    done = run_module(known_good_module, {**args, "release_kept": True}, capsys, monkeypatch)
    assert done["changed"] is True and done["released"] == [str(venv)], done
    assert ours(venv) == []
    assert known_good.load(Path(record).read_bytes())["venvs"][str(venv)] == freeze(venv)
    again = run_module(known_good_module, {**args, "release_kept": True}, capsys, monkeypatch)
    assert again["changed"] is False and again["released"] == []


@as_root
def test_a_venv_changed_without_a_copy_is_rebuilt_from_its_freeze(host, capsys, monkeypatch):
    venv, record, good = host
    pip(venv, "uninstall", "--yes", "setuptools")
    kept = run({"state": "kept", "venv": str(venv), "path": record}, capsys, monkeypatch)
    # (Ansible prints the module's warning with this why and "A rollback cannot put it back".)
    assert kept["changed"] is False and kept["action"] == "stale"
    assert kept["why"].startswith("it differs from the known-good record already: the record has")
    assert ours(venv) == []
    # pip and setuptools at the recorded versions: what this Python's ensurepip brings, so the
    # rebuild needs no index.
    sources = {"no_index": True, "python": sys.executable}
    result = run({"state": "restored", "path": record, "sources": sources}, capsys, monkeypatch)
    assert result["changed"] is True, result
    assert [(v["path"], v["action"]) for v in result["venvs"]] == [(str(venv), "rebuild")]
    assert freeze(venv) == good and ours(venv) == []


@as_root
def test_a_restore_stopped_between_its_renames_is_finished(host, capsys, monkeypatch):
    venv, record, good = host
    run({"state": "kept", "venv": str(venv), "path": record}, capsys, monkeypatch)
    pip(venv, "uninstall", "--yes", "setuptools")
    # Where the file system cannot exchange: the venv went to the trash name, the host stopped.
    os.rename(venv, venv.parent / ".pytorch.rocmlab-trash")
    result = run({"state": "restored", "path": record}, capsys, monkeypatch)
    assert result["changed"] is True, result
    assert freeze(venv) == good
    assert ours(venv) == [".pytorch.rocmlab-trash"]  # removed when the gate passes
    run({"state": "released", "venvs": [str(venv)]}, capsys, monkeypatch)
    assert ours(venv) == []


@as_root
def test_a_venv_the_record_did_not_freeze_is_not_kept(host, capsys, monkeypatch, tmp_path):
    venv, _record, _good = host
    other = tmp_path / "none.json"
    kept = run({"state": "kept", "venv": str(venv), "path": str(other)}, capsys, monkeypatch)
    assert kept["changed"] is False and kept["action"] == "none" and ours(venv) == []
    # A record that cannot be used: nothing to keep, said, and the run goes on.
    other.write_text(json.dumps({"format": 1}))
    kept = run({"state": "kept", "venv": str(venv), "path": str(other)}, capsys, monkeypatch)
    assert kept["action"] == "none" and ours(venv) == []
    assert kept["why"].startswith(f"the known-good record {other} cannot be used: it lacks since")


@as_root
def test_a_planted_kept_copy_is_refused(host, capsys, monkeypatch):
    venv, record, _good = host
    (venv.parent / ".pytorch.rocmlab-kept").symlink_to("/etc")
    result = run({"state": "kept", "venv": str(venv), "path": record}, capsys, monkeypatch)
    assert result["failed"] is True
    assert "is not a directory of root's; rocmlab leaves it alone" in result["msg"], result
    assert Path("/etc/passwd").exists()


@as_root
def test_a_venv_whose_pip_cannot_run_is_put_back_from_its_copy(host, capsys, monkeypatch):
    venv, record, good = host
    run({"state": "kept", "venv": str(venv), "path": record}, capsys, monkeypatch)
    # A run stopped while pip rewrote pip itself: the venv's pip does not start any more.
    for path in (venv / "lib").glob("python3*/site-packages/pip"):
        subprocess.run(["rm", "-rf", str(path)], check=True)
    plan = run(
        {"state": "restored", "path": record, "_ansible_check_mode": True}, capsys, monkeypatch
    )
    (entry,) = plan["venvs"]
    assert entry["action"] == "restore" and "# unreadable venv: pip freeze in" in entry["why"]
    restored = run({"state": "restored", "path": record}, capsys, monkeypatch)
    assert restored["changed"] is True and freeze(venv) == good and ours(venv) == []


# ------------------------------------------------- a rebuild from the record's freeze: the policy

WHEELS = venv_keep.WHEEL_DIR
ROCMLAB_LINE = f"rocmlab @ file://{WHEELS}/rocmlab-0.1.0-py3-none-any.whl"


@pytest.mark.parametrize(
    ("line", "refused"),
    [
        ("torch==2.9.1+rocm6.4", None),
        ("typing_extensions==4.12.2", None),
        ("zope.interface==7.1", None),
        (ROCMLAB_LINE, None),
        (f"Rocm_Lab @ file://{WHEELS}/rocm_lab-0.1.0-py3-none-any.whl", None),
        (ROCMLAB_LINE + "#sha256=" + "0a" * 32, None),
        (ROCMLAB_LINE + "#sha256=0a", "not name==version"),
        (ROCMLAB_LINE + "#md5=" + "0a" * 16, "not name==version"),
        ("rocmlab @ file:///tmp/rocmlab-0.1.0-py3-none-any.whl", "a file outside"),
        (f"rocmlab @ file://{WHEELS}/../../tmp/rocmlab-0.1.0-py3-none-any.whl", "a file outside"),
        (f"rocmlab @ file://{WHEELS}/sub/rocmlab-0.1.0-py3-none-any.whl", "a file outside"),
        (f"rocmlab @ file://{WHEELS}/torch-2.9.1-cp311-cp311-linux_x86_64.whl", "not a wheel of"),
        (f"rocmlab @ file://{WHEELS}/rocmlab-0.1.0.tar.gz", "not a wheel of"),
        ("rocmlab @ https://example.invalid/rocmlab-0.1.0-py3-none-any.whl", "not name==version"),
        ("-e git+https://example.invalid/x.git#egg=x", "not name==version"),
        ("--index-url=http://evil.invalid/simple", "not name==version"),
        ("torch>=2.9", "not name==version"),
        ("torch==2.9.1; rm -rf /", "not name==version"),
        ("torch==2.9.1 --pre", "not name==version"),
    ],
)
def test_a_rebuild_takes_exact_pins_and_rocmlabs_wheels_only(line, refused):
    taken, not_taken = venv_keep.rebuild_requirements(["numpy==2.1.0", line])
    if refused is None:
        assert (taken, not_taken) == (["numpy==2.1.0", line], [])
    else:
        assert taken == ["numpy==2.1.0"]
        (why,) = not_taken
        assert why.startswith(repr(line)) and refused in why, why


@pytest.mark.parametrize(
    ("index", "base", "want"),
    [
        # PyTorch's own index of the configured release: the one the recorded torch came from.
        (
            "https://pt.example/whl/rocm7.1",
            "https://pt.example/whl",
            "https://pt.example/whl/rocm6.4",
        ),
        ("https://pt.example/whl/", "https://pt.example/whl/", "https://pt.example/whl/rocm6.4"),
        # A lab's own index, or none: as it is.
        ("https://mirror.lab/simple", "https://pt.example/whl", "https://mirror.lab/simple"),
        ("", "https://pt.example/whl", ""),
        ("https://pt.example/whl/rocm7.1", "", "https://pt.example/whl/rocm7.1"),
    ],
)
def test_the_index_of_a_rebuild_is_the_one_the_recorded_torch_came_from(index, base, want):
    assert venv_keep.index_for(GOOD, index, base) == want
    # A CPU torch (no ROCm local version) keeps the configured index.
    assert venv_keep.index_for(["torch==2.13.0+cpu"], index, base) == index


def test_the_pip_command_of_a_rebuild():
    sources = {
        "index_url": "",
        "no_index": True,
        "find_links": "http://wheels.lab:8080/wheels/",
        "extra_args": ["--cert", "/etc/ssl/lab.pem"],
    }
    argv = venv_keep.pip_argv("/v/bin/python", sources, GOOD, ["numpy==2.1.0", ROCMLAB_LINE])
    assert argv == [
        "/v/bin/python", "-I", "-m", "pip", "install", "--disable-pip-version-check",
        "--no-input", "--no-deps", "--retries", "5", "--timeout", "60", "--no-index",
        "--find-links", "http://wheels.lab:8080/wheels/", "--trusted-host", "wheels.lab",
        "--cert", "/etc/ssl/lab.pem", "numpy==2.1.0", ROCMLAB_LINE,
    ]  # fmt: skip
    https = {
        "index_url": "https://pt.example/whl/rocm7.1",
        "index_base_url": "https://pt.example/whl",
    }
    argv = venv_keep.pip_argv("/v/bin/python", https, GOOD, ["torch==2.9.1+rocm6.4"])
    assert argv[-3:] == ["--index-url", "https://pt.example/whl/rocm6.4", "torch==2.9.1+rocm6.4"]
    assert "--trusted-host" not in argv and "--no-index" not in argv


def test_without_a_kept_copy_a_rebuildable_venv_is_rebuilt():
    good = ["numpy==2.1.0", ROCMLAB_LINE, "torch==2.9.1+rocm6.4"]
    for now, copy in ((MOVED, None), (None, None), (MOVED, MOVED)):
        (entry,) = venv_keep.restore_plan({VENV: good}, {VENV: now}, {VENV: copy})
        assert entry["action"] == "rebuild", entry
        assert "rebuilt from its recorded freeze (3 distributions) in" in entry["why"]
        assert "/opt/rocmlab/venvs/.pytorch.rocmlab-rebuild" in entry["why"]
    # A kept copy with the record's freeze is still put back: no rebuild.
    (entry,) = venv_keep.restore_plan({VENV: good}, {VENV: MOVED}, {VENV: good})
    assert entry["action"] == "restore"


def test_a_freeze_no_rebuild_takes_stops_the_rollback_naming_the_lines():
    bad = ["-e git+https://example.invalid/x.git#egg=x", "numpy==2.1.0"]
    (entry,) = venv_keep.restore_plan({VENV: bad}, {VENV: ["numpy==2.1.0"]}, {VENV: None})
    assert entry["action"] == "fail"
    why = entry["why"]
    assert why.startswith(f"{VENV} differs from its known-good freeze: the record has -e git+")
    assert "there is no kept copy to put back, and it cannot be rebuilt from the record's" in why
    assert "'-e git+https://example.invalid/x.git#egg=x' (not name==version, nor a wheel" in why
    assert f"run: {VENV}/bin/python -m pip install --no-deps 'numpy==2.1.0'" in why


def test_the_rollback_summary_says_which_venvs_are_rebuilt():
    record, _ = known_good.record(
        None,
        known_good.state(
            packages={},
            rocm_version="6.4.2",
            apt_files=[],
            venvs={VENV: ["numpy==2.1.0"]},
            gfx_override=None,
            kernel="6.1.0-28-amd64",
            rocmlab_version=None,
        ),
        "2026-12-01T10:00:00Z",
    )
    venvs = venv_keep.restore_plan({VENV: ["numpy==2.1.0"]}, {VENV: None}, {VENV: None})
    plan = known_good.rollback_plan(record, {}, {}, {}, venvs)
    assert plan["summary"].endswith(
        f": venvs rebuilt from their recorded freeze (no kept copy to put back): {VENV}"
    )


def test_the_activate_blocks_of_rocmlabs_roles_are_found():
    text = (
        'VIRTUAL_ENV="/v"\n# BEGIN rocmlab: GPU override (gfx_override)\nif [ -r /x ]; then\n'
        "    . /x\nfi\n# END rocmlab: GPU override (gfx_override)\nexport PATH\n"
    )
    assert venv_keep.rocmlab_blocks(text) == (
        "# BEGIN rocmlab: GPU override (gfx_override)\nif [ -r /x ]; then\n    . /x\nfi\n"
        "# END rocmlab: GPU override (gfx_override)\n"
    )
    assert venv_keep.rocmlab_blocks('VIRTUAL_ENV="/v"\n') == ""


def test_the_activate_block_is_the_one_role_framework_venv_writes():
    # The marker the rebuild looks for is blockinfile's "# {mark} rocmlab: ..." of the role.
    tasks = (
        Path(__file__).resolve().parents[2] / "roles/framework_venv/tasks/venv.yml"
    ).read_text()
    assert 'marker: "# {mark} rocmlab: GPU override (gfx_override)"' in tasks


def test_the_wheel_directory_is_the_smoke_jobs():
    text = (Path(__file__).resolve().parents[2] / "roles/smoke_test/vars/main.yml").read_text()
    assert f"__smoke_test_wheel_dir: {venv_keep.WHEEL_DIR}\n" in text


def test_a_failed_rebuild_says_so_with_credentials_masked():
    says = venv_keep.rebuild_failed(
        VENV, ["numpy==2.1.0"], ["numpy==2.0.0"], "pip install failed (exit 1): https://u:pw@idx/"
    )
    assert says.startswith(
        f"{VENV} differs from its known-good freeze: the record has numpy==2.1.0"
    )
    assert "rebuilding it from the record's freeze failed: pip install failed" in says
    assert "https://***@idx/" in says and "pw" not in says
    assert f"{VENV} is left as it was." in says
    assert says.endswith(f"run: {VENV}/bin/python -m pip install --no-deps 'numpy==2.1.0'")


# --------------------------------------- a rebuild on real venvs, from a wheelhouse made here


def make_wheel(where: Path, version: str) -> Path:
    """A wheel of the distribution rocmlab-demo at VERSION with a console script `demo` that
    prints its version: what pip installs, made by hand (a wheel is a zip with its metadata)."""
    import base64
    import hashlib
    import zipfile

    info = f"rocmlab_demo-{version}.dist-info"
    files = {
        "rocmlab_demo/__init__.py": f"def main():\n    print('demo {version}')\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: rocmlab-demo\nVersion: {version}\n",
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
        f"{info}/entry_points.txt": "[console_scripts]\ndemo = rocmlab_demo:main\n",
    }
    lines = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        lines.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*lines, f"{info}/RECORD,,"]) + "\n"
    path = where / f"rocmlab_demo-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("wheelhouse")
    make_wheel(where, "1.0")
    make_wheel(where, "2.0")
    return where


BLOCK = (
    "# BEGIN rocmlab: GPU override (gfx_override)\nif [ -r /etc/profile.d/rocmlab-gfx.sh ]; then\n"
    "    . /etc/profile.d/rocmlab-gfx.sh\nfi\n# END rocmlab: GPU override (gfx_override)\n"
)


@pytest.fixture
def demo(made_venv, wheelhouse, tmp_path):
    """A venv with rocmlab-demo 1.0 from the wheelhouse (its activate with the role's block), in
    a root-owned directory, group and mode as the roles make them, and a record that froze it."""
    venvs = tmp_path / "venvs"
    venvs.mkdir(mode=0o755)
    venv = venvs / "pytorch"
    subprocess.run(["cp", "-a", str(made_venv), str(venv)], check=True)
    with (venv / "bin" / "activate").open("a") as handle:
        handle.write(BLOCK)
    os.chown(venv, 0, 100)
    os.chmod(venv, 0o750)
    pip(venv, "install", "--no-index", "--find-links", str(wheelhouse), "rocmlab-demo==1.0")
    record_path = recorded(tmp_path, venv)
    sources = {"no_index": True, "find_links": str(wheelhouse), "python": sys.executable}
    return venv, str(record_path), freeze(venv), sources


@as_root
def test_a_venv_without_a_kept_copy_is_rebuilt_to_the_recorded_freeze(demo, capsys, monkeypatch):
    venv, record, good, sources = demo
    assert "rocmlab-demo==1.0" in good
    pip(venv, "install", "--no-index", "--find-links", sources["find_links"], "rocmlab-demo==2.0")
    changed_freeze = freeze(venv)
    assert "rocmlab-demo==2.0" in changed_freeze and ours(venv) == []
    inode = venv.stat().st_ino

    args = {"state": "restored", "path": record, "sources": sources}
    check = run({**args, "_ansible_check_mode": True}, capsys, monkeypatch)
    assert check["changed"] is True and freeze(venv) == changed_freeze and ours(venv) == []
    (entry,) = check["venvs"]
    assert entry["action"] == "rebuild", entry
    assert (
        "the record has rocmlab-demo==1.0; the venv has rocmlab-demo==2.0 instead" in entry["why"]
    )

    done = run(args, capsys, monkeypatch)
    assert done["changed"] is True, done
    assert freeze(venv) == good
    assert venv.stat().st_ino != inode  # a new venv, not the changed one
    assert ours(venv) == []  # the changed venv removed, nothing of the rebuild left
    info = venv.stat()
    assert (info.st_uid, info.st_gid, info.st_mode & 0o7777) == (0, 100, 0o750)
    # Its scripts name the venv where it is, not where it was built.
    script = (venv / "bin" / "demo").read_text()
    assert script.startswith(f"#!{venv}/bin/python"), script[:200]
    ran = subprocess.run([str(venv / "bin" / "demo")], capture_output=True, text=True, check=True)
    assert ran.stdout == "demo 1.0\n"
    activate = (venv / "bin" / "activate").read_text()
    assert f'VIRTUAL_ENV="{venv}"' in activate or f"VIRTUAL_ENV='{venv}'" in activate
    assert "rocmlab-rebuild" not in activate and "rocmlab-rebuild" not in script
    assert activate.endswith(BLOCK)
    again = run(args, capsys, monkeypatch)
    assert again["changed"] is False and again["venvs"][0]["action"] == "in_state"


@as_root
def test_a_removed_venv_is_rebuilt_in_its_place(demo, capsys, monkeypatch):
    venv, record, good, sources = demo
    subprocess.run(["rm", "-rf", str(venv)], check=True)
    done = run({"state": "restored", "path": record, "sources": sources}, capsys, monkeypatch)
    assert done["changed"] is True, done
    assert freeze(venv) == good and ours(venv) == []


@as_root
def test_a_rebuild_that_cannot_reach_the_record_leaves_the_venv_as_it_was(
    demo, capsys, monkeypatch, tmp_path
):
    venv, record, _good, sources = demo
    pip(venv, "install", "--no-index", "--find-links", sources["find_links"], "rocmlab-demo==2.0")
    changed_freeze = freeze(venv)
    inode = venv.stat().st_ino
    empty = tmp_path / "empty-wheelhouse"
    empty.mkdir()
    result = run(
        {"state": "restored", "path": record, "sources": {**sources, "find_links": str(empty)}},
        capsys,
        monkeypatch,
    )
    assert result["failed"] is True
    says = result["msg"]
    assert says.startswith(
        f"rocmlab_venv_keep: {venv} differs from its known-good freeze: the record has"
        " rocmlab-demo==1.0; the venv has rocmlab-demo==2.0 instead; there is no kept copy"
    ), says
    assert "rebuilding it from the record's freeze failed: pip install failed (exit 1): " in says
    assert "No matching distribution found for rocmlab-demo==1.0" in says, says
    assert f"{venv} is left as it was." in says
    assert f"run: {venv}/bin/python -m pip install --no-deps " in says
    assert "'rocmlab-demo==1.0'" in says
    assert freeze(venv) == changed_freeze and venv.stat().st_ino == inode
    assert ours(venv) == []


@as_root
def test_a_rebuild_installs_rocmlabs_wheel_from_the_wheel_directory(demo, tmp_path):
    # The smoke job's venv holds rocmlab from its wheel (rocmlab @ file:///opt/rocmlab/wheels/...):
    # a rebuild installs that file again.
    venv, _record, _good, sources = demo
    wheel_dir = tmp_path / "wheels"
    wheel_dir.mkdir()
    wheel = make_wheel(wheel_dir, "1.0")
    pip(venv, "install", "--no-deps", "--force-reinstall", str(wheel))
    good = freeze(venv)
    # (pip 23.1 and later add the wheel's hash; Debian 12's 23.0.1 does not.)
    assert [x.split("#")[0] for x in good if "@" in x] == [f"rocmlab-demo @ {wheel.as_uri()}"]
    pip(venv, "uninstall", "--yes", "rocmlab-demo")

    def run_command(argv, env):
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        return done.returncode, done.stdout, done.stderr

    bare = {**sources, "find_links": ""}  # nothing but the wheel directory
    venv_keep.rebuild(str(venv), good, bare, run_command, str(wheel_dir))
    assert freeze(venv) == good and ours(venv) == []
    # A file of the wheel directory that is not the line's wheel is refused before anything.
    with pytest.raises(venv_keep.RebuildFailed, match="a file outside"):
        venv_keep.rebuild(str(venv), good, bare, run_command, "/opt/rocmlab/wheels")
    assert freeze(venv) == good and ours(venv) == []
