"""Choosing the mixed-precision (AMP) dtype from the GPU architecture. No torch needed.

``torch.cuda.is_bf16_supported()`` returns True on every ROCm GPU, but RDNA1/RDNA2 (gfx10xx) have
no bf16 arithmetic, so the architecture string decides, not that function.
"""

from __future__ import annotations

import re

from rocmlab.common.errors import UsageError

AMP_CHOICES = ("auto", "off", "fp16", "bf16")
DTYPE_NAMES = {"fp16": "float16", "bf16": "bfloat16"}

# AMD architectures with native bf16: CDNA1-4 (gfx908, gfx90a, gfx94x, gfx95x) and RDNA3/4
# (gfx11xx, gfx12xx). Everything else (gfx10xx RDNA1/2, gfx906/gfx900 Vega, gfx803 Polaris,
# APUs such as gfx90c) gets fp16.
_BF16_GFX = re.compile(r"^gfx(908|90a|94\d|95\d|11\d\w|12\d\w)$")
_SM = re.compile(r"^sm_(\d+)$")


def base_arch(arch: str | None) -> str:
    """``gfx90a:sramecc+:xnack-`` -> ``gfx90a``; lower case; '' for None."""
    return (arch or "").split(":", 1)[0].strip().lower()


def arch_has_bf16(arch: str | None) -> bool | None:
    """True/False when the architecture is known to have / lack bf16, None when unknown."""
    name = base_arch(arch)
    if _BF16_GFX.match(name):
        return True
    if name.startswith("gfx"):
        return False
    sm = _SM.match(name)
    if sm:
        return int(sm.group(1)) >= 80  # NVIDIA Ampere and newer
    return None


def choose_amp_dtype(
    requested: str, device_type: str, arch: str | None, bf16_supported: bool
) -> str | None:
    """The autocast dtype name ("float16"/"bfloat16") for a run, or None for full fp32.

    ``auto``: off on the CPU; on a GPU bf16 where the architecture has it (and torch agrees),
    otherwise fp16 — never bf16 on gfx10xx. An explicit ``bf16`` on an architecture without
    bf16 is refused with a UsageError (exit 2).
    """
    if requested not in AMP_CHOICES:
        raise UsageError(f"--amp {requested!r}: expected one of {', '.join(AMP_CHOICES)}")
    if requested == "off":
        return None
    has_bf16 = arch_has_bf16(arch)
    if requested == "bf16":
        if device_type != "cpu" and (has_bf16 is False or not bf16_supported):
            raise UsageError(
                f"--amp bf16: {base_arch(arch) or 'this GPU'} has no bf16 arithmetic; "
                "use --amp fp16, --amp off or --amp auto"
            )
        return DTYPE_NAMES["bf16"]
    if requested == "fp16":
        return DTYPE_NAMES["fp16"]
    if device_type == "cpu":
        return None
    return DTYPE_NAMES["bf16"] if has_bf16 and bf16_supported else DTYPE_NAMES["fp16"]
