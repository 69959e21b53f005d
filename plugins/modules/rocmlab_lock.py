#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""One rocmlab run at a time on a host: take or release the host's run lock."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rocmlab_lock
short_description: Hold a host for one rocmlab run at a time
description:
  - With I(state=present), creates I(path) atomically (O_CREAT|O_EXCL) holding who runs - the
    controller, the account, the playbook, when it started - and a token; when another run holds
    it, fails naming that run instead of racing with it.
  - A lock older than I(stale_after) seconds (a run that was killed before it could release it)
    is taken over with a warning; I(force=true) takes over any lock.
  - With I(state=absent), removes the lock when it holds I(token), and leaves another run's lock
    alone.
  - In check mode nothing is written, but a lock held by another run still fails - its run is
    changing the host that check mode would describe.
options:
  path:
    description: The lock file; on /run, so a reboot releases it.
    type: path
    default: /run/rocmlab.lock
  state:
    description: present takes the lock, absent releases it.
    type: str
    choices: [present, absent]
    default: present
  owner:
    description: Who takes the lock (controller, user, playbook); shown to a run that finds it held.
    type: dict
    default: {}
  token:
    description: The token I(state=present) returned; I(state=absent) removes only its own lock.
    type: str
  stale_after:
    description: Seconds after which a held lock counts as left behind by a dead run.
    type: int
    default: 21600
  force:
    description: Take the lock even when another run holds it.
    type: bool
    default: false
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Take the host for this run
  rocmlab.rocmlab.rocmlab_lock:
    owner:
      controller: "{{ lookup('ansible.builtin.pipe', 'hostname') }}"
      playbook: site
  register: lock

- name: Give it back (in the play's always section)
  rocmlab.rocmlab.rocmlab_lock:
    state: absent
    token: "{{ lock.token }}"
"""

RETURN = r"""
token:
  description: Identifies this run's lock (pass it to state=absent).
  returned: when state is present
  type: str
holder:
  description: What the lock file said before this call (empty when there was none).
  returned: always
  type: dict
"""

import contextlib
import json
import os
import time
import uuid

from ansible.module_utils.basic import AnsibleModule


def read_holder(path):
    """The lock's content, {} when there is no lock, {"unreadable": ...} when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) else {"unreadable": "not a JSON object"}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        return {"unreadable": str(exc)}


def describe(holder, now):
    """A sentence about the run that holds the lock."""
    if "unreadable" in holder:
        return f"a lock whose content cannot be read ({holder['unreadable']})"
    started = holder.get("started", 0)
    age = int(now - started) if isinstance(started, (int, float)) else None
    return "the run of {playbook} started by {user} on {controller} at {at}{age}".format(
        playbook=holder.get("playbook", "an unknown playbook"),
        user=holder.get("user", "an unknown account"),
        controller=holder.get("controller", "an unknown controller"),
        at=holder.get("started_at", "an unknown time"),
        age=f" ({age // 60} min ago)" if age is not None else "",
    )


def write_new(path, content):
    """Create PATH holding CONTENT, failing with FileExistsError when it exists."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(content, handle)
        handle.write("\n")


def take(module, path, params):
    now = time.time()
    token = uuid.uuid4().hex
    content = dict(
        params["owner"],
        token=token,
        started=now,
        started_at=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now)),
    )
    for _attempt in range(2):
        holder = read_holder(path)
        if holder:
            started = holder.get("started")
            stale = isinstance(started, (int, float)) and now - started > params["stale_after"]
            if not (params["force"] or stale):
                module.fail_json(
                    msg=(
                        f"Another rocmlab run holds this host: {describe(holder, now)}. Two runs "
                        "at once would race on apt and the venvs. Wait for it to end; if it died, "
                        f"run again with -e rocmlab_lock_force=true, or remove {path} on the host."
                    ),
                    holder=holder,
                )
            if module.check_mode:
                module.exit_json(changed=False, holder=holder, token="")
            module.warn(f"Taking over {path} from {describe(holder, now)}.")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        if module.check_mode:
            module.exit_json(changed=False, holder=holder, token="")
        try:
            write_new(path, content)
        except FileExistsError:
            continue  # another run took it between our read and our write: look again
        module.exit_json(changed=False, holder=holder, token=token)
    module.fail_json(msg=f"Another rocmlab run took {path} at the same moment; run again.")


def release(module, path, token):
    holder = read_holder(path)
    if not holder or module.check_mode:
        module.exit_json(changed=False, holder=holder)
    if holder.get("token") != token:
        module.warn(f"{path} belongs to {describe(holder, time.time())}; left in place.")
        module.exit_json(changed=False, holder=holder)
    os.unlink(path)
    module.exit_json(changed=False, holder=holder)


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "default": "/run/rocmlab.lock"},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "owner": {"type": "dict", "default": {}},
            "token": {"type": "str", "no_log": False},
            "stale_after": {"type": "int", "default": 21600},
            "force": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    params = module.params
    if params["state"] == "present":
        take(module, params["path"], params)
    else:
        release(module, params["path"], params["token"] or "")


if __name__ == "__main__":
    main()
