"""The validated options of ``rocmlab smoke``: what the command line gives the job. No torch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class SmokeOptions:
    """Validated command-line options of ``rocmlab smoke``."""

    data: Path
    dataset: str
    device: str
    require_gpu: bool
    epochs: int
    batch_size: int
    optimizer: str
    lr: float
    momentum: float
    amp: str
    min_accuracy: float | None
    seed: int
    json_path: Path | None
    doctor: dict[str, Any] | None = None  # the --doctor-json document
    model: str = "mlp"
    techniques: tuple[str, ...] = ()
    rocm_sdk_timeout: float = 300.0  # seconds `rocm-sdk test` may take (ROCm wheels only)

    def report_fields(self) -> dict[str, Any]:
        """The options as the report records them."""
        return {
            "dataset": self.dataset,
            "data_dir": str(self.data),
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "optimizer": self.optimizer,
            "lr": self.lr,
            "momentum": self.momentum,
            "seed": self.seed,
            "amp": self.amp,
            "doctor": self.doctor,
            "model": self.model,
            "techniques": list(self.techniques),
        }
