# Copyright: rocmlab contributors
# Apache License 2.0
"""The collection's role registry (roles/rocmlab/vars/main.yml, __rocmlab_registry) as the
controller's plugins read it when no play hands it to them: the downloads filters, whose order
of roles is the registry's. The functions over it are plugins/module_utils/registry.py."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml
from ansible.errors import AnsibleError
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import registry

VARS = Path(__file__).resolve().parents[2] / "roles" / "rocmlab" / "vars" / "main.yml"


@lru_cache(maxsize=1)
def _load(path: str) -> tuple:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise AnsibleError(f"{path}: the role registry cannot be read: {exc}") from exc
    entries = (data or {}).get("__rocmlab_registry") if isinstance(data, dict) else None
    bad = registry.problems(entries)
    if bad:
        raise AnsibleError(f"{path}: {' '.join(bad)}")
    return tuple(entries)


def roles(path: Path = VARS) -> dict:
    """registry.roles() of the collection's registry."""
    return registry.roles(list(_load(str(path))))
