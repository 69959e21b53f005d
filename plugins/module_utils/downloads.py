# Copyright: rocmlab contributors
# Apache License 2.0
"""What a host downloads, declared once: each role that downloads publishes one list,
<role>_downloads, from its one resolve step (the frameworks' plan filters in
plugins/filter/frameworks.py; the functions below for the others, through
plugins/filter/downloads.py). The lab cache, the rollout's preflight and the docs read those lists
and nothing else.

An entry of a list (entry()):
  kind          apt | wheels | dataset
  what          what is fetched ("PyTorch wheels", "mnist dataset", "ROCm packages")
  mirrors       [{"what", "urls"}]: where this host fetches it from, each checked by the rollout's
                preflight from the host; any one URL of a mirror answering is enough
  upstream      where a lab cache fetches it for this host ({"index_url", "find_links"} for
                wheels, {"url"} for a dataset), {} when no lab cache fetches it
  requirements  what is asked for: pip's requirements, apt's package names, the dataset's name
  python        the X.Y the wheels are for (wheels), else None
  path          where it lands, the path whose free space the preflight checks (None: none)
  space         the kind of place, rocmlab_free_space_gib's key (rocm, venvs, datasets)
  size          its bytes on disk where known before fetching (the datasets), else None

Every fetch of a host goes through the lab's proxy where rocmlab_http_proxy names one:
proxy_env() is the environment each fetching task gets. The free space a host needs where its
downloads land is read by module rocmlab_preflight and said by space_line(), for the rollout's
preflight and the site playbook's first play alike.

Pure functions over the settings: tests feed them tables.
"""

from __future__ import annotations

import re

KINDS = ("apt", "wheels", "dataset")
GIB = 1024**3
# Always reached directly, never through the proxy: the host itself.
LOCAL = ("localhost", "127.0.0.1", "::1")
_HTTP = re.compile(r"https?://")
TRUE_STRINGS = frozenset({"yes", "on", "1", "true", "y", "t"})


