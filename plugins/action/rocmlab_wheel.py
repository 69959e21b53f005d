# Copyright: rocmlab contributors
# Apache License 2.0
"""The rocmlab wheel on the controller: the one kept for the project's current contents, else
built and kept (module_utils/wheel_cache.py). Runs on the controller only; nothing is sent to a
host. Role smoke_test's tasks/wheel.yml calls it once per play batch."""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.plugins.action import ActionBase
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.wheel_cache import (
    WheelError,
    default_cache,
    ensure,
)

# The collection's root (or the checkout's): pyproject.toml, README.md and src/ are there.
PROJECT = Path(__file__).resolve().parents[2]


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        unknown = sorted(set(args) - {"project", "cache_dir", "python"})
        if unknown:
            return {**result, "failed": True, "msg": f"rocmlab_wheel: unknown options {unknown}"}
        project = Path(args.get("project") or PROJECT)
        cache = Path(args["cache_dir"]) if args.get("cache_dir") else default_cache()
        python = args.get("python") or sys.executable
        try:
            found = ensure(project, cache, python)
        except WheelError as err:
            return {**result, "failed": True, "msg": str(err)}
        return {**result, "changed": False, **found}
