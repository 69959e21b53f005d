#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Make an offline bundle of a lab cache, or import one into a lab cache without an uplink."""

from __future__ import annotations

DOCUMENTATION = r"""
module: lab_cache_bundle
short_description: An offline bundle of a lab cache - made from a filled cache, or imported
description:
  - "I(state=created): copies what a lab cache holds into the directory I(bundle) - C(apt/),
    apt-cacher-ng's cache as it was fetched (the vendors' signed C(InRelease) files and packages,
    nothing re-signed), C(wheels/), C(datasets/) and C(rocm-wheels/) (the pages and files of
    ROCm's index the cache passed through, as module lab_cache_rocm_wheels kept them) - and
    writes C(MANIFEST.json) with the
    SHA-256 and size of every file. Returns C(manifest_sha256), the SHA-256 of C(MANIFEST.json):
    the offline side is given it (I(digest)) and trusts the manifest, and through it every file,
    only when it matches."
  - "I(bundle) must not exist yet, or be a bundle this module made there before: it leaves a
    marker with a random id in the directories it makes and records the id in
    C(<root>/bundles-made.json); an existing directory without that id (a USB stick's root, the
    cache itself) is refused and left untouched. The bundle is built beside I(bundle) and moved
    in place when complete. Unchanged (and not rewritten) when the cache holds exactly what the
    bundle's manifest lists."
  - "Reading apt-cacher-ng's cache, which its service account owns, no link is followed: links
    and special files there are left out of the bundle."
  - "I(state=imported): the SHA-256 of the bundle's C(MANIFEST.json) must be I(digest), then
    every file of I(bundle) is checked against the manifest (size, then SHA-256; a file missing,
    altered or not in the manifest, or a symbolic link or special file anywhere in the bundle,
    refuses the whole bundle, naming the files) before anything is copied; then C(apt/) is
    copied into I(apt_cache) (owned by I(apt_owner)), C(wheels/), C(datasets/) and
    C(rocm-wheels/) into I(root),
    each file checked again as it is copied, and the digest is recorded in
    C(<root>/bundle.json). A bundle whose digest is recorded there already is not checked or
    copied again."
  - "The import never follows a link in the destination either: I(apt_cache) belongs to
    apt-cacher-ng's account, which can plant links there. Directories are walked through
    descriptors opened without following links, a link where a directory belongs is removed,
    files are written under a fresh name and renamed over the old one, and only what the import
    made is given to I(apt_owner)."
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
  digest:
    description: >-
      I(state=imported) - the SHA-256 (64 hex digits) of the bundle's C(MANIFEST.json), as
      I(state=created) returned it where the bundle was made.
    type: str
  root:
    description: The lab cache's directory (wheels/, datasets/, rocm-wheels/).
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
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Make an offline bundle of a filled lab cache
  rocmlab.rocmlab.lab_cache_bundle:
    state: created
    bundle: /srv/rocmlab/lab-bundle
    root: /srv/rocmlab/cache
  register: made

- name: Print the digest the offline side must be given
  ansible.builtin.debug:
    msg: "lab_cache_bundle_digest: {{ made.manifest_sha256 }}"

- name: Import the bundle on the offline head node, trusted through its manifest's digest
  rocmlab.rocmlab.lab_cache_bundle:
    state: imported
    bundle: /media/usb/lab-bundle
    digest: "{{ lab_cache_bundle_digest }}"
    root: /srv/rocmlab/cache
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
manifest_sha256:
  description: >-
    The SHA-256 of the bundle's MANIFEST.json (lab_cache_bundle_digest on the offline side).
  returned: always
  type: str
skipped:
  description: I(state=created) - links and special files in the cache, left out of the bundle.
  returned: always
  type: list
  elements: str
"""

import hashlib
import json
import os
import pwd
import re
import secrets
import shutil
import stat
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.lab_cache import (
    TEMP_PREFIX,
    NotPlain,
    copy_fd,
    ensure_dir,
    hash_fd,
    open_dir,
    open_file,
    open_subdir,
    read_fd,
    read_small,
    replace_with,
    tree,
    write_bytes,
)

