#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Check settings on the host itself: what only the host can answer (a directory made root's,
owner=root). The checks live in module_utils/settings.py; every other check of every role runs
on the controller, once per play (action plugin rocmlab_check_settings)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rocmlab_settings
short_description: Check rocmlab's settings before they reach files, commands or paths
description:
  - Checks each setting in I(settings) as a whole against its kind (a path, a URL, a name, a
    version, a list of them, pip options, ...) and fails with one sentence per bad value naming
    the variable, the value (JSON-quoted, so a newline shows as C(\n)) and what is accepted.
  - Refused wherever text is accepted - control characters (a newline would start a new line
    in a configuration file that a root shell reads), Unicode line separators, and values of the
    wrong type (a string where a list is meant).
  - Paths must be absolute and normalised (no C(..), C(.), C(//), trailing C(/)) and made of
    letters, digits and C(._+-). A directory rocmlab creates or owns (I(kind=dir)) or a file it
    writes (I(kind=file)) must not be a system directory or the parent of one, nor lie under
    C(/proc), C(/sys), C(/dev) or C(/boot).
  - "A directory on the controller (I(kind=controller_dir): where reports are written) is
    checked like a directory rocmlab creates on a host, after its C(..) and C(.) are resolved
    (the defaults are C({{ playbook_dir }}/../reports)): absolute, letters, digits and C(._+-),
    not a system directory or the parent of one, nothing under C(/proc), C(/sys), C(/dev) or
    C(/boot)."
  - "With C(owner=root) (I(kind=dir) or I(kind=file)), the path is also checked on the host
    this module runs on, read-only: when it exists it must not be a symbolic link and must
    belong to root; each directory above it must belong to root and be writable by no other
    account (a sticky directory such as C(/tmp) only when the path in it exists already and is
    root's); and it must not be, or lie in, the home directory of any account but root (a
    service's directory, such as C(/var/www) or C(/var/cache/apt-cacher-ng)). The role then
    makes it root's, so another account's or a service's directory is never taken over."
  - "URLs carry no credentials (C(user:password@) before the host): rocmlab writes URLs into
    files and logs that other accounts or hosts read (apt's sources, lab-cache.json, reports,
    the run's output). Only a URL whose setting has C(credentials=masked) (pip's index and
    wheelhouse, which the roles mask wherever they show them and whose pip task is C(no_log))
    accepts them."
  - pip options (I(kind=pip_args)) are parsed as pip parses them (pip's parser is optparse, so
    C(--extra-index) means C(--extra-index-url) and C(-ihttp://x) means C(-i http://x)); only
    options that change how pip reaches the network, not what it installs, from where or where
    to, are accepted.
  - Read-only; changes nothing on the host.
  - The roles call it for the settings whose check needs the host (C(owner=root)); every other
    check runs on the controller, once per play, in M(rocmlab.rocmlab.rocmlab_check_settings),
    from the same declarations (roles/<role>/meta/settings.yml) and the same code
    (module_utils/settings.py).
options:
  settings:
    description:
      - The settings to check. Each item has C(name) (the variable), C(value), C(kind) and that
        kind's options - C(empty_ok) (any kind), C(pattern) and C(accepted) (pattern), C(choices)
        (choice), C(min) and C(max) (int), C(under), C(suffix) and C(example) (paths),
        C(schemes) and C(example) (url), C(element) (list), C(keys) and C(fields) (dict),
        C(min), C(above) (a lower bound the value must exceed) and C(max) (number), C(owner)
        (dir and file - C(root) checks the path on the host), C(credentials) (url - C(masked)
        accepts C(user:password@)) and C(published) (url - where the URL would be published,
        for the message).
      - "Kinds: text, pattern, choice, bool, int, number (a whole or decimal number), account,
        group, package (Debian), dist (Python), path (read), dir (created or owned), file
        (written), controller_dir (a directory on the controller that reports go to), url,
        list, dict, pip_args, cli_args (arguments of an argparse program, C(reserved) options
        refused with their abbreviations), batches (the sizes of Ansible's
        C(serial) - a number of hosts from 1, a percentage from 1% to 100%, or a list of them)."
    type: list
    elements: dict
    required: true
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Check the settings that reach files and commands
  rocmlab_settings:
    settings:
      - {name: pytorch_rocm_venv, value: "{{ pytorch_rocm_venv }}", kind: dir}
      - name: pytorch_rocm_index_url
        value: "{{ pytorch_rocm_index_url }}"
        kind: url
        empty_ok: true
      - name: pytorch_rocm_pip_extra_args
        value: "{{ pytorch_rocm_pip_extra_args }}"
        kind: pip_args
"""

RETURN = r"""
problems:
  description: One sentence per bad value (empty when every value is accepted).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.settings import (
    problems_of,
)


def main():
    module = AnsibleModule(
        argument_spec={"settings": {"type": "list", "elements": "dict", "required": True}},
        supports_check_mode=True,
    )
    problems = [problem for spec in module.params["settings"] for problem in problems_of(spec)]
    if problems:
        module.fail_json(
            msg=" ".join(problems) + " Nothing on this host was changed.", problems=problems
        )
    module.exit_json(changed=False, problems=[])


if __name__ == "__main__":
    main()
