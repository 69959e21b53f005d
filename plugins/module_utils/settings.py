# Copyright: rocmlab contributors
# Apache License 2.0
"""The checks of rocmlab's settings: pure functions over a value and its declaration.

Every role declares its settings once, in roles/<role>/meta/settings.yml: type, default and
description (what meta/argument_specs.yml is generated from) and, under ``check``, the kind of
value and its rule (pattern, choices, range, path rule, the message's "accepted" sentence).
The action plugin rocmlab_check_settings runs these checks on the controller, once per play,
for every host; the module rocmlab_settings runs the one check that needs the host itself (a
directory made root's: ``owner: root``).

Each problem is one sentence naming the variable, its value (JSON, so a newline shows as \n)
and what is accepted.
"""

from __future__ import annotations

import difflib
import json
import math
import optparse
import os
import posixpath
import pwd
import re
import stat

# What ends a line or hides text: C0 and C1 controls, DEL, NEL and the Unicode line and
# paragraph separators (str.splitlines() breaks on every one of them).
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
MAX_TEXT = 4096
PATH_COMPONENT = re.compile(r"[A-Za-z0-9._+-]+")
LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
HOST = re.compile(rf"{LABEL}(?:\.{LABEL})*|\[[0-9A-Fa-f:.]+\]")
URL = re.compile(
    r"(?P<scheme>[a-z][a-z0-9+.-]*)://"
    r"(?:(?P<userinfo>[A-Za-z0-9._~!$&'()*+,;=:%-]*)@)?"
    r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]*)"
    r"(?::(?P<port>[0-9]{1,5}))?"
    r"(?P<rest>[/?#][A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]*)?"
)
# Name kinds: the pattern, what a value that does not match is not, and what is accepted.
NAMES = {
    "account": (
        r"[a-z_][a-z0-9_-]{0,30}[$]?",
        "is not an account name",
        "Use lower-case letters, digits, '_' and '-', starting with a letter or '_', at most 32.",
    ),
    "group": (
        r"[a-z_][a-z0-9_-]{0,31}",
        "is not a group name",
        "Use lower-case letters, digits, '_' and '-', starting with a letter or '_', at most 32.",
    ),
    "package": (
        r"[a-z0-9][a-z0-9+.-]+",
        "is not a Debian package name",
        "Use lower-case letters, digits, '+', '-' and '.', starting with a letter or digit.",
    ),
    "dist": (
        r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?",
        "is not a Python distribution name",
        "Use letters, digits, '.', '_' and '-', as in tensorflow-rocm.",
    ),
}

# What no setting may name as a directory rocmlab creates or owns, or as a file it writes: the
# Filesystem Hierarchy Standard's directories and the system directories below them. Every
# parent of a listed directory is listed too, so "a system directory or its parent" is
# membership in this set.
SYSTEM_DIRS = frozenset(
    """
    / /bin /boot /dev /etc /home /lib /lib32 /lib64 /libx32 /media /mnt /opt /proc /root /run
    /sbin /snap /srv /sys /tmp /usr /var
    /usr/bin /usr/games /usr/include /usr/lib /usr/lib32 /usr/lib64 /usr/libexec /usr/libx32
    /usr/local /usr/local/bin /usr/local/etc /usr/local/include /usr/local/lib /usr/local/sbin
    /usr/local/share /usr/local/src /usr/sbin /usr/share /usr/share/keyrings /usr/src
    /var/backups /var/cache /var/lib /var/lib/apt /var/lib/dpkg /var/local /var/lock /var/log
    /var/mail /var/opt /var/run /var/spool /var/tmp
    /etc/apt /etc/apt/keyrings /etc/apt/preferences.d /etc/apt/sources.list.d
    /etc/apt/trusted.gpg.d /etc/default /etc/environment.d /etc/ld.so.conf.d /etc/profile.d
    /etc/security /etc/ssh /etc/sudoers.d /etc/systemd /etc/udev
    """.split()  # noqa: SIM905 (a table to read, not a list literal)
)
# Pseudo file systems and the boot partition: rocmlab writes nothing below them.
NO_WRITE_UNDER = ("/proc", "/sys", "/dev", "/boot")

