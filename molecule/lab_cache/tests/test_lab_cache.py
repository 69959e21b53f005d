"""A lab cache (role lab_cache) and its clients: the site playbook run from here, in order:

  run 1   the head node and three clients (c1-c3): the head installs apt-cacher-ng and nginx and
          fills the wheels and the dataset the clients' own checks asked for; the clients get
          ROCm from the AMD-layout mirror, Debian's packages, torch and MNIST through it, and
          train. Asserted from the cache's own logs: each package, wheel and dataset file
          crossed the uplink once while three clients installed it.
  bad     on c4, not converged yet: a cache host that is not in the inventory, and a cache that
          does not answer (a port nothing listens on), each refused with the cache's name and
          nothing on c4 changed.
  run 2   c4 added (with the head node in the limit): zero upstream fetches for the same files,
          and the head node reports no change.
  core    c4 moved to AMD's Core SDK line (playbooks/rocm.yml, rocm_repo_version 10.0): its
          sources, key and packages come through the cache's Core remap, every package file
          fetched first by the head node's fill, the signed InRelease the mirror's byte for byte.
  wheels  c3 and c4 (each showing an MI210: the sysfs fixture) install torch from ROCm's
          multi-arch wheels in one run through the head node's pass-through of the fixture
          index: the index's own log shows each file sent once, to the head node, and of device
          code only gfx90a's; nginx's log shows the device wheel served to both clients.
  offline an offline bundle made on the head node (playbooks/lab_bundle.yml, which prints the
          SHA-256 of its MANIFEST.json; an existing directory it did not make, as a USB stick's
          root, is refused as lab_cache_bundle_dest and left as it was), copied to the offline
          lab's head node; that head node and c5 moved to a Docker network created with
          --internal (no route out). The offline head node is given the printed digest. A copy
          of the bundle with one altered wheel is refused, naming the wheel, and a copy with an
          altered wheel and its manifest re-hashed is refused by the digest, each with nothing
          imported; apt-cacher-ng's account plants links in its cache to root-owned files
          outside, which the import replaces without writing through them; then the site
          playbook provisions c5 end to end, smoke job included, from the bundle alone: apt
          verifies the AMD-layout mirror's signatures through the offline cache, and the cache
          fetched nothing upstream. The bundle holds the Core SDK repository c4 used, and c5's
          apt verifies its signature and fetches a Core package from it offline.
          The bundle also holds what c3 and c4 got of ROCm's wheels (module
          lab_cache_rocm_wheels kept them from the pass-through, gfx90a's device code only), and
          c5 (an MI210 sysfs tree) installs torch from ROCm's wheels from it offline.

The cache's logs are read with plugins/modules/lab_cache_stats.py's own parser, so the module
is checked against the servers' real log formats here.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import unquote

import pytest
import testinfra
import yaml
from playbook_runs import (
    INVENTORY,
    failures,
    fleet_report,
    play,
    refusal,
    refused_without_change,
    said,
)

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
SITE = PROJECT / "playbooks" / "site.yml"
HEAD = "rocmlab-cache-head"
C1, C2, C3, C4, C5 = (f"rocmlab-cache-c{n}" for n in range(1, 6))
OFFLINE_HEAD = "rocmlab-cache-offline-head"
OFFLINE_NETWORK = "rocmlab-test-offline"
BUNDLE = "/srv/rocmlab/lab-bundle"
# Where the smoke job's reports are fetched to (rocmlab_reports_dir in molecule.yml).
REPORTS = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "reports"
FIRST = [C1, C2, C3]
VENV = "/opt/rocmlab/venvs/pytorch"
LOGS = {
    "apt_log": "/var/log/apt-cacher-ng/apt-cacher.log",
    "http_log": "/var/log/nginx/rocmlab-lab-cache.log",
    "fill_log": "/srv/rocmlab/lab-cache/fills.jsonl",
}
# What a refused client must not see change: apt's configuration, rocmlab's files, the venvs,
# the packages.
SNAPSHOT = (
    "find /etc/apt /etc/rocmlab /opt/rocmlab /var/lib/rocmlab -type f -print0 2>/dev/null"
    " | sort -z | xargs -0 -r sha256sum; dpkg-query -W -f '${Package} ${Version} ${Status}\\n'"
)

# The module imports its shared code from the collection rocmlab.rocmlab (collections/ links
# this checkout), as Ansible's module runner provides it.
sys.path.insert(0, str(PROJECT / "collections"))
_spec = importlib.util.spec_from_file_location(
    "lab_cache_stats", PROJECT / "plugins" / "modules" / "lab_cache_stats.py"
)
assert _spec is not None and _spec.loader is not None
lab_cache_stats = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lab_cache_stats)


def host(name: str):
    return testinfra.get_host(f"docker://{name}")


def cache_stats(tmp_path: Path, since: float, until: float | None = None) -> dict:
    """The head node's logs, counted by lab_cache_stats from SINCE to before UNTIL (Unix times)."""
    head = host(HEAD)
    local = {}
    for key, path in LOGS.items():
        target = tmp_path / Path(path).name
        target.write_text(head.file(path).content_string if head.file(path).exists else "")
        local[key] = str(target)
    return lab_cache_stats.stats(since=since, until=until, details=True, **local)


