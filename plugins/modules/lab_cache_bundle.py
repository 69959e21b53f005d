#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Make an offline bundle of a lab cache, or import one into a lab cache without an uplink."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time

DOCUMENTATION = r"""
module: lab_cache_bundle
short_description: An offline bundle of a lab cache - made from a filled cache, or imported
description:
  - "I(state=created): copies what a lab cache holds into the directory I(bundle) - C(apt/),
    apt-cacher-ng's cache as it was fetched (the vendors' signed C(InRelease) files and packages,
    nothing re-signed), C(wheels/) and C(datasets/) - and writes C(MANIFEST.json) with the
    SHA-256 and size of every file. The bundle is built beside I(bundle) and moved in place when
    complete. Unchanged (and not rewritten) when the cache holds exactly what the bundle's
    manifest lists."
  - "I(state=imported): checks every file of I(bundle) against its manifest (size, then SHA-256;
    a file missing, altered or not in the manifest refuses the whole bundle, naming the files)
    before anything is copied; then copies C(apt/) into I(apt_cache) (owned by I(apt_owner)),
    C(wheels/) and C(datasets/) into I(root), and records the manifest's digest in
    C(<root>/bundle.json). A bundle whose digest is recorded there already is not checked or
    copied again."
options:
  state:
    description: Make a bundle, or import one.
    type: str
    required: true
    choices: [created, imported]
  bundle:
    description: The bundle directory.
    type: path
    required: true
  root:
    description: The lab cache's directory (wheels/, datasets/).
    type: path
    required: true
  apt_cache:
    description: apt-cacher-ng's cache directory.
    type: path
    default: /var/cache/apt-cacher-ng
  apt_owner:
    description: The account apt-cacher-ng runs as (imported files belong to it).
    type: str
    default: apt-cacher-ng
author: rocmlab
"""

