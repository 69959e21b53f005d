#!/usr/bin/python
# Copyright: rocmlab contributors
# Apache License 2.0
"""Change apt's configuration files as one transaction: write and remove whole files, refresh
the package lists, and put every file back as it was when apt cannot use them."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rocmlab_apt_files
short_description: Write and remove apt files, refresh apt, and put them back if apt fails
description:
  - Makes each file of I(files) a regular file with the given content, owner and mode, removes
    each path of I(remove), then runs C(apt-get update -q) (argv, no shell, C locale, a time
    limit, I(update_retries) more tries after a failure).
  - >-
    Before anything changes, records the exact state of every path it touches - its bytes,
    mode and owner, or that it does not exist. When apt-get update fails - a non-zero exit, or
    any C(E:) or C(Err:) line, or a C(W: Failed to fetch), C(W: GPG error) or C(W: Some index
    files failed to download) line (apt exits 0 on those) - or a write fails, or the run is
    stopped by SIGTERM or SIGHUP, every path is put back byte-identical to its record (files
    this run added are removed again, files it removed come back, directories it created are
    removed when empty), each is read back and compared with its record, apt-get update runs
    again, and the task fails naming the cause in apt's own words, what was put back, what was
    removed, and whether apt-get update works again.
  - Each file is written to a new file created exclusively beside it (mode 0600), given its
    owner and mode, synced to disk and renamed over the path, so a run killed at any moment
    leaves each path whole, old or new.
  - Links are never followed. A path of I(files) that is a symbolic link is refused before
    anything changes, and not replaced either (the link may be the admin's; replacing it would
    silently drop what it points to). A path of I(remove) that is a link is removed itself,
    never its target, and made again as the same link on a rollback. A directory, FIFO, socket
    or device at any path is refused. The directories above a path are trusted as they are
    (root's C(/etc/apt)); a missing one is created with mode 0755 and removed again on a
    rollback.
  - Nothing is written and apt-get update does not run when every file already has its
    content, owner and mode and no path of I(remove) exists, unless I(update=always).
  - Check mode reads only; it reports which files would be written, created and removed, and
    with C(--diff) their text before and after (a binary file by its size and SHA-256).
options:
  files:
    description: The files to make exist. Exactly one of I(content), I(content_base64), I(src).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute, normalised path of the file.
        type: str
        required: true
      content:
        description:
          - The text (UTF-8), for example rendered on the controller with
            C(lookup('ansible.builtin.template', ...)).
        type: str
      content_base64:
        description: The bytes, base64-encoded, for binary content given by the controller.
        type: str
      src:
        description:
          - A regular file on the host whose bytes are copied exactly (a verified keyring in a
            scratch directory); a link is refused.
        type: str
      owner:
        description: User name or uid.
        type: str
        default: root
      group:
        description: Group name or gid.
        type: str
        default: root
      mode:
        description: Octal mode, quoted (C("0644")).
        type: raw
        default: "0644"
  remove:
    description:
      - Paths that must not exist (absolute, normalised); a regular file or a symbolic link
        (removed itself) is removed.
    type: list
    elements: str
    default: []
  update:
    description:
      - C(changed) - run apt-get update when a file was written or removed.
      - C(always) - run it even when no file changed (an earlier task changed apt's configuration).
      - C(never) - do not run it; nothing is put back unless a write fails.
    type: str
    choices: [changed, always, never]
    default: changed
  update_retries:
    description:
      - How many more times apt-get update runs after it failed, 2 s apart (a busy lock, a
        network blip).
    type: int
    default: 1
  update_timeout:
    description: Seconds one apt-get update may run before it is killed and counted as failed.
    type: int
    default: 600
  on_failure:
    description:
      - C(restore) - put every path back as it was, refresh apt again, and fail with the report.
      - C(keep) - leave the new files and fail with apt's lines.
    type: str
    choices: [restore, keep]
    default: restore
  label:
    description: Who is changing apt (a role), the first word of every message.
    type: str
    default: rocmlab_apt_files
  change:
    description: What the files are, for the failure message (apt-get update failed with ...).
    type: str
    default: the new files
  hint:
    description: What to check and how to run again, the last sentence of a failure message.
    type: str
    default: ""
author: rocmlab contributors (@rocmlab)
"""

