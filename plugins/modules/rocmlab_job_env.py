#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""The command line prefix that runs a job as an unprivileged account with a clean environment:
no login shell, no profile, nothing of the account's own choosing."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rocmlab_job_env
short_description: Run a job as an unprivileged account with a clean environment, no shell
description:
  - Returns I(argv), the start of a command line for M(ansible.builtin.command) that runs a
    program as I(account) - C(runuser -u ACCOUNT -- /usr/bin/env -i NAME=VALUE ...) - followed
    by the job's own absolute program path and arguments. No shell runs - not the account's
    login shell, no C(~/.profile), C(~/.bashrc) or shell functions, so the account cannot
    choose what a name in the command means.
  - C(runuser) without C(--login) still sets the account's supplementary groups from
    C(/etc/group) (util-linux initialises them with initgroups), so new C(render) and C(video)
    memberships apply as they do for a fresh login.
  - The environment is exactly - C(HOME), C(USER), C(LOGNAME) (from the password database),
    C(PATH) (I(path)), C(LANG) (I(lang)), the GPU settings of I(environment_file) (the
    role gfx_override writes C(HSA_OVERRIDE_GFX_VERSION) and C(ROCR_VISIBLE_DEVICES) there, and
    a login would have them from C(/etc/profile.d)), then I(extra).
  - I(environment_file) is read only when it is a regular file owned by root that only root may
    write, opened without following a link; a file that fails those checks fails the task. A
    missing file adds nothing (no GPU needs a setting).
  - Reads only; changes nothing, and runs the same in check mode.
options:
  account:
    description: The unprivileged account (not root) that runs the job.
    type: str
    required: true
  path:
    description: The job's C(PATH), directories in order (absolute paths).
    type: list
    elements: str
    default: [/usr/local/bin, /usr/bin, /bin]
  lang:
    description: The job's C(LANG).
    type: str
    default: C.UTF-8
  environment_file:
    description: >-
      A root-owned file of C(NAME=VALUE) lines (environment.d(5)), as gfx_override writes it.
    type: path
    default: /etc/environment.d/90-rocmlab-gfx.conf
  extra:
    description: More variables for the job, set last.
    type: dict
    default: {}
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Prepare the smoke job's clean environment
  rocmlab.rocmlab.rocmlab_job_env:
    account: researcher
  register: job_env

- name: Run the smoke job as researcher
  ansible.builtin.command:
    argv: "{{ job_env.argv + ['/usr/bin/timeout', '1800', venv ~ '/bin/rocmlab', 'smoke'] }}"
    chdir: /var/lib/rocmlab/smoke
  vars:
    venv: /opt/rocmlab/venvs/pytorch
"""

RETURN = r"""
argv:
  description: The command line prefix - runuser, the account, env -i and the variables.
  returned: always
  type: list
  elements: str
environment:
  description: The job's environment, as a mapping.
  returned: always
  type: dict
from_file:
  description: The names I(environment_file) contributed.
  returned: always
  type: list
  elements: str
"""

import os
import pwd
import re
import stat

from ansible.module_utils.basic import AnsibleModule

# util-linux's runuser (merged /usr: /sbin is a link to /usr/sbin) and coreutils' env.
RUNUSER = ("/usr/sbin/runuser", "/sbin/runuser")
ENV = "/usr/bin/env"
# The largest environment file read.
MAX_FILE = 64 * 1024
_VAR = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_]{0,127})=(.*)")
# Set from the password database and the options, never from a file or I(extra).
OWN = ("HOME", "USER", "LOGNAME", "PATH", "LANG")
# Values that would change what runs, not how it runs on the GPU: never from a file.
NOT_FROM_FILE = re.compile(r"LD_.*|PYTHON.*|BASH_ENV|ENV|SHELL|IFS|PS4")


class JobEnvError(Exception):
    """A value cannot go into the job's environment; the message names it."""


def _value(name: str, value: object, where: str) -> str:
    text = value if isinstance(value, str) else str(value)
    if isinstance(value, (dict, list)) or any(c in text for c in "\x00\n\r"):
        raise JobEnvError(f"{where}: {name}={text!r} is not a one-line value")
    return text


