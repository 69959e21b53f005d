"""Import PyTorch lazily, with a clear error when it is missing."""

from __future__ import annotations

import warnings
from types import ModuleType

from rocmlab.common.errors import TorchMissingError


def import_torch() -> ModuleType:
    """Return the torch module, or raise TorchMissingError with the fix."""
    # Wheels without numpy warn about it at import; the smoke job does not use numpy.
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    try:
        import torch
    except ImportError as exc:
        raise TorchMissingError(
            f"PyTorch is not importable ({exc}); install the ROCm build of torch into this "
            "environment (the pytorch_rocm role does), or a CPU build for a CPU-only check"
        ) from exc
    return torch
