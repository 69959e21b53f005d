"""Unit tests for rocm_repo's keyring code: plugins/module_utils/rocm_gpg.py,
plugins/modules/rocm_keyring_info.py and rocm_keyring.py, and the Molecule verifiers'
molecule/shared/apt_keys.py.

Every keyring here is real: the keys are generated with gpg in a temporary home directory
(an Ed25519 primary key with a Curve25519 subkey, and a second key), and exported the ways apt
finds them (binary, armored, several keys in one file). The fingerprints the tests expect come
from gpg's own KEY_CREATED status lines, not from the parser under test. The modules are
imported by path; their module_utils import from the collection (tests/python/conftest.py
puts collections/ on sys.path, as ansible.cfg's collections_path does for Ansible).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from ansible_modules import load_module, run_module

REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "plugins"

pytestmark = pytest.mark.skipif(shutil.which("gpg") is None, reason="needs gpg")


def load(name: str, path: Path):
    return load_module(name, path)


rocm_gpg = load("rocm_gpg_under_test", PLUGINS / "module_utils" / "rocm_gpg.py")
rocm_keyring_info = load("rocm_keyring_info", PLUGINS / "modules" / "rocm_keyring_info.py")
rocm_keyring = load("rocm_keyring", PLUGINS / "modules" / "rocm_keyring.py")
apt_keys = load("apt_keys", REPO / "molecule" / "shared" / "apt_keys.py")


@dataclass
class Keys:
    """Real key files, and the fingerprints gpg reported when it created the keys."""

    dir: Path
    a: str  # primary key of A (which has a subkey)
    a_sub: str  # A's encryption subkey
    b: str  # primary key of B
    a_gpg: Path  # A alone, binary
    b_gpg: Path  # B alone, binary
    both_gpg: Path  # A then B, binary
    a_asc: Path  # A alone, armored
    both_asc: Path  # A then B, armored
    truncated: Path  # the first 100 bytes of a_gpg: a download cut short
    html: Path  # what a web server answers instead of a key

    def copy(self, name: str, to: Path) -> Path:
        target = to / Path(getattr(self, name)).name
        shutil.copyfile(getattr(self, name), target)
        return target


def created(home: Path, *args: str) -> str:
    """Run a gpg key creation; the fingerprint of its KEY_CREATED status line."""
    out = subprocess.run(
        ["gpg", "--homedir", str(home), "--batch", "--passphrase", "", "--status-fd", "1", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return next(line.split()[3] for line in out.splitlines() if "KEY_CREATED" in line)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    files = tmp_path_factory.mktemp("keys")

    def gpg(*args: str) -> bytes:
        command = ["gpg", "--homedir", str(home), "--batch", *args]
        return subprocess.run(command, capture_output=True, check=True).stdout

    try:
        a = created(home, "--quick-gen-key", "Key A <a@example.org>", "ed25519", "sign", "never")
        a_sub = created(home, "--quick-add-key", a, "cv25519", "encr", "never")
        b = created(home, "--quick-gen-key", "Key B <b@example.org>", "ed25519", "sign", "never")
        outputs = {
            "a.gpg": gpg("--export", a),
            "b.gpg": gpg("--export", b),
            "both.gpg": gpg("--export", a, b),
            "a.asc": gpg("--armor", "--export", a),
            "both.asc": gpg("--armor", "--export", a, b),
        }
    finally:
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)
    for name, data in outputs.items():
        (files / name).write_bytes(data)
    (files / "truncated.gpg").write_bytes(outputs["a.gpg"][:100])
    (files / "page.asc").write_text("<html><body>404 Not Found</body></html>\n")
    return Keys(
        dir=files,
        a=a,
        a_sub=a_sub,
        b=b,
        a_gpg=files / "a.gpg",
        b_gpg=files / "b.gpg",
        both_gpg=files / "both.gpg",
        a_asc=files / "a.asc",
        both_asc=files / "both.asc",
        truncated=files / "truncated.gpg",
        html=files / "page.asc",
    )


def show_keys(path: Path) -> str:
    """gpg --show-keys --with-colons of PATH, as the role's tasks ran it."""
    with rocm_gpg.ScratchGpg() as gpg:
        result = gpg.run("--show-keys", "--with-colons", str(path))
    assert result.returncode == 0, result.stderr
    return result.stdout.decode()


