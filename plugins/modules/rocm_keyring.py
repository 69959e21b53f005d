#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Put one verified OpenPGP key in a keyring file, or take one out."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rocm_keyring
short_description: Keep one verified OpenPGP key in a keyring file, or remove a key from one
description:
  - With I(state=present), I(path) becomes a keyring holding the primary key I(fingerprint)
    alone (with its subkeys, user IDs and signatures), taken from the key file I(src), which
    may hold other keys and be binary or ASCII-armored. If I(src) does not hold that primary
    key, the task fails, reports the fingerprints I(src) does hold, and I(path) is left as it
    was. This is how a downloaded repository key becomes a C(signed-by) keyring for apt.
  - With I(state=absent), the primary key I(fingerprint) is removed from the keyring I(path);
    the other keys stay, and the file keeps its format (armored or binary). A file that does
    not exist, or does not hold the key, is left alone. A file left without keys stays, empty.
  - I(path) is written whole to a temporary file beside it and renamed over it, only when its
    content changes. Check mode reports what would change and writes nothing; diff mode shows
    the fingerprints before and after.
  - gpg runs with a private temporary home directory and never starts an agent; it re-exports
    the keys it writes, so a rewritten file holds the same keys, not necessarily the same
    bytes. Needs gpg on the host.
options:
  path:
    description:
      - The keyring file. With I(state=present) it is written ASCII-armored when its name ends
        in C(.asc), binary otherwise (apt reads both, by that suffix).
    type: path
    required: true
  fingerprint:
    description:
      - The primary key's fingerprint (40 or 64 hexadecimal digits; spaces and case do not
        matter).
    type: str
    required: true
  state:
    description:
      - C(present) - I(path) holds this key alone, taken from I(src).
      - C(absent) - I(path) does not hold this key.
    type: str
    choices: [present, absent]
    default: present
  src:
    description: The key file to take the key from (a download); required with I(state=present).
    type: path
extends_documentation_fragment:
  - ansible.builtin.files
seealso:
  - module: rocmlab.rocmlab.rocm_keyring_info
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Keep the downloaded key, if it is AMD's, alone as a binary keyring
  rocm_keyring:
    src: /tmp/scratch/key
    path: /etc/apt/keyrings/rocm.gpg
    fingerprint: CA8BB4727A47B4D09B4EE8969386B48A1A693C5C
    owner: root
    group: root
    mode: "0644"

- name: Stop trusting AMD's key for every repository
  rocm_keyring:
    path: /etc/apt/trusted.gpg
    fingerprint: CA8BB4727A47B4D09B4EE8969386B48A1A693C5C
    state: absent
"""

RETURN = r"""
fingerprint:
  description: I(fingerprint) as gpg prints it (upper case, no spaces).
  returned: success
  type: str
  sample: CA8BB4727A47B4D09B4EE8969386B48A1A693C5C
fingerprints:
  description:
    - The primary keys I(path) holds after the task (in check mode, would hold); empty when it
      does not exist.
  returned: success
  type: list
  elements: str
  sample: [CA8BB4727A47B4D09B4EE8969386B48A1A693C5C]
src_fingerprints:
  description: The primary keys that I(src) holds, when it does not hold I(fingerprint).
  returned: failure, when I(src) does not hold I(fingerprint)
  type: list
  elements: str
  sample: [5941273EA1554BB7D1B2007795193290F70D82F0]
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.rocm_gpg import (
    GpgError,
    GpgMissing,
    KeyNotFound,
    exported_key,
    keyring_fingerprints,
    normalize_fingerprint,
    without_key,
)


def read_keys(path: str) -> list[str]:
    """The primary keys of the keyring file PATH ([] if missing); GpgError if gpg cannot read it."""
    if not os.path.lexists(path):
        return []
    found, error = keyring_fingerprints(path)
    if error is not None:
        raise GpgError(f"path: cannot read the keyring {path}: {error}")
    return found


def current_content(path: str) -> bytes | None:
    """The bytes of the file PATH, or None if it does not exist."""
    if not os.path.lexists(path):
        return None
    with open(path, "rb") as handle:
        return handle.read()


def write_atomically(module: AnsibleModule, path: str, data: bytes) -> None:
    """Write DATA to a temporary file beside PATH and rename it over PATH."""
    handle, temporary = tempfile.mkstemp(prefix=".rocm_keyring.", dir=os.path.dirname(path))
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        module.atomic_move(temporary, path, unsafe_writes=module.params["unsafe_writes"])
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def wanted_content(params: dict, fingerprint: str, path: str) -> tuple[bytes | None, list[str]]:
    """(the content PATH should have, or None to leave it as it is; the keys it then holds)."""
    if params["state"] == "present":
        armor = path.endswith(".asc")
        try:
            return exported_key(params["src"], fingerprint, armor), [fingerprint]
        except (KeyNotFound, GpgMissing):
            raise
        except GpgError as err:
            raise GpgError(f"src: cannot read the key file {params['src']}: {err}") from err
    keys = read_keys(path)
    if fingerprint not in keys:
        return None, keys
    return without_key(path, fingerprint)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "fingerprint": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "src": {"type": "path"},
        },
        required_if=[("state", "present", ["src"])],
        add_file_common_args=True,
        supports_check_mode=True,
    )
    params = module.params
    path = os.path.abspath(params["path"])
    fingerprint = normalize_fingerprint(params["fingerprint"])
    if fingerprint is None:
        module.fail_json(
            msg=f"fingerprint: {params['fingerprint']!r} is not an OpenPGP fingerprint; "
            "expected 40 or 64 hexadecimal digits (spaces allowed)"
        )
    if os.path.lexists(path) and not os.path.isfile(path):
        module.fail_json(msg=f"path: {path} is not a regular file")
    if params["state"] == "present" and not os.path.isfile(params["src"]):
        module.fail_json(msg=f"src: {params['src']} is not a file; it should be the key to take")
    result: dict = {"changed": False, "fingerprint": fingerprint}
    try:
        content, result["fingerprints"] = wanted_content(params, fingerprint, path)
    except KeyNotFound as err:
        module.fail_json(msg=f"src: {err}", src_fingerprints=err.found, **result)
    except GpgError as err:
        module.fail_json(msg=str(err), **result)
    if content is not None and content != current_content(path):
        result["changed"] = True
        if module._diff:
            result["diff"] = {
                "before_header": path,
                "after_header": path,
                "before": "".join(f"{key}\n" for key in keyring_fingerprints(path)[0]),
                "after": "".join(f"{key}\n" for key in result["fingerprints"]),
            }
        if not module.check_mode:
            if not os.path.isdir(os.path.dirname(path)):
                module.fail_json(msg=f"path: the directory of {path} does not exist", **result)
            write_atomically(module, path, content)
    if os.path.lexists(path):
        file_args = module.load_file_common_arguments(params, path=path)
        result["changed"] = module.set_fs_attributes_if_different(file_args, result["changed"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