# pip install's options. pip's ConfigOptionParser is an optparse parser: a long option may be
# abbreviated to any unique prefix, and a short option takes its value attached. Copied from
# pip's own parser (pip 23.2.1: pip._internal.commands.create_command("install").parser);
# tests/python/test_rocmlab_settings.py checks it against the pip that is installed. Each
# entry: the option's strings, and whether it takes a value.
PIP_INSTALL_OPTIONS = (
    (("-r", "--requirement"), True),
    (("-c", "--constraint"), True),
    (("--no-deps", "--no-dependencies"), False),
    (("--pre",), False),
    (("-e", "--editable"), True),
    (("--dry-run",), False),
    (("-t", "--target"), True),
    (("--platform",), True),
    (("--python-version",), True),
    (("--implementation",), True),
    (("--abi",), True),
    (("--user",), False),
    (("--no-user",), False),
    (("--root",), True),
    (("--prefix",), True),
    (("--src", "--source", "--source-dir", "--source-directory"), True),
    (("-U", "--upgrade"), False),
    (("--upgrade-strategy",), True),
    (("--force-reinstall",), False),
    (("-I", "--ignore-installed"), False),
    (("--ignore-requires-python",), False),
    (("--no-build-isolation",), False),
    (("--use-pep517",), False),
    (("--no-use-pep517",), False),
    (("--check-build-dependencies",), False),
    (("--break-system-packages",), False),
    (("-C", "--config-settings"), True),
    (("--global-option",), True),
    (("--compile",), False),
    (("--no-compile",), False),
    (("--no-warn-script-location",), False),
    (("--no-warn-conflicts",), False),
    (("--no-binary",), True),
    (("--only-binary",), True),
    (("--prefer-binary",), False),
    (("--require-hashes",), False),
    (("--progress-bar",), True),
    (("--root-user-action",), True),
    (("--report",), True),
    (("--no-clean",), False),
    (("-i", "--index-url", "--pypi-url"), True),
    (("--extra-index-url",), True),
    (("--no-index",), False),
    (("-f", "--find-links"), True),
    (("-h", "--help"), False),
    (("--debug",), False),
    (("--isolated",), False),
    (("--require-virtualenv", "--require-venv"), False),
    (("--python",), True),
    (("-v", "--verbose"), False),
    (("-V", "--version"), False),
    (("-q", "--quiet"), False),
    (("--log", "--log-file", "--local-log"), True),
    (("--no-input",), False),
    (("--keyring-provider",), True),
    (("--proxy",), True),
    (("--retries",), True),
    (("--timeout", "--default-timeout"), True),
    (("--exists-action",), True),
    (("--trusted-host",), True),
    (("--cert",), True),
    (("--client-cert",), True),
    (("--cache-dir",), True),
    (("--no-cache-dir",), False),
    (("--disable-pip-version-check",), False),
    (("--no-color",), False),
    (("--no-python-version-warning",), False),
    (("--use-feature",), True),
    (("--use-deprecated",), True),
)
# What a lab may add: how pip reaches the network (proxy, TLS, timeouts), its cache and its
# output. Every other option changes what is installed, from where, or where to: an extra
# index could pull a CUDA build of torch, --target/--prefix/--root write outside the venv.
PIP_ALLOWED = frozenset(
    """
    --proxy --trusted-host --cert --client-cert --timeout --retries --keyring-provider
    --use-feature --cache-dir --no-cache-dir --prefer-binary --progress-bar --verbose --quiet
    --no-color --no-input --disable-pip-version-check --no-python-version-warning
    """.split()  # noqa: SIM905 (a table to read, not a list literal)
)


def shown(value):
    """The value as JSON (a newline shows as \\n), credentials in URLs masked."""
    return re.sub(r"://[^/@\s\"]*@", "://***@", json.dumps(value))


