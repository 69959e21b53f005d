"""The Slurm health gate (``rocmlab health --slurm-gate``): what a health verdict does to the
node's state in Slurm. Pure functions over the ``--json`` document and what ``scontrol show
node -o NAME`` printed; :func:`gate` runs the two ``scontrol`` commands through a runner.

The rules (docs/health.md, "Under Slurm"):

- a verdict of FAIL drains the node with ``Reason="rocmlab: <check>: <short fix>"`` (the first
  failed check; at most REASON_MAX characters: Slurm's listings cut long reasons, the host's
  report keeps the whole verdict), unless it is out of service already for another reason
  (DOWN, FAIL, or drained by an operator): that state and its reason are left as they are;
- a verdict of PASS or WARN (an ERROR warns) resumes ONLY a node drained with a reason
  rocmlab wrote (it starts with ``rocmlab:``), and only when this run's tier covers the check
  the reason names (a tier-2 check drained it: tier 0 does not resume it; a reason naming no
  check, such as the maintenance helper's, needs tier 2); an operator's drain, a reservation
  and a DOWN node stay as they are;
- nothing is done when the node is already as it should be.

What ``scontrol`` prints is hostile input: at most OUTPUT_LIMIT characters are looked at, the
node must be the one asked for, its state words must be Slurm's, and nothing of it is executed
or passed on but the reason rocmlab compares with its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

PREFIX = "rocmlab:"
# Slurm keeps longer reasons, but sinfo -R and most listings cut them: the check and the start
# of its fix must fit. The full verdict is in the host's report.
REASON_MAX = 80
OUTPUT_LIMIT = 64 * 1024
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
CHECK_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
# Slurm 22.05's node states (slurm.h, node_state_string): a base state and flags joined by "+",
# "*" when the node does not respond, "~" "#" "!" "%" "$" "@" "^" "-" as sinfo's short forms add.
BASE_STATES = frozenset(
    {"UNKNOWN", "DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE", "INVAL"}
)
FLAGS = frozenset(
    {
        "DRAIN", "COMPLETING", "NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN",
        "POWERING_UP", "POWER_DOWN", "POWER_UP", "MAINTENANCE", "RESERVED", "REBOOT_REQUESTED",
        "REBOOT_ISSUED", "FAIL", "CLOUD", "PLANNED", "DYNAMIC_FUTURE", "DYNAMIC_NORM",
        "INVALID_REG", "RES", "MAINT", "DRAINED", "DRAINING", "RESUME", "UNDRAIN",
    }
)  # fmt: skip
# In `scontrol show node -o`: " Reason=TEXT [USER@YYYY-MM-DDTHH:MM:SS]" (the user and the time
# Slurm adds), possibly followed by more fields.
_REASON_END = re.compile(r"\s\[[^\]\s@]{1,64}@\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\]")
_ALLOWED = re.compile(r"[^A-Za-z0-9 _.,:;/()'+@%#<>|-]")

DRAIN = "drain"
RESUME = "resume"
NONE = "none"


class SlurmGateError(Exception):
    """The node's state could not be read or changed: nothing was done (or the change failed)."""


@dataclass(frozen=True)
class Node:
    """A node as ``scontrol show node -o`` describes it."""

    name: str
    base: str  # IDLE, ALLOCATED, MIXED, DOWN, ...
    flags: frozenset[str]
    reason: str  # "" when none

    @property
    def state(self) -> str:
        return "+".join([self.base, *sorted(self.flags)])

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def ours(self) -> bool:
        return self.reason.startswith(PREFIX)


@dataclass(frozen=True)
class Action:
    """What the gate does: DRAIN (with ``reason``), RESUME or NONE, and why, in one line."""

    kind: str
    why: str
    reason: str = ""


def node_name(text: str) -> str:
    """A Slurm node name as the gate accepts one (it goes into a command's argument)."""
    if not isinstance(text, str) or not NODE_NAME.fullmatch(text):
        raise SlurmGateError(
            f"node name {text!r} is not accepted: letters, digits, '.', '_' and '-', at most "
            "63, starting with a letter or digit (Slurm's NodeName)"
        )
    return text


def _field(text: str, key: str, start: int = 0) -> re.Match[str] | None:
    return re.compile(rf"(?:^|\s){key}=(\S*)").search(text, start)


def parse_node(text: str, name: str) -> Node:
    """The node NAME from what ``scontrol show node -o NAME`` printed (one line per node).

    Raises SlurmGateError when the output names another node, has no State, or a state word
    that is not Slurm's."""
    text = text[:OUTPUT_LIMIT]
    line = next(
        (ln for ln in text.splitlines() if ln.startswith(f"NodeName={name} ")),
        None,
    )
    if line is None:
        first = text.strip().splitlines()[0][:120] if text.strip() else "nothing"
        raise SlurmGateError(
            f"scontrol show node -o {name} did not describe node {name} (it printed {first!r})"
        )
    state = _field(line, "State")
    if state is None:
        raise SlurmGateError(f"scontrol's line for {name} has no State= field")
    words = [word.rstrip("*~#!%$@^-") for word in state[1].split("+")]
    base, flags = words[0], frozenset(words[1:])
    if base not in BASE_STATES or not flags <= FLAGS:
        raise SlurmGateError(
            f"scontrol's State={state[1][:60]!r} for {name} is not a state this gate knows "
            f"(base states {', '.join(sorted(BASE_STATES))}; flags {', '.join(sorted(FLAGS))})"
        )
    reason = ""
    found = _field(line, "Reason", state.end())
    if found is not None:
        rest = line[found.start(1) :]
        end = _REASON_END.search(rest)
        reason = (rest[: end.start()] if end else rest).strip()
    return Node(name, base, flags, reason)