# ---------------------------------------------------------------- parsing gpg's output


def test_a_subkey_fingerprint_is_not_a_primary_key(keys):
    colons = show_keys(keys.a_gpg)
    assert f":{keys.a_sub}:" in colons  # gpg does print the subkey's fingerprint
    assert rocm_gpg.primary_fingerprints(colons) == [keys.a]


def test_a_keyring_of_two_keys_lists_both_in_order(keys):
    assert rocm_gpg.primary_fingerprints(show_keys(keys.both_gpg)) == [keys.a, keys.b]


def test_an_armored_keyring_reads_as_the_binary_one(keys):
    assert rocm_gpg.primary_fingerprints(show_keys(keys.both_asc)) == [keys.a, keys.b]


def test_secret_key_listings_count_sec_records_as_primary(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    try:
        a = created(home, "--quick-gen-key", "Key S <s@example.org>", "ed25519", "sign", "never")
        sub = created(home, "--quick-add-key", a, "cv25519", "encr", "never")
        listing = subprocess.run(
            ["gpg", "--homedir", str(home), "--batch", "--list-secret-keys", "--with-colons"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)
    assert f":{sub}:" in listing
    assert rocm_gpg.primary_fingerprints(listing) == [a]


def test_no_keys_in_no_output():
    assert rocm_gpg.primary_fingerprints("") == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "ca8b b472 7a47 b4d0 9b4e  e896 9386 b48a 1a69 3c5c",
            "CA8BB4727A47B4D09B4EE8969386B48A1A693C5C",
        ),
        ("CA8BB4727A47B4D09B4EE8969386B48A1A693C5C", "CA8BB4727A47B4D09B4EE8969386B48A1A693C5C"),
        ("1A693C5C", None),  # a short key ID is not a fingerprint
        ("CA8BB4727A47B4D09B4EE8969386B48A1A693C5G", None),
        ("", None),
    ],
)
def test_normalize_fingerprint(text, expected):
    assert rocm_gpg.normalize_fingerprint(text) == expected


# ---------------------------------------------------------------- reading files


def test_keyring_fingerprints_of_good_files(keys):
    assert rocm_gpg.keyring_fingerprints(str(keys.a_asc)) == ([keys.a], None)
    assert rocm_gpg.keyring_fingerprints(str(keys.both_gpg)) == ([keys.a, keys.b], None)


@pytest.mark.parametrize("name", ["truncated", "html"])
def test_a_damaged_file_is_reported_with_gpgs_reason(keys, name):
    _found, error = rocm_gpg.keyring_fingerprints(str(getattr(keys, name)))
    assert error is not None and error.startswith("gpg: ")
    assert "keybox" not in error and "trustdb" not in error  # the scratch home's chatter


def test_a_missing_file_is_reported(tmp_path):
    found, error = rocm_gpg.keyring_fingerprints(str(tmp_path / "missing.gpg"))
    assert found == []
    assert error is not None and "No such file" in error


def test_no_gpg_program_says_what_to_install(keys):
    with pytest.raises(rocm_gpg.GpgMissing, match="apt-get install gpg"):
        rocm_gpg.keyring_fingerprints(str(keys.a_gpg), program="no-such-gpg-program")