def type_name(value):
    """The YAML name of a value's type, for messages."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, (list, tuple)):
        return "list"
    return "null" if value is None else type(value).__name__


def text_problem(value):
    """Why VALUE is not one line of text, or None."""
    if not isinstance(value, str):
        return f"is a {type_name(value)}, not a string"
    match = CONTROL.search(value)
    if match:
        return f"contains the control character {json.dumps(match.group())}; it must be one line"
    if len(value) > MAX_TEXT:
        return f"is {len(value)} characters long; at most {MAX_TEXT} are accepted"
    return None


def path_problem(value, spec, kind):
    """Why VALUE is not an acceptable path of this kind, or None."""
    if not value.startswith("/"):
        return "is not an absolute path"
    components = value.split("/")[1:]
    if value != "/" and (
        posixpath.normpath(value) != value
        or value.startswith("//")
        or any(c in (".", "..") or not PATH_COMPONENT.fullmatch(c) for c in components)
    ):
        return (
            "is not a normalised absolute path of letters, digits and '._+-' (no '..', '.', "
            "'//', trailing '/', spaces or shell characters)"
        )
    if kind in ("dir", "file"):
        if value in SYSTEM_DIRS:
            return "is a system directory or the parent of one, which rocmlab would take over"
        for top in NO_WRITE_UNDER:
            if value.startswith(top + "/"):
                return f"lies under {top}, where rocmlab writes nothing"
    under = spec.get("under") or []
    if under and not any(value.startswith(parent.rstrip("/") + "/") for parent in under):
        return f"must lie in {' or '.join(under)}"
    suffix = spec.get("suffix")
    if suffix and not value.endswith(suffix):
        return f"must end in {suffix}"
    return None


def controller_dir_problem(value, spec):
    """Why VALUE is not an acceptable directory on the controller, or None: checked as a
    directory rocmlab creates, once '..' and '.' are resolved."""
    if not value.startswith("/"):
        return (
            "is not an absolute path (a directory on the controller, for example "
            "{{ playbook_dir }}/../reports)"
        )
    normal = "/" + posixpath.normpath(value).lstrip("/")
    why = path_problem(normal, spec, "dir")
    if why and normal != value:
        return f"(resolved: {normal}) {why}"
    return why


def owner_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def ownership_problem(value):
    """Why VALUE, a path rocmlab makes root's on this host, belongs to another account or a
    service here, or None. Read-only (lstat and the account database)."""
    try:
        info = os.lstat(value)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        return f"cannot be looked at on this host ({exc.strerror})"
    if info is not None and stat.S_ISLNK(info.st_mode):
        return (
            f"is a symbolic link (to {os.readlink(value)}) on this host, not a directory of root's"
        )
    if info is not None and info.st_uid != 0:
        return f"belongs to {owner_name(info.st_uid)} on this host, not to root"
    real = os.path.realpath(value)
    for path in dict.fromkeys([value, real]):
        for entry in pwd.getpwall():
            home = entry.pw_dir.rstrip("/")
            if entry.pw_uid != 0 and home and (path == home or path.startswith(home + "/")):
                return (
                    f"is {'' if path == home else 'in '}the home directory of {entry.pw_name} "
                    f"({entry.pw_dir}) on this host"
                )
    return parents_problem(real)


def parents_problem(real):
    """Why a directory above REAL (a resolved path) lets another account replace it, or None."""
    current = "/"
    for part in real.strip("/").split("/"):
        child = posixpath.join(current, part)
        try:
            above = os.lstat(current)
            below = os.lstat(child)
        except FileNotFoundError:
            below = None
        except OSError as exc:
            return f"cannot be looked at on this host ({exc.strerror})"
        if above.st_uid != 0:
            return f"lies in {current}, which belongs to {owner_name(above.st_uid)} on this host"
        shared = above.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        sticky_kept = above.st_mode & stat.S_ISVTX and below is not None and below.st_uid == 0
        if shared and not sticky_kept:
            return (
                f"lies in {current} (mode {stat.filemode(above.st_mode)}), which other accounts "
                "can write to on this host"
            )
        if below is None:
            return None
        current = child
    return None


OWNER_ACCEPTED = (
    "rocmlab makes it root's (root:root 0755): name a directory that root owns or that does not "
    "exist yet, in directories only root can write to, outside every account's home directory "
    "and every service's directory."
)


def credentials_problem(match, spec):
    """Why a URL with user:password@ is refused here, or None."""
    if match.group("userinfo") is None or spec.get("credentials") == "masked":
        return None
    where = spec.get("published") or "files and logs that other accounts or hosts read"
    return (
        "carries credentials (user:password@ before the host), which rocmlab would publish in "
        f"{where}"
    )


CREDENTIALS_ACCEPTED = (
    "Use a URL without user:password@: a mirror that needs no login (for example one inside the "
    "lab), or keep the login where the tool that fetches reads it itself, outside rocmlab's "
    "settings."
)


URL_PARTS_ACCEPTED = (
    "Use scheme://host[:port][/path][?query]: no ';' parameters (';proxy=' and the like, which "
    "clients read as options) and no '#' fragment."
)


def url_problem(value, spec):
    """Why VALUE is not an acceptable URL, or None."""
    schemes = spec.get("schemes") or ["https", "http"]
    match = URL.fullmatch(value)
    if not match or match.group("scheme") not in schemes:
        web = {"https", "http"} <= set(schemes)
        names = (["http(s)"] if web else []) + [
            s for s in schemes if not web or s not in ("https", "http")
        ]
        return f"is not an {' or '.join(n if n == 'http(s)' else n + '://' for n in names)} URL"
    host, rest = match.group("host"), match.group("rest") or ""
    marks = ((";", "parameters (;)"), ("#", "a fragment (#)"))
    parts = [what for mark, what in marks if mark in rest]
    if parts:
        return f"carries {' and '.join(parts)}"
    if match.group("scheme") == "file":
        if host or match.group("userinfo") is not None or not rest.startswith("/"):
            return "is not a file:///absolute/path URL"
        return None
    if not host or not HOST.fullmatch(host):
        return "has no valid host name"
    if match.group("port") and not 0 < int(match.group("port")) < 65536:
        return "has an invalid port"
    return credentials_problem(match, spec)


class PipArgsError(Exception):
    """What pip would refuse in the arguments: an unknown or ambiguous option, a missing value."""


def parse_pip_args(args):
    """The options pip would read in ARGS, each by its canonical long name, in table order.

    Parsed by optparse with pip install's options, as pip parses them. Raises PipArgsError for
    what pip itself refuses and for positional arguments (requirements are not options).
    """
    parser = optparse.OptionParser(add_help_option=False, usage="")
    for strings, takes_value in PIP_INSTALL_OPTIONS:
        parser.add_option(*strings, action="append" if takes_value else "count", dest=strings[-1])

    def refuse(message):
        raise PipArgsError(message)

    parser.error = refuse
    options, positional = parser.parse_args(list(args))
    if positional:
        raise PipArgsError(f"{json.dumps(positional[0])} is not an option (a requirement)")
    return [
        next(s for s in strings if s.startswith("--"))
        for strings, _unused in PIP_INSTALL_OPTIONS
        if getattr(options, strings[-1]) not in (None, 0)
    ]


def pip_args_problem(value, spec):
    """Why VALUE is not an acceptable list of extra pip options, or None."""
    accepted = f"Accepted: {', '.join(sorted(PIP_ALLOWED))}."
    try:
        used = parse_pip_args(value)
    except PipArgsError as exc:
        return f"is refused: pip would read it so: {exc}. {accepted}"
    refused = [option for option in used if option not in PIP_ALLOWED]
    if refused:
        return (
            f"is refused (found: {', '.join(refused)}, as pip reads the options). The role "
            "chooses the index, the wheelhouse and the install location itself ("
            + spec.get("instead", "see its variables")
            + f"): an extra index could pull a CUDA build. {accepted}"
        )
    return None


def problems_of(spec):
    """Every problem of one setting, each a sentence naming it, its value and what is accepted."""
    name, value, kind = spec["name"], spec.get("value"), spec.get("kind", "text")
    if spec.get("empty_ok") and value in ("", None, [], {}):
        return []
    example = f" (for example {spec['example']})" if spec.get("example") else ""

    def bad(why, accepted=""):
        why = why.rstrip(".")
        return [f"{name}: {shown(value)} {why}{example}.{' ' + accepted if accepted else ''}"]

    if kind == "list":
        if not isinstance(value, list):
            return bad(f"is a {type_name(value)}, not a list", "Write a YAML list, one item each.")
        element = spec.get("element") or {"kind": "text"}
        # An element's refusal says what is accepted: the list's example where it has none.
        inherited = {"example": spec["example"]} if spec.get("example") else {}
        return [
            problem
            for index, item in enumerate(value)
            for problem in problems_of(
                dict(inherited, **element, name=f"{name}[{index}]", value=item)
            )
        ]
    if kind == "pip_args":
        if not isinstance(value, list):
            return bad(
                f"is a {type_name(value)}, not a list of strings",
                'Write one option per item, as in ["--proxy", "http://proxy.lab:3128"].',
            )
        for index, item in enumerate(value):
            why = text_problem(item)
            if why:
                return [f"{name}[{index}]: {shown(item)} {why}."]
        why = pip_args_problem(value, spec)
        return bad(why) if why else []
    if kind == "cli_args":
        return cli_args_problems(name, value, spec, bad)
    if kind == "dict":
        return dict_problems(name, value, spec)
    if kind == "bool":
        return (
            [] if isinstance(value, bool) else bad(f"is a {type_name(value)}", "Use true or false.")
        )
    if kind == "int":
        return int_problems(value, spec, bad)
    if kind == "number":
        return number_problems(value, spec, bad)
    if kind == "batches":
        return batches_problems(name, value)
    if kind == "choice":
        choices = spec["choices"]
        return (
            []
            if value in choices
            else bad("is not accepted", f"Use one of {', '.join(map(str, choices))}.")
        )
    why = text_problem(value)
    if why:
        return bad(why)
    if kind == "text":
        return []
    if kind in NAMES or kind == "pattern":
        pattern, what, accepted = NAMES.get(kind) or (
            spec["pattern"],
            "is not accepted",
            spec.get("accepted", ""),
        )
        return [] if re.fullmatch(pattern, value) else bad(what, accepted)
    if kind in ("path", "dir", "file"):
        why = path_problem(value, spec, kind)
        if why:
            return bad(why)
        if kind in ("dir", "file") and spec.get("owner") == "root":
            why = ownership_problem(value)
            return bad(why, OWNER_ACCEPTED) if why else []
        return []
    if kind == "controller_dir":
        why = controller_dir_problem(value, spec)
        return bad(why) if why else []
    if kind == "url":
        why = url_problem(value, spec)
        if why and why.startswith("carries credentials"):
            return bad(why, CREDENTIALS_ACCEPTED)
        if why and why.startswith("carries "):
            return bad(why, URL_PARTS_ACCEPTED)
        return bad(why) if why else []
    raise ValueError(f"{name}: unknown kind {kind!r}")


def cli_args_problems(name, value, spec, bad):
    """Problems of a list of command-line arguments for an argparse program.

    argparse accepts any unique prefix of a long option, so an argument that is a prefix of one
    of spec['reserved'] (options the role sets itself) is refused, with or without =value.
    """
    if not isinstance(value, list):
        return bad(
            f"is a {type_name(value)}, not a list",
            'Write one argument per item, as in ["--epochs", "1"].',
        )
    reserved = spec.get("reserved") or []
    for index, item in enumerate(value):
        why = text_problem(item)
        if why:
            return [f"{name}[{index}]: {shown(item)} {why}."]
        option = item.split("=", 1)[0]
        clash = [
            r
            for r in reserved
            if len(option) > 2 and option.startswith("--") and r.startswith(option)
        ]
        if clash:
            return [
                f"{name}[{index}]: {shown(item)} is (or abbreviates) {', '.join(clash)}, which "
                f"the role sets itself ({spec.get('instead', 'see its variables')})."
            ]
    return []


def int_problems(value, spec, bad):
    """Problems of a whole number within [min, max]."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return bad(f"is a {type_name(value)}, not a whole number")
    if isinstance(value, str) and not re.fullmatch(r"-?[0-9]+", value):
        return bad("is not a whole number")
    low, high = spec.get("min"), spec.get("max")
    if (low is not None and int(value) < low) or (high is not None and int(value) > high):
        return bad("is out of range", spec.get("accepted", f"Use {low} to {high}."))
    return []


