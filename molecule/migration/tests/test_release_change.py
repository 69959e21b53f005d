"""The configured release is the installed release: the converged host (ROCm 6.4.2 from the
AMD-layout mirror) is moved to 7.1 by the README's steps as written (its section "Changing the
ROCm release": the release set in the inventory, site.yml run, the smoke job passing), then
back to 6.4.2 by rocm_repo_version alone, and each time every AMD package is the release's own
version, /opt/rocm points at it, nothing of the other release is left and a second run changes
nothing. Then the rollback: the host's 6.4.2 state recorded as known-good, the host moved to
7.1, and playbooks/rollback.yml puts it back (packages, apt files byte-identical). Runs after
test_migration.py (pytest collects the files in name order) and leaves the host on 6.4.2
again."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import testinfra
import yaml
from playbook_runs import ansible_env, changed, keep, play, said

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
PLAYBOOK = PROJECT / "playbooks" / "rocm.yml"
HOST = "rocmlab-migration-debian12"
EPHEMERAL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
VENV = "/opt/rocmlab/venvs/pytorch"

sys.path.insert(0, str(PROJECT / "collections"))
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.rocm_release import (  # noqa: E402
    release_of,
)

# The packages rocm-hip-sdk and rocm-opencl-sdk pull in from the mirror (its build.sh).
AMD_PACKAGES = {
    "rocm-core", "rocm-hip-runtime", "rocm-hip-libraries", "rocm-hip-sdk", "rocm-opencl-runtime",
    "rocm-opencl-sdk", "rocminfo", "rocm-smi",
}  # fmt: skip
# The apt files rocm_repo writes, with their names.
APT_FILES = "tail -n +1 /etc/apt/sources.list.d/* /etc/apt/preferences.d/* 2>/dev/null || true"


@pytest.fixture(scope="module")
def node():
    return testinfra.get_host(f"ansible://{HOST}?ansible_inventory={INVENTORY}")


def installed(node) -> dict[str, str]:
    out = node.check_output("dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\\n'")
    return {
        fields[1]: fields[2]
        for fields in (line.split() for line in out.splitlines())
        if fields[0] == "ii"
    }


def assert_on_release(node, release: str, other: str) -> None:
    packages = installed(node)
    # Every package of the release (and of the other one), whatever its name; Debian's own with
    # release-like versions (DEBIAN_LOOKALIKES, installed by a later test) read as other releases.
    amd = {name: version for name, version in packages.items() if release_of(version) == release}
    assert set(amd) == AMD_PACKAGES, amd
    assert not [name for name, version in packages.items() if release_of(version) == other]
    assert node.file("/opt/rocm").linked_to == f"/opt/rocm-{release}"
    assert node.file(f"/opt/rocm-{release}/.info/version").content_string.strip() == release
    assert not node.file(f"/opt/rocm-{other}").exists
    # Nothing left for the next `apt upgrade` to switch outside rocmlab.
    upgradable = node.check_output("apt list --upgradable 2>/dev/null")
    assert not [name for name in AMD_PACKAGES if f"\n{name}/" in f"\n{upgradable}"], upgradable


def test_check_mode_names_the_move_and_changes_nothing(node):
    before = installed(node)
    sources = node.check_output(APT_FILES)
    run = play(PLAYBOOK, {"rocm_repo_version": "7.1"}, "--check")
    assert run.returncode == 0, said(run)[-3000:]
    text = said(run)
    assert "6.4.2 \u2192 7.1.0: these packages change: " in text, text[-3000:]
    assert "rocm-core" in text.split("these packages change: ", 1)[1]
    assert installed(node) == before
    assert node.check_output(APT_FILES) == sources


def readme_section(heading: str) -> dict[str, list[str]]:
    """The fenced blocks of the README's section HEADING, by their language."""
    text = (PROJECT / "README.md").read_text()
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    body = text[start : end if end > 0 else len(text)]
    blocks: dict[str, list[str]] = {}
    for lang, block in re.findall(r"^```(\w+)\n(.*?)^```$", body, re.M | re.S):
        blocks.setdefault(lang, []).append(block)
    return blocks


def as_the_readme_says(lab: Path) -> subprocess.CompletedProcess:
    """The README's release change on LAB, a copy of the scenario's inventory standing in for
    inventory/lab: its yaml set in the file its first line names, its command run as written
    from the checkout, with LAB in place of inventory/lab."""
    blocks = readme_section("## Changing the ROCm release")
    assert len(blocks.get("yaml", [])) == 1 and len(blocks.get("sh", [])) == 1, blocks
    (settings,), (command,) = blocks["yaml"], blocks["sh"]
    target = settings.splitlines()[0].removeprefix("#").strip()
    assert target.startswith("inventory/lab/"), settings
    shutil.rmtree(lab, ignore_errors=True)
    shutil.copytree(Path(INVENTORY).parent, lab)
    path = lab / target.removeprefix("inventory/lab/")
    # Molecule names the group's file without its extension: the same file, edited.
    current = {}
    for old in (path.with_suffix(""), path):
        if old.exists():
            current.update(yaml.safe_load(old.read_text()) or {})
            old.unlink()
    path.write_text(yaml.safe_dump({**current, **yaml.safe_load(settings)}))
    argv = shlex.split(command)
    assert argv[:2] == ["ansible-playbook", "-i"] and argv[2] == "inventory/lab", command
    started = time.monotonic()
    run = subprocess.run(
        [*argv[:2], str(lab), *argv[3:]],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        env=ansible_env(),
        check=False,
    )
    keep(run, time.monotonic() - started)
    return run