def processes_naming(text: str) -> list[str]:
    """Command lines of the running processes that contain TEXT."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
        if text in cmdline:
            found.append(cmdline)
    return found


def test_gpg_starts_no_agent(keys):
    # gpg --import starts an agent unless told not to; it would outlive the task.
    with rocm_gpg.ScratchGpg() as gpg:
        assert gpg.import_keys(str(keys.both_gpg)) == [keys.a, keys.b]
        assert not [name for name in os.listdir(gpg.home) if name.startswith("S.gpg-agent")]
        assert processes_naming(gpg.home) == []


def test_gpg_leaves_no_scratch_home(keys, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    rocm_gpg.exported_key(str(keys.both_gpg), keys.a, armor=False)
    rocm_gpg.without_key(str(keys.both_asc), keys.a)
    rocm_gpg.keyring_fingerprints(str(keys.both_gpg))
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- exporting and removing


def test_exported_key_is_the_wanted_key_alone_with_its_subkey(keys, tmp_path):
    out = tmp_path / "keyring.gpg"
    out.write_bytes(rocm_gpg.exported_key(str(keys.both_asc), keys.a, armor=False))
    assert not rocm_gpg.is_armored(out.read_bytes())
    colons = show_keys(out)
    assert rocm_gpg.primary_fingerprints(colons) == [keys.a]
    assert f":{keys.a_sub}:" in colons


def test_exported_key_is_byte_for_byte_what_gpg_exported(keys):
    # What key.yml wrote with `gpg --import key && gpg --export FPR > keyring.gpg`.
    assert rocm_gpg.exported_key(str(keys.both_gpg), keys.a, armor=False) == keys.a_gpg.read_bytes()


def test_exported_key_can_be_armored(keys):
    data = rocm_gpg.exported_key(str(keys.both_gpg), keys.b, armor=True)
    assert rocm_gpg.is_armored(data)


def test_exporting_a_key_the_file_lacks_names_what_it_holds(keys):
    with pytest.raises(rocm_gpg.KeyNotFound) as caught:
        rocm_gpg.exported_key(str(keys.b_gpg), keys.a, armor=False)
    assert caught.value.found == [keys.b]
    assert keys.b in str(caught.value) and keys.a in str(caught.value)


@pytest.mark.parametrize("name", ["both_gpg", "both_asc"])
def test_without_key_keeps_the_other_keys_in_the_files_format(keys, tmp_path, name):
    data, left = rocm_gpg.without_key(str(getattr(keys, name)), keys.a)
    assert left == [keys.b]
    assert rocm_gpg.is_armored(data) == name.endswith("asc")
    out = tmp_path / "left"
    out.write_bytes(data)
    assert rocm_gpg.primary_fingerprints(show_keys(out)) == [keys.b]


def test_without_the_only_key_nothing_is_left(keys):
    assert rocm_gpg.without_key(str(keys.a_gpg), keys.a) == (b"", [])


# ---------------------------------------------------------------- the modules


def test_info_reports_each_file_in_order_with_globs_expanded(keys, tmp_path, capsys, monkeypatch):
    trusted = tmp_path / "trusted.gpg.d"
    trusted.mkdir()
    keys.copy("a_gpg", trusted)
    keys.copy("both_asc", trusted)
    keys.copy("truncated", trusted)
    result = run_module(
        rocm_keyring_info,
        {
            "paths": [
                str(tmp_path / "trusted.gpg"),  # missing
                str(trusted / "*.gpg"),
                str(trusted / "*.asc"),
                str(trusted / "*.nothing"),  # a glob that matches nothing adds nothing
                str(trusted / "a.gpg"),  # already listed
            ],
            "fingerprint": keys.a.lower(),
            "_ansible_check_mode": True,
        },
        capsys,
        monkeypatch,
    )
    assert result["changed"] is False
    assert result["fingerprint"] == keys.a
    rings = {Path(ring["path"]).name: ring for ring in result["keyrings"]}
    assert list(rings) == ["trusted.gpg", "a.gpg", "truncated.gpg", "both.asc"]
    assert rings["trusted.gpg"] == {
        "path": str(tmp_path / "trusted.gpg"),
        "exists": False,
        "fingerprints": [],
        "error": None,
        "holds": False,
        "only_key": False,
    }
    assert rings["a.gpg"]["fingerprints"] == [keys.a]
    assert (rings["a.gpg"]["holds"], rings["a.gpg"]["only_key"]) == (True, True)
    assert rings["a.gpg"]["error"] is None
    assert rings["both.asc"]["fingerprints"] == [keys.a, keys.b]
    assert (rings["both.asc"]["holds"], rings["both.asc"]["only_key"]) == (True, False)
    assert rings["truncated.gpg"]["exists"] is True
    assert rings["truncated.gpg"]["error"]


def test_info_without_fingerprint_lists_keys_only(keys, capsys, monkeypatch):
    result = run_module(rocm_keyring_info, {"paths": [str(keys.b_gpg)]}, capsys, monkeypatch)
    assert "fingerprint" not in result
    assert result["keyrings"] == [
        {"path": str(keys.b_gpg), "exists": True, "fingerprints": [keys.b], "error": None}
    ]


def test_info_reports_a_directory_as_not_a_keyring(tmp_path, capsys, monkeypatch):
    result = run_module(rocm_keyring_info, {"paths": [str(tmp_path)]}, capsys, monkeypatch)
    assert result["keyrings"][0]["error"] == "not a regular file"


def test_info_refuses_a_malformed_fingerprint(keys, capsys, monkeypatch):
    result = run_module(
        rocm_keyring_info,
        {"paths": [str(keys.a_gpg)], "fingerprint": "1A693C5C"},
        capsys,
        monkeypatch,
    )
    assert result["failed"] is True
    assert "fingerprint: '1A693C5C'" in result["msg"]
    assert "40 or 64 hexadecimal digits" in result["msg"]


def test_keyring_present_writes_the_verified_key_alone(keys, tmp_path, capsys, monkeypatch):
    dest = tmp_path / "keyring.gpg"
    args = {
        "src": str(keys.both_asc),
        "path": str(dest),
        "fingerprint": " ".join(keys.a[i : i + 4] for i in range(0, 40, 4)).lower(),
        "mode": "0644",
    }
    result = run_module(rocm_keyring, args, capsys, monkeypatch)
    assert result["changed"] is True
    assert result["fingerprints"] == [keys.a]
    assert dest.read_bytes() == keys.a_gpg.read_bytes()
    assert stat.S_IMODE(dest.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["keyring.gpg"]  # no temporary file left
    again = run_module(rocm_keyring, args, capsys, monkeypatch)
    assert again["changed"] is False


def test_keyring_present_armors_an_asc_path(keys, tmp_path, capsys, monkeypatch):
    dest = tmp_path / "rocm.asc"
    args = {"src": str(keys.both_gpg), "path": str(dest), "fingerprint": keys.b}
    assert run_module(rocm_keyring, args, capsys, monkeypatch)["changed"] is True
    assert rocm_gpg.is_armored(dest.read_bytes())
    assert rocm_gpg.keyring_fingerprints(str(dest)) == ([keys.b], None)


def test_keyring_present_replaces_another_key(keys, tmp_path, capsys, monkeypatch):
    dest = keys.copy("b_gpg", tmp_path)
    args = {"src": str(keys.a_asc), "path": str(dest), "fingerprint": keys.a, "_ansible_diff": True}
    result = run_module(rocm_keyring, args, capsys, monkeypatch)
    assert result["changed"] is True
    assert result["diff"]["before"] == f"{keys.b}\n"
    assert result["diff"]["after"] == f"{keys.a}\n"
    assert dest.read_bytes() == keys.a_gpg.read_bytes()


def test_keyring_present_in_check_mode_writes_nothing(keys, tmp_path, capsys, monkeypatch):
    dest = tmp_path / "keyring.gpg"
    args = {
        "src": str(keys.a_gpg),
        "path": str(dest),
        "fingerprint": keys.a,
        "_ansible_check_mode": True,
    }
    assert run_module(rocm_keyring, args, capsys, monkeypatch)["changed"] is True
    assert not dest.exists()


def test_keyring_present_refuses_a_download_without_the_key(keys, tmp_path, capsys, monkeypatch):
    dest = keys.copy("a_gpg", tmp_path)
    before = dest.read_bytes()
    args = {"src": str(keys.b_gpg), "path": str(dest), "fingerprint": keys.a}
    result = run_module(rocm_keyring, args, capsys, monkeypatch)
    assert result["failed"] is True
    assert result["src_fingerprints"] == [keys.b]
    assert result["msg"].startswith("src: ") and keys.b in result["msg"]
    assert dest.read_bytes() == before


def test_keyring_present_refuses_a_download_that_is_no_key(keys, tmp_path, capsys, monkeypatch):
    args = {"src": str(keys.html), "path": str(tmp_path / "k.gpg"), "fingerprint": keys.a}
    result = run_module(rocm_keyring, args, capsys, monkeypatch)
    assert result["failed"] is True
    assert result["msg"].startswith(f"src: cannot read the key file {keys.html}: gpg: ")
    assert "no valid OpenPGP data" in result["msg"]
    assert not (tmp_path / "k.gpg").exists()


def test_keyring_present_needs_src(keys, tmp_path, capsys, monkeypatch):
    args = {"path": str(tmp_path / "k.gpg"), "fingerprint": keys.a}
    result = run_module(rocm_keyring, args, capsys, monkeypatch)
    assert result["failed"] is True
    assert "src" in result["msg"]


@pytest.mark.parametrize("name", ["both_gpg", "both_asc"])
def test_keyring_absent_removes_the_key_and_keeps_the_rest(
    keys, tmp_path, capsys, monkeypatch, name
):
    ring = keys.copy(name, tmp_path)
    ring.chmod(0o640)
    args = {"path": str(ring), "fingerprint": keys.a, "state": "absent"}
    result = run_module(rocm_keyring, args, capsys, monkeypatch)
    assert result["changed"] is True
    assert result["fingerprints"] == [keys.b]
    assert rocm_gpg.keyring_fingerprints(str(ring)) == ([keys.b], None)
    assert rocm_gpg.is_armored(ring.read_bytes()) == name.endswith("asc")
    assert stat.S_IMODE(ring.stat().st_mode) == 0o640  # the file keeps its mode
    assert run_module(rocm_keyring, args, capsys, monkeypatch)["changed"] is False


def test_keyring_absent_in_check_mode_changes_nothing(keys, tmp_path, capsys, monkeypatch):
    ring = keys.copy("both_gpg", tmp_path)
    before = ring.read_bytes()
    args = {
        "path": str(ring),
        "fingerprint": keys.a,
        "state": "absent",
        "_ansible_check_mode": True,
    }
    result = run_module(rocm_keyring, args, capsys, monkeypatch)
    assert (result["changed"], result["fingerprints"]) == (True, [keys.b])
    assert ring.read_bytes() == before


def test_keyring_absent_leaves_a_missing_file_missing(keys, tmp_path, capsys, monkeypatch):
    args = {"path": str(tmp_path / "trusted.gpg"), "fingerprint": keys.a, "state": "absent"}
    result = run_module(rocm_keyring, args, capsys, monkeypatch)
    assert (result["changed"], result["fingerprints"]) == (False, [])
    assert not (tmp_path / "trusted.gpg").exists()


def test_keyring_absent_fails_on_a_file_gpg_cannot_read(keys, tmp_path, capsys, monkeypatch):
    ring = keys.copy("truncated", tmp_path)
    args = {"path": str(ring), "fingerprint": keys.b, "state": "absent"}
    result = run_module(rocm_keyring, args, capsys, monkeypatch)
    assert result["failed"] is True
    assert result["msg"].startswith(f"path: cannot read the keyring {ring}: gpg: ")


# ---------------------------------------------------------------- the Molecule verifiers' helper


def test_apt_keys_reads_a_hosts_keyring_with_the_same_parser(keys):
    testinfra = pytest.importorskip("testinfra")
    host = testinfra.get_host("local://")
    assert apt_keys.primary_fingerprints(host, str(keys.both_asc)) == [keys.a, keys.b]
    assert apt_keys.primary_fingerprints(host, str(keys.a_gpg)) == [keys.a]
    with pytest.raises(AssertionError):  # an unreadable keyring is not read as "no keys"
        apt_keys.primary_fingerprints(host, str(keys.html))
