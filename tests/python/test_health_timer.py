"""Unit tests for plugins/filter/health_timer.py: the health timer's systemd units (role
smoke_test, smoke_test_health_timer), checked by systemd-analyze verify where it is installed,
the refusals of bad settings (and the role's declared checks of them), the quoting of ExecStart=
arguments, and which of a host's health reports the controller keeps."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from rocmlab_testutil import load_module

REPO = Path(__file__).resolve().parents[2]


ht = load_module("health_timer_filters", REPO / "plugins" / "filter" / "health_timer.py")
settings_checks = load_module("settings_checks", REPO / "plugins" / "module_utils" / "settings.py")
DECLARED = yaml.safe_load((REPO / "roles/smoke_test/meta/settings.yml").read_text())
OPTIONS = DECLARED["argument_specs"]["main"]["options"]
ROLE_VARS = yaml.safe_load((REPO / "roles/smoke_test/vars/main.yml").read_text())

SETTINGS = {
    "rocmlab": "/opt/rocmlab/venvs/pytorch/bin/rocmlab",
    "lock": "/var/lib/rocmlab/health/tier0.lock",
    "account": "researcher",
    "accounts": ["researcher", "alice"],
    "expect_gpus": "2",
    "interval_minutes": 5,
    "daily_at": "04:00",
    "state_dir": "/var/lib/rocmlab/health",
    "tier2_dir": "/var/lib/rocmlab/health/tier2",
    "textfile_dir": "/var/lib/prometheus/node-exporter",
    "smoke_data": "/var/lib/rocmlab/datasets/mnist",
    "smoke_dataset": "mnist",
    "smoke_args": ["--epochs", "1"],
    "path": ["/usr/local/bin", "/usr/bin", "/bin", "/opt/rocm/bin"],
    "env_file": "/etc/environment.d/90-rocmlab-gfx.conf",
}


def lines(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            found.setdefault(key, []).append(value)
    return found


def test_the_units_are_the_roles_and_each_tier_runs_its_command_under_its_own_lock():
    plan = ht.health_timer_plan(SETTINGS)
    assert sorted(plan["units"]) == sorted(ROLE_VARS["__smoke_test_health_units"])
    assert plan["timers"] == ROLE_VARS["__smoke_test_health_timers"]
    assert ROLE_VARS["__smoke_test_health_lock"] == SETTINGS["lock"]
    flock = ["/usr/bin/flock", "-n", "-E", "75"]
    rocmlab = SETTINGS["rocmlab"]
    # Root's Python, isolated (test_health_root_wrappers.py runs it from a planted directory),
    # under root's lock.
    assert plan["commands"][0] == [
        *flock,
        "/var/lib/rocmlab/health/tier0.lock",
        "/opt/rocmlab/venvs/pytorch/bin/python",
        "-I",
        "-m",
        "rocmlab",
        "health",
        "--tier",
        "0",
        "--state-dir",
        "/var/lib/rocmlab/health",
        "--json",
        "/var/lib/rocmlab/health/tier0.json",
        "--expect-gpus",
        "2",
        "--textfile",
        "/var/lib/prometheus/node-exporter/rocmlab-health-tier0.prom",
        "--account",
        "researcher",
        "--account",
        "alice",
    ]
    # The account's run under the account's own lock, in its directory.
    assert plan["commands"][2] == [
        *flock,
        "/var/lib/rocmlab/health/tier2/tier2.lock",
        rocmlab,
        "health",
        "--tier",
        "2",
        "--state-dir",
        "/var/lib/rocmlab/health/tier2",
        "--json",
        "/var/lib/rocmlab/health/tier2/tier2.json",
        "--textfile",
        "/var/lib/rocmlab/health/tier2/rocmlab-health-tier2.prom",
        "--expect-gpus",
        "2",
        "--smoke-data",
        "/var/lib/rocmlab/datasets/mnist",
        "--smoke-dataset",
        "mnist",
        "--smoke-arg=--epochs",
        "--smoke-arg=1",
    ]
    units = plan["units"]
    for tier in (0, 2):
        service = lines(units[f"rocmlab-health-tier{tier}.service"])
        assert ht.systemd_split(service["ExecStart"][0]) == plan["commands"][tier]
        assert service["Type"] == ["oneshot"]
        assert "SuccessExitStatus" not in service  # a held lock (exit 75) fails the unit
        assert service["NoNewPrivileges"] == ["yes"]
    tier0 = lines(units["rocmlab-health-tier0.service"])
    assert "User" not in tier0  # root, confined to its two directories, without network
    assert tier0["WorkingDirectory"] == ["/"]
    assert tier0["Environment"] == [
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8"
    ]
    assert tier0["ProtectSystem"] == ["strict"] and tier0["PrivateNetwork"] == ["yes"]
    assert tier0["ReadWritePaths"] == ["/var/lib/rocmlab/health -/var/lib/prometheus/node-exporter"]
    tier2 = lines(units["rocmlab-health-tier2.service"])
    assert tier2["User"] == ["researcher"]  # training never runs as root
    assert tier2["EnvironmentFile"] == ["-/etc/environment.d/90-rocmlab-gfx.conf"]
    assert tier2["Environment"] == ["PATH=/usr/local/bin:/usr/bin:/bin:/opt/rocm/bin LANG=C.UTF-8"]


def test_a_held_lock_fails_tier_0_and_the_accounts_own_lock_does_not_stop_it(tmp_path):
    import fcntl
    import os

    flock = shutil.which("flock") or "/usr/bin/flock"
    settings = dict(
        SETTINGS,
        rocmlab=str(Path(sys.executable).parent / "rocmlab"),
        flock=flock,
        lock=str(tmp_path / "tier0.lock"),
        state_dir=str(tmp_path),
        tier2_dir=str(tmp_path / "tier2"),
        textfile_dir="",
        expect_gpus="0",
        accounts=["nobody"],
    )
    plan = ht.health_timer_plan(settings)
    (tmp_path / "tier2").mkdir()
    env = {"PATH": ht.ROOT_PATH, "LANG": "C.UTF-8"}
    # The account holds its own lock (tier 2's): root's tier 0 runs all the same.
    theirs = os.open(plan["commands"][2][4], os.O_RDONLY | os.O_CREAT, 0o600)
    fcntl.flock(theirs, fcntl.LOCK_EX)
    try:
        ran = subprocess.run(plan["commands"][0], env=env, capture_output=True, text=True,
                             timeout=120, check=False, cwd="/")  # fmt: skip
        assert ran.returncode in (0, 1) and "verdict:" in ran.stdout, ran.stdout + ran.stderr
        # Tier 0's own lock held (by anyone): the run stops with 75, a failure of the unit.
        ours = os.open(settings["lock"], os.O_RDONLY | os.O_CREAT, 0o600)
        fcntl.flock(ours, fcntl.LOCK_EX)
        try:
            held = subprocess.run(plan["commands"][0], env=env, capture_output=True, text=True,
                                  timeout=120, check=False, cwd="/")  # fmt: skip
        finally:
            os.close(ours)
    finally:
        os.close(theirs)
    assert held.returncode == ht.LOCKED and "verdict:" not in held.stdout, held.stdout
    service = lines(plan["units"]["rocmlab-health-tier0.service"])
    assert str(ht.LOCKED) not in " ".join(service.get("SuccessExitStatus", []))


def test_roots_lock_in_the_accounts_directory_is_refused():
    bad = dict(SETTINGS, lock="/var/lib/rocmlab/health/tier2/tier0.lock")
    with pytest.raises(ht.HealthTimerError, match="in tier 2's directory"):
        ht.health_timer_units(bad)


@pytest.mark.parametrize(
    ("interval", "active", "delay"), [(1, "1min", 12), (5, "5min", 60), (60, "60min", 300)]
)
def test_tier_0_runs_every_interval_with_a_random_delay(interval, active, delay):
    units = ht.health_timer_units(dict(SETTINGS, interval_minutes=interval))
    timer = lines(units["rocmlab-health-tier0.timer"])
    assert timer["OnUnitActiveSec"] == [active]
    assert timer["RandomizedDelaySec"] == [str(delay)]
    assert timer["OnBootSec"] and timer["OnActiveSec"]  # a first run after boot and after enabling
    assert timer["WantedBy"] == ["timers.target"]


def test_tier_2_runs_daily_with_a_random_delay_and_catches_up_a_missed_run():
    units = ht.health_timer_units(dict(SETTINGS, daily_at="23:05"))
    timer = lines(units["rocmlab-health-tier2.timer"])
    assert timer["OnCalendar"] == ["*-*-* 23:05:00"]
    assert timer["RandomizedDelaySec"] == ["1800"] and timer["Persistent"] == ["true"]


def test_no_textfile_dir_writes_no_textfile_for_tier_0():
    plan = ht.health_timer_plan(dict(SETTINGS, textfile_dir="", expect_gpus=""))
    assert "--textfile" not in plan["commands"][0] and "--expect-gpus" not in plan["commands"][0]
    assert lines(plan["units"]["rocmlab-health-tier0.service"])["ReadWritePaths"] == [
        "/var/lib/rocmlab/health"
    ]


@pytest.mark.parametrize(
    "arg",
    ["plain", "with space", 'a "quote"', "back\\slash", "100%", "$HOME", "${X}", "it's", "é"],
)
def test_an_argument_is_quoted_for_systemd_and_read_back_whole(arg):
    quoted = ht.systemd_quote(arg)
    assert ht.systemd_split(quoted) == [arg]
    assert "%" not in quoted.replace("%%", "") and "$" not in quoted.replace("$$", "")


def test_a_control_character_never_reaches_a_unit():
    with pytest.raises(ht.HealthTimerError, match="control character"):
        ht.health_timer_units(dict(SETTINGS, smoke_args=["--epochs\nExecStartPre=/bin/sh"]))


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "interval_minutes",
            0,
            "smoke_test_health_interval: 0 is not accepted. Use a number of minutes from 1 to 1440",
        ),
        ("interval_minutes", 1441, "smoke_test_health_interval: 1441 is not accepted"),
        ("interval_minutes", "5min", 'smoke_test_health_interval: "5min" is not accepted'),
        ("interval_minutes", True, "smoke_test_health_interval: true is not accepted"),
        ("daily_at", "4:00", 'smoke_test_health_daily_at: "4:00" is not a time of day. Use HH:MM'),
        ("daily_at", "24:00", 'smoke_test_health_daily_at: "24:00" is not a time of day'),
        ("daily_at", "12:60", 'smoke_test_health_daily_at: "12:60" is not a time of day'),
        ("account", "root", 'smoke_test_user: "root" is not an unprivileged account name'),
        ("accounts", ["alice", "x y"], 'user_groups_users: "x y" is not an unprivileged account'),
        ("textfile_dir", "prom", 'smoke_test_health_textfile_dir: "prom" is not an absolute path'),
        ("tier2_dir", "/var/lib/../etc", 'tier2_dir: "/var/lib/../etc" is not an absolute path'),
        ("expect_gpus", "two", 'smoke_test_expect_gpus: "two" is not accepted'),
    ],
)
def test_a_bad_setting_is_refused_naming_it_the_value_and_what_is_accepted(key, value, message):
    with pytest.raises(ht.HealthTimerError) as caught:
        ht.health_timer_units(dict(SETTINGS, **{key: value}))
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("name", "value", "fragment"),
    [
        ("smoke_test_health_interval", 0, "smoke_test_health_interval: 0 is out of range"),
        ("smoke_test_health_interval", 1441, "smoke_test_health_interval: 1441 is out of range"),
        (
            "smoke_test_health_daily_at",
            "4:61",
            'smoke_test_health_daily_at: "4:61" is not accepted',
        ),
        ("smoke_test_health_daily_at", "04:00 ", 'smoke_test_health_daily_at: "04:00 " is not'),
        (
            "smoke_test_health_textfile_dir",
            "/etc",
            'smoke_test_health_textfile_dir: "/etc" is a system',
        ),
    ],
)
def test_the_roles_declared_checks_refuse_a_bad_schedule_before_the_host_changes(
    name, value, fragment
):
    problems = settings_checks.problems_of(
        settings_checks.check_spec(name, OPTIONS[name]["check"], value)
    )
    assert problems and fragment in problems[0], problems
    good = {"smoke_test_health_interval": 5, "smoke_test_health_daily_at": "04:00"}
    if name in good:
        check = settings_checks.check_spec(name, OPTIONS[name]["check"], good[name])
        assert settings_checks.problems_of(check) == []


def test_the_units_pass_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here: the units' syntax is not verified")
    settings = dict(
        SETTINGS,
        rocmlab=str(Path(sys.executable).parent / "rocmlab"),  # its python: tier 0's
        flock=shutil.which("flock") or "/usr/bin/flock",
        account="daemon",
        accounts=["daemon"],
        smoke_args=["--epochs", "1", 'odd "arg" 100% $HOME'],
    )
    units = ht.health_timer_units(settings)
    paths = []
    for name, text in units.items():
        (tmp_path / name).write_text(text)
        paths.append(str(tmp_path / name))
    run = subprocess.run(
        [analyze, "verify", *paths], capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr
    # And it does refuse a broken timer, so its silence above means something.
    (tmp_path / "rocmlab-health-tier2.timer").write_text(
        units["rocmlab-health-tier2.timer"].replace("OnCalendar=*-*-* 04:00:00", "OnCalendar=25:99")
    )
    broken = subprocess.run(
        [analyze, "verify", str(tmp_path / "rocmlab-health-tier2.timer")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert broken.returncode != 0


# --- which report stands for the host -------------------------------------------------------
def read(tier: int, verdict: str | None = None, finished: str = "", raw: bytes | None = None):
    """What rocmlab_read_report registers in the role's loop, for one tier's report (a check
    whose status is the verdict, as rocmlab health writes it: fail when a check failed)."""
    if verdict is None and raw is None:
        return {"found": False, "content": "", "item": {"tier": tier}}
    if raw is None:
        check = {"name": "ras_errors", "status": verdict, "saw": "", "fix": None, "evidence": []}
        doc = {"tool": "rocmlab health", "tier": tier, "verdict": verdict, "finished": finished,
               "checks": [check]}  # fmt: skip
        raw = json.dumps(doc).encode()
    return {"found": True, "content": base64.b64encode(raw).decode(), "item": {"tier": tier}}


EARLY, LATE = "2026-12-03T04:10:00Z", "2026-12-04T17:05:00Z"
# The controller's clock in these tests: an hour after LATE.
NOW = datetime(2026, 12, 4, 18, 5, tzinfo=timezone.utc).timestamp()
FUTURE = "2099-12-31T00:00:00Z"


def picked(*results) -> tuple[int | None, str | None]:
    pick = ht.health_report_pick(list(results), now=NOW)
    return pick["tier"], pick["verdict"]


@pytest.mark.parametrize(
    ("tier0", "tier2", "expected"),
    [
        # The account's tier 2 adds its FAIL: a later tier-0 pass does not run its checks.
        (("pass", LATE), ("fail", EARLY), (2, "fail")),
        (("warn", LATE), ("fail", EARLY), (2, "fail")),
        # Alike verdicts: root's.
        (("pass", LATE), ("pass", EARLY), (0, "pass")),
        (("pass", EARLY), ("pass", LATE), (0, "pass")),
        # Root's FAIL stands until root's next run, whatever the account said before or after.
        (("fail", LATE), ("pass", EARLY), (0, "fail")),
        (("fail", EARLY), ("pass", LATE), (0, "fail")),
        (("fail", EARLY), ("warn", LATE), (0, "fail")),
        (("pass", LATE), None, (0, "pass")),
        (None, ("warn", EARLY), (2, "warn")),
        (None, None, (None, None)),
    ],
)
def test_the_worse_of_roots_and_the_accounts_report_stands(tier0, tier2, expected):
    results = [
        read(0, *tier0) if tier0 else read(0),
        read(2, *tier2) if tier2 else read(2),
    ]
    assert picked(*results) == expected


def test_a_report_from_the_future_or_without_checks_hides_no_root_fail():
    """The account's tier-2 report finished in 2099, or passing with no check at all: root's
    tier-0 FAIL stands, and the line says what is wrong with the account's report."""
    no_checks = json.dumps({"tool": "rocmlab health", "tier": 2, "verdict": "pass",
                            "finished": LATE, "checks": []}).encode()  # fmt: skip
    for tier2, why in (
        (
            read(2, "pass", FUTURE),
            f"finished {FUTURE}, later than now (2026-12-04T18:05:00Z): no report is from the "
            "future",
        ),
        (read(2, raw=no_checks), "verdict pass but no checks: it proves nothing"),
    ):
        pick = ht.health_report_pick([read(0, "fail", EARLY), tier2], now=NOW)
        assert (pick["tier"], pick["verdict"], pick["finished"]) == (0, "fail", EARLY)
        assert (
            pick["why"] == f"tier 0, fail, finished {EARLY}; the tier-2 report is unusable ({why})"
        )
    # Within the clock skew a host's clock may be ahead: taken.
    soon = datetime.fromtimestamp(NOW + ht.CLOCK_SKEW, timezone.utc).strftime(ht.FINISHED)
    assert picked(read(0, "pass", EARLY), read(2, "fail", soon)) == (2, "fail")


