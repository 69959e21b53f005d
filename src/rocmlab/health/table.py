"""The checks of each tier and their time budgets: one table (docs/health.md lists it).

Checks run phase by phase; the checks of one phase run side by side, each in its own process,
and each is cut at its budget (reported as ``error``). A tier runs the phases of its own tier and
of the tiers below, so its budget is the sum of those phases' budgets; the run also stops every
check at the tier's budget, so it always ends within it (plus the second it takes to kill and
report what was cut).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rocmlab.doctor import checks_driver, checks_kernel, checks_system
from rocmlab.doctor.context import Context
from rocmlab.doctor.model import Result
from rocmlab.health import checks_gpu, checks_node, checks_versions
from rocmlab.health.context import HealthContext, Outcome

TIERS = (0, 1, 2)

# (phase, tier, its budget in seconds): phases run in this order.
PHASES: tuple[tuple[str, int, float], ...] = (
    ("passive", 0, 5.0),
    ("compute", 1, 25.0),
    ("smoke", 2, 300.0),
    ("allreduce", 2, 120.0),
)

Work = Callable[[HealthContext, float], Outcome]


@dataclass(frozen=True)
class Spec:
    """One check: its stable name, the phase it runs in and its budget in seconds."""

    name: str
    phase: str
    budget: float
    work: Work

    @property
    def tier(self) -> int:
        return next(tier for phase, tier, _unused in PHASES if phase == self.phase)


def doctor(check: Callable[[Context], Result]) -> Work:
    """The doctor's check, as it is."""
    return lambda h, _deadline: Outcome(check(h.doctor))


def health(check: Callable[[HealthContext], Outcome]) -> Work:
    """A passive health check (no deadline of its own: the run cuts it)."""
    return lambda h, _deadline: check(h)


CHECKS: tuple[Spec, ...] = (
    Spec("amdgpu_driver", "passive", 4.0, doctor(checks_driver.check_amdgpu_driver)),
    Spec("device_nodes", "passive", 4.0, doctor(checks_driver.check_device_nodes)),
    Spec("node_group", "passive", 4.0, health(checks_node.check_node_group)),
    Spec("gpu_groups", "passive", 4.0, health(checks_node.check_gpu_groups)),
    Spec("gpu_count", "passive", 4.0, doctor(checks_driver.check_gpu_count)),
    Spec("kernel_log", "passive", 4.5, health(checks_node.check_kernel_log)),
    Spec("dkms_headers", "passive", 4.5, doctor(checks_kernel.check_dkms_headers)),
    Spec("dkms_next_kernel", "passive", 4.5, doctor(checks_kernel.check_dkms_next_kernel)),
    Spec("pcie_link", "passive", 4.0, doctor(checks_system.check_pcie_link)),
    Spec("pcie_replays", "passive", 4.0, health(checks_node.check_pcie_replays)),
    Spec("ras_errors", "passive", 4.0, health(checks_node.check_ras_errors)),
    Spec("rocm_version", "passive", 4.5, health(checks_versions.check_rocm_version)),
    Spec("framework_versions", "passive", 4.5, health(checks_versions.check_framework_versions)),
    Spec("disk_space", "passive", 4.0, health(checks_node.check_disk_space)),
    Spec("gpu_matmul", "compute", 25.0, checks_gpu.check_gpu_matmul),
    Spec("smoke", "smoke", 300.0, checks_gpu.check_smoke),
    Spec("allreduce", "allreduce", 120.0, checks_gpu.check_allreduce),
)
# Checks the run makes itself after the others, from what they found: what could not be read
# whole (the doctor's host_files), and whether the state of the last run was read and saved.
AFTER = ("host_files", "health_state")
# Checks whose findings are compared with the last run's (rocmlab.health.state keeps them).
STATEFUL = ("kernel_log", "pcie_replays", "ras_errors")


def resume_tiers() -> dict[str, int]:
    """Check name -> the tier whose run may resume a Slurm drain the check made. A check that
    fails on what rose since the last run (STATEFUL) passes on the next run although nothing was
    fixed: its drain waits for tier 2."""
    return {spec.name: 2 if spec.name in STATEFUL else spec.tier for spec in CHECKS}


def tier_budget(tier: int) -> float:
    """Seconds a run of ``tier`` may take: its phases and those of the tiers below."""
    return sum(budget for _unused, phase_tier, budget in PHASES if phase_tier <= tier)


def phases(tier: int) -> list[tuple[str, float, list[Spec]]]:
    """(phase, budget, its checks) in order, for a run of ``tier``."""
    return [
        (name, budget, [spec for spec in CHECKS if spec.phase == name])
        for name, phase_tier, budget in PHASES
        if phase_tier <= tier
    ]