def first_served(since: float, until: float) -> dict[str, str]:
    """{path: the client apt-cacher-ng served it to first} from its transfer log's O lines
    from SINCE to before UNTIL."""
    first: dict[str, str] = {}
    for line in host(HEAD).file(LOGS["apt_log"]).content_string.splitlines():
        fields = line.split("|", 4)
        if len(fields) == 5 and fields[1] == "O" and since <= float(fields[0]) < until:
            first.setdefault(fields[4].lstrip("/"), fields[3])
    return first


def smoke_passed(name: str) -> bool:
    """The smoke job's report of NAME, fetched to the controller, says it passed."""
    return json.loads((REPORTS / f"{name}.json").read_text())["passed"] is True


def recap_changed(run, name: str) -> int:
    match = re.search(rf"^{re.escape(name)}\s+: ok=\d+\s+changed=(\d+)", run.stdout, re.M)
    assert match, run.stdout[-3000:]
    return int(match.group(1))


@pytest.fixture(scope="module")
def first_run():
    start = time.time()
    run = play(SITE, {}, "--limit", ",".join([HEAD, *FIRST]))
    assert run.returncode == 0, said(run)[-4000:]
    return run, start, time.time()


@pytest.fixture(scope="module")
def bad_input(first_run):
    """Both refusals on c4, before c4 is converged (the cache is up: run 1 set it up)."""
    c4 = host(C4)
    not_in_inventory = refused_without_change(
        c4,
        SNAPSHOT,
        lambda: play(SITE, {"rocmlab_lab_cache": "rocmlab-cache-nowhere"}, "--limit", C4),
    )
    not_answering = play(SITE, {"lab_cache_http_port": 8999}, "--limit", C4)
    return not_in_inventory, not_answering


@pytest.fixture(scope="module")
def fourth_client(bad_input):
    start = time.time()
    run = play(SITE, {}, "--limit", f"{HEAD},{C4}")
    assert run.returncode == 0, said(run)[-4000:]
    return run, start


def test_clients_fetch_everything_through_the_cache(first_run):
    for name in FIRST:
        client = host(name)
        proxy = client.file("/etc/apt/apt.conf.d/80rocmlab-lab-cache").content_string
        assert f'Acquire::http::Proxy "http://{HEAD}:3142/";' in proxy
        sources = client.file("/etc/apt/sources.list.d/rocm.sources").content_string
        assert f"URIs: http://{HEAD}:3142/amd/rocm/apt/" in sources
        assert "Signed-By: /etc/apt/keyrings/rocm.gpg" in sources
        torch = client.check_output(
            f"{VENV}/bin/python -c 'import torch; print(torch.__version__)'"
        )
        assert torch.startswith("2.13.0")
        staged = client.check_output("ls /var/lib/rocmlab/datasets/mnist")
        assert "t10k-labels-idx1-ubyte" in staged
    # The smoke job passed on each client, and the head node got none (it is not a GPU host).
    for name in FIRST:
        assert smoke_passed(name)
    assert not (REPORTS / f"{HEAD}.json").exists()
    assert not host(HEAD).file(VENV).exists


def test_each_file_crossed_the_uplink_once_for_three_clients(first_run, tmp_path):
    _, start, end = first_run
    files = cache_stats(tmp_path, start, end)["files"]
    debs = {path: c for path, c in files["apt"].items() if path.endswith(".deb")}
    assert any(p.startswith("amd/") for p in debs) and any(p.startswith("debrep/") for p in debs)
    # The head node fetched every package file the clients' apt listed (lab_cache_apt_fill)
    # before they installed: no two clients ask apt-cacher-ng for a file it does not hold yet,
    # so it never opens a second upstream transfer. Each file crosses the uplink once, and all
    # of them together cost at most 2 % more than one copy of each (headers, index re-checks).
    once = 0.0
    for path, count in debs.items():
        # Each of the three clients got it (apt may ask again for a file it did not get whole).
        assert count["served"] >= 3, (path, count)
        one_copy = count["served_bytes"] / count["served"]
        once += one_copy
        assert count["upstream"] >= 1 and count["upstream_bytes"] < 2 * one_copy, (path, count)
    upstream = sum(count["upstream_bytes"] for count in debs.values())
    assert upstream <= 1.02 * once, (upstream, once)
    # The first to get each file was the head node itself (its own fill, from 127.0.0.1),
    # before any client.
    first = first_served(start, end)
    assert set(debs) <= set(first), sorted(set(debs) - set(first))
    not_filled = {path: first[path] for path in debs if not lab_cache_stats.own_fill(first[path])}
    assert not not_filled, not_filled
    for kind in ("wheels", "datasets"):
        assert files[kind], f"no {kind} went through the cache"
        for path, count in files[kind].items():
            assert (count["upstream"], count["served"]) == (1, 3), (kind, path, count)
    assert any("torch-2.13.0" in path for path in files["wheels"])
    assert len(files["datasets"]) == 4


