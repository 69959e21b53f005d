#!/usr/bin/env python3
"""What two changes to the test harness save per run, side by side in one run (ratios of the
CPU seconds of the ansible-playbook process tree, medians over ROUNDS alternating rounds):

- wheel: role smoke_test's wheel tasks as they were (tools/bench/wheel-before.yml: a temporary
  directory, a copy of the project, `pip wheel`, find, remove) against what it runs now
  (tools/bench/wheel-after.yml: action rocmlab_wheel, the wheel kept on the controller under the
  SHA-256 of its sources, here with the cache warm as on every run after the first). Every
  playbook run that installs rocmlab (site, fleet, smoke, cluster-check) paid the former.
- containers: Molecule's create and destroy of three containers, the Docker driver's own
  playbooks (molecule_plugins/docker/playbooks) against molecule/shared/create.yml and
  destroy.yml (one docker command each), both run with ansible-playbook as Molecule runs them.
  Every scenario paid the driver's destroy twice and its create once.

Usage: benchmarks/harness_overhead.py [ROUNDS]  (default 3; needs the toolchain of tools/test
and the Docker engine, and the image rocmlab-test/debian12 of tools/images/). Results and the
machine they ran on: docs/testing.md, "Measurements behind the harness's choices".
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DRIVER = Path(
    subprocess.run(
        [sys.executable, "-c", "import molecule_plugins.docker, os; "
         "print(os.path.dirname(molecule_plugins.docker.__file__))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
) / "playbooks"  # fmt: skip


def image() -> str:
    names = subprocess.run(
        ["docker", "images", "--format", "{{.Repository}}:{{.Tag}}", "rocmlab-test/debian12"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    if not names:
        sys.exit("no rocmlab-test/debian12 image: run tools/test (or prepare_lab) first")
    return names[0]


def cpu_of(argv: list[str], env: dict[str, str]) -> float:
    """CPU seconds (user + system) of ARGV and everything it started and waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if run.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{run.stdout[-3000:]}{run.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def playbook(path: Path, extra: dict, env: dict[str, str]) -> float:
    argv = [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local"]
    argv += ["-e", json.dumps({"ansible_python_interpreter": sys.executable, **extra}), str(path)]
    return cpu_of(argv, env)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    env = {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections"),
        "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
        "ANSIBLE_NOCOLOR": "1",
    }
    platforms = [
        {"name": f"rocmlab-bench-harness-{n}", "image": image(), "pre_build_image": True,
         "command": "sleep infinity"}
        for n in range(3)
    ]  # fmt: skip
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        molecule = {
            "molecule_yml": {"platforms": platforms},
            "molecule_no_log": False,
            "molecule_scenario_directory": scratch,
            "molecule_ephemeral_directory": scratch,
        }
        wheel = {"project": str(ROOT), "cache": str(Path(scratch) / "wheels")}
        playbook(ROOT / "tools/bench/wheel-after.yml", wheel, env)  # the cache warm
        for n in range(1, rounds + 1):
            sides = {
                "wheel before": lambda: playbook(ROOT / "tools/bench/wheel-before.yml", wheel, env),
                "wheel after": lambda: playbook(ROOT / "tools/bench/wheel-after.yml", wheel, env),
                "containers before": lambda: sum(
                    playbook(DRIVER / f"{step}.yml", molecule, env)
                    for step in ("create", "destroy")
                ),
                "containers after": lambda: sum(
                    playbook(ROOT / f"molecule/shared/{step}.yml", molecule, env)
                    for step in ("create", "destroy")
                ),
            }
            for name, side in sides.items():
                seconds = side()
                times.setdefault(name, []).append(seconds)
                print(f"round {n} {name}: {seconds:.2f} s of CPU", flush=True)
    for what in ("wheel", "containers"):
        before = statistics.median(times[f"{what} before"])
        after = statistics.median(times[f"{what} after"])
        print(f"{what}: median {before:.2f} s of CPU before, {after:.2f} s after: "
              f"{before / after:.2f}x less")  # fmt: skip


if __name__ == "__main__":
    main()
