"""The Slurm health gate (``rocmlab health --slurm-gate``): what a health verdict does to the
node's state in Slurm. Pure functions over the ``--json`` document and what ``scontrol show
node -o NAME`` printed; :func:`gate` runs the two ``scontrol`` commands through a runner.

The rules (docs/health.md, "Under Slurm"):

- a verdict of FAIL drains the node with ``Reason="rocmlab: <check>: <short fix>"`` (the first
  failed check; at most REASON_MAX characters: Slurm's listings cut long reasons, the host's
  report keeps the whole verdict), unless it is out of service already for another reason
  (DOWN, FAIL, or drained by an operator): that state and its reason are left as they are; a
  drain that succeeded is recorded by root (rocmlab.health.drains);
- a drain is rocmlab's only when root's record says so and Slurm shows its recorded reason: a
  reason that starts with ``rocmlab:`` proves nothing (an operator may type one);
- a verdict of PASS or WARN (an ERROR warns) resumes ONLY rocmlab's drain, only on a report of
  at least the tier the record needs (the tier of the report that drained it, and the tier that
  reruns each check that drained it: tier 2 for the checks that fail on what rose since the
  last run, and for a drain that names no check), and only when every check that drained it is
  in this report and passed (or warned); an operator's drain, a reservation and a DOWN node stay
  as they are;
- nothing is done when the node is already as it should be.

The report is root's own (``rocmlab health --slurm-gate``), or the tier-2 runner's, in which
root's own tier-0 results stand for every check root runs and the smoke account's tier 2 can add
a failure but hide none (rocmlab.health.slurm_tier2).

What ``scontrol`` prints is hostile input: at most OUTPUT_LIMIT characters are looked at, the
node must be the one asked for, its state words must be Slurm's, and nothing of it is executed
or passed on but the reason rocmlab compares with its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rocmlab.health import drains
from rocmlab.health.drains import Drain

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


def ours(node: Node, record: Drain | None) -> bool:
    """Whether ``node`` is drained by rocmlab: root recorded the drain and Slurm shows its
    reason (never because the reason starts with ``rocmlab:``)."""
    return (
        record is not None
        and node.drained
        and record.node == node.name
        and record.shown_by(node.reason)
    )


@dataclass(frozen=True)
class Action:
    """What the gate does: DRAIN (with ``reason``, and the check that failed), RESUME or NONE,
    and why, in one line."""

    kind: str
    why: str
    reason: str = ""
    check: str | None = None


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


def failed_name(doc: dict[str, Any]) -> str | None:
    """The name of the report's first failed check, None when it has none a reason can carry."""
    name = str((failed_check(doc) or {}).get("name", ""))
    return name if CHECK_NAME.fullmatch(name) else None


def reason_for(doc: dict[str, Any]) -> str:
    """``rocmlab: <check>: <short fix>`` for a failed report, at most REASON_MAX characters."""
    check = failed_check(doc) or {}
    name = failed_name(doc) or "health"
    head = f"{PREFIX} {name}: "
    fix = short_fix(str(check.get("fix") or "see the host's health report"), REASON_MAX - len(head))
    return (head + fix)[:REASON_MAX]


def held_back(doc: dict[str, Any], record: Drain) -> str:
    """Why the report ``doc`` cannot resume the drain ``record`` ("" when it can): its tier is
    below what the drain needs, or a check that drained the node is not in it, passing."""
    tier = doc.get("tier")
    if not isinstance(tier, int) or tier < record.needs:
        return f"{record.reason!r} needs tier {record.needs} to pass, this was tier {tier}"
    found = {c.get("name"): c.get("status") for c in doc.get("checks", []) if isinstance(c, dict)}
    for check in record.checks:
        if found.get(check) not in ("pass", "warn"):
            said = found.get(check) or "not in the report"
            return f"{record.reason!r}: {check} must pass again, this run: {said}"
    return ""