def test_upstream_bytes_are_printed_at_the_end_and_in_the_fleet_report(first_run):
    run, _, _ = first_run
    assert re.search(
        rf"lab cache {HEAD}: [0-9.]+ MB fetched upstream, [0-9.]+ MB served", said(run)
    )
    record = json.loads((REPORTS / "fleet" / "cache.json").read_text())
    assert record["cache_host"] == HEAD
    assert record["kinds"]["wheels"]["upstream_bytes"] > 0
    report = fleet_report(REPORTS, FIRST)
    assert report.returncode == 0, report.stdout + report.stderr
    fleet = json.loads((REPORTS / "fleet.json").read_text())
    assert fleet["cache"]["cache_host"] == HEAD
    assert fleet["cache"]["kinds"]["apt"] == {
        key: record["kinds"]["apt"][key] for key in ("upstream_bytes", "served_bytes")
    }


def test_amds_signed_metadata_reaches_the_clients_unchanged(first_run):
    """No re-signing: the InRelease a client gets through the cache is the mirror's, byte for
    byte, and apt verified it against the keyring rocm_repo wrote."""
    mirror = Path(os.environ["ROCMLAB_MIRROR_DIR"]) / "rocm/apt/6.4.2/dists/jammy/InRelease"
    through_cache = host(C1).check_output(
        'python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen('
        f"'http://{HEAD}:3142/amd/rocm/apt/6.4.2/dists/jammy/InRelease').read().decode())\""
    )
    assert through_cache.strip() == mirror.read_text().strip()
    policy = host(C1).check_output("apt-cache policy")
    assert f"http://{HEAD}:3142/amd/rocm/apt/6.4.2 jammy/main" in policy
    assert "o=repo.radeon.com" in policy


def test_a_cache_host_outside_the_inventory_is_refused(bad_input):
    not_in_inventory, _ = bad_input
    refusal(
        {C4: " ".join(not_in_inventory.split())},
        C4,
        [
            'rocmlab_lab_cache: "rocmlab-cache-nowhere" is not a host of the inventory',
            f"(group lab_cache: {HEAD})",
            "Nothing on this host was changed.",
        ],
    )


def test_a_cache_that_does_not_answer_is_refused(bad_input):
    _, run = bad_input
    assert run.returncode != 0
    message = refusal(
        failures(run),
        C4,
        [
            f"rocmlab_lab_cache: the lab cache {HEAD} does not answer from {C4}",
            f"http://{HEAD}:8999/lab-cache.json gave no answer",
            "Nothing on this host was changed.",
        ],
    )
    assert "Traceback" not in message


def test_a_refused_client_was_left_as_it_was(bad_input):
    """The refusal of an unknown cache host is checked against the snapshot in the fixture;
    the unanswered cache left no apt proxy setting and no venv behind either."""
    c4 = host(C4)
    assert not c4.file("/etc/apt/apt.conf.d/80rocmlab-lab-cache").exists
    assert not c4.file("/etc/apt/sources.list.d/rocm.sources").exists
    assert not c4.file(VENV).exists


def test_a_fourth_client_fetches_nothing_upstream(fourth_client, tmp_path):
    _, start = fourth_client
    counted = cache_stats(tmp_path, start)
    files = counted["files"]
    for kind in ("apt", "wheels", "datasets"):
        package_files = {
            path: c for path, c in files[kind].items() if kind != "apt" or path.endswith(".deb")
        }
        assert package_files, f"c4 got no {kind} through the cache"
        fetched = {path: c for path, c in package_files.items() if c["upstream"]}
        assert not fetched, (kind, fetched)
    assert counted["kinds"]["wheels"]["upstream_bytes"] == 0
    assert counted["kinds"]["datasets"]["upstream_bytes"] == 0
    assert smoke_passed(C4)


def test_the_head_node_does_not_change_when_a_client_is_added(fourth_client):
    run, _ = fourth_client
    assert recap_changed(run, HEAD) == 0


CORE_REPO = "amdcore/debian12"


@pytest.fixture(scope="module")
def core_client(fourth_client):
    """c4 moved to AMD's Core SDK line through the cache, as a lab moves (playbooks/rocm.yml)."""
    start = time.time()
    run = play(PROJECT / "playbooks" / "rocm.yml", {"rocm_repo_version": "10.0"}, "--limit", C4)
    assert run.returncode == 0, said(run)[-4000:]
    return run, start, time.time()


