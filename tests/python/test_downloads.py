"""Unit tests for plugins/module_utils/downloads.py and plugins/filter/downloads.py: what each
role that downloads publishes (<role>_downloads), and what the lab cache and the rollout's
preflight read from those lists."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml
from rocmlab_testutil import load_module

from rocmlab.datasets.catalog import DATASETS

REPO = Path(__file__).resolve().parents[2]
dl = load_module("downloads_filters", REPO / "plugins" / "filter" / "downloads.py")
fw = load_module("frameworks_filters_for_downloads", REPO / "plugins" / "filter" / "frameworks.py")

AMD = "https://mirror.lab/amd"
KEY = f"{AMD}/rocm/rocm.gpg.key"
WHEELHOUSE = "http://mirror.lab/wheels/"
UPSTREAM_MNIST = "https://datasets.example/mnist/"
REPOS = [
    {"name": "rocm", "uri": f"{AMD}/rocm/apt/7.1", "enabled": True},
    {"name": "amdgpu", "uri": f"{AMD}/amdgpu/30.20/ubuntu", "enabled": False},
    {"name": "graphics", "uri": f"{AMD}/graphics/7.1/ubuntu", "enabled": True},
]


def repo_settings(**changes) -> dict:
    base = {"state": "present", "source": "amd", "repositories": REPOS, "suite": "noble"}
    return {**base, "key_url": KEY, **changes}


def smoke_settings(**changes) -> dict:
    base = {
        "enabled": True,
        "dataset": "mnist",
        "data_src": "",
        "url": "http://cache.lab:8080/datasets/mnist",
        "upstream": UPSTREAM_MNIST,
        "probe_file": "t10k-labels-idx1-ubyte",
        "data_dir": "/var/lib/rocmlab/datasets",
        "bytes": "54950048",
    }
    return {**base, **changes}


# --- what each role publishes ---------------------------------------------------------------


def test_rocm_repo_asks_each_enabled_repository_and_the_key() -> None:
    assert dl.rocm_repo_downloads(repo_settings()) == [
        {
            "kind": "apt",
            "what": "ROCm apt repositories",
            "mirrors": [
                {
                    "what": "ROCm apt repository rocm",
                    "urls": [f"{AMD}/rocm/apt/7.1/dists/noble/InRelease"],
                },
                {
                    "what": "ROCm apt repository graphics",
                    "urls": [f"{AMD}/graphics/7.1/ubuntu/dists/noble/InRelease"],
                },
                {"what": "ROCm signing key", "urls": [KEY]},
            ],
            "upstream": {},
            "requirements": [],
            "python": None,
            "path": None,
            "space": None,
            "size": None,
        }
    ]


@pytest.mark.parametrize("enabled", ["False", "no", 0, False])
def test_a_repository_enabled_false_in_any_spelling_is_not_asked(enabled) -> None:
    repos = [{**REPOS[0], "enabled": enabled}]
    (only,) = dl.rocm_repo_downloads(repo_settings(repositories=repos))
    assert [m["what"] for m in only["mirrors"]] == ["ROCm signing key"]


@pytest.mark.parametrize(
    "changes", [{"source": "distro"}, {"state": "absent"}, {"state": "absent", "source": "distro"}]
)
def test_rocm_repo_fetches_nothing_for_the_distributions_rocm_or_removal(changes) -> None:
    assert dl.rocm_repo_downloads(repo_settings(**changes)) == []


@pytest.mark.parametrize(("source", "path"), [("amd", "/opt/rocm"), ("distro", "/usr")])
def test_rocm_packages_names_its_packages_and_where_they_land(source, path) -> None:
    settings = {"state": "present", "source": source, "prefix": "/opt/rocm"}
    (only,) = dl.rocm_packages_downloads({**settings, "packages": ["rocm-hip-runtime", "rocminfo"]})
    assert only == {
        "kind": "apt",
        "what": "ROCm packages",
        "mirrors": [],
        "upstream": {},
        "requirements": ["rocm-hip-runtime", "rocminfo"],
        "python": None,
        "path": path,
        "space": "rocm",
        "size": None,
    }
    absent = {**settings, "state": "absent", "packages": ["rocminfo"]}
    assert dl.rocm_packages_downloads(absent) == []


def test_the_smoke_job_fetches_its_dataset_from_its_mirror() -> None:
    assert dl.smoke_test_downloads(smoke_settings()) == [
        {
            "kind": "dataset",
            "what": "mnist dataset",
            "mirrors": [
                {
                    "what": "mnist dataset mirror",
                    "urls": [
                        "http://cache.lab:8080/datasets/mnist/t10k-labels-idx1-ubyte.gz",
                        "http://cache.lab:8080/datasets/mnist/t10k-labels-idx1-ubyte",
                    ],
                }
            ],
            "upstream": {"url": UPSTREAM_MNIST},
            "requirements": ["mnist"],
            "python": None,
            "path": "/var/lib/rocmlab/datasets",
            "space": "datasets",
            "size": 54950048,
        }
    ]
    slash = dl.smoke_test_downloads(smoke_settings(url="https://m.lab/fashion/"))
    assert slash[0]["mirrors"][0]["urls"][1] == "https://m.lab/fashion/t10k-labels-idx1-ubyte"


def test_a_dataset_copied_from_the_controller_is_not_fetched_but_needs_its_space() -> None:
    (only,) = dl.smoke_test_downloads(smoke_settings(data_src="/srv/mnist"))
    assert only["mirrors"] == [] and only["upstream"] == {}
    assert (only["path"], only["space"]) == ("/var/lib/rocmlab/datasets", "datasets")


def test_a_mirror_that_is_not_http_is_not_asked_but_a_lab_cache_still_fetches() -> None:
    (only,) = dl.smoke_test_downloads(smoke_settings(url="file:///srv/mnist"))
    assert only["mirrors"] == [] and only["upstream"] == {"url": UPSTREAM_MNIST}


@pytest.mark.parametrize("enabled", [False, "false", "no"])
def test_the_smoke_job_off_fetches_nothing(enabled) -> None:
    assert dl.smoke_test_downloads(smoke_settings(enabled=enabled)) == []


@pytest.mark.parametrize("dataset", sorted(DATASETS))
def test_the_dataset_size_the_role_declares_is_its_files_unpacked(dataset) -> None:
    """IDX of unsigned bytes: 4 bytes of magic, 4 per dimension, one byte per item."""
    declared = yaml.safe_load((REPO / "roles/smoke_test/vars/main.yml").read_text())
    size = sum(4 + 4 * len(f.shape) + math.prod(f.shape) for f in DATASETS[dataset].files)
    assert declared["__smoke_test_dataset_bytes"] == size


def test_an_unknown_kind_is_refused() -> None:
    from ansible_collections.rocmlab.rocmlab.plugins.module_utils import downloads

    with pytest.raises(ValueError, match=r"download kind 'pip': expected one of apt, wheels"):
        downloads.entry("pip", "x")


# --- the readers ----------------------------------------------------------------------------

TORCH_SETTINGS = {
    "source": "pip",
    "version": "2.9.1",
    "rocm_version": "6.4",
    "torchvision": False,
    "index_url": "http://cache.lab:8080/wheels/simple",
    "find_links": WHEELHOUSE,
    "index_base_url": "https://whl.example",
    "python": "/usr/bin/python3",
    "venv": "/opt/rocmlab/venvs/pytorch",
    "releases": yaml.safe_load((REPO / "roles/pytorch_rocm/vars/main.yml").read_text())[
        "__pytorch_rocm_releases"
    ],
    "distro_packages": None,
    "distribution": "Debian 12.11",
}
TORCH = fw.pytorch_rocm_plan(TORCH_SETTINGS, {"rc": 0, "stdout": "3.11.2"})["downloads"]
TORCH_312 = fw.pytorch_rocm_plan(TORCH_SETTINGS, {"rc": 0, "stdout": "3.12.1"})["downloads"]
REPO_DL = dl.rocm_repo_downloads(repo_settings())
PACKAGES = dl.rocm_packages_downloads(
    {"state": "present", "source": "amd", "prefix": "/opt/rocm", "packages": ["rocminfo"]}
)
SMOKE = dl.smoke_test_downloads(smoke_settings())


def host(**lists) -> dict:
    """A host's variables: the lists its roles published, and others."""
    return {"ansible_host": "10.0.0.5", **{f"{r}_downloads": v for r, v in lists.items()}}