MANIFEST = "MANIFEST.json"
# The marker in a bundle directory this module made: the id recorded in <root>/MADE.
MARKER = ".rocmlab-bundle"
MADE = "bundles-made.json"
IMPORTED = "bundle.json"
FORMAT = 1
# Parts of a lab cache and where they are kept: apt-cacher-ng's cache, the lab cache's root.
PARTS = ("apt", "wheels", "datasets", "rocm-wheels")
# apt-cacher-ng's own bookkeeping (statistics, snapshots) is not part of what it serves.
APT_SKIPPED = ("_xstore",)
MAX_MANIFEST = 64 << 20
MAX_RECORD = 1 << 20
DIGEST = re.compile(r"[0-9a-f]{64}")
MADE_ID = re.compile(r"[0-9a-f]{32}")


class BundleError(Exception):
    pass


def sources(root, apt_cache):
    """{part: directory} of a lab cache."""
    return {
        "apt": apt_cache,
        "wheels": os.path.join(root, "wheels"),
        "datasets": os.path.join(root, "datasets"),
        "rocm-wheels": os.path.join(root, "rocm-wheels"),
    }


def split(name):
    """(directories, file name) of a bundle-relative NAME."""
    parts = name.split("/")
    return parts[:-1], parts[-1]


def shown(problems, count=5):
    return "; ".join(problems[:count]) + (
        f"; and {len(problems) - count} more" if len(problems) > count else ""
    )


# --- Reading a tree without following links ---


def scan(directories):
    """The manifest entries of the regular files the parts hold, {name: {sha256, bytes}}, and
    the links and special files left out (read through descriptors, no link followed)."""
    files, skipped = {}, []
    for part, top in directories.items():
        try:
            top_fd = open_dir(top)
        except FileNotFoundError:
            continue
        except NotPlain as exc:
            raise BundleError(f"{top} ({part}/ of the bundle) {exc}: refused") from None
        try:
            for rel, name, info, dir_fd in tree(top_fd, APT_SKIPPED if part == "apt" else ()):
                # Directories, and what an interrupted import left under a temporary name.
                if stat.S_ISDIR(info.st_mode) or name.startswith(TEMP_PREFIX):
                    continue
                try:
                    fd, _unused = open_file(name, dir_fd)
                except (FileNotFoundError, NotPlain):
                    skipped.append(f"{part}/{rel}")
                    continue
                try:
                    digest, size = hash_fd(fd)
                finally:
                    os.close(fd)
                files[f"{part}/{rel}"] = {"sha256": digest, "bytes": size}
        except ValueError as exc:
            raise BundleError(f"{top}: {exc}") from None
        finally:
            os.close(top_fd)
    return files, skipped


def check_tree(bundle_fd, manifest, deep=True):
    """What in the bundle does not match MANIFEST: links and special files anywhere, missing,
    resized, altered (DEEP) and unlisted files."""
    listed = manifest["files"]
    links, unlisted, altered, seen = [], [], [], set()
    try:
        entries = list(_entries(bundle_fd, listed, deep))
    except ValueError as exc:
        return [str(exc)]
    for rel, problem in entries:
        if problem == "ok":
            seen.add(rel)
        elif problem == "unlisted":
            unlisted.append(f"{rel} is not in the manifest")
        elif problem.startswith("is "):
            links.append(f"{rel} {problem}")
        else:
            seen.add(rel)
            altered.append(f"{rel} {problem}")
    missing = [f"{name} is missing" for name in sorted(set(listed) - seen)]
    return links + missing + unlisted + altered