EXAMPLES = r"""
- name: Write AMD's keyring, pin and source, putting them back if apt cannot use them
  rocmlab.rocmlab.rocmlab_apt_files:
    files:
      - path: /etc/apt/keyrings/rocm.gpg
        src: "{{ scratch.path }}/keyring.gpg"
      - path: /etc/apt/preferences.d/rocm-pin-600
        content: "{{ lookup('ansible.builtin.template', 'rocm-pin.j2') }}"
      - path: /etc/apt/sources.list.d/rocm.sources
        content: "{{ lookup('ansible.builtin.template', 'repository.sources.j2') }}"
    remove: [/etc/apt/sources.list.d/rocm-graphics.sources]
    label: rocm_repo
    change: the new sources for ROCm 6.4.2

- name: Stop sending apt through a proxy
  rocmlab.rocmlab.rocmlab_apt_files:
    remove: [/etc/apt/apt.conf.d/80rocmlab-lab-cache]
"""

RETURN = r"""
written:
  description:
    - The files written (in check mode, that would be), created ones included, in the order
      given.
  returned: always
  type: list
  elements: str
created:
  description: The files of I(written) that did not exist before.
  returned: always
  type: list
  elements: str
removed:
  description: The paths of I(remove) that existed and were (would be) removed.
  returned: always
  type: list
  elements: str
directories:
  description: Missing directories created (would be created) for I(files).
  returned: always
  type: list
  elements: str
updated:
  description: Whether apt-get update ran and succeeded with the new files.
  returned: always
  type: bool
apt_errors:
  description:
    - apt's lines that say why it cannot use the new files (an Err line joined with its
      reason).
  returned: always
  type: list
  elements: str
  sample:
    - "Err:5 http://mirror/rocm/apt/7.1 jammy/main amd64 Packages 404 File not found"
    - "E: Failed to fetch http://mirror/rocm/apt/7.1/dists/jammy/main/binary-amd64/Packages
      404 File not found"
rolled_back:
  description: Whether the paths were put back as they were before the run.
  returned: always
  type: bool
restored:
  description:
    - After a rollback, the paths that existed before the run, read back byte-identical to
      their record (content, mode, owner), whether or not the run had changed them.
  returned: always
  type: list
  elements: str
discarded:
  description:
    - After a rollback, the files this run had added, removed again (and directories it
      created).
  returned: always
  type: list
  elements: str
unrestored:
  description:
    - Paths the rollback could not put back, with the error and their recorded state (content
      in base64).
  returned: always
  type: list
  elements: dict
apt_works_again:
  description:
    - After a rollback, whether apt-get update succeeded with the previous files (null when
      it did not run).
  returned: always
  type: bool
apt_errors_after:
  description: apt's failure lines from the update after the rollback, when it still fails.
  returned: always
  type: list
  elements: str
"""

import base64
import binascii
import grp
import os
import pwd
import re
import time
from dataclasses import dataclass

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.apt_files import (
    APT_UPDATE,
    AptRun,
    FileRefused,
    Interrupted,
    Record,
    interruptible,
    is_clean_path,
    read_record,
    remove_directories,
    remove_file,
    restore,
    run_apt_update,
    sync_directory,
    uninterrupted,
    write_file,
)

RETRY_DELAY = 2.0
OCTAL_MODE = re.compile(r"0?[0-7]{3,4}")


class Refusal(Exception):
    """A parameter or a path the module will not act on; nothing has changed yet."""


@dataclass(frozen=True)
class Wanted:
    """One file as it should be."""

    path: str
    content: bytes
    mode: int
    uid: int
    gid: int

    def record(self) -> Record:
        return Record(self.path, True, self.content, self.mode, self.uid, self.gid)


@dataclass(frozen=True)
class Plan:
    """What a run changes, in order."""

    write: tuple[Wanted, ...]
    created: tuple[str, ...]
    remove: tuple[str, ...]
    directories: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return bool(self.write or self.remove or self.directories)


def plan(
    wanted: list[Wanted], remove: list[str], before: dict[str, Record], directories: list[str]
) -> Plan:
    """The writes, removals and directories that take the paths from BEFORE to what is wanted."""
    write = tuple(w for w in wanted if not before[w.path].same_as(w.record()))
    return Plan(
        write=write,
        created=tuple(w.path for w in write if not before[w.path].exists),
        remove=tuple(path for path in remove if before[path].exists),
        directories=tuple(directories),
    )