def test_an_unusable_report_is_named_and_hides_nothing():
    deep = b"[" * 100_000 + b"]" * 100_000
    for raw, why in (
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"tier": 7}', "no tier 0, 1 or 2"),
        (b'{"tier": 0, "verdict": "pass"}', "a tier-0 report, where this file holds a tier 2"),
        (b'{"tier": 2, "verdict": "ok"}', "no verdict pass, warn or fail"),
        (deep, "arrays and objects nested too deep for any report"),
    ):
        pick = ht.health_report_pick([read(0, "pass", LATE), read(2, raw=raw)], now=NOW)
        assert (pick["tier"], pick["verdict"]) == (0, "pass")
        assert f"; the tier-2 report is unusable ({why}" in pick["why"], pick["why"]
    alone = ht.health_report_pick([read(0), read(2, raw=b"[1, 2]")], now=NOW)
    assert alone == {"tier": None, "verdict": None, "finished": None,
                     "why": "the tier-2 report is unusable (not a JSON object)"}  # fmt: skip


def test_the_line_names_the_report_that_stands_first():
    pick = ht.health_report_pick([read(0, "pass", LATE), read(2, "fail", EARLY)], now=NOW)
    assert pick["why"] == f"tier 2, fail, finished {EARLY}; tier 0, pass, finished {LATE}"


def test_no_report_yet_keeps_nothing():
    pick = ht.health_report_pick([read(0), read(2)])
    assert pick == {"tier": None, "verdict": None, "finished": None, "why": "no health report yet"}