def test_the_readmes_release_change_run_as_written_moves_the_host(node):
    run = as_the_readme_says(EPHEMERAL / "lab")
    assert run.returncode == 0, said(run)[-3000:]
    assert "6.4.2 \u2192 7.1.0: 8 packages change (" in said(run), said(run)[-3000:]
    assert_on_release(node, "7.1.0", "6.4.2")
    # PyTorch as this lab pinned it (the wheelhouse's CPU build; the README: "unless you pinned
    # them"), recorded as asked and as installed.
    record = json.loads(node.file("/etc/rocmlab/pytorch.json").content_string)
    assert record["torch_requested"] == "2.13.0", record
    assert record["torch_version"].startswith("2.13.0"), record
    # The smoke job passed on the new release, and its state is the host's known-good one.
    report = json.loads((EPHEMERAL / "reports" / f"{HOST}.json").read_text())
    assert report["passed"] is True and report["torch_version"].startswith("2.13.0"), report
    good = json.loads(node.file("/var/lib/rocmlab/known-good.json").content_string)
    assert good["rocm_version"] == "7.1.0" and VENV in good["venvs"], good


def test_a_second_run_on_the_new_release_changes_nothing(node):
    run = play(PLAYBOOK, {"rocm_repo_version": "7.1"})
    assert run.returncode == 0, said(run)[-3000:]
    assert changed(run) == 0, said(run)[-3000:]
    assert_on_release(node, "7.1.0", "6.4.2")


def test_going_back_downgrades_to_the_old_release_cleanly(node):
    run = play(PLAYBOOK, {"rocm_repo_version": "6.4.2"})
    assert run.returncode == 0, said(run)[-3000:]
    text = said(run)
    assert "7.1.0 \u2192 6.4.2: 8 packages change (" in text, text[-3000:]
    # AMD's own 7.1 rocminfo, no longer offered by any source, is not taken for Debian's.
    # (Its refusal, not the task's name, which every run prints.)
    assert "the distribution's ROCm packages are installed in versions above AMD's" not in text
    assert_on_release(node, "6.4.2", "7.1.0")
    assert installed(node)["rocminfo"] == "1.0.0.60402-1"
    again = play(PLAYBOOK, {"rocm_repo_version": "6.4.2"})
    assert again.returncode == 0 and changed(again) == 0, said(again)[-3000:]


# Every apt file's path, mode, owner and SHA-256: what a rollback must put back byte-identical.
APT_STATE = (
    "for f in /etc/apt/sources.list.d/* /etc/apt/preferences.d/* /etc/apt/keyrings/*"
    ' /etc/apt/apt.conf.d/*; do [ -f "$f" ] || continue; stat -c \'%n %a %U %G\' "$f";'
    ' sha256sum "$f"; done'
)
RECORD = Path(__file__).resolve().parents[1] / "record-known-good.yml"
ROLLBACK = PROJECT / "playbooks" / "rollback.yml"


def test_a_rollback_returns_the_host_to_its_known_good_state(node):
    # On 6.4.2 (the case before): its state recorded as known-good, then moved to 7.1.
    run = play(RECORD, {"rocm_repo_version": "6.4.2"})
    assert run.returncode == 0, said(run)[-3000:]
    good = installed(node)
    good_files = node.check_output(APT_STATE)
    assert node.file("/var/lib/rocmlab/known-good.json").exists
    run = play(PLAYBOOK, {"rocm_repo_version": "7.1"})
    assert run.returncode == 0, said(run)[-3000:]
    assert_on_release(node, "7.1.0", "6.4.2")
    moved_files = node.check_output(APT_STATE)
    assert moved_files != good_files

    # Check mode says where the host goes and changes nothing.
    check = play(ROLLBACK, {}, "--check")
    assert check.returncode == 0, said(check)[-3000:]
    assert "7.1.0 \u2192 6.4.2 (the known-good state since " in said(check), said(check)[-3000:]
    assert "8 package(s) change (" in said(check)
    assert node.check_output(APT_STATE) == moved_files
    assert {release_of(v) for n, v in installed(node).items() if n in AMD_PACKAGES} == {"7.1.0"}

    run = play(ROLLBACK, {})
    assert run.returncode == 0, said(run)[-3000:]
    assert_on_release(node, "6.4.2", "7.1.0")
    now = installed(node)
    assert {n: v for n, v in now.items() if release_of(v)} == {
        n: v for n, v in good.items() if release_of(v)
    }  # AMD's packages: exactly the recorded versions
    assert set(good) <= set(now)  # nothing the host had is gone
    assert node.check_output(APT_STATE) == good_files  # byte-identical, same mode and owner
    again = play(ROLLBACK, {})
    assert again.returncode == 0 and changed(again) == 0, said(again)[-3000:]
    assert "the host is in its known-good state already" in said(again)


