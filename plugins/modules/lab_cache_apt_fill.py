#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Fetch, once, through this host's apt-cacher-ng, the package files its clients' apt needs."""

from __future__ import annotations

DOCUMENTATION = r"""
module: lab_cache_apt_fill
short_description: Fetch each package file a batch of clients needs once through the lab cache
description:
  - Runs on the lab cache host. I(wants) holds, per client, what C(apt-get install --print-uris)
    printed there for the packages this run installs (module lab_cache_apt_uris) - the files
    that client's apt would download. Their union is fetched from this host's apt-cacher-ng on
    C(127.0.0.1), each file once, and thrown away - apt-cacher-ng keeps it. The clients then
    find every file in the cache - apt-cacher-ng opens no second upstream transfer for clients
    asking for the same file at once.
  - Up to I(workers) distinct files are fetched at once (apt-cacher-ng serves distinct files in
    parallel; only the same file asked twice at once would cost a second upstream transfer, and
    the union names each file once). The results are in the order of the files' URLs whatever
    order the fetches end in.
  - "The lists come from lab machines and are read as hostile input (plugins/module_utils/
    lab_cache_apt.py) - bounded (16 MiB and 20000 files per client, lines of 4 KiB), only
    plain C(http://) URLs of C(.deb) files with no query, and on the cache itself only under
    one of C(/<remap>/). Each file is read to at most its announced size and checked against the
    hash the client's apt announced; a mismatch or a failed fetch is reported, not fatal (the
    client's own apt refuses a wrong file)."
  - Changed when a file was fetched. In check mode nothing is fetched.
options:
  wants:
    description: Per client, its print-uris output.
    type: dict
    required: true
  cache:
    description: This cache's C(host:port) as the clients name it (their apt proxy's).
    type: str
    required: true
  port:
    description: apt-cacher-ng's port on this host.
    type: int
    required: true
  remap:
    description: >-
      The paths under which apt-cacher-ng serves AMD's remapped repositories - the legacy
      line's and the Core SDK line's (role lab_cache's C(Remap-) directives).
    type: list
    elements: str
    default: [amd, amdcore]
  timeout:
    description: Seconds without data after which one fetch is given up.
    type: int
    default: 300
  workers:
    description: How many files are fetched at once, 1 (one after another) to 16.
    type: int
    default: 4
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Fetch, once, what the clients' apt will download
  rocmlab.rocmlab.lab_cache_apt_fill:
    wants:
      ws-01: "{{ hostvars['ws-01'].apt_uris.uris }}"
    cache: head01:3142
    port: 3142
"""

RETURN = r"""
files:
  description: How many distinct package files the clients' lists named.
  returned: always
  type: int
fetched:
  description: The files fetched through the cache, each with C(uri), C(bytes) and C(clients),
    in the order of their URLs.
  returned: always
  type: list
  elements: dict
bytes:
  description: The bytes fetched through the cache, all files together.
  returned: always
  type: int
seconds:
  description: How long the fetches took, all files together (wall time).
  returned: always
  type: float
workers:
  description: How many fetches ran at once at most (0 when nothing was fetched).
  returned: always
  type: int
problems:
  description: What was not fetched or did not match, one sentence each (the lists' problems
    first, then the fetches', in the order of their URLs).
  returned: always
  type: list
  elements: str
"""

import hashlib
import http.client
import time
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.lab_cache_apt import REMAPS, fill_plan

HASH_FUNCTIONS = {"SHA512": "sha512", "SHA256": "sha256", "SHA1": "sha1", "MD5Sum": "md5"}
BLOCK = 1 << 20
# Bounds on the workers option: at most this many fetches at once.
MAX_WORKERS = 16


def fetch(port, entry, timeout):
    """Fetch ENTRY through apt-cacher-ng on 127.0.0.1:PORT, reading at most its size plus one
    byte; (bytes read, None) when it matches, else (bytes read, why)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", entry["target"], headers={"User-Agent": "rocmlab-lab-cache-fill"})
        response = connection.getresponse()
        if response.status != 200:
            return 0, f"answered {response.status} {response.reason}"
        digest = hashlib.new(HASH_FUNCTIONS[entry["hash_name"]])
        read = 0
        while read <= entry["size"]:
            block = response.read(min(BLOCK, entry["size"] + 1 - read))
            if not block:
                break
            digest.update(block)
            read += len(block)
        if read != entry["size"]:
            more = "more than" if read > entry["size"] else f"{read} bytes, not"
            return read, f"gave {more} the {entry['size']} bytes the clients' apt expects"
        if digest.hexdigest() != entry["hash"]:
            return read, f"has another {entry['hash_name']} than the clients' apt expects"
        return read, None
    except (OSError, http.client.HTTPException) as exc:
        return 0, f"could not be fetched ({exc or type(exc).__name__})"
    finally:
        connection.close()


def fetch_one(port, entry, timeout):
    """fetch(), with anything else that goes wrong in one fetch made its problem: one file's
    failure never loses the others' results."""
    try:
        return fetch(port, entry, timeout)
    except Exception as exc:  # a failed fetch is reported, not fatal
        return 0, f"could not be fetched ({type(exc).__name__}: {exc})"


def fetch_all(port, files, timeout, workers):
    """(bytes read, why or None) for each of FILES, in their order, at most WORKERS fetches at
    once. FILES are distinct (fill_plan names each URL once), so no file is asked twice."""
    if not files:
        return []
    with ThreadPoolExecutor(max_workers=min(workers, len(files))) as pool:
        return list(pool.map(lambda entry: fetch_one(port, entry, timeout), files))


def main():
    module = AnsibleModule(
        argument_spec={
            "wants": {"type": "dict", "required": True},
            "cache": {"type": "str", "required": True},
            "port": {"type": "int", "required": True},
            "remap": {"type": "list", "elements": "str", "default": list(REMAPS)},
            "timeout": {"type": "int", "default": 300},
            "workers": {"type": "int", "default": 4},
        },
        supports_check_mode=True,
    )
    params = module.params
    if not 1 <= params["workers"] <= MAX_WORKERS:
        module.fail_json(
            msg=f"workers: {params['workers']} is not a number of fetches at once; give 1 (one"
            f" after another) to {MAX_WORKERS}. Nothing was fetched."
        )
    files, problems = fill_plan(params["wants"], params["cache"], params["remap"])
    fetched, total = [], 0
    started = time.monotonic()
    if not module.check_mode:
        results = fetch_all(params["port"], files, params["timeout"], params["workers"])
        for index, entry in enumerate(files):
            read, why = results[index]
            total += read
            if why:
                problems.append(f"{entry['uri']} {why}")
            else:
                fetched.append(
                    {"uri": entry["uri"], "bytes": read, "clients": len(entry["clients"])}
                )
    for problem in problems:
        module.warn(f"lab_cache_apt_fill: {problem}")
    module.exit_json(
        changed=bool(fetched) or (module.check_mode and bool(files)),
        files=len(files),
        fetched=fetched,
        bytes=total,
        seconds=round(time.monotonic() - started, 1),
        workers=min(params["workers"], len(files)) if files and not module.check_mode else 0,
        problems=problems,
    )


if __name__ == "__main__":
    main()
