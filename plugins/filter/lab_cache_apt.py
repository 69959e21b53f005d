# Copyright: rocmlab contributors
# Apache License 2.0
"""Filters of the lab cache's apt fill (roles/rocm_packages/tasks/lab-cache-apt.yml).

lab_cache_apt_fills(hosts, hostvars) -> [{"host", "cache", "port", "wants"}]: one fill per lab
    cache that a host of this batch (HOSTS: ansible_play_hosts) uses and that host lacks a
    package file for, in the order the hosts name the caches. "host" is the cache's inventory
    name (where the fill runs), "cache" its ``host:port`` as the clients name it (their apt
    proxy's), "port" apt-cacher-ng's port, "wants" {client: its print-uris output} (module
    lab_cache_apt_uris, registered as __rocm_packages_apt_uris). A host without a lab cache,
    or whose list is empty (a converged host lacks nothing), is left out.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from ansible.errors import AnsibleFilterError

# What the uris task registers on each host.
LISTED = "__rocm_packages_apt_uris"


def lab_cache_apt_fills(hosts, hostvars):
    """The fills of this batch (module docstring)."""
    fills = {}
    for name in hosts or ():
        found = hostvars[name]
        urls = found.get("rocmlab_lab_cache_urls") or {}
        listed = found.get(LISTED) or {}
        uris = listed.get("uris") if isinstance(listed, dict) else None
        cache = urls.get("host") if isinstance(urls, dict) else None
        if not cache or not uris:
            continue
        fill = fills.get(cache)
        if fill is None:
            proxy = urls.get("apt_proxy") or ""
            try:
                parts = urlsplit(proxy)
                port = parts.port
            except ValueError:
                port = None
            if parts.scheme != "http" or not parts.hostname or port is None:
                raise AnsibleFilterError(
                    f"lab_cache_apt_fills: {name}'s rocmlab_lab_cache_urls.apt_proxy is"
                    f" {proxy!r}; want http://HOST:PORT/ (role rocmlab sets it from"
                    " rocmlab_lab_cache)"
                )
            fill = fills[cache] = {"host": cache, "cache": parts.netloc, "port": port, "wants": {}}
        fill["wants"][name] = uris
    return list(fills.values())


class FilterModule:
    def filters(self):
        return {"lab_cache_apt_fills": lab_cache_apt_fills}
