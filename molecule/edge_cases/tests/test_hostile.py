"""Hostile input and faults (issue: nothing from the inventory reaches a shell or a config file
unchecked, and every rollback restores).

- A table of hostile values per role, one class of attack per row: all of them run as aliases
  of the two containers in ONE ansible-playbook run of the site playbook; each alias must be
  refused by the first play with its variable named, and neither container may change.
- A ROCm upgrade against a broken repository puts the overwritten sources back.
- dpkg left half-done is refused with the repair command, or repaired when allowed.
- Two runs at once: the second is refused naming the first, which waits for the dpkg lock
  (held on purpose by a process here) and says who holds it.

The cases bring their own preconditions and do not depend on the order they run in.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import playbook_runs
import pytest
import testinfra
from playbook_runs import ansible_env, failures, play_aliases, refusal, said

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
SITE = PROJECT / "playbooks" / "site.yml"
ROCM = PROJECT / "playbooks" / "rocm.yml"
D12, D13 = "rocmlab-edge-debian12", "rocmlab-edge-debian13"

# What a refused run must not have touched (as test_edge_cases.py), plus the venvs and rocmlab's
# own files, and the lock.
SNAPSHOT = (
    "find /etc/apt /etc/ld.so.conf.d /etc/profile.d /etc/environment.d /etc/rocmlab"
    " /opt/rocmlab /var/lib/rocmlab /run/rocmlab.lock -type f -print0 2>/dev/null"
    " | sort -z | xargs -0 -r sha256sum;"
    " stat -c '%n %U %G %a' /etc /usr /opt /var/lib 2>/dev/null; cat /etc/group /etc/passwd;"
    " ls /tmp; dpkg-query -W -f '${Package} ${Version} ${Status}\\n'"
)


def host(name: str):
    return testinfra.get_host(f"ansible://{name}?ansible_inventory={INVENTORY}")


# (id, container, variables, fragments the refusal must contain). The smoke job and TensorFlow
# are on for every alias, so that their settings are checked too.
HOSTILE = [
    # Newlines that would become lines of their own in apt's files.
    (
        "version-newline",
        D12,
        {"rocm_repo_version": "6.4.2\n"},
        ['rocm_repo_version: "6.4.2\\n"', "control character"],
    ),
    (
        "url-new-field",
        D12,
        {"rocm_repo_base_url": "https://repo.radeon.com\nSigned-By: /tmp/k"},
        ["rocm_repo_base_url", "control character"],
    ),
    (
        "url-appended",
        D12,
        {"rocm_repo_base_url": "https://repo.radeon.com/ ./"},
        ["rocm_repo_base_url", "http(s) URL"],
    ),
    (
        "pin-second-priority",
        D12,
        {"rocm_repo_pin_origin": "repo.radeon.com\nPin-Priority: 1001"},
        ["rocm_repo_pin_origin", "control character"],
    ),
    (
        "suite-injection",
        D12,
        {"rocm_repo_suite": "jammy main\nTypes: deb-src"},
        ["rocm_repo_suite", "control character"],
    ),
    (
        "keyring-trusted-d",
        D12,
        {"rocm_repo_keyring": "/etc/apt/trusted.gpg.d/rocm.gpg"},
        ["rocm_repo_keyring", "must lie in /etc/apt/keyrings"],
    ),
    (
        "keyring-relative",
        D12,
        {"rocm_repo_keyring": "keyrings/rocm.gpg"},
        ["rocm_repo_keyring", "not an absolute path"],
    ),
    # Shell in what reaches profile.d and ld.so.conf.d.
    (
        "prefix-command",
        D12,
        {"rocm_packages_prefix": "/opt/rocm$(touch /tmp/pwned)"},
        ["rocm_packages_prefix", "shell characters"],
    ),
    (
        "prefix-system-dir",
        D12,
        {"rocm_packages_prefix": "/usr"},
        ["rocm_packages_prefix", "system directory"],
    ),
    (
        "packages-string",
        D12,
        {"rocm_packages_extra": "rocm-ml-sdk"},
        ["rocm_packages_extra", "is a string, not a list"],
    ),
    (
        "package-option",
        D12,
        {"rocm_packages_extra": ["-o APT::Get::AllowUnauthenticated=1"]},
        ["rocm_packages_extra[0]", "not a Debian package name"],
    ),
    # Accounts and groups.
    (
        "user-newline",
        D12,
        {"user_groups_users": ["researcher\nroot"]},
        ["user_groups_users[0]", "control character"],
    ),
    (
        "users-string",
        D12,
        {"user_groups_users": "researcher"},
        ["user_groups_users", "is a string, not a list"],
    ),
    (
        "group-shell",
        D13,
        {"user_groups_groups": ["render;id"]},
        ["user_groups_groups[0]", "not a group name"],
    ),
    # The environment files a login shell (root's too) sources.
    (
        "gfx-note-newline",
        D13,
        {"gfx_override_targets_extra": {"gfx1031": {"note": "x\nexport LD_PRELOAD=/tmp/x.so"}}},
        ["gfx_override_targets_extra.gfx1031.note", "control character"],
    ),
    (
        "gfx-override-newline",
        D13,
        {"gfx_override_targets_extra": {"gfx1031": {"override": "10.3.0\nLD_PRELOAD=/tmp/x.so"}}},
        ["gfx_override_targets_extra.gfx1031.override", "control character"],
    ),
    (
        "gfx-pci-name-newline",
        D13,
        {"gfx_override_pci_ids_extra": {"73df": {"gfx": "gfx1031", "name": "Navi\nrm -rf /"}}},
        ["gfx_override_pci_ids_extra.73df.name", "control character"],
    ),
    (
        "gfx-version-newline",
        D13,
        {"gfx_override_mode": "manual", "gfx_override_version": "10.3.0\n"},
        ["gfx_override_version", "control character"],
    ),
    # Paths the roles create or own.
    (
        "venv-etc",
        D12,
        {"pytorch_rocm_venv": "/etc"},
        ['pytorch_rocm_venv: "/etc" is a system directory'],
    ),
    (
        "venv-dotdot",
        D12,
        {"pytorch_rocm_venv": "/opt/rocmlab/../../etc"},
        ["pytorch_rocm_venv", "normalised"],
    ),
    ("venv-root", D13, {"tensorflow_rocm_venv": "/"}, ["tensorflow_rocm_venv", "system directory"]),
    (
        "result-file-passwd",
        D12,
        {"pytorch_rocm_result_file": "/etc/passwd"},
        ["pytorch_rocm_result_file", "must end in .json"],
    ),
    (
        "data-dir-shell",
        D12,
        {"smoke_test_data_dir": "/var/lib/rocmlab/data; touch /tmp/pwned"},
        ["smoke_test_data_dir", "shell characters"],
    ),
    ("smoke-venv-usr", D13, {"smoke_test_venv": "/usr"}, ["smoke_test_venv", "system directory"]),
    # "Never an extra index", however pip spells it.
    (
        "pip-extra-index-abbrev",
        D12,
        {"pytorch_rocm_pip_extra_args": ["--extra-index=https://pypi.org/simple"]},
        ["found: --extra-index-url, as pip reads"],
    ),
    (
        "pip-short-attached",
        D12,
        {"pytorch_rocm_pip_extra_args": ["-ihttps://pypi.org/simple"]},
        ["found: --index-url, as pip reads"],
    ),
    (
        "pip-find-abbrev",
        D13,
        {"tensorflow_rocm_pip_extra_args": ["--find", "https://x/"]},
        ["found: --find-links, as pip reads"],
    ),
    (
        "pip-requirement",
        D12,
        {"pytorch_rocm_pip_extra_args": ["--proxy=http://p:3128", "torch==2.5.0+cu121"]},
        ["a requirement"],
    ),
    (
        "pip-args-string",
        D12,
        {"pytorch_rocm_pip_extra_args": "--proxy=http://p:3128"},
        ["pytorch_rocm_pip_extra_args", "not a list of strings"],
    ),
    (
        "index-with-extra",
        D12,
        {
            "pytorch_rocm_index_url": "https://download.pytorch.org/whl/rocm6.4 --extra-index-url https://pypi.org/simple"
        },
        ["pytorch_rocm_index_url", "http(s) URL"],
    ),
    (
        "tf-package-spec",
        D13,
        {"tensorflow_rocm_package": "tensorflow-rocm==2.14 ; echo"},
        ["tensorflow_rocm_package", "not a Python distribution name"],
    ),
    # The smoke job's command line.
    (
        "smoke-args-string",
        D12,
        {"smoke_test_args": "--epochs 1"},
        ["smoke_test_args", "is a string, not a list"],
    ),
    (
        "smoke-args-json",
        D12,
        {"smoke_test_args": ["--js=/etc/passwd"]},
        ["smoke_test_args[0]", "(or abbreviates) --json"],
    ),
    (
        "smoke-url-space",
        D13,
        {"smoke_test_mnist_url": "http://mirror/mnist/ x"},
        ["smoke_test_mnist_url", "URL"],
    ),
]
# TensorFlow is off unless a case sets a TensorFlow setting (its Python check would refuse
# Debian 13 first).
TF = {"tensorflow_rocm_enabled": True, "tensorflow_rocm_package": "tensorflow-cpu"}


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    """One site.yml run over every hostile alias, with both containers' snapshots around it."""
    aliases = {
        c[0]: (c[1], {**(TF if any(k.startswith("tensorflow") for k in c[2]) else {}), **c[2]})
        for c in HOSTILE
    }
    run, before, after = play_aliases(
        tmp_path_factory.mktemp("hostile") / "inventory.json",
        aliases,
        SITE,
        lambda: {name: host(name).check_output(SNAPSHOT) for name in (D12, D13)},
    )
    return run, failures(run), before, after


