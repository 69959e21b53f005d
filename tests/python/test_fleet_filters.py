"""Unit tests for plugins/filter/fleet.py (role rocmlab_fleet): a host's preflight findings
judged as checks, and what the rollout does with the host."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "fleet_filters", REPO / "plugins" / "filter" / "fleet.py"
)
assert _spec is not None and _spec.loader is not None
fleet = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fleet)

GIB = 1024**3
WHEELHOUSE = "http://mirror.lab/wheels/"
DATASET = [
    "http://mirror.lab/mnist/t10k-labels-idx1-ubyte.gz",
    "http://mirror.lab/mnist/t10k-labels-idx1-ubyte",
]


def findings(**changes: object) -> dict:
    """What the preflight tasks of a healthy host register."""
    base = {
        "reach": {"elapsed": 1},
        "connect_timeout": 30,
        "settings": {"status": "pass", "detail": "accepted for rocm_repo, smoke_test"},
        "python": {"status": "pass", "detail": "/usr/bin/python3 3.11.2: torch 2.13 has wheels"},
        "host": {
            "space": [
                {
                    "mount": "/",
                    "names": ["rocm", "venvs"],
                    "paths": ["/usr", "/opt/rocmlab/venvs/pytorch"],
                    "need_bytes": 45 * GIB,
                    "free_bytes": 100 * GIB,
                    "enough": True,
                }
            ],
            "clock_offset": 0.4,
            "in_use": [],
        },
        "dpkg": {"lock_holders": [], "interrupted": False, "unconfigured": []},
        "audit": {"stdout_lines": [], "stderr_lines": []},
        "mirrors": [
            {"what": "PyTorch wheelhouse", "urls": [WHEELHOUSE]},
            {"what": "mnist dataset mirror", "urls": DATASET},
        ],
        "fetched": [
            {"item": WHEELHOUSE, "status": 200},
            {"item": DATASET[0], "status": 404, "msg": "HTTP Error 404: File not found"},
            {"item": DATASET[1], "status": 200},
        ],
        "max_clock_skew": 10,
        "skip_busy": True,
    }
    base.update(changes)
    return base


def by_name(checks: list[dict]) -> dict[str, dict]:
    return {check["name"]: check for check in checks}


def test_a_healthy_host_passes_every_check_in_order() -> None:
    checks = fleet.fleet_preflight_checks(findings())
    assert [c["name"] for c in checks] == [
        "reachable", "settings", "python", "free_space", "dpkg", "clock",
        "mirror_pytorch_wheelhouse", "mirror_mnist_dataset_mirror", "in_use",
    ]  # fmt: skip
    assert {c["status"] for c in checks} == {"pass"}
    found = by_name(checks)
    assert found["free_space"]["detail"] == (
        "/ (rocm /usr, venvs /opt/rocmlab/venvs/pytorch): 100.0 GiB free, 45.0 GiB needed"
    )
    # The plain file answered where the gzipped one did not: either will do.
    assert found["mirror_mnist_dataset_mirror"]["detail"].endswith(
        "t10k-labels-idx1-ubyte answered 200"
    )
    assert fleet.fleet_decision(checks) == {"state": "go", "reason": None}


@pytest.mark.parametrize(
    ("installed", "configured", "detail"),
    [
        (None, "7.1", "no AMD ROCm installed: will install 7.1.0"),
        ("6.4.2-120", "7.1", "will change 6.4.2-120 \u2192 7.1.0 (upgrade)"),
        ("7.1.0", "6.4.2", "will change 7.1.0 \u2192 6.4.2 (downgrade)"),
        ("7.1.0-20", "7.1", "7.1.0-20: already the configured 7.1"),
    ],
)
def test_the_release_line_says_what_the_rollout_will_change(installed, configured, detail):
    host = {**findings()["host"], "rocm_version": installed}
    checks = fleet.fleet_preflight_checks(findings(host=host, rocm_configured=configured))
    names = [c["name"] for c in checks]
    assert names.index("release") == names.index("clock") + 1
    assert by_name(checks)["release"] == {"name": "release", "status": "pass", "detail": detail}
    # The distribution's ROCm: nothing is configured, no line.
    assert "release" not in by_name(fleet.fleet_preflight_checks(findings(host=host)))


def test_a_host_whose_checks_outlive_the_preflight_deadline_is_set_aside_naming_it() -> None:
    # Ansible stopped the module (its task timeout): the host's findings are what came before.
    stopped = {"failed": True, "msg": "Task failed: Timed out after 12 second(s).", "timedout": {}}
    checks = fleet.fleet_preflight_checks(
        findings(host=stopped, overdue={"task": "Read the host's use, free space and clock",
                                        "timeout": 600})
    )  # fmt: skip
    deadline = by_name(checks)["deadline"]
    assert deadline == {
        "name": "deadline",
        "status": "fail",
        "detail": "the host's checks did not finish within rocmlab_fleet_preflight_timeout (600 s):"
        " Ansible stopped 'Read the host's use, free space and clock'",
    }
    assert [c["name"] for c in checks][:2] == ["reachable", "deadline"]
    decision = fleet.fleet_decision(checks)
    assert decision["state"] == "failed"
    assert "rocmlab_fleet_preflight_timeout (600 s)" in decision["reason"]
    assert "deadline" not in by_name(fleet.fleet_preflight_checks(findings()))


def test_each_task_gets_what_is_left_of_the_deadline(monkeypatch) -> None:
    monkeypatch.setattr(fleet.time, "time", lambda: 1000.0)
    assert fleet.fleet_time_left(1000.0, 600) == 600
    assert fleet.fleet_time_left("900.25", 600) == 501  # registered facts are strings
    assert fleet.fleet_time_left(400.0, 600) == 1  # spent: 1 s, as Ansible reads 0 as none
    assert fleet.fleet_time_left(0.0, 600) == 1


def test_an_unreachable_host_has_one_check_and_is_set_aside() -> None:
    checks = fleet.fleet_preflight_checks(
        findings(
            reach={
                "failed": True,
                "msg": "timed out waiting for ping: container stopped",
            }
        )
    )
    assert checks == [
        {
            "name": "reachable",
            "status": "fail",
            "detail": "no answer within 30 s: timed out waiting for ping: container stopped",
        }
    ]
    decision = fleet.fleet_decision(checks)
    assert decision["state"] == "unreachable"
    assert "container stopped" in decision["reason"]


HOST = findings()["host"]
SHORT = [{**HOST["space"][0], "free_bytes": 20 * GIB, "enough": False}]
INTERRUPTED = {
    "lock_holders": [],
    "interrupted": True,
    "unconfigured": [{"package": "rocminfo", "state": "unpacked"}],
}
HALF = {"stdout_lines": ["The following packages are only half configured:", " rocminfo"]}
NO_DNS = "Request failed: <urlopen error [Errno -2] Name or service not known>"
FAILING = [
    ({"host": {**HOST, "space": SHORT}}, "free_space", "20.0 GiB free, 45.0 GiB needed"),
    ({"host": {**HOST, "clock_offset": -42.0}}, "clock", "42.0 s behind the controller"),
    ({"host": {**HOST, "clock_offset": 15.0}}, "clock", "15.0 s ahead of the controller (limit 10"),
    (
        {"dpkg": INTERRUPTED},
        "dpkg",
        "an interrupted dpkg run; packages not fully installed: rocminfo (unpacked); fix: sudo",
    ),
    ({"audit": HALF}, "dpkg", "dpkg --audit: The following packages are only half configured:"),
    (
        {"fetched": [{"item": WHEELHOUSE, "status": -1, "msg": NO_DNS}]},
        "mirror_pytorch_wheelhouse",
        "PyTorch wheelhouse: http://mirror.lab/wheels/: Request failed",
    ),
    (
        {"settings": {"status": "fail", "detail": 'rocm_repo_version: "6.4.2\\n" is refused'}},
        "settings",
        "rocm_repo_version",
    ),
    (
        {"python": {"status": "fail", "detail": "torch 2.13 has no wheels for Python 3.9.2"}},
        "python",
        "3.9.2",
    ),
]


@pytest.mark.parametrize(("change", "check", "fragment"), FAILING)
def test_each_failing_check_fails_the_host_with_its_reason(change, check, fragment) -> None:
    checks = fleet.fleet_preflight_checks(findings(**change))
    found = by_name(checks)[check]
    assert found["status"] == "fail", found
    assert fragment in found["detail"], found["detail"]
    decision = fleet.fleet_decision(checks)
    assert decision["state"] == "failed"
    assert decision["reason"].startswith("preflight: ") and check in decision["reason"]


def test_what_a_host_answers_is_cut_short_in_the_checks() -> None:
    """A host's answers (dpkg --audit's lines, a fetch's error, the uses found) reach the
    preflight's lines and records at most 300 characters each, the rest counted; the check's
    verdict and fix stay whole."""
    long = "x" * 5000
    audit = {"stdout_lines": [long, long, long, long], "stderr_lines": []}
    fetched = [{"item": WHEELHOUSE, "status": -1, "msg": long}]
    host = {**HOST, "in_use": [long, "user logged in: alice"]}
    checks = by_name(
        fleet.fleet_preflight_checks(findings(audit=audit, fetched=fetched, host=host))
    )
    cut = "x" * 300 + " ... (4700 more characters)"
    dpkg = checks["dpkg"]["detail"]
    fix = "fix: sudo dpkg --configure -a (or rocmlab_dpkg_repair: true)"
    assert dpkg == f"dpkg --audit: {cut} | {cut} | {cut}; {fix}"
    mirror = checks["mirror_pytorch_wheelhouse"]["detail"]
    assert mirror == f"PyTorch wheelhouse: {WHEELHOUSE}: {cut}"
    assert checks["in_use"]["detail"].startswith(f"{cut}; user logged in: alice; skipped")
    # Short answers are kept as they are.
    assert fleet._clip(" a  b\n") == "a b" and fleet._clip("y" * 300) == "y" * 300


def test_a_held_dpkg_lock_warns_without_failing() -> None:
    holder = {"lock": "/var/lib/dpkg/lock-frontend", "pid": 812, "command": "unattended-upgrade"}
    held = {"lock_holders": [holder], "interrupted": False, "unconfigured": []}
    checks = fleet.fleet_preflight_checks(findings(dpkg=held))
    assert by_name(checks)["dpkg"]["status"] == "warn"
    assert "PID 812 (unattended-upgrade)" in by_name(checks)["dpkg"]["detail"]
    assert fleet.fleet_decision(checks)["state"] == "go"


def test_a_host_in_use_is_skipped_unless_told_otherwise() -> None:
    use = ["user logged in: alice on pts/3 since 2025-01-06T09:12:00+00:00"]
    busy = findings(host={**findings()["host"], "in_use": use})
    checks = fleet.fleet_preflight_checks(busy)
    assert by_name(checks)["in_use"]["status"] == "warn"
    assert fleet.fleet_decision(checks, True, use) == {"state": "skipped", "reason": use[0]}
    anyway = fleet.fleet_preflight_checks({**busy, "skip_busy": False})
    assert (
        "provisioned anyway (rocmlab_fleet_skip_busy: false)" in by_name(anyway)["in_use"]["detail"]
    )
    assert fleet.fleet_decision(anyway, False, use)["state"] == "go"


def test_credentials_in_mirror_urls_are_masked() -> None:
    url = "https://user:secret@mirror.lab/wheels/"
    checks = fleet.fleet_preflight_checks(
        findings(
            mirrors=[{"what": "PyTorch wheelhouse", "urls": [url]}],
            fetched=[{"item": url, "status": 401, "msg": "Unauthorized"}],
        )
    )
    detail = by_name(checks)["mirror_pytorch_wheelhouse"]["detail"]
    assert "secret" not in detail and "https://***@mirror.lab/wheels/" in detail


def test_a_refused_settings_check_leaves_nothing_else_to_judge() -> None:
    """The roles declare their mirrors and places only once their settings are accepted."""
    checks = fleet.fleet_preflight_checks(
        findings(
            settings={"status": "fail", "detail": "refused"},
            python=None,
            mirrors=[],
            host={"clock_offset": 0.1, "in_use": []},
        )
    )
    assert [c["name"] for c in checks] == ["reachable", "settings", "dpkg", "clock", "in_use"]


# --- What the preflight play gathers and prints around the checks. ---
TORCH_FOUND = {
    "path": "/usr/bin/python3",
    "version": "3.11.2",
    "torch": "2.13",
    "wheels_for": ["3.10", "3.11"],
}
TF_FOUND = {
    "path": "/usr/bin/python3",
    "version": "3.11.2",
    "package": "tensorflow-cpu 2.18.1",
    "wheels_for": ["3.9", "3.10", "3.11", "3.12"],
}


def test_the_python_detail_names_each_framework_and_its_wheels() -> None:
    assert fleet.fleet_python_detail([TORCH_FOUND, TF_FOUND]) == (
        "/usr/bin/python3 3.11.2: torch 2.13 has wheels for Python 3.10, 3.11; /usr/bin/python3"
        " 3.11.2: tensorflow-cpu 2.18.1 has wheels for Python 3.9, 3.10, 3.11, 3.12"
    )
    jax = {**TORCH_FOUND, "jax": "0.10.2", "wheels_for": ["3.11", "3.12"]}
    del jax["torch"]
    assert fleet.fleet_python_detail([None, None, jax]) == (
        "/usr/bin/python3 3.11.2: jax 0.10.2 has wheels for Python 3.11, 3.12"
    )
    assert fleet.fleet_python_detail([None, TF_FOUND]).startswith("/usr/bin/python3 3.11.2: tens")
    assert fleet.fleet_python_detail([None, None]) == (
        "no framework installed with pip in this rollout"
    )


HOSTS = ["ws-01", "lab-ws-2", "ws-3"]
DECISIONS = {
    "ws-01": {"state": "go", "reason": None},
    "lab-ws-2": {"state": "failed", "reason": "preflight: dpkg: an interrupted dpkg run"},
    "ws-3": {"state": "unreachable", "reason": "no answer within 30 s"},
}


def test_one_line_per_host_and_check_then_the_decision_aligned() -> None:
    checks = {
        "ws-01": [{"name": "reachable", "status": "pass", "detail": "answered in 1 s"}],
        "lab-ws-2": [{"name": "dpkg", "status": "fail", "detail": "an interrupted dpkg run"}],
        "ws-3": [],
    }
    assert fleet.fleet_lines(HOSTS, checks, DECISIONS) == [
        "ws-01     PASS reachable                answered in 1 s",
        "ws-01     => goes into the rollout",
        "lab-ws-2  FAIL  dpkg                     an interrupted dpkg run",
        "lab-ws-2  => failed: preflight: dpkg: an interrupted dpkg run",
        "ws-3      => unreachable: no answer within 30 s",
    ]


def test_the_hosts_set_aside_and_those_that_go_keep_inventory_order() -> None:
    assert fleet.fleet_aside(HOSTS, DECISIONS) == ["lab-ws-2 (failed)", "ws-3 (unreachable)"]
    assert fleet.fleet_go(HOSTS, DECISIONS) == ["ws-01"]
    both = {**DECISIONS, "ws-3": {"state": "go", "reason": None}}
    assert fleet.fleet_go(HOSTS, both) == ["ws-01", "ws-3"]
    assert fleet.fleet_aside([], {}) == [] and fleet.fleet_lines([], {}, {}) == []


FACTS = {
    "host": "gpu01",
    "created": "2026-12-05T07:00:00Z",
    "distribution": "Debian 12.11",
    "kernel": "6.1.0-37-amd64",
    "python_found": None,
    "python_version": "3.11.2",
    "rocm_source": "amd",
    "host_rocm_version": None,
    "rocminfo_version": "",
    "rocm_configured": "7.1",
}


@pytest.mark.parametrize(
    ("changes", "python", "rocm_version"),
    [
        ({}, "3.11.2", None),
        # AMD's /opt/rocm/.info/version wins over dpkg's rocminfo.
        ({"host_rocm_version": "6.4.2", "rocminfo_version": "5.2.3-1"}, "3.11.2", "6.4.2"),
        # The distribution's rocminfo: its upstream release, an epoch and revision left out.
        ({"rocminfo_version": "5.2.3-1"}, "3.11.2", "5.2.3"),
        ({"rocminfo_version": "1:6.1.5-2+b1"}, "3.11.2", "6.1.5"),
        # The interpreter the frameworks will use, where they found one.
        ({"python_found": {"path": "/usr/bin/python3.12", "version": "3.12.4"}}, "3.12.4", None),
    ],
)
def test_the_preflight_record_holds_what_was_read_from_the_host(changes, python, rocm_version):
    checks = fleet.fleet_preflight_checks(findings())
    record = fleet.fleet_preflight_record(checks, {**FACTS, **changes})
    assert record["schema_version"] == 1
    assert record["host"] == "gpu01" and record["created"] == "2026-12-05T07:00:00Z"
    assert record["checks"] == checks
    assert record["facts"] == {
        "distribution": "Debian 12.11",
        "kernel": "6.1.0-37-amd64",
        "python": python,
        "rocm_source": "amd",
        "rocm_version": rocm_version,
        "rocm_configured": "7.1",
    }


def test_the_preflight_record_passes_only_without_a_failed_check():
    holder = {"lock": "/var/lib/dpkg/lock-frontend", "pid": 812, "command": "unattended-upgrade"}
    held = {"lock_holders": [holder], "interrupted": False, "unconfigured": []}
    checks = fleet.fleet_preflight_checks(findings(dpkg=held))
    assert by_name(checks)["dpkg"]["status"] == "warn"
    assert fleet.fleet_preflight_record(checks, FACTS)["passed"] is True
    failing = fleet.fleet_preflight_checks(
        findings(dpkg={**findings()["dpkg"], "interrupted": True})
    )
    assert fleet.fleet_preflight_record(failing, FACTS)["passed"] is False


def test_the_reason_of_a_hosts_first_rollout_record():
    aside = {"state": "failed", "reason": "dpkg: interrupted"}
    go = {"state": "go", "reason": ""}
    assert fleet.fleet_not_run_reason(aside, ["b (failed)"], True) == "dpkg: interrupted"
    assert fleet.fleet_not_run_reason(go, ["b (failed)", "c (unreachable)"], True) == (
        "all or nothing (rocmlab_fleet_all_or_nothing): b (failed), c (unreachable) set aside in"
        " preflight, so no host is provisioned"
    )
    later = "an earlier batch exceeded the failure budget, or the run was stopped"
    assert fleet.fleet_not_run_reason(go, ["b (failed)"], False) == later
    assert fleet.fleet_not_run_reason(go, [], True) == later


# ---------------------------------------------------------------- why a host's task failed

# ansible.builtin.apt's result when a package's postinst exits 1 (tests/fixtures/apt_failure:
# captured from a Debian 12 container; apt runs dpkg on a terminal, so its lines end in \r\n and
# the script's own lines, both streams, are in stdout).
APT_POSTINST = json.loads(
    (REPO / "tests" / "fixtures" / "apt_failure" / "postinst.json").read_text()
)


def test_a_failed_maintainer_script_is_named_with_its_last_lines():
    reason = fleet.fleet_failure("Move AMD's packages to ROCm 7.1.2", APT_POSTINST)
    assert reason == (
        "Move AMD's packages to ROCm 7.1.2: rocm-hip-runtime (--configure): installed"
        " rocm-hip-runtime package post-installation script subprocess returned error exit"
        " status 1; it said: rocm-hip-runtime: registering the HIP runtime of ROCm 7.1.2 |"
        " rocm-hip-runtime: cannot register /opt/rocm-7.1.2/lib (rocmlab fixture: fails on"
        " purpose)"
    )
    assert "apt-get" not in reason  # the cut-off command line said nothing


def test_other_failures_keep_their_message_clipped():
    assert fleet.fleet_failure("Install the ROCm packages", {"msg": "No package matching 'x'"}) == (
        "Install the ROCm packages: No package matching 'x'"
    )
    assert fleet.fleet_failure("a task", None) == "a task: failed"
    long = fleet.fleet_failure("t", {"msg": "y" * 5000})
    assert long.endswith("... (4200 more characters)") and len(long) < 900


def test_a_hostile_script_output_is_bounded_and_stripped():
    lines = "\r\n".join(f"line {n}\u200b\x1b[31m" + "z" * 1000 for n in range(50))
    result = {
        "stdout": f"Setting up rocm-core (7.1.2) ...\r\n{lines}\r\n"
        "dpkg: error processing package rocm-core (--configure):\r\n"
        " installed rocm-core package post-installation script subprocess returned error exit"
        " status 2\r\n",
    }
    reason = fleet.fleet_failure("t", result)
    assert reason.startswith("t: rocm-core (--configure): installed rocm-core package")
    assert reason.count(" | ") == 4 and "line 49" in reason and "line 44" not in reason
    assert "\x1b" not in reason and "\u200b" not in reason and len(reason) < 2000