RETURN = r"""
files:
  description: How many files the bundle holds.
  returned: always
  type: int
bytes:
  description: Their size in all.
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 (after the module's docs, by convention)
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.lab_cache import sha256_of  # noqa: E402

MANIFEST = "MANIFEST.json"
FORMAT = 1
# Parts of a lab cache and where they are kept: apt-cacher-ng's cache, the lab cache's root.
PARTS = ("apt", "wheels", "datasets")
# apt-cacher-ng's own bookkeeping (statistics, snapshots) is not part of what it serves.
APT_SKIPPED = ("_xstore",)


class BundleError(Exception):
    pass


def walk_files(top, skipped=()):
    """Relative paths of the regular files under ``top``, sorted; top-level ``skipped`` left out."""
    found = []
    for directory, subdirs, files in os.walk(top):
        if directory == top:
            subdirs[:] = [d for d in subdirs if d not in skipped]
        subdirs.sort()
        for name in files:
            path = os.path.join(directory, name)
            if os.path.isfile(path) and not os.path.islink(path):
                found.append(os.path.relpath(path, top))
    return sorted(found)


def sources(root, apt_cache):
    """{part: directory} of a lab cache."""
    return {
        "apt": apt_cache,
        "wheels": os.path.join(root, "wheels"),
        "datasets": os.path.join(root, "datasets"),
    }


def listing(directories):
    """{bundle path: (directory, relative path)} of every file the parts hold."""
    found = {}
    for part, top in directories.items():
        if not os.path.isdir(top):
            continue
        for rel in walk_files(top, APT_SKIPPED if part == "apt" else ()):
            found[f"{part}/{rel}"] = (top, rel)
    return found


def manifest_of(files):
    return {
        "format": FORMAT,
        "files": {
            name: {
                "sha256": sha256_of(os.path.join(top, rel)),
                "bytes": os.path.getsize(os.path.join(top, rel)),
            }
            for name, (top, rel) in sorted(files.items())
        },
    }


def read_manifest(bundle):
    path = os.path.join(bundle, MANIFEST)
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
        manifest = json.loads(raw)
    except FileNotFoundError as exc:
        raise BundleError(f"{bundle} has no {MANIFEST}: it is not a rocmlab lab bundle") from exc
    except ValueError as exc:
        raise BundleError(f"{path} is not JSON ({exc})") from exc
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") != FORMAT
        or not isinstance(manifest.get("files"), dict)
    ):
        raise BundleError(f"{path} is not a manifest of format {FORMAT} with a 'files' mapping")
    return manifest, hashlib.sha256(raw).hexdigest()


def create(bundle, directories, now):
    """Write the bundle; returns (changed, manifest)."""
    files = listing(directories)
    manifest = manifest_of(files)
    if os.path.isdir(bundle):
        try:
            existing, _ = read_manifest(bundle)
        except BundleError:
            existing = None
        unchanged = existing is not None and existing["files"] == manifest["files"]
        if unchanged and not problems(bundle, existing, deep=False):
            return False, existing
    part = bundle.rstrip("/") + ".part"
    shutil.rmtree(part, ignore_errors=True)
    os.makedirs(part)
    for name, (top, rel) in files.items():
        target = os.path.join(part, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.join(top, rel), target)
    manifest["created"] = now
    with open(os.path.join(part, MANIFEST), "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=True)
        handle.write("\n")
    if os.path.isdir(bundle):
        shutil.rmtree(bundle)
    os.rename(part, bundle)
    return True, manifest


def problems(bundle, manifest, deep=True):
    """What in ``bundle`` does not match ``manifest``: missing, resized, altered, unlisted files."""
    found = []
    listed = manifest["files"]
    present = set(walk_files(bundle)) - {MANIFEST}
    for name in sorted(set(listed) - present):
        found.append(f"{name} is missing")
    for name in sorted(present - set(listed)):
        found.append(f"{name} is not in the manifest")
    for name in sorted(present & set(listed)):
        entry = listed[name]
        path = os.path.join(bundle, name)
        size = os.path.getsize(path)
        if size != entry.get("bytes"):
            found.append(f"{name} has {size} bytes, the manifest says {entry.get('bytes')}")
        elif deep and sha256_of(path) != entry.get("sha256"):
            found.append(
                f"{name} has SHA-256 {sha256_of(path)}, the manifest says {entry.get('sha256')}"
            )
    return found


def copy_tree(src, dest, owner=None):
    for rel in walk_files(src):
        target = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.join(src, rel), target)
        if owner:
            shutil.chown(target, owner, owner)
    if owner:
        for directory, _subdirs, _files in os.walk(dest):
            shutil.chown(directory, owner, owner)


def import_bundle(bundle, root, apt_cache, apt_owner):
    """Check the bundle, then copy it in; returns (changed, manifest)."""
    manifest, digest = read_manifest(bundle)
    record = os.path.join(root, "bundle.json")
    try:
        with open(record, encoding="utf-8") as handle:
            if json.load(handle).get("manifest_sha256") == digest:
                return False, manifest
    except (FileNotFoundError, ValueError):
        pass
    bad = problems(bundle, manifest)
    if bad:
        shown = "; ".join(bad[:5]) + (f"; and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise BundleError(
            f"lab_cache_bundle: {bundle} does not match its manifest: {shown}. The bundle is "
            "damaged or was altered; nothing was imported. Copy it again from where it was made."
        )
    targets = sources(root, apt_cache)
    for part in PARTS:
        src = os.path.join(bundle, part)
        if os.path.isdir(src):
            copy_tree(src, targets[part], apt_owner if part == "apt" else None)
    os.makedirs(root, exist_ok=True)
    with open(record, "w", encoding="utf-8") as handle:
        json.dump({"manifest_sha256": digest, "bundle": bundle}, handle, indent=1)
        handle.write("\n")
    return True, manifest


def summary(manifest):
    files = manifest["files"]
    return {
        "files": len(files),
        "bytes": sum(int(entry.get("bytes", 0)) for entry in files.values()),
    }


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "required": True, "choices": ["created", "imported"]},
            "bundle": {"type": "path", "required": True},
            "root": {"type": "path", "required": True},
            "apt_cache": {"type": "path", "default": "/var/cache/apt-cacher-ng"},
            "apt_owner": {"type": "str", "default": "apt-cacher-ng"},
        },
        supports_check_mode=False,
    )
    params = module.params
    try:
        if params["state"] == "created":
            directories = sources(params["root"], params["apt_cache"])
            changed, manifest = create(params["bundle"], directories, time.time())
        else:
            changed, manifest = import_bundle(
                params["bundle"], params["root"], params["apt_cache"], params["apt_owner"]
            )
    except (BundleError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=changed, **summary(manifest))


if __name__ == "__main__":
    main()
