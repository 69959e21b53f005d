#!/usr/bin/env python3
"""Benchmark: the bytes a lab cache fetches upstream for one client and for three, in one run.

Two labs of Debian 12 containers on the test network, each with a fresh head node (role
lab_cache): one with one client, one with three. Each lab runs playbooks/site.yml (ROCm from the
AMD-layout mirror, Debian's packages, torch from the harness's wheelhouse, MNIST, the smoke job
with one epoch) with the lab settings of the lab_cache scenario (molecule/lab_cache/molecule.yml,
read from there). The upstream bytes come from the head node's own logs, counted by
plugins/modules/lab_cache_stats.py. Prints, per kind (apt, wheels, datasets) and in all, the
upstream and served bytes of both labs and the ratio of upstream bytes, 3 clients / 1 client
(the goal: at most 1.1). Usage, as root on a machine where tools/test runs:

  .venv/bin/python benchmarks/lab_cache_upstream.py [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
SCENARIO = REPO / "molecule" / "lab_cache" / "molecule.yml"
LOGS = {
    "apt_log": "/var/log/apt-cacher-ng/apt-cacher.log",
    "http_log": "/var/log/nginx/rocmlab-lab-cache.log",
    "fill_log": "/srv/rocmlab/lab-cache/fills.jsonl",
}
KINDS = ("apt", "wheels", "datasets")

_spec = importlib.util.spec_from_file_location(
    "lab_cache_stats", REPO / "plugins" / "modules" / "lab_cache_stats.py"
)
assert _spec is not None and _spec.loader is not None
lab_cache_stats = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lab_cache_stats)


def lab_environment() -> dict[str, str]:
    """The harness's engine, images and upstreams (as tools/test starts them), as environment."""
    script = """
        set -e
        source tools/lib.sh
        prepare_lab >&2
        eval "$(tests/fixtures/amd_mirror/mirror.sh start)"
        eval "$(tests/fixtures/wheelhouse/wheelhouse.sh start)"
        tools/stage-test-data --only mnist >&2
        export ROCMLAB_DATASETS_URL=$(serve_dir rocmlab-datasets "$ROCMLAB_CACHE/data")
        env -0
    """
    out = subprocess.run(
        ["bash", "-c", script], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)


def scenario_vars(env: dict[str, str]) -> dict:
    """The lab_cache scenario's group_vars, its ${VARIABLES} filled in from ENV."""
    text = SCENARIO.read_text()
    for key, value in env.items():
        text = text.replace("${" + key + "}", value)
    return yaml.safe_load(text)["provisioner"]["inventory"]["group_vars"]


def docker(*args: str, check: bool = True) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check).stdout


def start_lab(name: str, clients: int, env: dict[str, str], work: Path) -> Path:
    """Containers NAME-head and NAME-c1.. on the test network; returns an inventory file."""
    image = env["ROCMLAB_IMAGE_DEBIAN12"]
    network = env["ROCMLAB_MIRROR_NETWORK"]
    head = f"{name}-head"
    members = [f"{name}-c{n}" for n in range(1, clients + 1)]
    for container in [head, *members]:
        docker("rm", "-f", container, check=False)
        extra = ["--cap-add", "SYS_PTRACE"] if container == head else []
        docker(
            "run",
            "-d",
            "--name",
            container,
            "--network",
            network,
            *extra,
            image,
            "sleep",
            "infinity",
        )
    for member in members:
        docker("exec", member, "useradd", "--create-home", "researcher")
    group_vars = scenario_vars(env)
    group_vars["all"]["rocmlab_lab_cache"] = head
    group_vars["all"]["rocmlab_reports_dir"] = str(work / name / "reports")
    docker_host = {"ansible_connection": "community.docker.docker"}
    inventory = {
        "all": {
            "vars": {**group_vars["all"], "ansible_python_interpreter": "/usr/bin/python3"},
            "children": {
                "lab_cache": {"hosts": {head: docker_host}, "vars": group_vars["lab_cache"]},
                "clients": {"hosts": {member: docker_host for member in members}},
            },
        }
    }
    path = work / f"{name}.yml"
    path.write_text(json.dumps(inventory, indent=1))
    return path


def run_lab(inventory: Path, env: dict[str, str]) -> None:
    run_env = dict(
        env,
        ANSIBLE_ROLES_PATH=str(REPO / "roles"),
        ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
        ANSIBLE_PIPELINING="True",
        ANSIBLE_NOCOLOR="1",
    )
    command = ["ansible-playbook", "-i", str(inventory), str(REPO / "playbooks" / "site.yml")]
    run = subprocess.run(command, cwd=REPO, env=run_env, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"{shlex.join(command)} failed:\n{run.stdout[-4000:]}\n{run.stderr[-2000:]}")


def head_stats(head: str, work: Path) -> dict:
    local = {}
    for key, path in LOGS.items():
        target = work / f"{head}-{Path(path).name}"
        target.write_text(docker("exec", head, "cat", path, check=False))
        local[key] = str(target)
    return lab_cache_stats.stats(**local)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    env = lab_environment()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for clients in (1, 3):
            name = f"rocmlab-bench-cache{clients}"
            inventory = start_lab(name, clients, env, work)
            try:
                run_lab(inventory, env)
                results[clients] = head_stats(f"{name}-head", work)
            finally:
                for container in [f"{name}-head", *(f"{name}-c{n}" for n in range(1, clients + 1))]:
                    docker("rm", "-f", container, check=False)
    one, three = results[1], results[3]
    heads = ("1 client: upstream", "served", "3 clients: upstream", "served", "ratio")
    print(f"{'':10} {heads[0]:>20} {heads[1]:>12} {heads[2]:>20} {heads[3]:>12} {heads[4]:>7}")
    rows = [(kind, one["kinds"][kind], three["kinds"][kind]) for kind in KINDS]
    rows.append(("all", one, three))
    for kind, a, b in rows:
        ratio = b["upstream_bytes"] / a["upstream_bytes"] if a["upstream_bytes"] else float("nan")
        print(
            f"{kind:10} {a['upstream_bytes'] / 1e6:17.1f} MB {a['served_bytes'] / 1e6:9.1f} MB"
            f" {b['upstream_bytes'] / 1e6:17.1f} MB {b['served_bytes'] / 1e6:9.1f} MB {ratio:7.3f}"
        )
    total = three["upstream_bytes"] / one["upstream_bytes"]
    print(f"3 clients fetched {total:.3f} x the upstream bytes of 1 client (goal: at most 1.1)")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"machine": platform.platform(), "clients": results, "ratio": total}, indent=1
            )
        )
    return 0 if total <= 1.1 else 1


if __name__ == "__main__":
    sys.exit(main())