NUMBER = re.compile(r"-?[0-9]+([.][0-9]+)?")


def number_problems(value, spec, bad):
    """Problems of a number (whole or decimal, not NaN or infinite) within its bounds: min and
    max inclusive, above exclusive."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return bad(f"is a {type_name(value)}, not a number")
    if isinstance(value, str) and not NUMBER.fullmatch(value):
        return bad("is not a number")
    number = float(value)
    if not math.isfinite(number):
        return bad("is not a finite number")
    low, above, high = spec.get("min"), spec.get("above"), spec.get("max")
    if (
        (low is not None and number < low)
        or (above is not None and number <= above)
        or (high is not None and number > high)
    ):
        lower = f"above {above}" if above is not None else f"from {low}" if low is not None else ""
        upper = f"up to {high}" if high is not None else ""
        return bad("is out of range", spec.get("accepted", f"Use a number {lower} {upper}."))
    return []


# One batch of Ansible's serial: a number of hosts (1 or more) or a share of the play's hosts
# ("25%"; Ansible reads the percentage as a whole number).
BATCH_ACCEPTED = (
    'Use a number of hosts from 1, a percentage from 1% to 100% written as a string ("25%"), '
    'or a list of them, as in [1, "25%"] (a canary of one host, then a quarter of the hosts at '
    "a time)."
)


def batch_problem(value):
    """Why VALUE is not one batch size of Ansible's serial, or None."""
    if isinstance(value, float):
        return "is not a whole number of hosts"
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return f"is a {type_name(value)}, not a number of hosts or a percentage"
    if isinstance(value, str) and text_problem(value):
        return text_problem(value)
    text = str(value)
    percent = text.endswith("%")
    digits = text[:-1] if percent else text
    if not re.fullmatch(r"-?[0-9]+", digits):
        return "is not a whole number of hosts or a whole percentage"
    size = int(digits)
    if size <= 0:
        size_text = f"{size}% of the hosts" if percent else f"{size} hosts"
        return f"is a batch of {size_text}: no host would ever be provisioned"
    if percent and size > 100:
        return f"is over 100% (a batch of {size}% of the hosts)"
    return None