def _entries(bundle_fd, listed, deep):
    for rel, name, info, dir_fd in tree(bundle_fd):
        if rel in (MANIFEST, MARKER):
            continue
        if stat.S_ISDIR(info.st_mode):
            continue
        if not stat.S_ISREG(info.st_mode):
            kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "a special file"
            yield rel, f"is {kind}: a bundle holds only directories and regular files"
            continue
        entry = listed.get(rel)
        if entry is None:
            yield rel, "unlisted"
            continue
        if info.st_size != entry["bytes"]:
            yield rel, f"has {info.st_size} bytes, the manifest says {entry['bytes']}"
            continue
        if deep:
            try:
                fd, _unused = open_file(name, dir_fd)
            except (FileNotFoundError, NotPlain) as exc:
                yield rel, f"{exc}"
                continue
            try:
                digest, _unused = hash_fd(fd)
            finally:
                os.close(fd)
            if digest != entry["sha256"]:
                yield rel, f"has SHA-256 {digest}, the manifest says {entry['sha256']}"
                continue
        yield rel, "ok"


# --- Manifests and records ---


def parse_manifest(raw, where):
    """The manifest in RAW, its names and entries checked: {format, files: {name: {sha256,
    bytes}}}, each name a path under one of the parts, without '.', '..' or empty components."""
    try:
        manifest = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise BundleError(f"{where} is not JSON ({exc})") from None
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") != FORMAT
        or not isinstance(manifest.get("files"), dict)
    ):
        raise BundleError(f"{where} is not a manifest of format {FORMAT} with a 'files' mapping")
    bad = []
    for name, entry in manifest["files"].items():
        parts = name.split("/")
        if (
            len(parts) < 2
            or parts[0] not in PARTS
            or any(p in ("", ".", "..") or "\x00" in p for p in parts)
        ):
            bad.append(f"{json.dumps(name)} is not a file of {', '.join(p + '/' for p in PARTS)}")
        elif (
            not isinstance(entry, dict)
            or not isinstance(entry.get("bytes"), int)
            or isinstance(entry.get("bytes"), bool)
            or entry["bytes"] < 0
            or not isinstance(entry.get("sha256"), str)
            or not DIGEST.fullmatch(entry["sha256"])
        ):
            bad.append(f"{json.dumps(name)} has no size and SHA-256")
    if bad:
        raise BundleError(f"{where}: {shown(bad)}")
    return manifest


def read_manifest(bundle_fd, bundle):
    """(raw bytes, SHA-256) of the bundle's MANIFEST.json."""
    try:
        fd, _unused = open_file(MANIFEST, bundle_fd)
    except FileNotFoundError:
        raise BundleError(f"{bundle} has no {MANIFEST}: it is not a rocmlab lab bundle") from None
    except NotPlain as exc:
        raise BundleError(f"{bundle}/{MANIFEST} {exc}: refused") from None
    try:
        raw = read_fd(fd, MAX_MANIFEST)
    except ValueError as exc:
        raise BundleError(f"{bundle}/{MANIFEST} {exc}") from None
    finally:
        os.close(fd)
    return raw, hashlib.sha256(raw).hexdigest()


def read_record(root, name):
    """The JSON mapping in ROOT/NAME, or {} when it is missing or unreadable."""
    try:
        record = json.loads(read_small(os.path.join(root, name), MAX_RECORD))
    except (OSError, NotPlain, ValueError, RecursionError):
        return {}
    return record if isinstance(record, dict) else {}