def test_a_hosts_lists_are_read_in_registry_order_and_limited_to_the_roles_applied() -> None:
    vars_ = host(smoke_test=SMOKE, pytorch_rocm=TORCH, rocm_repo=REPO_DL, rocm_packages=PACKAGES)
    assert dl.downloads_of_host(vars_) == REPO_DL + PACKAGES + TORCH + SMOKE
    applied = ["smoke_test", "rocm_repo", "user_groups"]
    assert dl.downloads_of_host(vars_, applied) == REPO_DL + SMOKE
    assert dl.downloads_of_host({"smoke_test_downloads": None}) == []
    assert dl.downloads_of_host(vars_, []) == []


def test_the_preflight_gets_each_mirror_each_url_once_and_the_space_of_each_place() -> None:
    need = {"rocm": 30, "venvs": 15}
    got = dl.downloads_preflight(REPO_DL + PACKAGES + TORCH + TORCH + SMOKE, need)
    assert [m["what"] for m in got["mirrors"]] == [
        "ROCm apt repository rocm",
        "ROCm apt repository graphics",
        "ROCm signing key",
        "PyTorch index",
        "PyTorch wheelhouse",
        "PyTorch index",
        "PyTorch wheelhouse",
        "mnist dataset mirror",
    ]
    assert got["urls"] == [
        f"{AMD}/rocm/apt/7.1/dists/noble/InRelease",
        f"{AMD}/graphics/7.1/ubuntu/dists/noble/InRelease",
        KEY,
        "http://cache.lab:8080/wheels/simple/torch/",
        WHEELHOUSE,
        "http://cache.lab:8080/datasets/mnist/t10k-labels-idx1-ubyte.gz",
        "http://cache.lab:8080/datasets/mnist/t10k-labels-idx1-ubyte",
    ]
    assert got["space"] == [
        {"name": "rocm", "path": "/opt/rocm", "need_gib": 30},
        {"name": "venvs", "path": "/opt/rocmlab/venvs/pytorch", "need_gib": 15},
        {"name": "venvs", "path": "/opt/rocmlab/venvs/pytorch", "need_gib": 15},
        {"name": "datasets", "path": "/var/lib/rocmlab/datasets", "need_gib": 0},
    ]
    assert dl.downloads_preflight([], need) == {"mirrors": [], "urls": [], "space": []}