def decide(
    doc: dict[str, Any], node: Node, tiers: dict[str, int], record: Drain | None = None
) -> Action:
    """What the verdict of ``doc`` (a ``rocmlab health --json`` report) does to ``node``, with
    root's ``record`` of its drain (None: rocmlab has drained nothing). ``tiers``: check name ->
    the tier that reruns it."""
    verdict, tier = doc.get("verdict"), doc.get("tier")
    if verdict not in ("pass", "warn", "fail") or tier not in (0, 1, 2):
        raise SlurmGateError(
            f"the health report has verdict {verdict!r} and tier {tier!r}: not a report "
            "rocmlab health writes; the node's state was not changed"
        )
    mine = ours(node, record)
    if verdict == "fail":
        reason = reason_for(doc)
        if node.base == "DOWN" or "FAIL" in node.flags:
            why = node.reason or "no reason"
            return Action(NONE, f"{node.name} is {node.state} already ({why}): left as it is")
        if node.drained and not mine:
            return Action(NONE, f"{node.name} is drained by someone else ({node.reason!r}): "
                          "left as it is")  # fmt: skip
        if mine and record is not None and record.reason == reason:
            return Action(NONE, f"{node.name} is drained already: {reason}")
        return Action(DRAIN, f"drain {node.name}: {reason}", reason, failed_name(doc))
    if not mine or record is None:
        theirs = (
            f" ({node.reason!r} is not rocmlab's: root has no record of it)" if node.reason else ""
        )
        return Action(NONE, f"{node.name} is {node.state}: nothing to resume{theirs}")
    why = held_back(doc, record)
    if why:
        return Action(NONE, f"{node.name} stays drained: {why}")
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
    doc: dict[str, Any],
    name: str,
    run: Runner,
    tiers: dict[str, int],
    scontrol: str = "scontrol",
    *,
    state_dir: Path | None = None,
    boot_id: str = "",
) -> Action:
    """Read the node's state and root's record of its drain (in ``state_dir``), decide, change
    it, and keep the record: written when a drain succeeded (``boot_id``: this boot), removed
    when a resume did or when the node is no longer drained as recorded. Raises SlurmGateError
    when scontrol is missing, fails or prints what is not a node's description."""
    name = node_name(name)
    record, problem = drains.load(state_dir, name) if state_dir else (None, "")
    shown = run([scontrol, "show", "node", "-o", name])
    if shown is None:
        raise SlurmGateError(f"{scontrol} is not installed (or not on PATH): nothing was changed")
    if shown.returncode != 0:
        raise SlurmGateError(
            f"{scontrol} show node -o {name} exited {shown.returncode}: "
            f"{_clean(shown.stderr)[:200] or 'no message'}; nothing was changed"
        )
    node = parse_node(shown.stdout, name)
    action = decide(doc, node, tiers, record)
    if problem:
        action = replace(action, why=f"{action.why} [{problem}]")
    argv = command(action, name, scontrol)
    if argv is None:
        if state_dir is not None and record is not None and not ours(node, record):
            drains.clear(state_dir)  # resumed or drained again by someone else: not ours now
        return action
    done = run(argv)
    if done is None or done.returncode != 0:
        said = _clean(done.stderr)[:200] if done is not None else "not installed"
        raise SlurmGateError(f"{' '.join(argv[1:4])} failed ({said or 'no message'}): {action.why}")
    if state_dir is not None:
        keep(state_dir, action, node, record, int(doc["tier"]), tiers, boot_id)
    return action


def keep(
    state_dir: Path,
    action: Action,
    node: Node,
    record: Drain | None,
    tier: int,
    tiers: dict[str, int],
    boot_id: str,
) -> None:
    """Root's record after ``action`` succeeded on ``node``: the drain recorded (with the
    checks of the drain it replaces, when that was rocmlab's too), the resume forgotten."""
    try:
        if action.kind == RESUME:
            drains.clear(state_dir)
        elif action.kind == DRAIN:
            earlier = record if ours(node, record) else None
            drains.save(
                state_dir,
                drains.made(node.name, action.reason, action.check, tier, tiers, boot_id, earlier),
            )
    except OSError as exc:
        raise SlurmGateError(
            f"{action.why}, but root's record of it in {state_dir} could not be kept "
            f"({exc.strerror or exc}): resume the node yourself once it is fixed"
        ) from None