# Debian 12's own packages whose versions end in a 5- or 6-digit field as AMD's do
# (liberror-perl 0.17029 reads as "ROCm 1.70.29"), and git, which depends on liberror-perl.
DEBIAN_LOOKALIKES = ["liberror-perl", "libmoo-perl", "librole-tiny-perl", "git"]
AUDIT = "dpkg --audit"


def test_a_rollback_leaves_debians_packages_installed_after_the_record_alone(node):
    # The record of the test before (6.4.2) predates them: installed now, then a change undone.
    node.run_expect(
        [0], "DEBIAN_FRONTEND=noninteractive apt-get install -y -q " + " ".join(DEBIAN_LOOKALIKES)
    )
    debian = {name: installed(node)[name] for name in DEBIAN_LOOKALIKES}
    assert release_of(debian["liberror-perl"]) == "1.70.29"  # what a version string suggests
    run = play(PLAYBOOK, {"rocm_repo_version": "7.1"})
    assert run.returncode == 0, said(run)[-3000:]
    run = play(ROLLBACK, {})
    assert run.returncode == 0, said(run)[-3000:]
    text = said(run)
    assert not [name for name in DEBIAN_LOOKALIKES if f"{name}-" in text or f"{name}=" in text]
    assert_on_release(node, "6.4.2", "7.1.0")
    now = installed(node)
    assert {name: now.get(name) for name in DEBIAN_LOOKALIKES} == debian
    ledger = node.check_output("cat /var/lib/rocmlab/amd-packages.json")
    assert not [name for name in DEBIAN_LOOKALIKES if f'"{name}"' in ledger], ledger


def test_a_failed_upgrade_is_undone_by_the_rollback(node):
    # 7.1.2's rocm-hip-runtime postinst exits 1 (the mirror's build.sh): the upgrade fails and
    # leaves it half-configured and what depends on it unpacked.
    good = installed(node)
    good_files = node.check_output(APT_STATE)
    run = play(PLAYBOOK, {"rocm_repo_version": "7.1.2"})
    assert run.returncode != 0
    assert "rocm-hip-runtime" in said(run), said(run)[-3000:]
    assert "half configured" in node.check_output(AUDIT)
    # Check mode says where the host goes and changes nothing, the half-done dpkg included.
    check = play(ROLLBACK, {}, "--check")
    assert check.returncode == 0, said(check)[-3000:]
    assert "7.1.2 \u2192 6.4.2 (the known-good state since " in said(check), said(check)[-3000:]
    run = play(ROLLBACK, {})
    assert run.returncode == 0, said(run)[-3000:]
    assert "Not fully installed, and replaced or removed by this run" in said(run)
    assert node.check_output(AUDIT) == ""  # dpkg is whole again
    assert_on_release(node, "6.4.2", "7.1.2")
    now = installed(node)
    assert {n: v for n, v in now.items() if release_of(v)} == {
        n: v for n, v in good.items() if release_of(v)
    }
    assert node.check_output(APT_STATE) == good_files
    again = play(ROLLBACK, {})
    assert again.returncode == 0 and changed(again) == 0, said(again)[-3000:]


def test_a_failed_upgrade_is_also_mended_by_moving_on(node):
    # The same failure, then the admin configures another release: the move replaces the
    # half-configured packages (no `dpkg --configure -a` of a script that fails).
    run = play(PLAYBOOK, {"rocm_repo_version": "7.1.2"})
    assert run.returncode != 0 and "half configured" in node.check_output(AUDIT)
    run = play(PLAYBOOK, {"rocm_repo_version": "7.1"})
    assert run.returncode == 0, said(run)[-3000:]
    assert "Not fully installed, and replaced or removed by this run" in said(run)
    assert node.check_output(AUDIT) == ""
    assert_on_release(node, "7.1.0", "7.1.2")
    run = play(PLAYBOOK, {"rocm_repo_version": "6.4.2"})  # back to where the next test starts
    assert run.returncode == 0, said(run)[-3000:]
    assert_on_release(node, "6.4.2", "7.1.0")


def test_a_rollback_without_a_record_says_so_and_changes_nothing(node):
    node.run_expect([0], "mv /var/lib/rocmlab/known-good.json /root/known-good.json")
    try:
        before = installed(node)
        run = play(ROLLBACK, {})
    finally:
        node.run_expect([0], "mv /root/known-good.json /var/lib/rocmlab/known-good.json")
    assert run.returncode != 0
    assert "there is no known-good record at /var/lib/rocmlab/known-good.json" in said(run)
    assert installed(node) == before
    assert not node.file("/run/rocmlab.lock").exists