def write_record(root, name, record):
    os.makedirs(root, 0o755, exist_ok=True)
    root_fd = open_dir(root)
    try:
        write_bytes(root_fd, name, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
    finally:
        os.close(root_fd)


# --- Making a bundle ---


def marker_of(path):
    """The id in the marker of the directory PATH, or None (no marker, or not a plain file)."""
    try:
        dir_fd = open_dir(path)
    except (OSError, NotPlain):
        return None
    try:
        record = json.loads(read_small(MARKER, 4096, dir_fd))
    except (OSError, NotPlain, ValueError, RecursionError):
        return None
    finally:
        os.close(dir_fd)
    made_id = record.get("id") if isinstance(record, dict) else None
    return made_id if isinstance(made_id, str) and MADE_ID.fullmatch(made_id) else None


def dest_state(dest, made_id):
    """'missing', or 'ours' (a directory holding this cache's marker for DEST); BundleError for
    anything else, which is left as it is."""
    try:
        info = os.lstat(dest)
    except FileNotFoundError:
        return "missing"
    if stat.S_ISDIR(info.st_mode) and made_id and marker_of(dest) == made_id:
        return "ours"
    what = (
        "a directory"
        if stat.S_ISDIR(info.st_mode)
        else "a " + ("symbolic link" if stat.S_ISLNK(info.st_mode) else "file")
    )
    raise BundleError(
        f"lab_cache_bundle_dest: {dest} exists and is {what} that lab_cache_bundle did not make "
        "(it holds no marker of a bundle made from this cache): it is left as it is, nothing in "
        "it removed or changed. Name a directory that does not exist yet, for example "
        f"{dest.rstrip('/')}/rocmlab-bundle: it is made, and later runs replace only what they "
        "made there."
    )


def check_dest_outside(dest, directories, root):
    """DEST may neither lie in what it bundles (the bundle would hold itself) nor hold it."""
    real = os.path.realpath(dest)
    for top in [*directories.values(), root]:
        other = os.path.realpath(top)
        if real == other or real.startswith(other + "/") or other.startswith(real + "/"):
            raise BundleError(
                f"lab_cache_bundle_dest: {dest} lies in or holds {top}, which the bundle is made "
                "from. Name a directory outside the lab cache, for example /srv/rocmlab/lab-bundle."
            )


def remove_own(parent_fd, parent, name, made_id):
    """Remove PARENT/NAME when it is a directory holding MADE_ID's marker (a leftover of an
    interrupted run); BundleError when something else is there."""
    try:
        info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    path = os.path.join(parent, name)
    if stat.S_ISDIR(info.st_mode) and marker_of(path) == made_id:
        shutil.rmtree(path)
        return
    raise BundleError(f"{path} is in the way and was not made by lab_cache_bundle: remove it")


def copy_part(top, names, dest_fd, part, copied, skipped):
    """Copy NAMES (bundle names of PART) from the directory TOP into DEST_FD/<part>/..., each
    checked to be a regular file, hashed as it is copied; records each in COPIED, and in
    SKIPPED those that are gone or no regular file any more (the cache changed meanwhile)."""
    top_fd = open_dir(top)
    try:
        for name in names:
            dirs, base = split(name[len(part) + 1 :])
            try:
                src_dir = open_subdir(top_fd, dirs)
                try:
                    src, info = open_file(base, src_dir)
                finally:
                    os.close(src_dir)
            except (FileNotFoundError, NotPlain):
                skipped.append(name)
                continue
            try:
                dst_dir = open_subdir(dest_fd, [part, *dirs], create=True)
                try:
                    digest, size = replace_with(
                        dst_dir,
                        base,
                        lambda fd, src=src: copy_fd(src, fd),
                        mtime_ns=info.st_mtime_ns,
                    )
                finally:
                    os.close(dst_dir)
            finally:
                os.close(src)
            copied[name] = {"sha256": digest, "bytes": size}
    finally:
        os.close(top_fd)


def create(bundle, directories, root, now):
    """Write the bundle; returns (changed, manifest, manifest_sha256, skipped)."""
    check_dest_outside(bundle, directories, root)
    made_id = read_record(root, MADE).get(bundle)
    made_id = made_id if isinstance(made_id, str) and MADE_ID.fullmatch(made_id) else None
    state = dest_state(bundle, made_id)
    files, skipped = scan(directories)
    if state == "ours":
        unchanged = _unchanged(bundle, files)
        if unchanged:
            return (False, *unchanged, skipped)
    if made_id is None:
        made_id = secrets.token_hex(16)
        made = read_record(root, MADE)
        made[bundle] = made_id
        write_record(root, MADE, made)
    parent, base = os.path.split(bundle.rstrip("/"))
    os.makedirs(parent, 0o755, exist_ok=True)
    parent_fd = open_dir(parent)
    part, old = f".{base}.part-{made_id}", f".{base}.old-{made_id}"
    try:
        remove_own(parent_fd, parent, part, made_id)
        remove_own(parent_fd, parent, old, made_id)
        os.mkdir(part, 0o755, dir_fd=parent_fd)
        try:
            part_fd = open_dir(part, parent_fd)
            try:
                manifest, raw = _fill(part_fd, made_id, directories, files, now, skipped)
            finally:
                os.close(part_fd)
            if state == "ours":
                os.rename(base, old, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
            os.rename(part, base, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
        except BaseException:
            shutil.rmtree(os.path.join(parent, part), ignore_errors=True)
            raise
        if state == "ours":
            shutil.rmtree(os.path.join(parent, old), ignore_errors=True)
    finally:
        os.close(parent_fd)
    return True, manifest, hashlib.sha256(raw).hexdigest(), skipped


def _fill(part_fd, made_id, directories, files, now, skipped):
    write_bytes(part_fd, MARKER, (json.dumps({"id": made_id}) + "\n").encode())
    copied = {}
    for part, top in directories.items():
        names = sorted(name for name in files if name.startswith(part + "/"))
        if names:
            copy_part(top, names, part_fd, part, copied, skipped)
    manifest = {"format": FORMAT, "files": dict(sorted(copied.items())), "created": now}
    raw = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
    write_bytes(part_fd, MANIFEST, raw)
    return manifest, raw


def _unchanged(bundle, files):
    """(manifest, digest) of the bundle when it lists exactly FILES and holds them whole."""
    try:
        bundle_fd = open_dir(bundle)
    except (OSError, NotPlain):
        return None
    try:
        raw, digest = read_manifest(bundle_fd, bundle)
        manifest = parse_manifest(raw, f"{bundle}/{MANIFEST}")
        if manifest["files"] != files or check_tree(bundle_fd, manifest, deep=False):
            return None
        return manifest, digest
    except BundleError:
        return None
    finally:
        os.close(bundle_fd)


# --- Importing a bundle ---


def account(name):
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise BundleError(f"apt_owner: there is no account {name} on this host") from None
    return entry.pw_uid, entry.pw_gid


def import_bundle(bundle, digest, root, apt_cache, apt_owner):
    """Check the bundle against DIGEST and its manifest, then copy it in; returns (changed,
    manifest, digest)."""
    try:
        bundle_fd = open_dir(bundle)
    except FileNotFoundError:
        raise BundleError(f"lab_cache_bundle: {bundle} does not exist") from None
    except NotPlain as exc:
        raise BundleError(
            f"lab_cache_bundle: {bundle} {exc}: name the bundle's directory itself"
        ) from None
    try:
        raw, actual = read_manifest(bundle_fd, bundle)
        if actual != digest:
            raise BundleError(
                f"lab_cache_bundle_digest: the manifest of {bundle} ({MANIFEST}) has SHA-256 "
                f"{actual}, not {digest}: it is not the bundle whose digest was given, or it was "
                "altered and its manifest re-hashed. Nothing was imported. Set "
                "lab_cache_bundle_digest to the digest playbooks/lab_bundle.yml printed where the "
                "bundle was made, and carry that bundle."
            )
        manifest = parse_manifest(raw, f"{bundle}/{MANIFEST}")
        if read_record(root, IMPORTED).get("manifest_sha256") == digest:
            return False, manifest, digest
        bad = check_tree(bundle_fd, manifest)
        if bad:
            raise BundleError(
                f"lab_cache_bundle: {bundle} does not match its manifest: {shown(bad)}. The "
                "bundle is damaged or was altered; nothing was imported. Copy it again from where "
                "it was made."
            )
        _copy_in(bundle_fd, bundle, manifest, root, apt_cache, account(apt_owner))
    finally:
        os.close(bundle_fd)
    write_record(root, IMPORTED, {"manifest_sha256": digest, "bundle": bundle})
    return True, manifest, digest


def _copy_in(bundle_fd, bundle, manifest, root, apt_cache, apt_ids):
    os.makedirs(root, 0o755, exist_ok=True)
    if not os.path.lexists(apt_cache):
        os.makedirs(apt_cache, 0o755)
        fd = open_dir(apt_cache)
        try:
            os.fchown(fd, *apt_ids)
        finally:
            os.close(fd)
    listed = manifest["files"]
    for part in PARTS:
        names = sorted(name for name in listed if name.startswith(part + "/"))
        if not names:
            continue
        owner = apt_ids if part == "apt" else None
        if part == "apt":
            where, top_fd = apt_cache, _open_target(apt_cache)
        else:
            where = os.path.join(root, part)
            root_fd = _open_target(root)
            try:
                top_fd = ensure_dir(root_fd, part)
            except NotPlain as exc:
                raise BundleError(f"{where} {exc}; nothing more was imported") from None
            finally:
                os.close(root_fd)
        try:
            for name in names:
                _copy_one(bundle_fd, bundle, name, listed[name], top_fd, where, owner)
        finally:
            os.close(top_fd)


def _open_target(path):
    try:
        return open_dir(path)
    except NotPlain as exc:
        raise BundleError(f"{path} {exc}: nothing was imported into it") from None


def _copy_one(bundle_fd, bundle, name, entry, top_fd, where, owner):
    dirs, base = split(name)
    try:
        src_dir = open_subdir(bundle_fd, dirs)
        try:
            src, info = open_file(base, src_dir)
        finally:
            os.close(src_dir)
    except (OSError, NotPlain) as exc:
        raise BundleError(f"{bundle}/{name} changed while it was imported: {exc}") from None
    target = os.path.join(where, *dirs[1:], base)
    try:
        try:
            dst_dir = open_subdir(top_fd, dirs[1:], create=True, owner=owner)
        except NotPlain as exc:
            raise BundleError(
                f"{target}: a directory on the way {exc}; the import stopped there"
            ) from None
        try:
            replace_with(
                dst_dir,
                base,
                lambda fd: _copy_checked(src, fd, entry, f"{bundle}/{name}"),
                owner=owner,
                mtime_ns=info.st_mtime_ns,
            )
        except NotPlain as exc:
            raise BundleError(f"{target} {exc}; the import stopped there") from None
        finally:
            os.close(dst_dir)
    finally:
        os.close(src)


def _copy_checked(src, fd, entry, where):
    digest, size = copy_fd(src, fd)
    if (digest, size) != (entry["sha256"], entry["bytes"]):
        raise BundleError(
            f"{where} changed while it was imported (SHA-256 {digest}, {size} bytes; the "
            f"manifest says {entry['sha256']}, {entry['bytes']} bytes): not copied, the import "
            "stopped there. Copy the bundle again and re-run."
        )


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
            "digest": {"type": "str"},
            "root": {"type": "path", "required": True},
            "apt_cache": {"type": "path", "default": "/var/cache/apt-cacher-ng"},
            "apt_owner": {"type": "str", "default": "apt-cacher-ng"},
        },
        required_if=[("state", "imported", ["digest"])],
        supports_check_mode=False,
    )
    params = module.params
    skipped = []
    try:
        if params["state"] == "created":
            directories = sources(params["root"], params["apt_cache"])
            changed, manifest, digest, skipped = create(
                params["bundle"], directories, params["root"], time.time()
            )
        else:
            if not DIGEST.fullmatch(params["digest"] or ""):
                raise BundleError(
                    f"lab_cache_bundle_digest: {json.dumps(params['digest'])} is not a SHA-256 "
                    "(64 hex digits, lower case), as playbooks/lab_bundle.yml printed it where the "
                    "bundle was made."
                )
            changed, manifest, digest = import_bundle(
                params["bundle"],
                params["digest"],
                params["root"],
                params["apt_cache"],
                params["apt_owner"],
            )
    except (BundleError, OSError, NotPlain) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=changed, manifest_sha256=digest, skipped=skipped, **summary(manifest))


if __name__ == "__main__":
    main()