def batches_problems(name, value):
    """Problems of Ansible's serial: one batch size or a non-empty list of them."""
    if isinstance(value, list):
        if not value:
            return [f"{name}: [] is an empty list of batches. {BATCH_ACCEPTED}"]
        return [
            f"{name}[{index}]: {shown(item)} {why}. {BATCH_ACCEPTED}"
            for index, item in enumerate(value)
            for why in [batch_problem(item)]
            if why
        ]
    why = batch_problem(value)
    return [f"{name}: {shown(value)} {why}. {BATCH_ACCEPTED}"] if why else []


def dict_problems(name, value, spec):
    """Problems of a mapping: its keys against spec['keys'], its items against spec['fields']."""
    if not isinstance(value, dict):
        return [f"{name}: {shown(value)} is a {type_name(value)}, not a mapping."]
    problems = []
    fields = spec.get("fields")
    for key, item in value.items():
        where = f"{name}.{key}"
        problems += problems_of(
            dict(spec.get("keys") or {"kind": "text"}, name=f"{name} key", value=key)
        )
        if fields is None:
            problems += problems_of(
                dict(spec.get("items") or {"kind": "text"}, name=where, value=item)
            )
            continue
        if not isinstance(item, dict):
            problems.append(
                f"{where}: {shown(item)} is a {type_name(item)}, not a mapping of "
                f"{', '.join(sorted(fields))}."
            )
            continue
        for field, field_value in item.items():
            if field in fields:
                problems += problems_of(
                    dict(fields[field], name=f"{where}.{field}", value=field_value)
                )
            else:
                problems.append(
                    f"{where}: {shown(field)} is not a field; known: {', '.join(sorted(fields))}."
                )
    return problems


