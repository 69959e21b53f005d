#!/usr/bin/env python3
"""What the lab's size costs the controller (issue 22): the same lab at N = 1, 4, 8 and 16 hosts
in one run, each host a container started from the converged Debian 12 image
(tools/images/converged.sh) on the test network, reached with community.docker.docker.

For each N: a first converging run of playbooks/site.yml and then of playbooks/fleet.yml (not
measured; near no-op on the converged image, it brings the hosts to this checkout), then the
measured converged no-op run of each, printing its wall time, the tasks it executed per host
(ok + skipped of the PLAY RECAP; changed must be 0), the CPU seconds (user + system) of the
ansible-playbook process tree and its peak RSS (ru_maxrss of the waited-for children: the
largest single process of the tree, not a sum over the forks), and the ratio to the smallest N.

Every run has the smoke job off (-e smoke_test_enabled=false): the benchmark measures the
controller and the protocol, not MNIST trained N times on the machine's cores. The settings are
tools/images/converged.yml's (ROCm from the AMD-layout mirror, PyTorch from the wheelhouse), with
the fleet scenario's preflight thresholds; ansible.cfg's forks (10) and pipelining are kept.

Usage (under the Molecule lock: it starts the harness's services as tools/test does, and its
containers share the machine with the scenarios):
  flock /tmp/rocmlab-molecule.lock .venv/bin/python benchmarks/fleet_scale.py \
      [--sizes 1,4,8,16] [--image TAG] [--json out.json] [--logs DIR]
The containers are named rocmlab-bench-fleet-<pid>-<i> and removed at the end, whatever happens.
Results and the machine they ran on: docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NETWORK = "rocmlab-test"
PREFIX = f"rocmlab-bench-fleet-{os.getpid()}"
RECAP = re.compile(
    r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)"
    r"\s+failed=(?P<failed>\d+)\s+skipped=(?P<skipped>\d+)",
    re.M,
)

# The harness's services as tools/test starts them, and the converged image's tag: printed as
# NAME=VALUE lines for this process's environment.
SERVICES = r"""
set -e
source tools/lib.sh
ensure_images >/dev/null
eval "$(tests/fixtures/amd_mirror/mirror.sh start)"
eval "$(tests/fixtures/wheelhouse/wheelhouse.sh start)"
tools/stage-test-data --only mnist >/dev/null
ROCMLAB_DATASETS_URL=$(serve_dir rocmlab-datasets "$ROCMLAB_CACHE/data")
tag=$(converged_image_tag)
for v in ROCMLAB_IMAGE_DEBIAN12 ROCMLAB_MIRROR_URL ROCMLAB_MIRROR_FINGERPRINT ROCMLAB_MIRROR_DIR \
    ROCMLAB_WHEELHOUSE_URL ROCMLAB_WHEELHOUSE_DIR ROCMLAB_DATASETS_URL; do
  printf '%s=%s\n' "$v" "${!v}"
done
printf 'CONVERGED_TAG=%s\n' "$tag"
"""

# Runs ARGV, then writes its wall time and the rusage of its waited-for process tree to PATH: a
# process of its own per run, so that ru_maxrss is that run's and not the largest of all runs.
MEASURE = r"""
import json, resource, subprocess, sys, time
out, argv = sys.argv[1], sys.argv[2:]
start = time.monotonic()
code = subprocess.call(argv)
wall = time.monotonic() - start
use = resource.getrusage(resource.RUSAGE_CHILDREN)
json.dump({"rc": code, "wall": wall, "cpu": use.ru_utime + use.ru_stime,
           "maxrss_kib": use.ru_maxrss}, open(out, "w"))
