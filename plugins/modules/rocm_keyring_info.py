#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Report the primary OpenPGP keys that keyring files hold."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rocm_keyring_info
short_description: List the primary OpenPGP keys in keyring files
description:
  - For each keyring file (binary C(.gpg) or ASCII-armored C(.asc), as apt reads them), reports
    the fingerprints of the primary keys it holds. Subkeys are left out.
  - With I(fingerprint), also tells whether each file holds that key and whether it is the only
    key there, which is what removing a key from apt's trusted keyrings needs.
  - A file that does not exist, or that gpg cannot read, is reported as such; it does not fail
    the task.
  - Read-only. gpg runs with a private temporary home directory and never starts an agent.
  - Needs gpg on the host.
options:
  paths:
    description:
      - Keyring files to read. An entry with C(*), C(?) or C([) is a glob; a glob that matches
        nothing adds no file, a plain path that does not exist is reported with I(exists=false).
      - Files are reported in the order given, each glob's matches sorted, each file once.
    type: list
    elements: path
    required: true
  fingerprint:
    description:
      - A primary key's fingerprint (40 or 64 hexadecimal digits; spaces and case do not
        matter). Adds I(holds) and I(only_key) to each file's report.
    type: str
seealso:
  - module: rocmlab.rocmlab.rocm_keyring
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Find apt's trusted keyrings that hold AMD's key
  rocm_keyring_info:
    paths:
      - /etc/apt/trusted.gpg
      - /etc/apt/trusted.gpg.d/*.gpg
      - /etc/apt/trusted.gpg.d/*.asc
    fingerprint: CA8B B472 7A47 B4D0 9B4E E896 9386 B48A 1A69 3C5C
  register: trusted

- name: Remove the keyring files that hold only that key
  ansible.builtin.file:
    path: "{{ item.path }}"
    state: absent
  loop: "{{ trusted.keyrings | selectattr('only_key') }}"
  loop_control:
    label: "{{ item.path }}"

- name: Read the keys of a downloaded key file
  rocm_keyring_info:
    paths: [/tmp/scratch/key]
  register: download
"""

RETURN = r"""
fingerprint:
  description: I(fingerprint) as gpg prints it (upper case, no spaces).
  returned: when I(fingerprint) is given
  type: str
  sample: CA8BB4727A47B4D09B4EE8969386B48A1A693C5C
keyrings:
  description: One entry per keyring file, in the order of I(paths).
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The file.
      type: str
      sample: /etc/apt/trusted.gpg
    exists:
      description: Whether the file exists.
      type: bool
    fingerprints:
      description:
        - The fingerprints of the primary keys gpg read in the file, in the file's order
          (subkeys left out). Empty for a missing file, and for a file without keys.
      type: list
      elements: str
      sample: [CA8BB4727A47B4D09B4EE8969386B48A1A693C5C]
    error:
      description:
        - Why the file could not be read, or not wholly (gpg's message), else null.
          I(fingerprints) then holds the keys gpg read before it stopped.
      type: str
      sample: "gpg: no valid OpenPGP data found."
    holds:
      description: Whether I(fingerprint) is among I(fingerprints).
      type: bool
      returned: when I(fingerprint) is given
    only_key:
      description: Whether I(fingerprint) is the only primary key in the file.
      type: bool
      returned: when I(fingerprint) is given
"""

import glob
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.rocm_gpg import (
    GpgMissing,
    keyring_fingerprints,
    normalize_fingerprint,
)


def expand(paths: list[str]) -> list[str]:
    """PATHS with each glob replaced by its sorted matches, each file once, in order."""
    files: list[str] = []
    for entry in paths:
        matches = sorted(glob.glob(entry)) if glob.has_magic(entry) else [entry]
        files.extend(match for match in matches if match not in files)
    return files


def keyring_report(path: str, fingerprint: str | None) -> dict:
    """What the keyring file PATH holds (the RETURN's keyrings entry)."""
    exists = os.path.lexists(path)
    report: dict = {"path": path, "exists": exists, "fingerprints": [], "error": None}
    if exists and not os.path.isfile(path):
        report["error"] = "not a regular file"
    elif exists:
        report["fingerprints"], report["error"] = keyring_fingerprints(path)
    if fingerprint is not None:
        report["holds"] = fingerprint in report["fingerprints"]
        report["only_key"] = report["fingerprints"] == [fingerprint]
    return report


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "paths": {"type": "list", "elements": "path", "required": True},
            "fingerprint": {"type": "str"},
        },
        supports_check_mode=True,
    )
    fingerprint = None
    result: dict = {"changed": False}
    if module.params["fingerprint"] is not None:
        fingerprint = normalize_fingerprint(module.params["fingerprint"])
        if fingerprint is None:
            module.fail_json(
                msg=f"fingerprint: {module.params['fingerprint']!r} is not an OpenPGP "
                "fingerprint; expected 40 or 64 hexadecimal digits (spaces allowed)"
            )
        result["fingerprint"] = fingerprint
    try:
        result["keyrings"] = [
            keyring_report(path, fingerprint) for path in expand(module.params["paths"])
        ]
    except GpgMissing as err:
        module.fail_json(msg=f"rocm_keyring_info: {err}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