# --- Declarations (roles/<role>/meta/settings.yml) -------------------------------------------


def declared_options(declaration):
    """Every option of every entry point of a role's declaration (main's first), by name."""
    entries = (declaration or {}).get("argument_specs") or {}
    options = {}
    for entry in sorted(entries, key=lambda name: name != "main"):
        for name, option in ((entries[entry] or {}).get("options") or {}).items():
            options.setdefault(name, option)
    return options


def check_spec(name, check, value):
    """One declared check (a setting's ``check`` in meta/settings.yml) as problems_of() takes
    it. ``string: true`` checks the value as text, as Jinja's string filter makes it (a version
    written 6.4 in YAML is the text 6.4)."""
    spec = dict(check)
    if spec.pop("string", False) and value is not None and not isinstance(value, str):
        value = str(value)
    spec.update(name=name, value=value)
    return spec


def declaration_problems(declaration, values):
    """The problems of VALUES ({name: value} of one host, resolved) against a role's
    declaration: every option that declares a check and has a value. ``checked_when`` (the
    name of a boolean setting) turns the whole role's checks off while it is false."""
    gate = (declaration or {}).get("checked_when")
    if gate and not truthy(values.get(gate)):
        return []
    problems = []
    for name, option in declared_options(declaration).items():
        if name not in values:
            continue
        if "check" in option:
            problems += problems_of(check_spec(name, option["check"], values[name]))
    return problems