def parse_mode(where: str, mode) -> int:
    if isinstance(mode, int) and not isinstance(mode, bool) and 0 <= mode <= 0o7777:
        return mode
    if isinstance(mode, str) and OCTAL_MODE.fullmatch(mode):
        return int(mode, 8)
    raise Refusal(
        f'{where}.mode: {mode!r} is not an octal file mode; use a quoted one such as "0644"'
    )


def parse_id(where: str, value: str, lookup, what: str) -> int:
    if value.isdigit():
        return int(value)
    try:
        return lookup(value)
    except KeyError:
        raise Refusal(f"{where}.{what}: {value!r} is no {what} on this host") from None


def wanted_files(files: list[dict]) -> list[Wanted]:
    """The I(files) parameter as Wanted entries, their bytes read; Refusal on the first bad one."""
    found = []
    for number, item in enumerate(files):
        where = f"files[{number}]"
        path = item["path"]
        if not is_clean_path(path):
            raise Refusal(f"{where}.path: {path!r} is not an absolute, normalised path")
        given = [key for key in ("content", "content_base64", "src") if item.get(key) is not None]
        if len(given) != 1:
            raise Refusal(f"{where} ({path}): give exactly one of content, content_base64, src")
        if item.get("content") is not None:
            content = item["content"].encode("utf-8")
        elif item.get("content_base64") is not None:
            try:
                content = base64.b64decode(item["content_base64"], validate=True)
            except (binascii.Error, ValueError) as err:
                raise Refusal(f"{where}.content_base64 ({path}): not base64: {err}") from None
        else:
            source = read_source(where, item["src"])
            content = source.content
        found.append(
            Wanted(
                path=path,
                content=content,
                mode=parse_mode(where, item.get("mode", "0644")),
                uid=parse_id(
                    where, item.get("owner") or "root", lambda n: pwd.getpwnam(n).pw_uid, "owner"
                ),
                gid=parse_id(
                    where, item.get("group") or "root", lambda n: grp.getgrnam(n).gr_gid, "group"
                ),
            )
        )
    return found


def read_source(where: str, src: str) -> Record:
    if not is_clean_path(src):
        raise Refusal(f"{where}.src: {src!r} is not an absolute, normalised path")
    try:
        record = read_record(src)
    except FileRefused as err:
        raise Refusal(f"{where}.src: {err}") from None
    except OSError as err:
        raise Refusal(f"{where}.src: cannot read {src}: {err.strerror}") from None
    if not record.exists:
        raise Refusal(f"{where}.src: {src} does not exist")
    return record


def missing_directories(paths: list[str]) -> list[str]:
    """The directories above PATHS that do not exist, outermost first; Refusal when something
    other than a directory stands where one is needed."""
    missing: list[str] = []
    for path in paths:
        chain = []
        directory = os.path.dirname(path)
        while not os.path.lexists(directory):
            chain.append(directory)
            directory = os.path.dirname(directory)
        if not os.path.isdir(directory):
            raise Refusal(f"{path}: {directory} is not a directory")
        missing.extend(d for d in reversed(chain) if d not in missing)
    return missing


def as_text(record: Record) -> str:
    if not record.exists:
        return ""
    if record.link is not None:
        return f"({record.describe()})\n"
    try:
        text = record.content.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\0" in text:
        return f"({record.describe()})\n"
    return text


def diff(changes: Plan, before: dict[str, Record]) -> list[dict]:
    entries = [
        {
            "before_header": w.path,
            "after_header": w.path,
            "before": as_text(before[w.path]),
            "after": as_text(w.record()),
        }
        for w in changes.write
    ]
    entries += [
        {
            "before_header": path,
            "after_header": f"{path} (removed)",
            "before": as_text(before[path]),
            "after": "",
        }
        for path in changes.remove
    ]
    return entries


def update_apt(argv, timeout: float, retries: int, retry_delay: float) -> AptRun:
    run = run_apt_update(argv, timeout)
    for _unused in range(max(0, retries)):
        if run.ok:
            break
        time.sleep(retry_delay)
        run = run_apt_update(argv, timeout)
    return run


def listed(paths) -> str:
    return ", ".join(paths) or "nothing"


