#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Keep, as plain files an offline lab cache can serve, what the lab cache's pass-through of
ROCm's multi-arch wheel index served its clients."""

from __future__ import annotations

DOCUMENTATION = r"""
module: lab_cache_rocm_wheels
short_description: Keep the ROCm wheels a lab cache passed through, for its offline bundle
description:
  - "Reads nginx's access log of the lab cache's site (I(log), and its rotated copies
    C(.N) and C(.N.gz), read as module lab_cache_stats reads them), in its format
    C($msec|$status|$body_bytes_sent|$remote_addr|$uri),
    for the answers 200 under C(/rocm-wheels/): the project pages pip read
    (C(/rocm-wheels/<project>/)) and the files it fetched (C(/rocm-wheels/<file>) as AMD's
    pages link them, or C(/rocm-wheels/<project>/<file>)), then fetches each once more through
    the pass-through at I(url) - from nginx's cache, so a kept file does not cross the uplink
    again - and writes it under I(dest): a page as C(<project>/index.html), a file under its
    own name. An offline lab cache serves I(dest) at the same address, so the clients' index
    URL stays the same."
  - "The log is written for requests the clients made: every line is hostile input. Lines and
    paths are bounded, a path is kept only when it is a project page or a wheel, sdist or
    metadata file by name (no C(..), no other character), and at most I(max_bytes) are kept in
    all. I(dest) is walked and written without following a link (a planted one is replaced)."
  - "Unchanged when every kept file already holds what the pass-through answers."
options:
  log:
    description: nginx's access log of the lab cache's site.
    type: path
    required: true
  url:
    description: The pass-through's own address on this host, ending in C(/rocm-wheels/).
    type: str
    required: true
  dest:
    description: Where the files are kept (C(<lab_cache_root>/rocm-wheels)).
    type: path
    required: true
  max_bytes:
    description: The most bytes kept in all; a file past it is named in C(missing).
    type: int
    required: true
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Keep what the clients got through the pass-through
  rocmlab.rocmlab.lab_cache_rocm_wheels:
    log: /var/log/nginx/rocmlab-lab-cache.log
    url: http://127.0.0.1:8180/rocm-wheels/
    dest: /srv/rocmlab/lab-cache/rocm-wheels
    max_bytes: 214748364800
"""

RETURN = r"""
kept:
  description: The paths kept, relative to I(dest)'s address (C(torch/), C(torch-...whl)).
  type: list
  elements: str
  returned: always
bytes:
  description: The bytes of the kept files.
  type: int
  returned: always
missing:
  description: What the log names that could not be kept, each with the reason.
  type: list
  elements: str
  returned: always
"""

import hashlib
import os
import re
import urllib.error
import urllib.parse
import urllib.request

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.lab_cache import (
    BLOCK,
    NotPlain,
    Unreadable,
    ensure_dir,
    hash_fd,
    log_lines,
    open_dir,
    open_file,
    replace_with,
    rotated_logs,
    write_all,
)

PREFIX = "/rocm-wheels/"
# PEP 503's normalized project names, and the files pip fetches by name.
PAGE = re.compile(r"[a-z0-9]([a-z0-9._-]{0,126}[a-z0-9])?/")
FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+!-]{0,250}\.(whl|tar\.gz|zip)(\.metadata)?")
MAX_LINE = 8192
MAX_LOG_BYTES = 1 << 30
MAX_PATHS = 20000
MAX_ROTATED = 30
# A project page of AMD's index lists every build of every release: a few MB at most.
MAX_PAGE = 64 << 20
TIMEOUT = 600


def read_log(path):
    """The lines of one log (logrotate's .N.gz decompressed), opened without following a link
    or blocking on a FIFO (nginx's account writes there), at most MAX_LOG_BYTES of it; a line
    over MAX_LINE is given as None. ValueError when it cannot be read whole."""
    try:
        yield from log_lines(path, MAX_LINE, MAX_LOG_BYTES)
    except Unreadable as exc:
        raise ValueError(f"{path} {exc}: not read") from None


def logs(log):
    """LOG's rotated copies (logrotate's .N and .N.gz, the newest MAX_ROTATED, oldest first)
    and LOG."""
    return rotated_logs(log, MAX_ROTATED)[0]


def served(lines):
    """The paths under /rocm-wheels/ answered 200 in LINES, in first-seen order, each checked:
    a project page ('torch/'), a file ('torch-...whl') or a project's file ('torch/torch-...')."""
    found = {}
    for line in lines:
        if line is None or len(line) > MAX_LINE:
            continue
        fields = line.rstrip("\n").split("|", 4)
        if len(fields) != 5 or fields[1] != "200" or not fields[4].startswith(PREFIX):
            continue
        rel = fields[4][len(PREFIX) :]
        if kept_name(rel) is not None and rel not in found:
            found[rel] = None
            if len(found) > MAX_PATHS:
                raise ValueError(f"the log names more than {MAX_PATHS} files under {PREFIX}")
    return list(found)


