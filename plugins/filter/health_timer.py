# Copyright: rocmlab contributors
# Apache License 2.0
"""The health timer of role smoke_test (smoke_test_health_timer), decided by pure functions:

health_timer_units(settings) -> {unit file name: its text}: two oneshot services and their
    timers - tier 0 as root every few minutes, tier 2 as the smoke account once a day - each run
    under `flock -n` on a lock of its own: root's (LOCK, root's 0600 file in root's directory) for
    tier 0, the account's (tier2.lock in its directory) for tier 2. A run that finds its lock held
    exits 75, which the unit reports as a failure.
health_report_pick(results) -> {"tier", "verdict", "finished", "why"}: of the host's reports
    (the results of rocmlab_read_report, each with its item's tier), the one that stands for the
    host - root's tier 0 unless the smoke account's tier 2 is worse - as `rocmlab fleet-report`
    chooses it from the copies the controller keeps.
systemd_quote(arg) / systemd_split(line): one argument as an ExecStart= line needs it, and back.

SETTINGS (the role's values, checked by role rocmlab against meta/settings.yml first; checked
again here, so that a bad value never reaches a unit file): rocmlab (the CLI; root's tier 0 runs
its venv's `python -I -m rocmlab`), flock, lock, account (runs tier 2), accounts (tier 0's
--account), expect_gpus ("" or a number), interval_minutes, daily_at ("HH:MM"), state_dir,
tier2_dir, textfile_dir ("" for none), smoke_data, smoke_dataset, smoke_args, path (PATH's
directories), env_file.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import shlex
from datetime import datetime, timezone

UNITS = "rocmlab-health"
# flock's exit code when another run holds the lock: the run is skipped, and the unit fails
# (whoever holds the lock keeps the checks from running: that is never a success).
LOCKED = 75
TIMES = re.compile(r"(?P<hour>[01][0-9]|2[0-3]):(?P<minute>[0-5][0-9])")
ACCOUNT = re.compile(r"[a-z_][a-z0-9_-]{0,30}[$]?")
ABSOLUTE = re.compile(r"/(?:[A-Za-z0-9._+-]+/?)*")
SAFE = re.compile(r"[A-Za-z0-9_./:=,+@-]+")
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
MAX_INTERVAL = 1440
# Tier 0's PATH (root's): fixed, nothing an account can write.
ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Tier 0's random delay: a fifth of its interval, at most this; tier 2's: this window after its
# time of day.
TIER0_DELAY_MAX = 300
TIER2_DELAY = 1800
# How long systemd lets a run take before it stops it (the tiers' own budgets are 5 s and 450 s).
TIMEOUTS = {0: 120, 2: 1200}
VERDICTS = {"pass": 0, "warn": 1, "fail": 2}
# The tiers each writer's report holds: root's timer runs tier 0, the smoke account tier 2.
ROOT_TIERS = (0, 1)
ACCOUNT_TIERS = (2,)
# How far a host's clock may be ahead of the controller's (rocmlab.fleet.records.CLOCK_SKEW,
# which the fleet report applies to the same reports).
CLOCK_SKEW = 300
FINISHED = "%Y-%m-%dT%H:%M:%SZ"
HEADER = (
    "# Written by rocmlab (role smoke_test, smoke_test_health_timer); a change made here is\n"
    '# overwritten by its next run. docs/health.md, "The health timer".\n'
)


class HealthTimerError(ValueError):
    """A setting the units cannot be made from; the message names it and what is accepted."""


def systemd_quote(arg) -> str:
    """ARG as one word of an ExecStart= line: bare when it is plain, else in double quotes with
    its backslashes and double quotes escaped; `%` (a specifier) and `$` (a variable) doubled.
    Control characters are refused (the settings check refuses them first)."""
    arg = str(arg)
    if CONTROL.search(arg):
        raise HealthTimerError(f"{arg!r} holds a control character: no unit line can carry it")
    if not SAFE.fullmatch(arg):
        arg = '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return arg.replace("%", "%%").replace("$", "$$")


def systemd_split(line: str) -> list[str]:
    """The arguments of an ExecStart= value that systemd_quote wrote (for the tests, and for
    running a service's command by hand where systemd does not run)."""
    words = shlex.split(line, posix=True)
    return [word.replace("%%", "%").replace("$$", "$") for word in words]


def _absolute(name: str, value) -> str:
    if not isinstance(value, str) or not ABSOLUTE.fullmatch(value) or "/../" in value + "/":
        raise HealthTimerError(
            f"{name}: {json.dumps(value)} is not an absolute path. "
            "Use a path such as /var/lib/rocmlab/health."
        )
    return value.rstrip("/") or "/"


def _interval(value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        value_ok = False
    else:
        value_ok = str(value).isdigit() and 1 <= int(value) <= MAX_INTERVAL
    if not value_ok:
        raise HealthTimerError(
            f"smoke_test_health_interval: {json.dumps(value)} is not accepted. Use a number of "
            f"minutes from 1 to {MAX_INTERVAL} between two tier-0 runs."
        )
    return int(value)


def _daily_at(value) -> tuple[int, int]:
    match = TIMES.fullmatch(value) if isinstance(value, str) else None
    if not match:
        raise HealthTimerError(
            f"smoke_test_health_daily_at: {json.dumps(value)} is not a time of day. Use HH:MM "
            "(24 hours, local time), for example 04:00."
        )
    return int(match["hour"]), int(match["minute"])


def _expect_gpus(value) -> list[str]:
    if value in ("", None):
        return []
    if isinstance(value, bool) or not str(value).isdigit() or int(value) > 64:
        raise HealthTimerError(
            f"smoke_test_expect_gpus: {json.dumps(value)} is not accepted. "
            "Use a number of GPUs from 0 to 64, or leave it empty."
        )
    return ["--expect-gpus", str(int(value))]


def _account(name: str, value) -> str:
    if not isinstance(value, str) or not ACCOUNT.fullmatch(value) or value == "root":
        raise HealthTimerError(
            f"{name}: {json.dumps(value)} is not an unprivileged account name. "
            "Use the smoke job's account (smoke_test_user, or one of user_groups_users)."
        )
    return value


def _exec(words: list[str]) -> str:
    return " ".join(systemd_quote(word) for word in words)


def health_timer_plan(settings: dict) -> dict:
    """The command of each tier, its schedule and the units' texts (see the module's docstring
    for SETTINGS). Raises HealthTimerError naming the first bad setting."""
    interval = _interval(settings.get("interval_minutes"))
    hour, minute = _daily_at(settings.get("daily_at"))
    account = _account("smoke_test_user", settings.get("account"))
    accounts = [_account("user_groups_users", a) for a in settings.get("accounts") or [account]]
    rocmlab = _absolute("smoke_test_venv", settings.get("rocmlab"))
    flock = _absolute("flock", settings.get("flock", "/usr/bin/flock"))
    lock = _absolute("lock", settings.get("lock"))
    state_dir = _absolute("state_dir", settings.get("state_dir"))
    tier2_dir = _absolute("tier2_dir", settings.get("tier2_dir"))
    if (lock + "/").startswith(tier2_dir + "/"):
        raise HealthTimerError(
            f"lock: {json.dumps(lock)} is in tier 2's directory {json.dumps(tier2_dir)}, which "
            "the smoke account writes. Use a path in root's directory, such as "
            "/var/lib/rocmlab/health/tier0.lock."
        )
    textfile_dir = settings.get("textfile_dir") or ""
    if textfile_dir:
        textfile_dir = _absolute("smoke_test_health_textfile_dir", textfile_dir)
    smoke_data = _absolute("smoke_test_data_dir", settings.get("smoke_data"))
    smoke_args = settings.get("smoke_args") or []
    if not isinstance(smoke_args, list):
        raise HealthTimerError(
            f"smoke_test_args: {json.dumps(smoke_args)} is not a list. Write one argument per item."
        )
    gpus = _expect_gpus(settings.get("expect_gpus"))
    env_file = _absolute("env_file", settings.get("env_file"))
    path = ":".join(_absolute("PATH", d) for d in settings.get("path") or ["/usr/bin", "/bin"])
    locked = [flock, "-n", "-E", str(LOCKED), lock]  # root's: tier 0

    tier0_json = f"{state_dir}/tier0.json"
    # Root's Python, isolated (-I): no PYTHON* variable, no user site, nothing of the working
    # directory on sys.path; the unit also runs it from / with a fixed PATH.
    python = rocmlab.rsplit("/", 1)[0] + "/python"
    tier0 = [*locked, python, "-I", "-m", "rocmlab", "health", "--tier", "0"]
    tier0 += ["--state-dir", state_dir]
    tier0 += ["--json", tier0_json, *gpus]
    if textfile_dir:
        tier0 += ["--textfile", f"{textfile_dir}/{UNITS}-tier0.prom"]
    for name in accounts:
        tier0 += ["--account", name]

    tier2_json = f"{tier2_dir}/tier2.json"
    # The account's own lock, in its own directory: holding it stops no run of root's.
    tier2 = [flock, "-n", "-E", str(LOCKED), f"{tier2_dir}/tier2.lock"]
    tier2 += [rocmlab, "health", "--tier", "2", "--state-dir", tier2_dir]
    tier2 += ["--json", tier2_json, "--textfile", f"{tier2_dir}/{UNITS}-tier2.prom", *gpus]
    tier2 += ["--smoke-data", smoke_data, "--smoke-dataset", str(settings.get("smoke_dataset"))]
    tier2 += [f"--smoke-arg={arg}" for arg in smoke_args]

    delay0 = min(interval * 60 // 5, TIER0_DELAY_MAX)
    writable = [state_dir] + ([f"-{textfile_dir}"] if textfile_dir else [])
    units = {
        f"{UNITS}-tier0.service": "\n".join(
            [
                HEADER.rstrip("\n"),
                "[Unit]",
                "Description=rocmlab health, tier 0 (passive checks of the node)",
                "After=local-fs.target",
                "",
                "[Service]",
                "Type=oneshot",
                # Root: tier 0 reads this boot's kernel log, root's known-good record and the
                # device nodes; it runs no GPU work and needs no network. Confined: it writes only
                # its state directory and node_exporter's textfile directory.
                "WorkingDirectory=/",
                f"Environment={systemd_quote('PATH=' + ROOT_PATH)} LANG=C.UTF-8",
                f"ExecStart={_exec(tier0)}",
                f"TimeoutStartSec={TIMEOUTS[0]}",
                "Nice=10",
                "IOSchedulingClass=idle",
                "UMask=0022",
                "NoNewPrivileges=yes",
                "PrivateTmp=yes",
                "PrivateNetwork=yes",
                "ProtectSystem=strict",
                "ProtectHome=read-only",
                f"ReadWritePaths={_exec(writable)}",
                "",
            ]
        ),
        f"{UNITS}-tier0.timer": "\n".join(
            [
                HEADER.rstrip("\n"),
                "[Unit]",
                f"Description=rocmlab health, tier 0, every {interval} minutes",
                "",
                "[Timer]",
                "OnActiveSec=1min",
                "OnBootSec=2min",
                f"OnUnitActiveSec={interval}min",
                f"RandomizedDelaySec={delay0}",
                "",
                "[Install]",
                "WantedBy=timers.target",
                "",
            ]
        ),
        f"{UNITS}-tier2.service": "\n".join(
            [
                HEADER.rstrip("\n"),
                "[Unit]",
                "Description=rocmlab health, tier 2 (the smoke job and the all-reduce)",
                "After=local-fs.target network-online.target",
                "",
                "[Service]",
                "Type=oneshot",
                # The smoke account, with its groups from /etc/group (render, video), as the
                # smoke job runs: training never runs as root. The GPU settings gfx_override
                # wrote, and a login's PATH; nothing of the account's profile.
                f"User={account}",
                f"WorkingDirectory={systemd_quote(tier2_dir)}",
                f"EnvironmentFile=-{systemd_quote(env_file)}",
                f"Environment={systemd_quote('PATH=' + path)} LANG=C.UTF-8",
                f"ExecStart={_exec(tier2)}",
                f"TimeoutStartSec={TIMEOUTS[2]}",
                "Nice=10",
                "UMask=0022",
                "NoNewPrivileges=yes",
                "PrivateTmp=yes",
                "ProtectSystem=full",
                "",
            ]
        ),
        f"{UNITS}-tier2.timer": "\n".join(
            [
                HEADER.rstrip("\n"),
                "[Unit]",
                f"Description=rocmlab health, tier 2, daily at {hour:02d}:{minute:02d}",
                "",
                "[Timer]",
                f"OnCalendar=*-*-* {hour:02d}:{minute:02d}:00",
                f"RandomizedDelaySec={TIER2_DELAY}",
                "Persistent=true",
                "",
                "[Install]",
                "WantedBy=timers.target",
                "",
            ]
        ),
    }
    return {
        "units": units,
        "timers": [f"{UNITS}-tier0.timer", f"{UNITS}-tier2.timer"],
        "commands": {0: tier0, 2: tier2},
        "reports": {0: tier0_json, 2: tier2_json},
    }


def health_timer_units(settings: dict) -> dict:
    """The units' texts by file name (health_timer_plan's "units")."""
    return health_timer_plan(settings)["units"]


def _problem(result: dict, now: float) -> tuple[dict | None, str]:
    """The report a rocmlab_read_report result holds, or None and what is wrong with it."""
    tiers = ACCOUNT_TIERS if (result.get("item") or {}).get("tier") in ACCOUNT_TIERS else ROOT_TIERS
    try:
        raw = base64.b64decode(result.get("content", ""), validate=True)
    except (binascii.Error, ValueError):
        return None, "not base64"
    try:
        doc = json.loads(raw)
    except RecursionError:
        return None, "arrays and objects nested too deep for any report"
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"not JSON: {str(exc)[:120]}"
    if not isinstance(doc, dict):
        return None, "not a JSON object"
    tier, verdict, finished = doc.get("tier"), doc.get("verdict"), doc.get("finished")
    if isinstance(tier, bool) or tier not in (0, 1, 2):
        return None, "no tier 0, 1 or 2"
    if tier not in tiers:
        return None, f"a tier-{tier} report, where this file holds a tier {tiers[0]} report"
    if verdict not in VERDICTS:
        return None, "no verdict pass, warn or fail"
    try:
        when = datetime.strptime(finished, FINISHED).replace(tzinfo=timezone.utc)
    except (TypeError, ValueError):
        return None, "no finished time (UTC, 2026-01-30T08:00:00Z)"
    if when.timestamp() > now + CLOCK_SKEW:
        shown = datetime.fromtimestamp(now, timezone.utc).strftime(FINISHED)
        return None, f"finished {finished}, later than now ({shown}): no report is from the future"
    checks = doc.get("checks")
    if not isinstance(checks, list) or not checks:
        return None, f"verdict {verdict} but no checks: it proves nothing"
    failed = any(isinstance(c, dict) and c.get("status") == "fail" for c in checks)
    if failed != (verdict == "fail"):
        return None, f"verdict {verdict} but {'a' if failed else 'no'} check failed"
    return {"tier": tier, "verdict": verdict, "finished": finished}, ""


def health_report_pick(results: list, now: float | None = None) -> dict:
    """Which of a host's health reports stands for it (RESULTS: rocmlab_read_report's, in a loop
    whose items carry `tier`; each within its bound, never through a link; NOW: the controller's
    clock, default now), for the line the play prints. The controller keeps each report as it
    is, root's and the smoke account's apart, and `rocmlab fleet-report` makes the same choice
    from them (rocmlab.fleet.rules.health_summary).

    Root's tier-0 report and the account's tier-2 report each stand until their own writer's
    next one: the account's report can add a FAIL to root's, never hide it. Of the two, the
    worse verdict stands, root's of two alike. A report that cannot be used - not a health
    report, a time more than CLOCK_SKEW ahead of NOW, a verdict its checks do not bear out (a
    pass without a check), another tier than its file holds - is named, and hides nothing.
    Returns {"tier", "verdict", "finished", "why"} (None but "why" when none stands)."""
    now = datetime.now(timezone.utc).timestamp() if now is None else now
    found = [r for r in results if isinstance(r, dict) and r.get("found")]
    standing, unusable = [], []
    for result in found:
        report, why = _problem(result, now)
        if report is None:
            tier = (result.get("item") or {}).get("tier")
            unusable.append(f"the tier-{tier} report is unusable ({why})")
        else:
            standing.append(report)
    if not standing:
        why = unusable or ["no health report yet"]
        return {"tier": None, "verdict": None, "finished": None, "why": "; ".join(why)}
    # max() keeps the first of equals: root's report, read first.
    pick = max(standing, key=lambda r: VERDICTS[r["verdict"]])
    said = [f"tier {r['tier']}, {r['verdict']}, finished {r['finished']}"
            for r in sorted(standing, key=lambda r: r is not pick)]  # fmt: skip
    return {**pick, "why": "; ".join(said + unusable)}


class FilterModule:
    def filters(self):
        return {
            "health_timer_units": health_timer_units,
            "health_report_pick": health_report_pick,
            "systemd_quote": systemd_quote,
        }
