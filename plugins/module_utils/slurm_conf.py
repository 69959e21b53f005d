# Copyright: rocmlab contributors
# Apache License 2.0
"""Role slurm_health's Slurm files, decided by pure functions (filter slurm_gres_plan):

gres_conf(gpus, visible, rsmi, node) -> gres.conf's text: ``AutoDetect=rsmi`` where Debian's
    slurm-wlm-rsmi-plugin is installed, else one ``Name=gpu File=/dev/dri/renderD<minor>`` line
    per GPU ROCm is to use (gfx_detect's gpus and visible, the minor from the KFD topology).
node_gres(slurm_conf, node) -> what slurm.conf says of the node: whether it is defined, its
    Gres=gpu count, and whether GresTypes lists gpu. slurm.conf is the lab's (hostile input):
    at most 1 MiB as read, each line split once, and its NodeName= host lists (``gpu[01-04,07]``)
    asked whether they hold the node, never expanded.
gres_plan(...) -> both, and the problems: the GPU count of slurm.conf against gres.conf's.
"""

from __future__ import annotations

import re

CONF_LIMIT = 1024 * 1024
HEADER = (
    "# Written by rocmlab (role slurm_health); a change made here is overwritten by its next run.\n"
)
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_RANGE = re.compile(r"^(?P<prefix>[^\[\]]*)\[(?P<ranges>[0-9,\-]+)\](?P<suffix>[^\[\]]*)$")
_BOUND = re.compile(r"[0-9]{1,18}")
_GPU = re.compile(r"^gpu(?::[A-Za-z0-9_.-]+)?:(?P<count>\d+)(?:\([^)]*\))?$")
# Host lists naming more than this are unreadable (a lab's nodes; a typo like gpu[1-99999999]).
MAX_HOSTS = 65536


class SlurmConfError(ValueError):
    """A value the role cannot write into Slurm's files."""


def _spans(expression: str) -> list[tuple[str, int, int, int, str]] | None:
    """Slurm's host list (``a,b[1-3,05],c``) as spans (prefix, width, first, last, suffix), a
    plain name being (name, 0, 0, -1, ""); None when it cannot be read or names more than
    MAX_HOSTS. Nothing is expanded: the cost follows the text, not the ranges."""
    depth, start, parts = 0, 0, []
    for i, char in enumerate(expression):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(expression[start:i])
            start = i + 1
    parts.append(expression[start:])
    spans, count = [], 0
    for part in parts:
        match = _RANGE.match(part)
        if not match:
            spans.append((part, 0, 0, -1, ""))
            count += 1
            continue
        for item in match["ranges"].split(","):
            low, _dash, high = item.partition("-")
            if not _BOUND.fullmatch(low) or (high and not _BOUND.fullmatch(high)):
                return None
            first, last = int(low), int(high or low)
            count += last - first + 1
            if last < first or count > MAX_HOSTS:
                return None
            spans.append((match["prefix"], len(low), first, last, match["suffix"]))
    return spans


def hostlist(expression: str) -> list[str]:
    """Slurm's host list as names; [] when it cannot be read. Expands every range: for a list
    the caller needs whole (in_hostlist asks whether it holds a name)."""
    names: list[str] = []
    for prefix, width, first, last, suffix in _spans(expression) or []:
        if last < 0:
            names.append(prefix)
        else:
            names += [f"{prefix}{n:0{width}d}{suffix}" for n in range(first, last + 1)]
    return names


def in_hostlist(name: str, expression: str) -> bool:
    """Whether Slurm's host list names NAME, as hostlist(expression) would, without expanding
    it: each range is compared as numbers."""
    for prefix, width, first, last, suffix in _spans(expression) or []:
        if last < 0:
            if name == prefix:
                return True
            continue
        digits = name[len(prefix) : len(name) - len(suffix)]
        if (
            len(name) > len(prefix) + len(suffix)
            and name.startswith(prefix)
            and name.endswith(suffix)
            and _BOUND.fullmatch(digits)
            and first <= int(digits) <= last
            and f"{int(digits):0{width}d}" == digits
        ):
            return True
    return False


def _pairs(line: str) -> list[tuple[str, str]]:
    """The KEY=VALUE words of a line, keys lower-cased (split, not a regular expression: a line
    of a megabyte costs a pass over it)."""
    pairs = []
    for word in line.split():
        key, equals, value = word.partition("=")
        if equals and key:
            pairs.append((key.lower(), value))
    return pairs


