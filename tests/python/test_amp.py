"""AMP dtype choice per architecture string (no GPU needed: the choice is a pure function)."""

from __future__ import annotations

import pytest

from rocmlab.common.errors import UsageError
from rocmlab.smoke.amp import arch_has_bf16, base_arch, choose_amp_dtype


@pytest.mark.parametrize(
    ("arch", "expected"),
    [
        # RDNA1/2: torch.cuda.is_bf16_supported() says True on ROCm, but there is no bf16.
        ("gfx1010", "float16"),
        ("gfx1012", "float16"),
        ("gfx1030", "float16"),
        ("gfx1031", "float16"),
        ("gfx1032", "float16"),
        ("gfx1035", "float16"),
        ("gfx1036", "float16"),
        # Vega, Polaris, APUs: no bf16.
        ("gfx906", "float16"),
        ("gfx900", "float16"),
        ("gfx803", "float16"),
        ("gfx90c", "float16"),
        # CDNA and RDNA3/4 have bf16; gcnArchName may carry feature flags.
        ("gfx908", "bfloat16"),
        ("gfx90a:sramecc+:xnack-", "bfloat16"),
        ("gfx942:sramecc+:xnack-", "bfloat16"),
        ("gfx950", "bfloat16"),
        ("gfx1100", "bfloat16"),
        ("gfx1101", "bfloat16"),
        ("gfx1103", "bfloat16"),
        ("gfx1151", "bfloat16"),
        ("gfx1200", "bfloat16"),
        ("gfx1201", "bfloat16"),
        # NVIDIA: bf16 from Ampere (sm_80) on.
        ("sm_90", "bfloat16"),
        ("sm_80", "bfloat16"),
        ("sm_75", "float16"),
        # Unknown architecture: the safe choice.
        (None, "float16"),
        ("", "float16"),
    ],
)
def test_auto_on_gpu_when_torch_claims_bf16(arch: str | None, expected: str) -> None:
    assert choose_amp_dtype("auto", "cuda", arch, bf16_supported=True) == expected


def test_auto_never_picks_bf16_when_torch_denies_it() -> None:
    assert choose_amp_dtype("auto", "cuda", "gfx90a", bf16_supported=False) == "float16"


def test_auto_is_off_on_cpu() -> None:
    assert choose_amp_dtype("auto", "cpu", None, bf16_supported=False) is None


@pytest.mark.parametrize("device_type", ["cuda", "cpu"])
def test_off_and_explicit_fp16(device_type: str) -> None:
    assert choose_amp_dtype("off", device_type, "gfx1100", True) is None
    assert choose_amp_dtype("fp16", device_type, "gfx1100", True) == "float16"


def test_explicit_bf16_where_supported() -> None:
    assert choose_amp_dtype("bf16", "cuda", "gfx942", True) == "bfloat16"
    assert choose_amp_dtype("bf16", "cpu", None, False) == "bfloat16"  # CPU autocast has bf16


@pytest.mark.parametrize("arch", ["gfx1030", "gfx1031", "sm_75"])
def test_explicit_bf16_refused_on_architectures_without_it(arch: str) -> None:
    with pytest.raises(
        UsageError, match=rf"--amp bf16: {arch} has no bf16 arithmetic; use --amp fp16"
    ):
        choose_amp_dtype("bf16", "cuda", arch, bf16_supported=True)


def test_unknown_choice_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"--amp 'fp8': expected one of auto, off, fp16, bf16"):
        choose_amp_dtype("fp8", "cuda", "gfx1100", True)


def test_arch_helpers() -> None:
    assert base_arch("GFX90A:sramecc+:xnack-") == "gfx90a"
    assert arch_has_bf16("gfx1030") is False
    assert arch_has_bf16("gfx1100") is True
    assert arch_has_bf16("mystery") is None