def cause_of(run: AptRun) -> str:
    return " | ".join(run.errors) or f"exit {run.rc} without an error line"


class Transaction:
    """One run of the module over the host's files."""

    def __init__(self, params: dict, check_mode: bool, update_argv, retry_delay: float):
        self.params = params
        self.check_mode = check_mode
        self.update_argv = tuple(update_argv)
        self.retry_delay = retry_delay
        self.label = params["label"]
        self.result: dict = {
            "changed": False,
            "written": [],
            "created": [],
            "removed": [],
            "directories": [],
            "updated": False,
            "apt_errors": [],
            "rolled_back": False,
            "restored": [],
            "discarded": [],
            "unrestored": [],
            "apt_works_again": None,
            "apt_errors_after": [],
        }
        self.records: list[Record] = []
        self.made: list[str] = []  # directories this run created

    def refuse(self, reason: str) -> tuple[bool, dict]:
        return False, dict(
            self.result, msg=f"{self.label}: {reason}. Nothing on this host was changed."
        )

    def run(self) -> tuple[bool, dict]:
        params = self.params
        remove = list(params["remove"])
        try:
            if params["update_timeout"] < 1:
                raise Refusal(
                    f"update_timeout: {params['update_timeout']} is not a number of seconds above 0"
                )
            wanted = wanted_files(params["files"])
            for number, path in enumerate(remove):
                if not is_clean_path(path):
                    raise Refusal(f"remove[{number}]: {path!r} is not an absolute, normalised path")
            paths = [w.path for w in wanted] + remove
            twice = sorted({p for p in paths if paths.count(p) > 1})
            if twice:
                raise Refusal(f"{', '.join(twice)} named twice in files and remove")
            directories = missing_directories([w.path for w in wanted])
            # A link in remove is removed itself (and recorded, to be put back); in files, refused.
            self.records = [read_record(path) for path in paths[: len(wanted)]] + [
                read_record(path, links=True) for path in remove
            ]
        except Refusal as err:
            return self.refuse(str(err))
        except FileRefused as err:
            return self.refuse(
                f"{err}. Replace it with a regular file or remove it, then run again"
            )
        except OSError as err:
            return self.refuse(f"cannot read {err.filename}: {err.strerror}")
        before = {record.path: record for record in self.records}
        changes = plan(wanted, remove, before, directories)
        run_update = params["update"] == "always" or (
            params["update"] == "changed" and changes.changed
        )
        self.result.update(
            changed=changes.changed or run_update,
            written=[w.path for w in changes.write],
            created=list(changes.created),
            removed=list(changes.remove),
            directories=list(changes.directories),
        )
        if self.check_mode:
            self.result["diff"] = diff(changes, before)
            return True, self.result
        if not changes.changed and not run_update:
            return True, self.result
        return self.apply(changes, run_update)

    def apply(self, changes: Plan, run_update: bool) -> tuple[bool, dict]:
        step = "creating the directories"
        try:
            with interruptible():
                for directory in changes.directories:
                    step = f"creating {directory}"
                    os.mkdir(directory, 0o755)
                    self.made.append(directory)
                    os.chmod(directory, 0o755)
                    sync_directory(os.path.dirname(directory))
                for w in changes.write:
                    step = f"writing {w.path}"
                    write_file(w.path, w.content, w.mode, w.uid, w.gid)
                for path in changes.remove:
                    step = f"removing {path}"
                    remove_file(path)
                if not run_update:
                    return True, self.result
                step = "apt-get update"
                apt = update_apt(
                    self.update_argv,
                    self.params["update_timeout"],
                    self.params["update_retries"],
                    self.retry_delay,
                )
        except (Exception, KeyboardInterrupt, Interrupted) as err:
            return self.interrupted(step, err)
        self.result["apt_errors"] = apt.errors
        if apt.ok:
            self.result["updated"] = True
            return True, self.result
        if self.params["on_failure"] == "keep":
            return False, dict(
                self.result,
                msg=(
                    f"{self.label}: apt-get update failed with {self.params['change']}: "
                    f"{cause_of(apt)}. Kept as this run wrote them (on_failure: keep): "
                    f"{listed(w.path for w in changes.write)}; removed: {listed(changes.remove)}."
                    f"{self.hint()}"
                ),
            )
        self.roll_back()
        try:
            with interruptible():
                after = run_apt_update(self.update_argv, self.params["update_timeout"])
        except (Exception, KeyboardInterrupt, Interrupted) as err:
            after = AptRun(None, [f"E: the update after the rollback was interrupted: {err}"])
        self.result["apt_works_again"] = after.ok
        self.result["apt_errors_after"] = [] if after.ok else after.errors
        if after.ok:
            apt_now = "apt-get update works again with the previous configuration."
        else:
            apt_now = (
                f"apt-get update still fails (exit {after.rc}) with the previous configuration: "
                f"{cause_of(after)}. That is not this run's files: run `apt-get update` on the "
                "host and fix the source it names."
            )
        return False, dict(
            self.result,
            msg=(
                f"{self.label}: apt-get update failed with {self.params['change']}: "
                f"{cause_of(apt)}. {self.put_back()} {apt_now}{self.unrestored()}{self.hint()}"
            ),
        )

    def interrupted(self, step: str, err: BaseException) -> tuple[bool, dict]:
        """A write, a removal or apt-get update raised or was stopped: put everything back."""
        self.roll_back()
        what = "was interrupted" if isinstance(err, (Interrupted, KeyboardInterrupt)) else "failed"
        reason = (
            err.strerror
            if isinstance(err, OSError) and err.strerror
            else str(err) or type(err).__name__
        )
        apt_now = (
            "apt-get update was not run again: its lists may mention the new files until the next "
            "`apt-get update`."
            if step == "apt-get update"
            else "apt-get update had not run; apt's lists still match the previous configuration."
        )
        return False, dict(
            self.result,
            msg=(
                f"{self.label}: {step} {what}: {reason}. {self.put_back()} {apt_now}"
                f"{self.unrestored()} Run again once the cause is fixed."
            ),
        )

    def roll_back(self) -> None:
        with uninterrupted():
            back = restore(self.records)
            gone, stuck = remove_directories(self.made)
        self.result.update(
            rolled_back=True,
            restored=back.restored,
            discarded=back.removed + gone,
            unrestored=back.failed + stuck,
        )

    def put_back(self) -> str:
        return (
            f"Put back as they were: {listed(self.result['restored'])}; removed, as this run had "
            f"added them: {listed(self.result['discarded'])}."
        )

    def unrestored(self) -> str:
        if not self.result["unrestored"]:
            return ""
        stuck = "; ".join(f"{item['path']} ({item['error']})" for item in self.result["unrestored"])
        return (
            f" Could not be put back: {stuck}; their recorded state is in this task's result "
            "(unrestored, content in base64)."
        )

    def hint(self) -> str:
        return f" {self.params['hint']}" if self.params["hint"] else ""