def conf_bytes(slurm_conf: str) -> int:
    """The size of slurm.conf as read (its text as Ansible decoded it, back to bytes)."""
    return len(slurm_conf.encode("utf-8", "surrogateescape"))


def node_gres(slurm_conf: str, node: str) -> dict:
    """What slurm.conf says of ``node``: {defined, gpus (None when no Gres=gpu), gres_types}.

    SlurmConfError when the text read is over CONF_LIMIT bytes (whatever the host said its size
    was)."""
    size = conf_bytes(slurm_conf)
    if size > CONF_LIMIT:
        raise SlurmConfError(
            f"slurm.conf as read is {size} bytes, over the {CONF_LIMIT} (1 MiB) rocmlab reads of "
            "a lab's slurm.conf: move node and partition lines into Include files (not read)"
        )
    defaults: dict[str, str] = {}
    found = {"defined": False, "gpus": None, "gres_types": False, "includes": False}
    for raw in slurm_conf.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        pairs = _pairs(line)
        if not pairs:
            if line.lower().startswith("include"):
                found["includes"] = True
            continue
        key, value = pairs[0]
        if key == "grestypes":
            found["gres_types"] = "gpu" in value.lower().split(",")
        if key != "nodename":
            continue
        fields = dict(pairs[1:])
        if value.lower() == "default":
            defaults.update(fields)
            continue
        if not in_hostlist(node, value):
            continue
        merged = {**defaults, **fields}
        found["defined"] = True
        found["gpus"] = None
        for gres in merged.get("gres", "").split(","):
            match = _GPU.match(gres.strip())
            if match:
                found["gpus"] = (found["gpus"] or 0) + int(match["count"])
    return found


def gres_conf(gpus: list, visible: list, rsmi: bool, node: str) -> tuple[str, int]:
    """gres.conf's text for ``node`` and the number of GPUs it declares."""
    if not _NODE.fullmatch(str(node)):
        raise SlurmConfError(f"node name {node!r} is not a Slurm NodeName")
    used = [g for g in gpus if isinstance(g, dict) and g.get("pci_address") in set(visible)]
    if rsmi:
        return (
            HEADER + "# slurm-wlm-rsmi-plugin is installed: slurmd finds the AMD GPUs itself.\n"
            "AutoDetect=rsmi\n",
            len(used),
        )
    lines = []
    for gpu in used:
        minor = gpu.get("render_minor")
        if not isinstance(minor, int) or isinstance(minor, bool) or not 128 <= minor <= 255:
            raise SlurmConfError(
                f"GPU {gpu.get('pci_address')} ({gpu.get('gfx_target') or 'unknown'}) has no "
                f"render node in the KFD topology (drm_render_minor {minor!r}): gres.conf needs "
                "its /dev/dri/renderD<N>. Load amdgpu (rocmlab doctor), or install "
                "slurm-wlm-rsmi-plugin for AutoDetect=rsmi"
            )
        lines.append(
            f"NodeName={node} Name=gpu File=/dev/dri/renderD{minor}"
            f"  # {gpu.get('pci_address')} {gpu.get('gfx_target') or ''}".rstrip()
        )
    body = "\n".join(lines) + "\n" if lines else "# No GPU that ROCm is to use was found.\n"
    return HEADER + body, len(used)


def gres_plan(gpus: list, visible: list, rsmi: bool, node: str, slurm_conf: str) -> dict:
    """gres.conf's text, its GPU count, what slurm.conf says, and the problems (each a full
    sentence: what is wrong and what to do)."""
    text, count = gres_conf(gpus, visible, rsmi, node)
    conf = node_gres(slurm_conf, node)
    problems, notes = [], []
    if not conf["defined"]:
        where = " (its Include files are not read)" if conf["includes"] else ""
        notes.append(
            f"slurm.conf{where} defines no NodeName line for {node}: its Gres=gpu:{count} was "
            "not checked"
        )
    elif (conf["gpus"] or 0) != count:
        said = f"Gres=gpu:{conf['gpus']}" if conf["gpus"] is not None else "no Gres=gpu"
        problems.append(
            f"slurm.conf says {said} for {node}, but the node has {count} GPU(s) for gres.conf: "
            f"set Gres=gpu:{count} on its NodeName line (slurmd refuses a node with fewer GPUs "
            "than slurm.conf declares and drains it)"
        )
    if count and conf["defined"] and not conf["gres_types"]:
        problems.append("slurm.conf has no GresTypes=gpu: add it, or Slurm ignores gres.conf")
    return {"text": text, "count": count, "problems": problems, "notes": notes, "slurm_conf": conf}