def test_a_client_moves_to_the_core_line_through_the_cache(core_client, tmp_path):
    _, start, end = core_client
    c4 = host(C4)
    sources = c4.file("/etc/apt/sources.list.d/rocm.sources").content_string
    assert f"URIs: http://{HEAD}:3142/{CORE_REPO}" in sources
    policy = c4.check_output("apt-cache policy amdrocm-core10.0")
    assert f"http://{HEAD}:3142/{CORE_REPO} stable/main" in policy
    assert c4.check_output("readlink -f /opt/rocm/core") == "/opt/rocm/core-10.0"
    # AMD's signed index through the cache is the mirror's, byte for byte: nothing re-signed.
    mirror = (
        Path(os.environ["ROCMLAB_MIRROR_DIR"]) / "rocm/packages/debian12/dists/stable/InRelease"
    )
    cached = host(HEAD).file(f"{ACNG_CACHE}/{CORE_REPO}/dists/stable/InRelease").content_string
    assert cached.strip() == mirror.read_text().strip()
    # The head node fetched every Core package file (its own fill) before c4 asked for it.
    apt = cache_stats(tmp_path, start, end)["files"]["apt"]
    debs = [path for path in apt if path.startswith(f"{CORE_REPO}/") and path.endswith(".deb")]
    assert any("amdrocm-core10.0" in path for path in debs), sorted(apt)
    first = first_served(start, end)
    not_filled = [path for path in debs if not lab_cache_stats.own_fill(first.get(path, ""))]
    assert not not_filled, {path: first.get(path) for path in not_filled}


# --- ROCm's multi-arch wheels through the cache's pass-through (lab_cache_rocm_wheels_upstream) ---
WHEELS_CLIENTS = [C3, C4]
WHEELS_SETTINGS = {
    "pytorch_rocm_source": "wheels",
    "pytorch_rocm_rocm_version": "7.14",
    "pytorch_rocm_sysfs_root": "/srv/sysfs/mi210",
}
DISTS = (
    f"{VENV}/bin/python -c 'import json, importlib.metadata as m;"
    ' print(json.dumps({d.metadata["Name"]: d.version for d in m.distributions()}))\''
)


def index_gets(since: float, address: str) -> list[str]:
    """The files the ROCm wheels fixture index (its server's log: Python's http.server, one line
    per request) sent to ADDRESS since SINCE, as named on the index."""
    logs = subprocess.run(
        ["docker", "logs", "--since", str(int(since)), "rocmlab-rocm-wheels"],
        capture_output=True,
        text=True,
        check=True,
    )
    paths = re.findall(
        rf'^{re.escape(address)} - - \[[^]]*\] "GET (\S+) HTTP[^"]*" 200 ',
        logs.stdout + logs.stderr,
        re.M,
    )
    return [unquote(path.rsplit("/", 1)[1]) for path in paths if path.endswith(".whl")]


def address_of(name: str) -> str:
    """NAME's address on the test network (what the fixture index's log names it by)."""
    network = '{{(index .NetworkSettings.Networks "rocmlab-test").IPAddress}}'
    return docker("inspect", "-f", network, name).strip()


@pytest.fixture(scope="module")
def rocm_wheels_clients(core_client):
    """c3 and c4, both showing an MI210, install PyTorch from ROCm's wheels in one run."""
    start = time.time()
    run = play(SITE, WHEELS_SETTINGS, "--limit", ",".join(WHEELS_CLIENTS), "--tags", "pytorch_rocm")
    assert run.returncode == 0, said(run)[-4000:]
    return run, start


def test_two_clients_of_one_gpu_target_cost_one_upstream_copy_of_its_device_code(
    rocm_wheels_clients,
):
    _, start = rocm_wheels_clients
    for name in WHEELS_CLIENTS:
        dists = json.loads(host(name).check_output(DISTS))
        assert dists["torch"] == "2.13.0+rocm7.14.0"
        devices = sorted(n for n in dists if "-device-" in n)
        assert devices == ["amd-torch-device-gfx90a", "rocm-sdk-device-gfx90a"], name
        record = json.loads(host(name).file("/etc/rocmlab/pytorch.json").content_string)
        assert record["index_url"] == f"http://{HEAD}:8180/rocm-wheels/"
    fetched = index_gets(start, address_of(HEAD))
    # Each file once from upstream for both clients, and of the device code only their target's.
    assert len(fetched) == len(set(fetched)) > 0, sorted(fetched)
    devices = sorted(name.split("-")[0] for name in fetched if "_device_" in name)
    assert devices == ["amd_torch_device_gfx90a", "rocm_sdk_device_gfx90a"], sorted(fetched)
    # No client fetched from the index itself: both got every file from the head node.
    for name in WHEELS_CLIENTS:
        assert index_gets(start, address_of(name)) == [], name
    served = [
        line.split("|")[3]
        for line in host(HEAD).file(LOGS["http_log"]).content_string.splitlines()
        if "/rocm-wheels/" in line
        and "rocm_sdk_device_gfx90a" in line
        and float(line.split("|")[0]) >= start
    ]
    assert len(served) == 2 and len(set(served)) == 2, served


