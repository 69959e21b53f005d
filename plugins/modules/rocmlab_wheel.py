#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Documentation of the action plugin rocmlab_wheel (plugins/action/), which runs on the
controller only; nothing of it is sent to a host."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rocmlab_wheel
short_description: The rocmlab wheel of the project's contents, built once, kept on the controller
description:
  - An action plugin that runs on the controller only. Nothing is sent to the hosts.
  - Hashes exactly what the build reads (C(pyproject.toml), C(README.md) and the regular files
    below C(src/), without Python's caches) with SHA-256 and returns the wheel kept for that
    digest in I(cache_dir). When there is none it builds it there, reproducibly
    (C(SOURCE_DATE_EPOCH), no build isolation, no dependencies), in a scratch directory moved
    into place when complete, so runs side by side never see half a wheel.
  - The same contents always give the same wheel, so a playbook run no longer builds it again;
    a change to any of those files gives a new digest and a new build. The wheels of other
    contents are removed but the four newest.
  - The cache must be the controller account's own (a real directory, not writable by others),
    or the task fails naming it and what to do.
  - Never changes anything on a host (C(changed) is always false).
options:
  project:
    description:
      - The project the wheel is built from; the collection's root (or the checkout's) by default.
    type: path
  cache_dir:
    description:
      - Where the wheels are kept; C($XDG_CACHE_HOME/rocmlab/wheels), else
        C(~/.cache/rocmlab/wheels).
    type: path
  python:
    description:
      - The Python whose pip builds the wheel; the controller's own (C(ansible_playbook_python))
        by default.
    type: path
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Find or build the rocmlab wheel on the controller
  rocmlab.rocmlab.rocmlab_wheel:
  run_once: true
  register: __wheel

- name: Copy it to the host
  ansible.builtin.copy:
    src: "{{ __wheel.wheel }}"
    dest: /opt/rocmlab/wheels/
    mode: "0644"
"""

RETURN = r"""
wheel:
  description: The wheel's path on the controller.
  returned: success
  type: str
digest:
  description: SHA-256 of the files the build reads.
  returned: success
  type: str
built:
  description: Whether this run built the wheel (false when it was kept from an earlier run).
  returned: success
  type: bool
pruned:
  description: Digests of older wheels removed from the cache.
  returned: success
  type: list
  elements: str
"""