def parse_environment_file(text: str, where: str) -> dict[str, str]:
    """NAME=VALUE lines of an environment.d(5) file (comments and blank lines skipped; values
    in single or double quotes lose them). Raises JobEnvError for a line that is neither."""
    found = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.fullmatch(line)
        if not match:
            raise JobEnvError(f"{where}, line {number}: {line[:80]!r} is not NAME=VALUE")
        name, value = match.groups()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if name in OWN or NOT_FROM_FILE.fullmatch(name):
            raise JobEnvError(f"{where}, line {number}: {name} is not for a GPU setting")
        found[name] = _value(name, value, f"{where}, line {number}")
    return found


def read_root_file(path: str) -> str | None:
    """PATH's text when it is root's regular file that only root may write (None when missing),
    opened without following a link. Raises JobEnvError otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise JobEnvError(
            f"{path} cannot be opened without following a link ({os.strerror(exc.errno or 0)})"
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise JobEnvError(f"{path} is not a regular file")
        if st.st_uid != 0 or st.st_mode & 0o022:
            raise JobEnvError(
                f"{path} is owned by uid {st.st_uid} with mode {stat.S_IMODE(st.st_mode):04o}: "
                "only root may write what the job's environment is made of"
            )
        data = os.read(fd, MAX_FILE + 1)
        if len(data) > MAX_FILE:
            raise JobEnvError(f"{path} is larger than {MAX_FILE} bytes")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise JobEnvError(f"{path} is not UTF-8 text") from None
    finally:
        os.close(fd)


def job_env(
    account: pwd.struct_passwd,
    path: list[str],
    lang: str,
    from_file: dict[str, str],
    extra: dict,
    runuser: str,
) -> tuple[list[str], dict[str, str]]:
    """(argv prefix, environment) for a job of ACCOUNT."""
    if account.pw_uid == 0:
        raise JobEnvError(f"account: {account.pw_name} is root, not an unprivileged account")
    for directory in path:
        if not isinstance(directory, str) or not os.path.isabs(directory) or ":" in directory:
            raise JobEnvError(f"path: {directory!r} is not an absolute directory without ':'")
    environment = {
        "HOME": account.pw_dir,
        "USER": account.pw_name,
        "LOGNAME": account.pw_name,
        "PATH": ":".join(path),
        "LANG": _value("LANG", lang, "lang"),
        **from_file,
    }
    for name, value in extra.items():
        if not isinstance(name, str) or not _VAR.fullmatch(name) or name in OWN:
            raise JobEnvError(f"extra: {name!r} is not a variable the job may be given")
        environment[name] = _value(name, value, "extra")
    argv = [runuser, "-u", account.pw_name, "--", ENV, "-i"]
    argv += [f"{name}={value}" for name, value in environment.items()]
    return argv, environment


def main():
    module = AnsibleModule(
        argument_spec={
            "account": {"type": "str", "required": True},
            "path": {
                "type": "list",
                "elements": "str",
                "default": ["/usr/local/bin", "/usr/bin", "/bin"],
            },
            "lang": {"type": "str", "default": "C.UTF-8"},
            "environment_file": {
                "type": "path",
                "default": "/etc/environment.d/90-rocmlab-gfx.conf",
            },
            "extra": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        account = pwd.getpwnam(params["account"])
    except KeyError:
        module.fail_json(msg=f"account: {params['account']!r} is no account on this host")
    runuser = next((path for path in RUNUSER if os.path.isfile(path)), None)
    if runuser is None:
        module.fail_json(msg=f"runuser (util-linux) is not installed: none of {', '.join(RUNUSER)}")
    try:
        text = read_root_file(params["environment_file"])
        where = params["environment_file"]
        from_file = parse_environment_file(text, where) if text is not None else {}
        argv, environment = job_env(
            account, params["path"], params["lang"], from_file, params["extra"], runuser
        )
    except JobEnvError as exc:
        module.fail_json(msg=f"The job's environment cannot be made: {exc}.")
    module.exit_json(changed=False, argv=argv, environment=environment, from_file=sorted(from_file))


if __name__ == "__main__":
    main()