def test_no_hostile_value_changes_either_host(hostile_run):
    run, _, before, after = hostile_run
    assert run.returncode != 0
    assert after == before
    for name in (D12, D13):
        assert not host(name).file("/tmp/pwned").exists


@pytest.mark.parametrize(
    ("case", "container", "extra", "expected"), HOSTILE, ids=[c[0] for c in HOSTILE]
)
def test_each_hostile_value_is_refused_naming_it(hostile_run, case, container, extra, expected):
    _, failed, _, _ = hostile_run
    message = refusal(failed, case, expected)
    assert "Nothing on this host was changed" in message


# --- Rollback: ROCm 6.4.2 -> 7.1 against a broken 7.1 repository. ---
LOCAL_MIRROR = "http://127.0.0.1:8081"
SOURCES = ["/etc/apt/sources.list.d/rocm.sources", "/etc/apt/sources.list.d/amdgpu.sources"]
GRAPHICS = "/etc/apt/sources.list.d/rocm-graphics.sources"


def serve_broken_mirror(h) -> None:
    """A copy of the AMD-layout mirror served inside the container, its 7.1 index removed: the
    InRelease answers (the preflight passes), `apt-get update` fails on the missing Packages."""
    mirror = os.environ["ROCMLAB_MIRROR_DIR"]
    h.check_output("rm -rf /srv/amd-mirror && mkdir -p /srv")
    subprocess.run(["docker", "cp", f"{mirror}/.", f"{D12}:/srv/amd-mirror"], check=True)
    h.check_output("rm -f /srv/amd-mirror/rocm/apt/7.1/dists/jammy/main/binary-amd64/Packages*")
    h.check_output(
        "(python3 -m http.server 8081 --bind 127.0.0.1 --directory /srv/amd-mirror"
        " >/var/log/broken-mirror.log 2>&1 &) ; for i in $(seq 50); do"
        " python3 -c 'import urllib.request as u; u.urlopen(\"%s/rocm/rocm.gpg.key\")' && exit 0;"
        " sleep 0.2; done; exit 1",
        LOCAL_MIRROR,
    )