def docker(*args: str, check: bool = True) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check).stdout


def offline_inventory(path: Path, digest: str, bundle: str = BUNDLE) -> Path:
    """The offline lab: its head node (lab_cache_bundle, and the DIGEST of the bundle's
    manifest printed where it was made) and c5, with the scenario's settings."""
    group_vars = Path(INVENTORY).parent / "group_vars"
    lab = yaml.safe_load((group_vars / "all").read_text())
    lab["rocmlab_lab_cache"] = OFFLINE_HEAD
    cache = yaml.safe_load((group_vars / "lab_cache").read_text())
    connection = {"ansible_connection": "community.docker.docker"}
    hosts = {
        OFFLINE_HEAD: {
            **connection,
            **cache,
            "lab_cache_bundle": bundle,
            "lab_cache_bundle_digest": digest,
        }
    }
    inventory = {
        "all": {
            "vars": lab,
            "children": {"lab_cache": {"hosts": hosts}, "clients": {"hosts": {C5: connection}}},
        }
    }
    path.write_text(json.dumps(inventory, indent=1))
    return path


def refused_run(name: str, snapshot: str, run_play):
    """RUN_PLAY's run, which must fail, with SNAPSHOT (a shell command) printing the same on
    the host NAME before and after it."""
    before = host(name).check_output(snapshot)
    run = run_play()
    assert run.returncode != 0, said(run)[-2000:]
    assert host(name).check_output(snapshot) == before
    return run


# A directory that a USB stick's root stands for, with the owner's files in it.
STICK = "/srv/rocmlab/usb-stick"
STICK_SNAPSHOT = (
    f"find {STICK} -printf '%p %y %u %m %s\\n' | sort; find {STICK} -type f -exec sha256sum {{}} +"
)
# What apt-cacher-ng's account plants in its cache on the offline head node before the import:
# a file's name and a directory's name linked to root-owned things outside the cache.
ACNG_CACHE = "/var/cache/apt-cacher-ng"
PLANTED_FILE = f"{ACNG_CACHE}/amd/rocm/apt/6.4.2/dists/jammy/InRelease"
PLANTED_DIR = f"{ACNG_CACHE}/debrep"
CANARY_FILE = "/etc/rocmlab-canary"
CANARY_DIR = "/root/rocmlab-canary"
CANARIES = (
    f"stat -c '%n %F %U %a %s' {CANARY_FILE} {CANARY_DIR}; sha256sum {CANARY_FILE};"
    f" ls -A {CANARY_DIR}"
)


def printed_digest(run) -> str:
    match = re.search(r"MANIFEST\.json SHA-256: ([0-9a-f]{64})", said(run))
    assert match, said(run)[-3000:]
    return match.group(1)