def truthy(value) -> bool:
    """Ansible's `bool` filter: true for True, 1 and the strings yes/on/1/true/y/t (the frameworks'
    plan filters read their settings with it too)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value.strip().lower() in TRUE_STRINGS
    return value == 1


def entry(
    kind,
    what,
    mirrors=(),
    upstream=None,
    requirements=(),
    python=None,
    path=None,
    space=None,
    size=None,
) -> dict:
    """One thing a host downloads (see the module's doc)."""
    if kind not in KINDS:
        raise ValueError(f"download kind {kind!r}: expected one of {', '.join(KINDS)}")
    return {
        "kind": kind,
        "what": str(what),
        "mirrors": [{"what": str(m["what"]), "urls": [str(u) for u in m["urls"]]} for m in mirrors],
        "upstream": dict(upstream or {}),
        "requirements": [str(r) for r in requirements],
        "python": None if python is None else str(python),
        "path": None if path is None else str(path),
        "space": None if path is None else str(space),
        "size": None if size is None else int(size),
    }


def is_http(url) -> bool:
    return _HTTP.match(str(url)) is not None


def pip_mirrors(label, index_url, find_links, project) -> list:
    """The package mirrors pip reads: the index's project page (PEP 503) and a wheelhouse over
    HTTP (a local directory is not fetched)."""
    mirrors = []
    if index_url:
        mirrors.append(
            {"what": f"{label} index", "urls": [f"{str(index_url).rstrip('/')}/{project}/"]}
        )
    if is_http(find_links):
        mirrors.append({"what": f"{label} wheelhouse", "urls": [str(find_links)]})
    return mirrors


def rocm_repo(settings: dict) -> list:
    """What role rocm_repo fetches: the Release file of each of AMD's repositories it configures,
    and the signing key (nothing for the distribution's ROCm, or when it removes them).

    SETTINGS: state, source (the effective one), repositories ([{name, uri, enabled}]), suite,
    key_url."""
    if settings["state"] != "present" or settings["source"] != "amd":
        return []
    mirrors = [
        {
            "what": f"ROCm apt repository {repo['name']}",
            "urls": [f"{repo['uri']}/dists/{settings['suite']}/InRelease"],
        }
        for repo in settings["repositories"]
        if truthy(repo["enabled"])
    ]
    mirrors.append({"what": "ROCm signing key", "urls": [str(settings["key_url"])]})
    return [entry("apt", "ROCm apt repositories", mirrors=mirrors)]


def rocm_packages(settings: dict) -> list:
    """What role rocm_packages installs with apt, and where (AMD's under the prefix, the
    distribution's under /usr). SETTINGS: state, source, prefix, packages."""
    if settings["state"] != "present":
        return []
    return [
        entry(
            "apt",
            "ROCm packages",
            requirements=settings["packages"],
            path=settings["prefix"] if settings["source"] == "amd" else "/usr",
            space="rocm",
        )
    ]


def smoke_test(settings: dict) -> list:
    """What role smoke_test fetches: the dataset, from its mirror (asked for the dataset's
    smallest file, gzipped or not: rocmlab fetch-mnist takes either), unless it is copied from the
    controller. SETTINGS: enabled, dataset, data_src, url (smoke_test_mnist_url), upstream (where
    a lab cache fetches it), probe_file, data_dir, bytes (the dataset's size unpacked)."""
    if not truthy(settings["enabled"]):
        return []
    dataset = str(settings["dataset"])
    url = str(settings["url"])
    fetched = len(str(settings["data_src"])) == 0
    base = url if url.endswith("/") else url + "/"
    mirrors = (
        [
            {
                "what": f"{dataset} dataset mirror",
                "urls": [base + settings["probe_file"] + ".gz", base + settings["probe_file"]],
            }
        ]
        if fetched and is_http(url)
        else []
    )
    return [
        entry(
            "dataset",
            f"{dataset} dataset",
            mirrors=mirrors,
            upstream={"url": str(settings["upstream"])} if fetched else {},
            requirements=[dataset],
            path=settings["data_dir"],
            space="datasets",
            size=settings.get("bytes"),
        )
    ]


# --- What the readers need -------------------------------------------------------------------


def of_host(host_vars, order, roles=None) -> list:
    """A host's downloads: the lists its roles published (<role>_downloads), in ORDER (the
    registry's roles that download, registry.roles()["downloads"]); ROLES limits them to the
    roles a run applies (None: every role)."""
    found = []
    for role in order:
        if roles is not None and role not in roles:
            continue
        found.extend(host_vars.get(f"{role}_downloads") or [])
    return found


def preflight(downloads) -> dict:
    """What the rollout's preflight checks: {"mirrors": [{what, urls}], "space": [{what, path}]},
    in the downloads' order."""
    downloads = list(downloads or [])
    return {
        "mirrors": [m for d in downloads for m in d.get("mirrors") or []],
        "space": [{"what": d["space"], "path": d["path"]} for d in downloads if d.get("path")],
    }


def _unique(items) -> list:
    kept = []
    for item in items:
        if item not in kept:
            kept.append(item)
    return kept


def lab_cache_wants(clients, order) -> dict:
    """What a lab cache fetches once for its clients (the host vars of each, in inventory order):
    {"wheels": [{requirements, python, index_url, find_links}], "datasets": [{dataset, url}]},
    each distinct want once, by role in ORDER (the registry's roles that download), then by
    client."""
    wheels, datasets = [], []
    for role in order:
        for client in clients or []:
            for item in client.get(f"{role}_downloads") or []:
                upstream = item.get("upstream") or {}
                if not upstream:
                    continue
                if item["kind"] == "wheels":
                    wheels.append(
                        {
                            "requirements": list(item["requirements"]),
                            "python": item["python"],
                            "index_url": upstream.get("index_url", ""),
                            "find_links": upstream.get("find_links", ""),
                        }
                    )
                elif item["kind"] == "dataset":
                    datasets.append({"dataset": item["requirements"][0], "url": upstream["url"]})
    return {"wheels": _unique(wheels), "datasets": _unique(datasets)}


# --- The lab's proxy and the free space -------------------------------------------------------


def proxy_env(proxy, no_proxy=(), lab_cache="") -> dict:
    """The environment every fetching task gets: {} without a proxy, else http_proxy and
    https_proxy (both schemes go through the one proxy; HTTPS by CONNECT) and no_proxy (the
    host itself, the lab cache's address, then NO_PROXY: what the lab reaches directly), each in
    lower and upper case (apt, pip, Python's urllib and curl read one or the other)."""
    proxy = str(proxy or "")
    if not proxy:
        return {}
    direct = []
    for name in (*LOCAL, str(lab_cache or "").strip("[]"), *(str(n) for n in no_proxy or ())):
        if name and name not in direct:
            direct.append(name)
    env = {"http_proxy": proxy, "https_proxy": proxy, "no_proxy": ",".join(direct)}
    return {**env, **{name.upper(): value for name, value in env.items()}}


def space_line(entry) -> str:
    """One file system of rocmlab_preflight's space result as a sentence: its mount point, what
    goes there (name and path), the GiB free and the GiB needed."""
    held = ", ".join(
        f"{name} {path}" for name, path in zip(entry["names"], entry["paths"], strict=True)
    )
    return (
        f"{entry['mount']} ({held}): {entry['free_bytes'] / GIB:.1f} GiB free, "
        f"{entry['need_bytes'] / GIB:.1f} GiB needed"
    )


def space_short(space) -> list:
    """The sentences (space_line) of the file systems of rocmlab_preflight's space result that
    lack room for what goes there."""
    return [space_line(entry) for entry in space or [] if not entry["enough"]]