def test_a_failed_upgrade_puts_the_overwritten_sources_back():
    h = host(D12)
    serve_broken_mirror(h)
    first = playbook_runs.play(
        ROCM,
        {"rocm_repo_base_url": LOCAL_MIRROR, "rocm_repo_version": "6.4.2"},
        "--limit",
        D12,
        "--tags",
        "rocm_repo",
    )
    assert first.returncode == 0, said(first)[-3000:]
    before = {path: h.file(path).content_string for path in SOURCES}
    assert "rocm/apt/6.4.2" in before[SOURCES[0]]

    run = playbook_runs.play(
        ROCM,
        {"rocm_repo_base_url": LOCAL_MIRROR, "rocm_repo_version": "7.1"},
        "--limit",
        D12,
        "--tags",
        "rocm_repo",
    )
    assert run.returncode != 0
    message = " ".join(failures(run)[D12].split())
    assert "rocm_repo: apt-get update failed with the new sources for ROCm 7.1: " in message, (
        message
    )
    # apt's own words, not an empty cause.
    assert "rocm/apt/7.1" in message and "Packages" in message
    kept = ["/etc/apt/keyrings/rocm.gpg", "/etc/apt/preferences.d/rocm-pin-600", *SOURCES]
    assert f"Put back as they were: {', '.join(kept)}" in message
    assert f"removed, as this run had added them: {GRAPHICS}" in message
    assert "apt-get update works again with the previous configuration" in message
    assert {path: h.file(path).content_string for path in SOURCES} == before
    assert not h.file(GRAPHICS).exists
    update = h.run("apt-get update 2>&1")
    assert update.rc == 0 and "E:" not in update.stdout and "W:" not in update.stdout, update.stdout


