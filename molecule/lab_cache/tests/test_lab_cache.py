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

The cache's logs are read with plugins/modules/lab_cache_stats.py's own parser, so the module
is checked against the servers' real log formats here.
"""

from __future__ import annotations

import importlib.util
import os
import re
import time
from pathlib import Path

import pytest
import testinfra
from playbook_runs import failures, play, refusal, refused_without_change, said

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
SITE = PROJECT / "playbooks" / "site.yml"
HEAD = "rocmlab-cache-head"
C1, C2, C3, C4 = (f"rocmlab-cache-c{n}" for n in range(1, 5))
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

_spec = importlib.util.spec_from_file_location(
    "lab_cache_stats", PROJECT / "plugins" / "modules" / "lab_cache_stats.py"
)
assert _spec is not None and _spec.loader is not None
lab_cache_stats = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lab_cache_stats)


def host(name: str):
    return testinfra.get_host(f"docker://{name}")


def cache_stats(tmp_path: Path, since: float, until: float = float("inf")) -> dict:
    """The head node's logs, counted by lab_cache_stats between SINCE and UNTIL (Unix times)."""
    head = host(HEAD)
    local = {}
    for key, path in LOGS.items():
        target = tmp_path / Path(path).name
        target.write_text(head.file(path).content_string if head.file(path).exists else "")
        local[key] = str(target)
    # Lines after UNTIL are left out by rewriting the copies (the module counts from SINCE on).
    for key in ("apt_log", "http_log"):
        kept = [
            line
            for line in Path(local[key]).read_text().splitlines(keepends=True)
            if float(line.split("|", 1)[0] or 0) < until
        ]
        Path(local[key]).write_text("".join(kept))
    fills = [
        line
        for line in Path(local["fill_log"]).read_text().splitlines(keepends=True)
        if float(re.search(r'"time": ([0-9.]+)', line).group(1)) < until
    ]
    Path(local["fill_log"]).write_text("".join(fills))
    return lab_cache_stats.stats(since=since, details=True, **local)


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
    run, _, _ = first_run
    # The smoke job passed on each client, and the head node got none (it is not a GPU host).
    for name in FIRST:
        assert re.search(rf"{name}: PASSED", said(run)), said(run)[-3000:]
    assert not re.search(rf"{HEAD}: (PASSED|FAILED|no report)", said(run))


def test_each_file_crossed_the_uplink_once_for_three_clients(first_run, tmp_path):
    _, start, end = first_run
    files = cache_stats(tmp_path, start, end)["files"]
    debs = {path: c for path, c in files["apt"].items() if path.endswith(".deb")}
    assert any(p.startswith("amd/") for p in debs) and any(p.startswith("debrep/") for p in debs)
    for path, count in debs.items():
        assert count["served"] == 3, (path, count)
        # One copy's bytes upstream: a request that arrives while the file is still coming in
        # for another client costs only a header exchange (lab_cache_stats' documentation).
        one_copy = count["served_bytes"] / count["served"]
        assert count["upstream"] >= 1 and count["upstream_bytes"] <= one_copy + 1024, (path, count)
    for kind in ("wheels", "datasets"):
        assert files[kind], f"no {kind} went through the cache"
        for path, count in files[kind].items():
            assert (count["upstream"], count["served"]) == (1, 3), (kind, path, count)
    assert any("torch-2.13.0" in path for path in files["wheels"])
    assert len(files["datasets"]) == 4


def test_upstream_bytes_are_printed_at_the_end(first_run):
    run, _, _ = first_run
    assert re.search(
        rf"lab cache {HEAD}: [0-9.]+ MB fetched upstream, [0-9.]+ MB served", said(run)
    )


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
    assert re.search(rf"{C4}: PASSED", said(fourth_client[0]))


def test_the_head_node_does_not_change_when_a_client_is_added(fourth_client):
    run, _ = fourth_client
    assert recap_changed(run, HEAD) == 0
