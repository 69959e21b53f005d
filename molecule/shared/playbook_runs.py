"""Run a playbook against a Molecule scenario's hosts from its testinfra verifier, and read
what the run said. For the cases that feed the roles bad input, or run them a second time."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])


def ansible_env() -> dict[str, str]:
    """The environment ansible-playbook runs in from a verifier: this checkout's roles and
    collection, no colours, one JSON line per result (the yaml format folds long messages)."""
    return dict(
        os.environ,
        ANSIBLE_ROLES_PATH=str(PROJECT / "roles"),
        ANSIBLE_COLLECTIONS_PATH=str(PROJECT / "collections"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
    )


def play(
    playbook: Path, extra_vars: dict, *args: str, inventory: str | Path = INVENTORY
) -> subprocess.CompletedProcess:
    """ansible-playbook PLAYBOOK with EXTRA_VARS (highest precedence) and more ARGS, against the
    scenario's inventory or INVENTORY."""
    started = time.monotonic()
    run = subprocess.run(
        [
            "ansible-playbook",
            *("-i", str(inventory), "-e", json.dumps(extra_vars)),
            *args,
            str(playbook),
        ],
        capture_output=True,
        text=True,
        env=ansible_env(),
        check=False,
    )
    keep(run, time.monotonic() - started)
    return run


def keep(run: subprocess.CompletedProcess, seconds: float) -> None:
    """With ROCMLAB_PLAY_LOG set (a file's path), append RUN's command, its wall time and all it
    printed there (with ANSIBLE_CALLBACKS_ENABLED=ansible.posix.profile_tasks, each task's time:
    Molecule's ansible.cfg enables no callback), which pytest otherwise keeps only for a failed
    test."""
    path = os.environ.get("ROCMLAB_PLAY_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(
                f"=== {' '.join(map(str, run.args))} (rc {run.returncode}, {seconds:.0f} s)\n"
            )
            log.write(run.stdout + run.stderr + "\n")


def said(run: subprocess.CompletedProcess) -> str:
    """All the run printed (ansible-core 2.19 prints task failures to stderr), whitespace folded."""
    return " ".join((run.stdout + run.stderr).split())


def changed(run: subprocess.CompletedProcess) -> int:
    """The changed counts of the run's recap, added up over its hosts."""
    counts = re.findall(r"^\S+\s+: ok=\d+\s+changed=(\d+)", run.stdout, re.M)
    assert counts, run.stdout[-2000:]
    return sum(int(count) for count in counts)


def refused_without_change(host, snapshot: str, run_play) -> str:
    """Call RUN_PLAY (a run that must fail); assert that it failed and that SNAPSHOT, a shell
    command printing the state a refused run must not touch, prints the same on HOST as before.
    Returns what the run said."""
    before = host.check_output(snapshot)
    run = run_play()
    assert run.returncode != 0, said(run)[-2000:]
    assert host.check_output(snapshot) == before
    return said(run)


def failures(run: subprocess.CompletedProcess, items: bool = False) -> dict[str, str]:
    """The message of each host's last failure in RUN: {host: msg} (JSON result format), in
    the order of those last failures (the run's last failure last). The last one: a rescue that
    reports why its block failed comes after the block's own failure.
    ITEMS: also a loop's failed items (`failed: [host] (item=...) => {...}`; an assert in a
    loop fails its host with no `fatal:` line), for a host that has no `fatal:` line."""
    found: dict[str, str] = {}
    by_item: dict[str, str] = {}
    decoder = json.JSONDecoder()
    text = run.stdout + "\n" + run.stderr
    pattern = r"^(?:fatal: \[([^\]]+)\]: FAILED! => |failed: \[([^\]]+)\] \(item=.*?\) => )"
    for match in re.finditer(pattern, text, re.M):
        try:
            result, _ = decoder.raw_decode(text, match.end())
        except ValueError:
            result = {"msg": text[match.end() : match.end() + 2000]}
        if match.group(1):
            found.pop(match.group(1), None)
            found[match.group(1)] = str(result.get("msg", result))
        elif items:
            by_item[match.group(2)] = str(result.get("msg", result))
    return {**by_item, **found}


def refusal(failed: dict[str, str], case: str, fragments: list[str]) -> str:
    """CASE's message in FAILED (what failures() returned), whitespace folded, asserted to hold
    every one of FRAGMENTS."""
    assert case in failed, f"{case} was not refused; refused: {sorted(failed)}"
    message = " ".join(failed[case].split())
    for fragment in fragments:
        assert fragment in message, (fragment, message[-2000:])
    return message


def alias_inventory(path: Path, aliases: dict[str, tuple[str, dict]]) -> Path:
    """Write an inventory where each alias is a Docker container of the scenario with its own
    variables: {alias: (container, host_vars)}. Many cases then run in one ansible-playbook."""
    hosts = {
        alias: {"ansible_connection": "community.docker.docker", "ansible_host": container, **hv}
        for alias, (container, hv) in aliases.items()
    }
    path.write_text(json.dumps({"all": {"hosts": hosts}}, indent=1))
    return path


def play_aliases(
    path: Path, aliases: dict[str, tuple[str, dict]], playbook: Path, snapshot, forks: int = 12
):
    """ONE run of PLAYBOOK over ALIASES (see alias_inventory; the inventory is written to PATH),
    with SNAPSHOT() (what a refused run must not touch) taken before and after it. Returns
    (run, before, after)."""
    inventory = alias_inventory(path, aliases)
    before = snapshot()
    run = subprocess.run(
        ["ansible-playbook", "-i", str(inventory), "--forks", str(forks), str(playbook)],
        capture_output=True,
        text=True,
        env=ansible_env(),
        check=False,
    )
    return run, before, snapshot()


def fleet_report(reports: Path, hosts: list[str]) -> subprocess.CompletedProcess:
    """`rocmlab fleet-report REPORTS --hosts HOSTS` from this checkout's src/ (the standard
    library only, as the fleet_report callback runs it)."""
    return subprocess.run(
        [sys.executable, "-m", "rocmlab", "fleet-report", str(reports), "--hosts", ",".join(hosts)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(PROJECT / "src")),
        check=False,
    )