# --- dpkg left half-done ---
def test_an_interrupted_dpkg_is_refused_with_the_command_then_repaired_when_allowed():
    h = host(D13)
    h.check_output(
        "apt-get update -qq && cd /tmp && apt-get download -qq hello"
        " && dpkg --unpack /tmp/hello_*.deb && rm -f /tmp/hello_*.deb"
    )
    assert "unpacked" in h.check_output("dpkg-query -W -f '${Status}' hello")
    refused = playbook_runs.refused_without_change(
        h, SNAPSHOT, lambda: playbook_runs.play(ROCM, {}, "--limit", D13)
    )
    assert "hello unpacked" in refused, refused[-2000:]
    assert "Run `sudo dpkg --configure -a` on the host, or set rocmlab_dpkg_repair: true" in refused

    repaired = playbook_runs.play(ROCM, {"rocmlab_dpkg_repair": True}, "--limit", D13)
    assert repaired.returncode == 0, said(repaired)[-3000:]
    assert h.check_output("dpkg-query -W -f '${Status}' hello") == "install ok installed"


# --- Two runs at once ---
HOLD_DPKG_LOCK = (
    "import fcntl, time; f = open('/var/lib/dpkg/lock-frontend', 'w');"
    " fcntl.lockf(f, fcntl.LOCK_EX); open('/tmp/dpkg-held', 'w').close(); time.sleep(120)"
)


def test_a_second_run_is_refused_naming_the_first_which_waits_for_the_dpkg_lock():
    h = host(D13)
    h.check_output("rm -f /tmp/dpkg-held")
    holder = subprocess.Popen(["docker", "exec", D13, "python3", "-c", HOLD_DPKG_LOCK])
    first = None
    try:
        deadline = time.monotonic() + 30
        while not h.file("/tmp/dpkg-held").exists:
            assert time.monotonic() < deadline, "the dpkg lock holder did not start"
            time.sleep(0.5)
        env = ansible_env()
        first = subprocess.Popen(
            ["ansible-playbook", "-i", INVENTORY, "--limit", D13, str(ROCM)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        deadline = time.monotonic() + 120
        while not h.file("/run/rocmlab.lock").exists:
            assert first.poll() is None, first.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "the first run never took the host"
            time.sleep(0.5)
        second = playbook_runs.play(ROCM, {}, "--limit", D13)
        assert second.returncode != 0
        message = " ".join(failures(second)[D13].split())
        assert (
            "Another rocmlab run holds this host: the run of Provision ROCm started by" in message
        ), message
        assert "rocmlab_lock_force=true" in message
    finally:
        holder.kill()
        holder.wait()
    out, _ = first.communicate(timeout=600)
    assert first.returncode == 0, out[-3000:]
    waited = " ".join(out.split())
    assert "Waiting up to 600 s for the dpkg lock, held by PID" in waited, waited[-3000:]
    assert "python3 -c import fcntl" in waited
    assert not h.file("/run/rocmlab.lock").exists
