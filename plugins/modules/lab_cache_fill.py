#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Fill a directory of the lab cache with a command, and record what came from upstream."""

from __future__ import annotations

DOCUMENTATION = r"""
module: lab_cache_fill
short_description: Fill a lab cache directory once, recording the bytes fetched upstream
description:
  - Runs I(argv) (C(pip download ... --dest DIR) for wheels, C(rocmlab fetch-mnist --dest DIR)
    for a dataset), which fetches into I(dir) only what I(dir) does not hold yet.
  - Compares I(dir) before and after (names, sizes and modification times; names starting with
    a dot, the downloaders' partial files, are left out) and appends one JSON line per new or
    changed file to I(log) - C(time), C(kind), C(file) (C(<kind>/<path in dir>)), C(bytes) and
    C(sha256). Those lines are the cache's own count of the bytes that crossed the uplink for
    this kind (lab_cache_stats reads them).
  - No link is followed - I(dir) is walked and its files are read through descriptors opened
    without following links (links and special files are left out), and I(log) is appended to
    without following a link at its name.
  - Changed when a file was added or replaced. In check mode nothing runs.
  - A command that fails stops the module with its last lines of output; the files it fetched
    before failing are recorded all the same (they did cross the uplink).
options:
  argv:
    description: The command that fills I(dir), as a list of arguments (no shell).
    type: list
    elements: str
    required: true
  dir:
    description: The directory the command fills (created by the caller).
    type: path
    required: true
  kind:
    description: What the directory holds, the first part of each recorded name.
    type: str
    required: true
    choices: [wheels, datasets]
  log:
    description: The fill log, JSON lines, appended to (created when missing).
    type: path
    required: true
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Fetch the wheels the lab's hosts need into the cache, once
  rocmlab.rocmlab.lab_cache_fill:
    argv:
      - /opt/rocmlab/venvs/lab-cache/bin/pip
      - download
      - --only-binary=:all:
      - --dest
      - /srv/rocmlab/cache/wheels
      - torch==2.6.0
    dir: /srv/rocmlab/cache/wheels
    kind: wheels
    log: /srv/rocmlab/cache/fill.log

- name: Fetch MNIST into the cache's datasets
  rocmlab.rocmlab.lab_cache_fill:
    argv:
      - /opt/rocmlab/venvs/lab-cache/bin/rocmlab
      - fetch-mnist
      - --dest
      - /srv/rocmlab/cache/datasets/mnist
    dir: /srv/rocmlab/cache/datasets
    kind: datasets
    log: /srv/rocmlab/cache/fill.log
"""

RETURN = r"""
fetched:
  description: The files this run added or replaced, as recorded in I(log).
  returned: always
  type: list
  elements: dict
  sample:
    - {"file": "wheels/torch-2.9.1+rocm6.4-cp311-cp311-manylinux_2_28_x86_64.whl", "bytes": 4e9}
"""

import json
import os
import stat
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.lab_cache import (
    NotPlain,
    hash_fd,
    open_dir,
    open_file,
    open_subdir,
    tree,
)


def hidden(rel):
    """Whether any component of REL starts with a dot (the downloaders' partial files)."""
    return any(part.startswith(".") for part in rel.split("/"))


def snapshot(root):
    """{relative path: (size, mtime_ns)} of the regular files under ``root``, dot-files left out.
    Walked through descriptors: no link is followed, links and special files are left out."""
    found = {}
    top = open_dir(root)
    try:
        for rel, _name, info, _dir_fd in tree(top):
            if stat.S_ISREG(info.st_mode) and not hidden(rel):
                found[rel] = (info.st_size, info.st_mtime_ns)
    finally:
        os.close(top)
    return found


def new_files(before, after):
    """Paths in ``after`` that ``before`` lacks or holds with another size or time, sorted."""
    return sorted(path for path, meta in after.items() if before.get(path) != meta)


def measure(root, path):
    """(bytes, SHA-256) of ROOT/PATH, opened without following links; None when it is gone or
    no regular file any more."""
    top = open_dir(root)
    try:
        parts = path.split("/")
        try:
            directory = open_subdir(top, parts[:-1])
        except (FileNotFoundError, NotPlain):
            return None
        try:
            fd, _unused = open_file(parts[-1], directory)
        except (FileNotFoundError, NotPlain):
            return None
        finally:
            os.close(directory)
        try:
            digest, size = hash_fd(fd)
        finally:
            os.close(fd)
        return size, digest
    finally:
        os.close(top)


def records(root, kind, paths, now):
    found = []
    for path in paths:
        measured = measure(root, path)
        if measured is None:
            continue
        found.append(
            {
                "time": now,
                "kind": kind,
                "file": f"{kind}/{path}",
                "bytes": measured[0],
                "sha256": measured[1],
            }
        )
    return found


def append_records(log, lines):
    """Append LINES to the fill log, never through a link at its name."""
    if not lines:
        return
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotPlain(f"{log} is not a regular file")
        data = "".join(json.dumps(line, sort_keys=True) + "\n" for line in lines).encode()
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)


def tail(text, count=15):
    return " | ".join(line for line in text.splitlines()[-count:] if line.strip())


def main():
    module = AnsibleModule(
        argument_spec={
            "argv": {"type": "list", "elements": "str", "required": True},
            "dir": {"type": "path", "required": True},
            "kind": {"type": "str", "required": True, "choices": ["wheels", "datasets"]},
            "log": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    if module.check_mode:
        module.exit_json(changed=False, fetched=[], msg="check mode: nothing fetched")
    try:
        before = snapshot(params["dir"])
    except (OSError, NotPlain, ValueError) as exc:
        module.fail_json(msg=f"lab_cache_fill: {params['dir']} is not a directory to fill: {exc}")
    rc, out, err = module.run_command(params["argv"])
    try:
        fetched = records(
            params["dir"], params["kind"], new_files(before, snapshot(params["dir"])), time.time()
        )
        append_records(params["log"], fetched)
    except (OSError, NotPlain, ValueError) as exc:
        module.fail_json(msg=f"lab_cache_fill: cannot record what was fetched: {exc}", rc=rc)
    summary = [{"file": line["file"], "bytes": line["bytes"]} for line in fetched]
    if rc != 0:
        module.fail_json(
            msg=f"{params['argv'][0]} exited {rc}: {tail(out + chr(10) + err)}",
            rc=rc,
            fetched=summary,
        )
    module.exit_json(changed=bool(fetched), fetched=summary, stdout=out)


if __name__ == "__main__":
    main()