def declared_names(declarations):
    """The settings of DECLARATIONS ({role: its meta/settings.yml}), and every name they declare:
    the settings, the facts the roles publish (``publishes``) and the retired names."""
    settings, known = set(), set()
    for declaration in declarations.values():
        settings |= set(declared_options(declaration))
        known |= set((declaration or {}).get("publishes") or [])
        known |= set((declaration or {}).get("retired") or {})
    return settings, known | settings


def retired_problems(retired, names):
    """A problem for each setting of RETIRED ({name: what to set instead}, a declaration's
    ``retired``) that NAMES (the variables a host has) still sets: the roles no longer read it,
    and its value would otherwise be ignored without a word."""
    return [
        f"{name} is no longer read: {(retired or {})[name]}"
        for name in sorted(retired or {})
        if name in names
    ]


# How close the rest of a name (after its role's prefix) must be to a setting's to be offered as
# "did you mean" (difflib's ratio). The prefix is left out: shared by all of a role's settings,
# it would make unrelated names look close (rocm_repo_site_owner and rocm_repo_suite).
CLOSE_ENOUGH = 0.75
ALLOW_UNKNOWN = "rocmlab_settings_allow_unknown"


def unknown_problems(places, roles, known, settings, allowed=()):
    """A problem for each variable of PLACES ({name: [where it was set, ...]}: the inventory, the
    play, the extra vars) whose name starts with a role's prefix (ROLES: the roles' names, each
    followed by "_") and that is none of KNOWN (the roles' settings, the facts they publish, the
    retired names) and not one of ALLOWED (the site's own, rocmlab_settings_allow_unknown): no
    role reads it, so a typo would leave the default in place without a word. Each names the
    closest of SETTINGS with the same prefix (difflib, on the rest of the names), when one is
    close enough."""
    prefixes = sorted((f"{role}_" for role in roles), key=len, reverse=True)
    problems = []
    for name in sorted(places):
        prefix = next((p for p in prefixes if name.startswith(p)), None)
        if prefix is None or name in known or name in allowed:
            continue
        close = difflib.get_close_matches(
            name[len(prefix) :],
            sorted(s[len(prefix) :] for s in settings if s.startswith(prefix)),
            n=1,
            cutoff=CLOSE_ENOUGH,
        )
        hint = (
            f"Did you mean {prefix}{close[0]}?"
            if close
            else f"Role {prefix[:-1]}'s settings are listed in its README."
        )
        shown_name = name if re.fullmatch(r"[A-Za-z0-9_]+", name) else json.dumps(name)
        problems.append(
            f"{shown_name}, set in {' and in '.join(places[name])}, is not a setting of any "
            f"rocmlab role, so nothing would read it. {hint} A variable of the site's own whose "
            f"name starts with {prefix} is accepted once listed in {ALLOW_UNKNOWN}."
        )
    return problems


def truthy(value):
    """Ansible's bool filter: true, yes, on, 1 (any case) and True are true."""
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on", "y", "t")