def _clean(text: str) -> str:
    """One line of the characters a reason keeps (no quotes, no '=', no controls)."""
    text = text.replace("`", "")
    return re.sub(r"\s+", " ", _ALLOWED.sub("?", text)).strip()


def short_fix(fix: str, room: int) -> str:
    """The first clause of a check's fix, cut to ``room`` characters ("..." marks a cut)."""
    first = _clean(re.split(r";\s|\.\s|\s-\s", fix or "", maxsplit=1)[0]).rstrip(".")
    if len(first) <= room:
        return first
    return first[: max(0, room - 3)].rstrip() + "..."


def failed_check(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The first check of the report that failed."""
    return next(
        (c for c in doc.get("checks", []) if isinstance(c, dict) and c.get("status") == "fail"),
        None,
    )


def reason_for(doc: dict[str, Any]) -> str:
    """``rocmlab: <check>: <short fix>`` for a failed report, at most REASON_MAX characters."""
    check = failed_check(doc) or {}
    name = check.get("name") if CHECK_NAME.fullmatch(str(check.get("name", ""))) else "health"
    head = f"{PREFIX} {name}: "
    fix = short_fix(str(check.get("fix") or "see the host's health report"), REASON_MAX - len(head))
    return (head + fix)[:REASON_MAX]


def reason_check(reason: str) -> str | None:
    """The check a reason rocmlab wrote names, None when it names none."""
    match = re.match(rf"{re.escape(PREFIX)} ([a-z][a-z0-9_]*):", reason)
    return match[1] if match else None


def covers(tier: int, check: str | None, tiers: dict[str, int]) -> bool:
    """Whether a run of ``tier`` reran the check that drained the node (a reason naming no
    known check needs the highest tier, 2)."""
    needed = tiers.get(check or "", 2)
    return tier >= needed


def decide(doc: dict[str, Any], node: Node, tiers: dict[str, int]) -> Action:
    """What the verdict of ``doc`` (a ``rocmlab health --json`` report) does to ``node``.
    ``tiers``: check name -> the tier that runs it."""
    verdict, tier = doc.get("verdict"), doc.get("tier")
    if verdict not in ("pass", "warn", "fail") or tier not in (0, 1, 2):
        raise SlurmGateError(
            f"the health report has verdict {verdict!r} and tier {tier!r}: not a report "
            "rocmlab health writes; the node's state was not changed"
        )
    if verdict == "fail":
        reason = reason_for(doc)
        if node.base == "DOWN" or "FAIL" in node.flags:
            why = node.reason or "no reason"
            return Action(NONE, f"{node.name} is {node.state} already ({why}): left as it is")
        if node.drained and not node.ours:
            return Action(NONE, f"{node.name} is drained by someone else ({node.reason!r}): "
                          "left as it is")  # fmt: skip
        if node.drained and node.reason == reason:
            return Action(NONE, f"{node.name} is drained already: {reason}")
        return Action(DRAIN, f"drain {node.name}: {reason}", reason)
    if not (node.drained and node.ours):
        theirs = f" ({node.reason!r} is not rocmlab's)" if node.reason else ""
        return Action(NONE, f"{node.name} is {node.state}: nothing to resume{theirs}")
    check = reason_check(node.reason)
    if not covers(tier, check, tiers):
        return Action(
            NONE,
            f"{node.name} stays drained: {node.reason!r} needs tier "
            f"{tiers.get(check or '', 2)} to pass, this was tier {tier}",
        )
    return Action(
        RESUME, f"resume {node.name}: tier {tier} verdict {verdict} ({node.reason!r} was rocmlab's)"
    )


def command(action: Action, name: str, scontrol: str = "scontrol") -> list[str] | None:
    """The scontrol command of an action (None for NONE)."""
    if action.kind == DRAIN:
        return [scontrol, "update", f"NodeName={name}", "State=DRAIN", f"Reason={action.reason}"]
    if action.kind == RESUME:
        return [scontrol, "update", f"NodeName={name}", "State=RESUME"]
    return None


Runner = Callable[[Sequence[str]], Any]


def gate(
    doc: dict[str, Any], name: str, run: Runner, tiers: dict[str, int], scontrol: str = "scontrol"
) -> Action:
    """Read the node's state, decide, and change it. Raises SlurmGateError when scontrol is
    missing, fails or prints what is not a node's description."""
    name = node_name(name)
    shown = run([scontrol, "show", "node", "-o", name])
    if shown is None:
        raise SlurmGateError(f"{scontrol} is not installed (or not on PATH): nothing was changed")
    if shown.returncode != 0:
        raise SlurmGateError(
            f"{scontrol} show node -o {name} exited {shown.returncode}: "
            f"{_clean(shown.stderr)[:200] or 'no message'}; nothing was changed"
        )
    action = decide(doc, parse_node(shown.stdout, name), tiers)
    argv = command(action, name, scontrol)
    if argv is None:
        return action
    done = run(argv)
    if done is None or done.returncode != 0:
        said = _clean(done.stderr)[:200] if done is not None else "not installed"
        raise SlurmGateError(f"{' '.join(argv[1:4])} failed ({said or 'no message'}): {action.why}")
    return action