ARGUMENT_SPEC = {
    "files": {
        "type": "list",
        "elements": "dict",
        "default": [],
        "options": {
            "path": {"type": "str", "required": True},
            "content": {"type": "str"},
            "content_base64": {"type": "str"},
            "src": {"type": "str"},
            "owner": {"type": "str", "default": "root"},
            "group": {"type": "str", "default": "root"},
            "mode": {"type": "raw", "default": "0644"},
        },
        "mutually_exclusive": [["content", "content_base64", "src"]],
        "required_one_of": [["content", "content_base64", "src"]],
    },
    "remove": {"type": "list", "elements": "str", "default": []},
    "update": {"type": "str", "choices": ["changed", "always", "never"], "default": "changed"},
    "update_retries": {"type": "int", "default": 1},
    "update_timeout": {"type": "int", "default": 600},
    "on_failure": {"type": "str", "choices": ["restore", "keep"], "default": "restore"},
    "label": {"type": "str", "default": "rocmlab_apt_files"},
    "change": {"type": "str", "default": "the new files"},
    "hint": {"type": "str", "default": ""},
}


def main(update_argv=APT_UPDATE, retry_delay: float = RETRY_DELAY) -> None:
    """Run the module; tests pass a script as UPDATE_ARGV in place of apt-get update."""
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    ok, result = Transaction(module.params, module.check_mode, update_argv, retry_delay).run()
    if not module._diff:
        result.pop("diff", None)
    if ok:
        module.exit_json(**result)
    module.fail_json(**result)


if __name__ == "__main__":
    main()