def kept_name(rel):
    """(directories, file name) under dest for the served path REL, or None when REL is none of
    the forms kept."""
    if PAGE.fullmatch(rel):
        return [rel[:-1]], "index.html"
    project, _sep, name = rel.rpartition("/")
    if FILE.fullmatch(name) and (not project or PAGE.fullmatch(project + "/")):
        return ([project] if project else []), name
    return None


def size_of(dir_fd, name):
    """The size of NAME in DIR_FD when it is a regular file (not followed if a link), else None."""
    try:
        fd, info = open_file(name, dir_fd)
    except (FileNotFoundError, NotPlain):
        return None
    os.close(fd)
    return info.st_size


def copy_answer(answer, fd, limit):
    """Write the body of ANSWER to FD, at most LIMIT bytes; returns (SHA-256, size)."""
    digest, size = hashlib.sha256(), 0
    for chunk in iter(lambda: answer.read(BLOCK), b""):
        size += len(chunk)
        if size > limit:
            raise ValueError(f"larger than the {limit} bytes left of max_bytes")
        digest.update(chunk)
        write_all(fd, chunk)
    return digest.hexdigest(), size


def keep_one(opener, url, dir_fd, name, page, limit):
    """Fetch URL into NAME in DIR_FD; returns (changed, size). A file (not a page) whose name
    is already kept with the size the pass-through announces is not fetched again: a wheel
    index never changes a file under its name. A page is replaced only when it changed."""
    with opener.open(url, timeout=TIMEOUT) as answer:
        announced = answer.headers.get("Content-Length", "")
        have = size_of(dir_fd, name)
        if not page and have is not None and announced.isdigit() and int(announced) == have:
            return False, have
        if page:
            data = answer.read(min(limit, MAX_PAGE) + 1)
            if len(data) > min(limit, MAX_PAGE):
                raise ValueError(f"a page larger than {min(limit, MAX_PAGE)} bytes")
            if holds(dir_fd, name, data):
                return False, len(data)
            replace_with(dir_fd, name, lambda fd: write_all(fd, data))
            return True, len(data)
        _digest, size = replace_with(dir_fd, name, lambda fd: copy_answer(answer, fd, limit))
        return True, size


def holds(dir_fd, name, data):
    """Whether NAME in DIR_FD is a regular file with exactly DATA (read without following a
    link)."""
    try:
        fd, _unused = open_file(name, dir_fd)
    except (FileNotFoundError, NotPlain):
        return False
    try:
        return hash_fd(fd) == (hashlib.sha256(data).hexdigest(), len(data))
    finally:
        os.close(fd)


def open_dest(dest):
    """A descriptor of DEST, made (root's, 0755) when missing, no link followed."""
    parent, base = os.path.split(dest.rstrip("/"))
    os.makedirs(parent, 0o755, exist_ok=True)
    parent_fd = open_dir(parent)
    try:
        return ensure_dir(parent_fd, base)
    finally:
        os.close(parent_fd)


def keep(paths, url, dest, max_bytes):
    """Fetch each of PATHS through URL (no proxy: the pass-through is on this host) and write
    it under DEST; returns (changed, kept, bytes, missing)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    changed, kept, total, missing = False, [], 0, []
    top = open_dest(dest)
    try:
        for rel in paths:
            dirs, name = kept_name(rel)
            dir_fd = ensure_dir(top, dirs[0]) if dirs else os.dup(top)
            try:
                new, size = keep_one(
                    opener,
                    url + urllib.parse.quote(rel),
                    dir_fd,
                    name,
                    rel.endswith("/"),
                    max_bytes - total,
                )
            except (OSError, ValueError, urllib.error.URLError) as exc:
                missing.append(f"{rel}: {exc}")
                continue
            finally:
                os.close(dir_fd)
            changed = changed or new
            kept.append(rel)
            total += size
    finally:
        os.close(top)
    return changed, kept, total, missing


def absent(paths, dest):
    """The PATHS not kept under DEST yet (for check mode: nothing is fetched)."""
    found = []
    for rel in paths:
        dirs, name = kept_name(rel)
        if not os.path.isfile(os.path.join(dest, *dirs, name)):
            found.append(rel)
    return found


def main():
    module = AnsibleModule(
        argument_spec={
            "log": {"type": "path", "required": True},
            "url": {"type": "str", "required": True},
            "dest": {"type": "path", "required": True},
            "max_bytes": {"type": "int", "required": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    if not params["url"].startswith("http://") or not params["url"].endswith(PREFIX):
        module.fail_json(msg=f"url: {params['url']!r} is not an http:// address ending in {PREFIX}")
    try:
        paths = served(line for name in logs(params["log"]) for line in read_log(name))
    except ValueError as exc:
        module.fail_json(msg=f"log: {exc}")
    if module.check_mode:
        module.exit_json(
            changed=bool(absent(paths, params["dest"])), kept=paths, bytes=0, missing=[]
        )
    try:
        changed, kept, total, missing = keep(
            paths, params["url"], params["dest"], params["max_bytes"]
        )
    except (OSError, NotPlain) as exc:
        module.fail_json(msg=f"dest: {params['dest']}: {exc}")
    module.exit_json(changed=changed, kept=kept, bytes=total, missing=missing)


if __name__ == "__main__":
    main()
