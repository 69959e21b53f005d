# Copyright: rocmlab contributors
# Apache License 2.0
"""The collection's roles, listed once: __rocmlab_registry in roles/rocmlab/vars/main.yml, one
entry per role (name, tag, group, and the columns downloads, lab_cache_urls, host_rules,
system_rocm). The
playbooks, the rollout, the settings check, the lab cache and tools/role_docs.py read their lists
of roles from it through these functions; tests/python/test_registry.py ties every column to the
roles' own files and to the playbooks.

Pure functions over the registry (a list of dicts); nothing here reads a file.
"""

from __future__ import annotations

KEYS = ("name", "tag", "group", "downloads", "lab_cache_urls", "host_rules", "system_rocm")
COLUMNS = ("downloads", "lab_cache_urls", "host_rules", "system_rocm")
# The groups site.yml and the rollout apply, in this order (playbooks/tasks/<group>.yml).
SITE_GROUPS = ("rocm", "frameworks", "smoke")


def problems(registry) -> list:
    """What is wrong with REGISTRY, one sentence each (empty: it can be read)."""
    if not isinstance(registry, list) or not registry:
        return [f"__rocmlab_registry: {registry!r} is not a list of roles."]
    found, names, tags = [], [], []
    for index, entry in enumerate(registry):
        where = f"__rocmlab_registry[{index}]"
        if not isinstance(entry, dict) or set(entry) != set(KEYS):
            keys = sorted(entry) if isinstance(entry, dict) else entry
            found.append(f"{where}: {keys!r} is not a role entry with the keys {', '.join(KEYS)}.")
            continue
        if not isinstance(entry["name"], str) or not entry["name"]:
            found.append(f"{where}: name {entry['name']!r} is not a role's name.")
        where = f"{where} ({entry['name']})"
        for key in ("tag", "group"):
            value = entry[key]
            if value is not None and (not isinstance(value, str) or not value):
                found.append(f"{where}: {key} {value!r} is neither a name nor null.")
        for column in COLUMNS:
            if not isinstance(entry[column], bool):
                found.append(f"{where}: {column} {entry[column]!r} is not true or false.")
        if entry["name"] in names:
            found.append(f"{where}: the role {entry['name']} is listed twice.")
        names.append(entry["name"])
        if entry["tag"] is not None:
            if entry["tag"] in tags:
                found.append(f"{where}: the tag {entry['tag']} is another role's too.")
            tags.append(entry["tag"])
    return found


def _checked(registry) -> list:
    bad = problems(registry)
    if bad:
        raise ValueError(" ".join(bad))
    return registry


def roles(registry) -> dict:
    """The roles by group and by column, in the registry's order: {"site": the roles of the
    site groups in order, "<group>": its roles, "<column>": the roles where it is true, "all":
    every role, "tags": {role: tag} of the roles that have a tag}."""
    registry = _checked(registry)
    found = {"all": [e["name"] for e in registry], "site": [], "tags": {}}
    for column in COLUMNS:
        found[column] = [e["name"] for e in registry if e[column]]
    for entry in registry:
        if entry["group"] is not None:
            found.setdefault(entry["group"], []).append(entry["name"])
        if entry["tag"] is not None:
            found["tags"][entry["name"]] = entry["tag"]
    found["site"] = [name for group in SITE_GROUPS for name in found.get(group, [])]
    return found


def applied(registry, wanted, run_tags, skip_tags, checked=(), install="system") -> list:
    """The roles of WANTED (in its order) whose settings a run checks now: those whose tag the
    run selects (RUN_TAGS: --tags, "all" when none was given) and does not skip (SKIP_TAGS:
    --skip-tags), less those already CHECKED on the host, less the system_rocm roles on a host
    whose INSTALL is "wheels" (any other value is left to the settings check, which refuses it
    before anything changes). A role of WANTED that is not in the registry, or has no tag, is a
    mistake in the caller."""
    found = roles(registry)
    tags = found["tags"]
    unknown = [name for name in wanted if name not in tags]
    if unknown:
        raise ValueError(
            f"{', '.join(unknown)}: not a role of the registry with a tag "
            f"(roles/rocmlab/vars/main.yml __rocmlab_registry: {', '.join(tags)})"
        )
    run_tags, skip_tags = list(run_tags or ["all"]), list(skip_tags or [])
    return [
        name
        for name in wanted
        if ("all" in run_tags or tags[name] in run_tags)
        and tags[name] not in skip_tags
        and name not in checked
        and not (install == "wheels" and name in found["system_rocm"])
    ]