def test_a_lab_cache_fetches_each_distinct_want_of_its_clients_once() -> None:
    clients = [
        host(pytorch_rocm=TORCH, smoke_test=SMOKE, rocm_repo=REPO_DL),
        host(pytorch_rocm=TORCH_312, smoke_test=SMOKE),
        host(pytorch_rocm=TORCH),
        host(),
        host(smoke_test=dl.smoke_test_downloads(smoke_settings(data_src="/srv/mnist"))),
    ]
    got = dl.downloads_lab_cache(clients)
    want = {"requirements": ["torch==2.9.1"], "index_url": "https://whl.example/rocm6.4"}
    assert got == {
        "wheels": [
            {**want, "python": "3.11", "find_links": ""},
            {**want, "python": "3.12", "find_links": ""},
        ],
        "datasets": [{"dataset": "mnist", "url": UPSTREAM_MNIST}],
    }
    assert dl.downloads_lab_cache([]) == {"wheels": [], "datasets": []}


def test_a_lab_cache_reads_pytorch_wants_before_tensorflow_ones() -> None:
    tf = [{**TORCH[0], "what": "TensorFlow wheels", "requirements": ["tensorflow-rocm==2.18.1.*"]}]
    got = dl.downloads_lab_cache([host(tensorflow_rocm=tf), host(pytorch_rocm=TORCH)])
    assert [w["requirements"] for w in got["wheels"]] == [
        ["torch==2.9.1"],
        ["tensorflow-rocm==2.18.1.*"],
    ]


# --- one declaration ------------------------------------------------------------------------


def test_no_role_declares_a_download_elsewhere() -> None:
    """The per-role preflight files and the *_wanted facts are gone: nothing in the roles, the
    playbooks or the plugins names them."""
    from ansible_collections.rocmlab.rocmlab.plugins.plugin_utils import registry

    roles = "|".join(registry.roles()["downloads"])
    old = re.compile(rf"\b({roles})_(preflight|wheels_wanted|dataset_wanted)\b")
    leftovers = [
        str(path.relative_to(REPO))
        for tree in ("roles", "playbooks", "plugins")
        for path in (REPO / tree).rglob("*")
        if path.suffix in {".yml", ".py", ".j2"} and old.search(path.read_text())
    ]
    assert leftovers == []
    assert [p.parent.parent.name for p in (REPO / "roles").glob("*/tasks/preflight.yml")] == [
        "rocmlab_fleet"
    ]