@pytest.fixture(scope="module")
def offline_lab(core_client, rocm_wheels_clients, tmp_path_factory):
    """The bundle made on the head node (after c3 and c4 got ROCm's wheels through it, and an
    existing directory was refused as its destination), carried to the offline head node with
    an altered and a re-hashed copy beside it, links planted in the offline head node's
    apt-cacher-ng cache, and the offline lab cut off from every route out."""
    work = tmp_path_factory.mktemp("offline")
    docker("exec", HEAD, "sh", "-c", f"mkdir -p {STICK}/photos && echo mine > {STICK}/notes.txt")
    stick = refused_run(
        HEAD,
        STICK_SNAPSHOT,
        lambda: play(
            PROJECT / "playbooks" / "lab_bundle.yml",
            {"lab_cache_bundle_dest": STICK},
            "--limit",
            HEAD,
        ),
    )
    made = play(PROJECT / "playbooks" / "lab_bundle.yml", {}, "--limit", HEAD)
    assert made.returncode == 0, said(made)[-3000:]
    docker("cp", f"{HEAD}:{BUNDLE}", str(work / "bundle"))
    # The two bad copies share the bundle's files (hard links: the bundle holds hundreds of MB);
    # what a copy alters is unlinked and written anew, never written through a link.
    carried = work / "carried"
    shutil.copytree(work / "bundle", carried / "lab-bundle-altered", copy_function=os.link)
    wheel = next((carried / "lab-bundle-altered" / "wheels").glob("torch-*.whl"))
    data = bytearray(wheel.read_bytes())
    data[-1] ^= 0xFF  # same size, other content: only the SHA-256 tells
    wheel.unlink()
    wheel.write_bytes(bytes(data))
    # The same altered wheel, and the manifest re-hashed to match it.
    rehashed = carried / "lab-bundle-rehashed"
    shutil.copytree(carried / "lab-bundle-altered", rehashed, copy_function=os.link)
    manifest = json.loads((rehashed / "MANIFEST.json").read_text())
    name = f"wheels/{wheel.name}"
    manifest["files"][name]["sha256"] = hashlib.sha256(bytes(data)).hexdigest()
    (rehashed / "MANIFEST.json").unlink()
    (rehashed / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    shutil.copytree(work / "bundle", carried / "lab-bundle", copy_function=os.link)
    # One copy into the offline head node, its hard links kept: BUNDLE and its two bad copies.
    assert Path(BUNDLE).name == "lab-bundle"
    docker("exec", OFFLINE_HEAD, "mkdir", "-p", str(Path(BUNDLE).parent))
    docker("cp", f"{carried}/.", f"{OFFLINE_HEAD}:{Path(BUNDLE).parent}")
    plant = (
        f"install -m 0600 /dev/null {CANARY_FILE} && echo canary > {CANARY_FILE}"
        f" && install -d -m 0700 {CANARY_DIR}"
        f" && runuser -u apt-cacher-ng -- sh -c 'mkdir -p {Path(PLANTED_FILE).parent}"
        f" && ln -s {CANARY_FILE} {PLANTED_FILE} && ln -s {CANARY_DIR} {PLANTED_DIR}'"
    )
    docker("exec", OFFLINE_HEAD, "sh", "-c", plant)
    docker("network", "rm", OFFLINE_NETWORK, check=False)
    docker("network", "create", "--internal", OFFLINE_NETWORK)
    for name in (OFFLINE_HEAD, C5):
        docker("network", "connect", OFFLINE_NETWORK, name)
        docker("network", "disconnect", os.environ["ROCMLAB_MIRROR_NETWORK"], name)
    canaries = host(OFFLINE_HEAD).check_output(CANARIES)
    yield work, made, stick, canaries
    for name in (OFFLINE_HEAD, C5):
        docker("network", "disconnect", OFFLINE_NETWORK, name, check=False)
    docker("network", "rm", OFFLINE_NETWORK, check=False)


# What a refused import must not touch on the offline head node (the planted links included).
OFFLINE_SNAPSHOT = (
    "find /srv/rocmlab/lab-cache /var/cache/apt-cacher-ng /etc/apt-cacher-ng /etc/nginx"
    " -type f -print0 2>/dev/null | sort -z | xargs -0 -r sha256sum;"
    f" find {ACNG_CACHE} -type l -printf '%p -> %l\\n' | sort"
)


@pytest.fixture(scope="module")
def altered_bundle(offline_lab):
    work, made, _, _ = offline_lab
    inventory = offline_inventory(
        work / "altered.json", printed_digest(made), bundle=f"{BUNDLE}-altered"
    )
    return refused_run(
        OFFLINE_HEAD,
        OFFLINE_SNAPSHOT,
        lambda: play(PROJECT / "playbooks" / "lab_cache.yml", {}, inventory=inventory),
    )


@pytest.fixture(scope="module")
def rehashed_bundle(altered_bundle, offline_lab):
    work, made, _, _ = offline_lab
    inventory = offline_inventory(
        work / "rehashed.json", printed_digest(made), bundle=f"{BUNDLE}-rehashed"
    )
    return refused_run(
        OFFLINE_HEAD,
        OFFLINE_SNAPSHOT,
        lambda: play(PROJECT / "playbooks" / "lab_cache.yml", {}, inventory=inventory),
    )


@pytest.fixture(scope="module")
def offline_run(rehashed_bundle, offline_lab):
    work, made, _, _ = offline_lab
    run = play(SITE, {}, inventory=offline_inventory(work / "offline.json", printed_digest(made)))
    assert run.returncode == 0, said(run)[-4000:]
    return run


def test_the_bundle_lists_every_file_with_its_hash(offline_lab):
    work, made, _, _ = offline_lab
    manifest = json.loads((work / "bundle" / "MANIFEST.json").read_text())
    files = manifest["files"]
    assert any(name.startswith("apt/amd/rocm/apt/") and name.endswith(".deb") for name in files)
    assert any(name.startswith("apt/debrep/pool/") for name in files)
    assert "apt/amd/rocm/apt/6.4.2/dists/jammy/InRelease" in files
    # AMD's Core SDK repository that c4 installed from: its signed index, its key, its packages.
    for name in (f"apt/{CORE_REPO}/dists/stable/InRelease", "apt/amdcore/gpg/rocm.gpg"):
        assert name in files, name
    core = f"apt/{CORE_REPO}/"
    assert any(n.startswith(f"{core}dists/stable/main/binary-amd64/Packages") for n in files)
    assert any(n.startswith(f"{core}pool/") and n.endswith(".deb") for n in files)
    assert any(name.startswith("wheels/torch-2.13.0") for name in files)
    assert len([name for name in files if name.startswith("datasets/mnist/")]) == 4
    for name, entry in files.items():
        assert (work / "bundle" / name).stat().st_size == entry["bytes"], name
    assert re.search(rf"Offline bundle on {HEAD}: {BUNDLE}, {len(files)} files", said(made))
    # The digest the play printed is the SHA-256 of the manifest that was carried.
    digest = hashlib.sha256((work / "bundle" / "MANIFEST.json").read_bytes()).hexdigest()
    assert printed_digest(made) == digest
    assert f"lab_cache_bundle_digest to {digest}" in said(made)


def test_an_existing_directory_is_refused_as_the_bundles_destination(offline_lab):
    """A USB stick's root (any existing directory the module did not make) is neither emptied
    nor written to: refused, naming it, before anything in it changes."""
    _, _, stick, _ = offline_lab
    refusal(
        failures(stick),
        HEAD,
        [
            f"lab_cache_bundle_dest: {STICK} exists and is a directory that lab_cache_bundle did "
            "not make",
            "nothing in it removed or changed",
            f"for example {STICK}/rocmlab-bundle",
        ],
    )
    assert host(HEAD).file(f"{STICK}/notes.txt").content_string.strip() == "mine"


def test_the_offline_lab_has_no_route_out(offline_lab):
    """Neither Debian's archive nor the AMD-layout mirror (by its address on the network the
    offline hosts left) answers from the offline lab."""
    mirror = docker(
        "inspect",
        "-f",
        "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}",
        "rocmlab-amd-mirror",
    ).split()[0]
    probe = "import socket, sys; socket.create_connection((sys.argv[1], 80), 3)"
    cases = [(name, target) for name in (OFFLINE_HEAD, C5) for target in ("deb.debian.org", mirror)]

    def reached(case: tuple[str, str]) -> int:
        name, target = case
        run = ["docker", "exec", name, "python3", "-c", probe, target]
        return subprocess.run(run, capture_output=True, check=False).returncode

    # The four probes at once: each waits out a timeout (a name lookup with no server to ask, a
    # connection with no route), 26 s one after another on a quiet machine.
    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        codes = dict(zip(cases, pool.map(reached, cases), strict=True))
    # 1: the probe ran and its connection failed (not docker exec's own failure, 125-127).
    assert all(code == 1 for code in codes.values()), codes


def test_an_altered_bundle_is_refused_and_nothing_imported(altered_bundle):
    message = refusal(
        failures(altered_bundle),
        OFFLINE_HEAD,
        [
            f"lab_cache_bundle: {BUNDLE}-altered does not match its manifest: wheels/torch-2.13.0",
            "has SHA-256",
            "nothing was imported",
        ],
    )
    assert "Traceback" not in message
    assert not host(OFFLINE_HEAD).file("/srv/rocmlab/lab-cache/bundle.json").exists


def test_a_re_hashed_manifest_is_refused_by_the_digest_and_nothing_imported(rehashed_bundle):
    message = refusal(
        failures(rehashed_bundle),
        OFFLINE_HEAD,
        [
            f"lab_cache_bundle_digest: the manifest of {BUNDLE}-rehashed (MANIFEST.json) has "
            "SHA-256",
            "altered and its manifest re-hashed",
            "Nothing was imported",
        ],
    )
    assert "Traceback" not in message
    assert not host(OFFLINE_HEAD).file("/srv/rocmlab/lab-cache/bundle.json").exists


def test_a_client_is_provisioned_offline_from_the_bundle(offline_run, tmp_path):
    assert smoke_passed(C5)
    c5 = host(C5)
    policy = c5.check_output("apt-cache policy")
    assert f"http://{OFFLINE_HEAD}:3142/amd/rocm/apt/6.4.2 jammy/main" in policy
    # apt checked the mirror's signatures through the offline cache: an unsigned or
    # wrongly signed repository would have stopped rocm_repo; the package came from it.
    assert c5.run("apt-get update -q").rc == 0
    installed = c5.check_output("apt-cache policy rocminfo")
    assert f"http://{OFFLINE_HEAD}:3142/amd/rocm/apt/6.4.2" in installed
    conf = host(OFFLINE_HEAD).file("/etc/apt-cacher-ng/zz_rocmlab.conf").content_string
    assert "Offlinemode: 1" in conf
    log = host(OFFLINE_HEAD).file(LOGS["apt_log"]).content_string
    assert "|O|" in log and "|I|" not in log, "the offline cache fetched something upstream"


def test_links_planted_in_the_offline_cache_were_not_written_through(offline_run, offline_lab):
    """apt-cacher-ng's account linked a file of its cache to a root-only file and a directory
    to a root-only directory: after the import both are unchanged (content, owner, mode, still
    empty), and the cache holds the bundle's files, the account's, in place of the links."""
    _, _, _, canaries = offline_lab
    head = host(OFFLINE_HEAD)
    assert head.check_output(CANARIES) == canaries
    assert head.file(CANARY_FILE).content_string.strip() == "canary"
    for path, kind in ((PLANTED_FILE, "regular file"), (PLANTED_DIR, "directory")):
        described = head.check_output(f"stat -c '%F %U' {path}")
        assert described == f"{kind} apt-cacher-ng", (path, described)
    assert head.file(PLANTED_FILE).content_string.startswith("-----BEGIN PGP SIGNED MESSAGE")


# apt on c5 asked, apart from its own configuration, for AMD's Core SDK repository through the
# offline cache: the bundle's signed InRelease checked with the keyring rocm_repo wrote (the
# mirror signs both lines with one key), then a package file checked against that index.
CORE_APT = (
    "-o Dir::Etc::SourceList=/tmp/core/sources.list -o Dir::Etc::SourceParts=/tmp/core/none"
    " -o Dir::State::Lists=/tmp/core/lists -o Dir::Cache=/tmp/core/cache"
    " -o APT::Sandbox::User=root"
)


def test_an_offline_client_gets_the_core_line_from_the_bundle_signature_checked(offline_run):
    c5 = host(C5)
    c5.check_output(
        "rm -rf /tmp/core && mkdir -p /tmp/core/none /tmp/core/lists/partial"
        " /tmp/core/cache/archives/partial /tmp/core/get && echo 'deb"
        f" [signed-by=/etc/apt/keyrings/rocm.gpg] http://{OFFLINE_HEAD}:3142/{CORE_REPO}"
        " stable main' > /tmp/core/sources.list"
    )
    update = c5.run(f"apt-get {CORE_APT} update")
    assert update.rc == 0, update.stdout + update.stderr
    assert "stable InRelease" in update.stdout
    assert not re.search(r"^(W|E|Err):", update.stdout + update.stderr, re.M), update.stderr
    fetched = c5.run(f"cd /tmp/core/get && apt-get {CORE_APT} download amdrocm-runtime10.0")
    assert fetched.rc == 0, fetched.stdout + fetched.stderr
    assert c5.check_output("ls /tmp/core/get").startswith("amdrocm-runtime10.0_10.0.0-1_")
    log = host(OFFLINE_HEAD).file(LOGS["apt_log"]).content_string
    assert "|I|" not in log, "the offline cache fetched something upstream"


@pytest.fixture(scope="module")
def offline_rocm_wheels(offline_run, offline_lab):
    """c5 (an MI210 sysfs tree), offline, installs PyTorch from ROCm's wheels: from what the
    bundle kept of the head node's pass-through."""
    work, made, _, _ = offline_lab
    inventory = offline_inventory(work / "offline.json", printed_digest(made))
    start = time.time()
    run = play(SITE, WHEELS_SETTINGS, "--limit", C5, "--tags", "pytorch_rocm", inventory=inventory)
    assert run.returncode == 0, said(run)[-4000:]
    return run, start


def test_the_bundle_carries_rocms_wheels_the_clients_got_and_an_offline_client_installs_them(
    offline_rocm_wheels, offline_lab
):
    work, _, _, _ = offline_lab
    _, start = offline_rocm_wheels
    kept = [
        name.split("/", 1)[1]
        for name in json.loads((work / "bundle" / "MANIFEST.json").read_text())["files"]
        if name.startswith("rocm-wheels/")
    ]
    assert "torch/index.html" in kept, sorted(kept)
    # What c3 and c4 got: their one GPU target's device code, no other target's.
    devices = sorted(n.split("/")[-1].split("-")[0] for n in kept if "_device_" in n)
    assert devices == ["amd_torch_device_gfx90a", "rocm_sdk_device_gfx90a"], sorted(kept)
    dists = json.loads(host(C5).check_output(DISTS))
    assert dists["torch"] == "2.13.0+rocm7.14.0"
    assert sorted(n for n in dists if "-device-" in n) == [
        "amd-torch-device-gfx90a",
        "rocm-sdk-device-gfx90a",
    ]
    record = json.loads(host(C5).file("/etc/rocmlab/pytorch.json").content_string)
    assert record["index_url"] == f"http://{OFFLINE_HEAD}:8180/rocm-wheels/"
    # Served by the offline head node from the bundle, to c5.
    served = [
        line.split("|")
        for line in host(OFFLINE_HEAD).file(LOGS["http_log"]).content_string.splitlines()
        if "|/rocm-wheels/" in line and float(line.split("|")[0]) >= start
    ]
    assert any(f[1] == "200" and "rocm_sdk_device_gfx90a" in f[4] for f in served), served