sys.exit(code)
"""


def services() -> dict[str, str]:
    run = subprocess.run(
        ["bash", "-c", SERVICES], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if run.returncode != 0:
        sys.exit(f"starting the harness's services failed:\n{run.stderr[-3000:]}")
    return dict(line.split("=", 1) for line in run.stdout.splitlines() if "=" in line)


def pick_image(wanted: str | None, tag: str) -> str:
    if wanted:
        return wanted
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0:
        return tag
    # This checkout's tag is not built (it hashes the checkout's paths): the newest converged
    # image, which the unmeasured first run brings to this checkout.
    names = subprocess.run(
        ["docker", "images", "--format", "{{.Repository}}:{{.Tag}}",
         "rocmlab-test/debian12-converged"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    if not names:
        sys.exit("no rocmlab-test/debian12-converged image: run tools/test cluster first")
    return names[0]


def start_hosts(image: str, first: int, last: int) -> list[str]:
    names = [f"{PREFIX}-{i}" for i in range(first, last)]
    for name in names:
        subprocess.run(
            ["docker", "run", "-d", "--name", name, "--network", NETWORK,
             "--label", "rocmlab.bench=fleet_scale", image, "sleep", "infinity"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    return names


def remove_hosts(names: list[str]) -> None:
    if names:
        subprocess.run(["docker", "rm", "-f", *names], capture_output=True, check=False)


def inventory(path: Path, hosts: list[str], reports: Path, env: dict[str, str]) -> Path:
    lab = {
        "ansible_connection": "community.docker.docker",
        "ansible_python_interpreter": "/usr/bin/python3",
        # tools/images/converged.yml, with the service URLs resolved here.
        "rocm_repo_base_url": env["ROCMLAB_MIRROR_URL"],
        "rocm_repo_key_fingerprint": env["ROCMLAB_MIRROR_FINGERPRINT"],
        "user_groups_users": ["researcher"],
        "pytorch_rocm_version": "2.13.0",
        "pytorch_rocm_rocm_version": "7.2",
        "pytorch_rocm_index_url": "",
        "pytorch_rocm_find_links": env["ROCMLAB_WHEELHOUSE_URL"],
        "pytorch_rocm_require_rocm_build": False,
        "pytorch_rocm_torchvision": False,
        "smoke_test_mnist_url": env["ROCMLAB_DATASETS_URL"] + "mnist/",
        "rocmlab_reports_dir": str(reports),
        "smoke_test_args": ["--epochs", "1"],
        "smoke_test_expect_gpus": 0,
        # The fleet scenario's rollout settings (molecule/fleet/tests/test_fleet.py).
        "rocmlab_fleet_connect_timeout": 5,
        "rocmlab_free_space_gib": {"rocm": 1, "venvs": 2, "datasets": 0.1},
    }
    path.write_text(json.dumps({"all": {"hosts": {h: {} for h in hosts}, "vars": lab}}))
    return path


def playbook(name: str, inv: Path, log: Path, env: dict[str, str]) -> dict:
    """One ansible-playbook run of playbooks/NAME with the smoke job off, measured."""
    stats = log.with_suffix(".json")
    argv = [str(BIN / "ansible-playbook"), "-i", str(inv), "-e", "smoke_test_enabled=false"]
    argv.append(str(ROOT / "playbooks" / name))
    with log.open("w") as out:
        run = subprocess.run(
            [sys.executable, "-c", MEASURE, str(stats), *argv],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT, check=False,
        )  # fmt: skip
    result = json.loads(stats.read_text())
    text = log.read_text()
    recap = text.rsplit("PLAY RECAP", 1)[-1]
    hosts = {m["host"]: {k: int(v) for k, v in m.groupdict().items() if k != "host"}
             for m in RECAP.finditer(recap)}  # fmt: skip
    if run.returncode != 0 or any(h["failed"] or h["unreachable"] for h in hosts.values()):
        sys.exit(f"{name} failed (log: {log}):\n{text[-4000:]}")
    result["hosts"] = hosts
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,4,8,16", help="numbers of hosts, comma-separated")
    parser.add_argument("--image", help="converged image (default: this checkout's, else newest)")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--logs", type=Path, help="keep every run's output here")
    args = parser.parse_args()
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    if not sizes or sizes[0] < 1:
        sys.exit(f"--sizes {args.sizes}: want numbers of hosts, 1 or more, comma-separated")

    found = services()
    image = pick_image(args.image, found.pop("CONVERGED_TAG"))
    env = {
        **os.environ,
        **found,
        "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(ROOT / "src"),
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections"),
        "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
    }
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"image {image}; {os.cpu_count()} CPUs; load {load}; smoke job OFF", flush=True)
    hosts: list[str] = []
    results: list[dict] = []
    with tempfile.TemporaryDirectory() as scratch:
        logs = args.logs or Path(scratch)
        logs.mkdir(parents=True, exist_ok=True)
        try:
            for n in sizes:
                new = start_hosts(image, len(hosts), n)
                hosts += new
                reports = Path(scratch) / "reports"
                # The first, converging run on the hosts this N adds (those of the smaller Ns
                # had theirs), not measured.
                inv = inventory(Path(scratch) / f"new-{n}.json", new, reports, env)
                for book in ("site.yml", "fleet.yml"):
                    first = playbook(book, inv, logs / f"{n}-{book}-first.log", env)
                    print(f"N={n} {book} first run on {len(new)} new host(s): "
                          f"{first['wall']:.1f} s", flush=True)  # fmt: skip
                inv = inventory(Path(scratch) / f"lab-{n}.json", hosts[:n], reports, env)
                row: dict = {"hosts": n, "load_before": os.getloadavg()[0]}
                for book in ("site.yml", "fleet.yml"):
                    measured = playbook(book, inv, logs / f"{n}-{book}.log", env)
                    # The lab's hosts only (site.yml has plays on the controller, localhost).
                    recap = {h: v for h, v in measured.pop("hosts").items() if h in hosts[:n]}
                    tasks = sorted({h["ok"] + h["skipped"] for h in recap.values()})
                    changed = sum(h["changed"] for h in recap.values())
                    row[book] = {**measured, "tasks_per_host": tasks, "changed": changed}
                    print(f"N={n} {book} no-op run: {measured['wall']:.1f} s wall, "
                          f"{measured['cpu']:.1f} s CPU, {measured['maxrss_kib'] / 1024:.0f} MiB, "
                          f"tasks per host {tasks}, changed {changed}", flush=True)  # fmt: skip
                row["load_after"] = os.getloadavg()[0]
                results.append(row)
        finally:
            remove_hosts(hosts)

    base = results[0]
    print(f"\nconverged no-op runs, smoke job off, ratios to N={base['hosts']}")
    print("| hosts | playbook | wall s | ratio | CPU s | ratio | RSS MiB | tasks/host | changed |")
    print("|---:|---|---:|---:|---:|---:|---:|---|---:|")
    for row in results:
        for book in ("site.yml", "fleet.yml"):
            r, b = row[book], base[book]
            tasks = "-".join(str(t) for t in (r["tasks_per_host"][0], r["tasks_per_host"][-1]))
            if len(set(r["tasks_per_host"])) == 1:
                tasks = str(r["tasks_per_host"][0])
            print(f"| {row['hosts']} | {book} | {r['wall']:.1f} | {r['wall'] / b['wall']:.2f} | "
                  f"{r['cpu']:.1f} | {r['cpu'] / b['cpu']:.2f} | {r['maxrss_kib'] / 1024:.0f} | "
                  f"{tasks} | {r['changed']} |")  # fmt: skip
    loads = (f"N={r['hosts']} {r['load_before']:.1f}/{r['load_after']:.1f}" for r in results)
    print("load averages (1 min) before/after the measured runs of each N: " + ", ".join(loads))
    if args.json:
        args.json.write_text(json.dumps({"image": image, "results": results}, indent=1))


if __name__ == "__main__":
    main()
