# Copyright: rocmlab contributors
# Apache License 2.0
"""What a host downloads, declared once (plugins/module_utils/downloads.py says what an entry
holds). Each role that downloads publishes one list, <role>_downloads, from its one resolve step:
pytorch_rocm and tensorflow_rocm from their plan (plugins/filter/frameworks.py), the others from
the filters here, in their tasks/validate.yml. The readers take those lists and nothing else.

Producers (SETTINGS: the role's vars/main.yml __<role>_download_settings):
rocm_repo_downloads(settings) -> AMD's repositories and signing key
rocm_packages_downloads(settings) -> the ROCm packages apt installs, and where
smoke_test_downloads(settings) -> the dataset

Readers:
downloads_of_host(host_vars, roles) -> the host's lists merged, in the order of the role registry
    (roles/rocmlab/vars/main.yml, plugins/plugin_utils/registry.py)
downloads_preflight(downloads, need_gib) -> {"mirrors", "urls", "space"}: what the rollout's
    preflight fetches from the host (each distinct URL once), and the places it checks with the
    GiB each needs
downloads_lab_cache(clients) -> {"wheels", "datasets"}: what a lab cache fetches for its clients
downloads_space_short(space) -> one sentence per file system of rocmlab_preflight's space
    result that lacks room (mount point, what goes there, GiB free and needed)

Every fetch:
downloads_proxy_env(proxy, no_proxy, lab_cache) -> the environment each fetching task gets
    (rocmlab_http_proxy, rocmlab_no_proxy and the lab cache's address; {} without a proxy)
"""

from __future__ import annotations

from ansible_collections.rocmlab.rocmlab.plugins.module_utils import downloads
from ansible_collections.rocmlab.rocmlab.plugins.plugin_utils import registry


def rocm_repo_downloads(settings):
    """What role rocm_repo fetches (settings: state, source, repositories, suite, key_url)."""
    return downloads.rocm_repo(settings)


def rocm_packages_downloads(settings):
    """What role rocm_packages installs (settings: state, source, prefix, packages)."""
    return downloads.rocm_packages(settings)


def smoke_test_downloads(settings):
    """What role smoke_test fetches (settings: enabled, dataset, data_src, url, upstream,
    probe_file, data_dir, bytes)."""
    return downloads.smoke_test(settings)


def downloads_of_host(host_vars, roles=None):
    """A host's downloads (<role>_downloads of each role in the registry, in its order), limited
    to ROLES where given (the roles a run applies)."""
    return downloads.of_host(
        host_vars, registry.roles()["downloads"], None if roles is None else list(roles)
    )


def downloads_preflight(items, need_gib=None):
    """What the rollout's preflight checks: {"mirrors": [{what, urls}], "urls": the distinct URLs
    it fetches, in order, "space": [{name, path, need_gib}]}, the GiB by kind of place from
    rocmlab_free_space_gib (0 where it names none)."""
    found = downloads.preflight(items)
    urls = []
    for mirror in found["mirrors"]:
        urls.extend(url for url in mirror["urls"] if url not in urls)
    return {
        "mirrors": found["mirrors"],
        "urls": urls,
        "space": [
            {
                "name": place["what"],
                "path": place["path"],
                "need_gib": (need_gib or {}).get(place["what"], 0),
            }
            for place in found["space"]
        ],
    }


def downloads_lab_cache(clients):
    """What a lab cache fetches once for its clients (their host vars): {"wheels":
    [{requirements, python, index_url, find_links}], "datasets": [{dataset, url}]}."""
    return downloads.lab_cache_wants(list(clients or []), registry.roles()["downloads"])


def downloads_space_short(space):
    """The file systems of rocmlab_preflight's space result that lack room, one sentence each."""
    return downloads.space_short(list(space or []))


def downloads_proxy_env(proxy, no_proxy=None, lab_cache=""):
    """The environment every fetching task gets (rocmlab_http_proxy, rocmlab_no_proxy, the lab
    cache's address): {} without a proxy."""
    return downloads.proxy_env(proxy, list(no_proxy or []), lab_cache)


class FilterModule:
    def filters(self):
        return {
            "rocm_repo_downloads": rocm_repo_downloads,
            "rocm_packages_downloads": rocm_packages_downloads,
            "smoke_test_downloads": smoke_test_downloads,
            "downloads_of_host": downloads_of_host,
            "downloads_preflight": downloads_preflight,
            "downloads_lab_cache": downloads_lab_cache,
            "downloads_space_short": downloads_space_short,
            "downloads_proxy_env": downloads_proxy_env,
        }
