"""Training with the dataset resident on the device: one transfer, shuffled index batches.

No DataLoader and no per-sample Python: each epoch draws one permutation on the device, and each
step gathers its batch with ``index_select``. Losses stay on the device until the epoch ends.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from rocmlab.datasets.datadir import LoadedDataset
from rocmlab.datasets.idx import IdxArray
from rocmlab.smoke.interrupt import Phase
from rocmlab.torchjob.device import synchronize
from rocmlab.torchjob.distenv import DistContext
from rocmlab.torchjob.progress import Progress

OPTIMIZERS = ("adam", "sgd")
LOSS_WINDOW_MAX = 50  # steps averaged at the start and at the end for the falling-loss check


@dataclass(frozen=True)
class TrainConfig:
    """Hyperparameters of a run."""

    epochs: int
    batch_size: int
    optimizer: str
    lr: float
    momentum: float
    seed: int
    accumulation: int = 1  # micro-batches per optimizer step (gradient accumulation)


@dataclass(frozen=True)
class DeviceData:
    """Normalised images (N x 1 x 28 x 28 float32) and labels (int64), on the run device."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor


@dataclass(frozen=True)
class EpochStats:
    """One epoch: mean training loss, test accuracy after it, time and throughput."""

    epoch: int
    loss: float
    test_accuracy: float
    seconds: float
    samples_per_second: float


@dataclass
class TrainResult:
    """A whole run."""

    epochs: list[EpochStats] = field(default_factory=list)
    samples: int = 0
    train_seconds: float = 0.0
    loss_first: float = math.nan  # mean loss of the first steps of the first epoch
    loss_last: float = math.nan  # mean loss of the last steps of the last epoch

    @property
    def samples_per_second(self) -> float:
        """Training samples per second over all epochs (all ranks together)."""
        return self.samples / self.train_seconds if self.train_seconds else 0.0

    @property
    def test_accuracy(self) -> float:
        """Accuracy after the last epoch."""
        return self.epochs[-1].test_accuracy if self.epochs else 0.0


def images_tensor(array: IdxArray) -> torch.Tensor:
    """An IDX uint8 image array (N x H x W) as an N x 1 x H x W uint8 CPU tensor."""
    count, height, width = array.shape
    return torch.frombuffer(bytearray(array.data), dtype=torch.uint8).view(count, 1, height, width)


def labels_tensor(array: IdxArray) -> torch.Tensor:
    """An IDX uint8 label array as an int64 CPU tensor."""
    return torch.frombuffer(bytearray(array.data), dtype=torch.uint8).to(torch.int64)


def normalise(images: torch.Tensor, mean: float, std: float) -> torch.Tensor:
    """uint8 pixels -> float32 ``(x / 255 - mean) / std``."""
    return images.to(torch.float32).sub_(255.0 * mean).div_(255.0 * std)


def to_device(dataset: LoadedDataset, device: torch.device) -> DeviceData:
    """Move the dataset to the device as uint8 (one transfer each), then normalise there."""
    spec, arrays = dataset.spec, dataset.arrays
    return DeviceData(
        train_x=normalise(images_tensor(arrays["train_images"]).to(device), spec.mean, spec.std),
        train_y=labels_tensor(arrays["train_labels"]).to(device),
        test_x=normalise(images_tensor(arrays["test_images"]).to(device), spec.mean, spec.std),
        test_y=labels_tensor(arrays["test_labels"]).to(device),
    )


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """SGD (with optional momentum) or Adam, multi-tensor (foreach) implementations."""
    if config.optimizer == "sgd":
        return torch.optim.SGD(
            model.parameters(), lr=config.lr, momentum=config.momentum, foreach=True
        )
    return torch.optim.Adam(model.parameters(), lr=config.lr, foreach=True)


def autocast_context(
    device: torch.device, amp_dtype: torch.dtype | None
) -> AbstractContextManager[object]:
    """``torch.autocast(device.type, dtype)`` when AMP is on, else a no-op context."""
    if amp_dtype is None:
        return nullcontext()
    return torch.autocast(device.type, dtype=amp_dtype)


@torch.no_grad()
def evaluate(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    amp_dtype: torch.dtype | None,
    batch: int = 10000,
) -> float:
    """Fraction of ``x`` classified as ``y``."""
    was_training = model.training
    model.eval()
    correct = torch.zeros((), dtype=torch.int64, device=x.device)
    for start in range(0, x.shape[0], batch):
        with autocast_context(x.device, amp_dtype):
            logits = model(x[start : start + batch])
        correct += (logits.argmax(1) == y[start : start + batch]).sum()
    model.train(was_training)
    return int(correct) / x.shape[0]


def share(part: int, batch: int) -> float:
    """The weight of a micro-batch of ``part`` samples in a batch of ``batch``: its share."""
    return part / batch


def accumulate_gradients(
    net: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    index: torch.Tensor,
    micro_batches: int,
    amp_dtype: torch.dtype | None = None,
    scaler: torch.amp.GradScaler | None = None,
    weight: Callable[[int, int], float] = share,
) -> torch.Tensor:
    """Forward and backward of one batch (rows ``index`` of ``images``/``labels``) as
    ``micro_batches`` micro-batches whose gradients add up in ``.grad``; return the batch's mean
    loss (detached).

    Each micro-batch's mean loss is multiplied by ``weight(its size, the batch's size)``, by
    default its share of the batch, so that the summed gradients are those of the batch's mean
    loss. Under DDP only the last micro-batch all-reduces.
    """
    parts = [part for part in index.tensor_split(micro_batches) if part.numel()]
    losses = []
    for number, part in enumerate(parts, start=1):
        x = images.index_select(0, part)
        y = labels.index_select(0, part)
        deferred = isinstance(net, DistributedDataParallel) and number < len(parts)
        with net.no_sync() if deferred else nullcontext():
            with autocast_context(index.device, amp_dtype):
                loss = F.cross_entropy(net(x), y)
                if len(parts) > 1:
                    loss = loss * weight(part.numel(), index.numel())
            (scaler.scale(loss) if scaler is not None else loss).backward()
        losses.append(loss.detach())
    return losses[0] if len(losses) == 1 else torch.stack(losses).sum()


def rank_permutation(
    n: int, generator: torch.Generator, device: torch.device, ctx: DistContext
) -> torch.Tensor:
    """This rank's share of a fresh permutation; every rank draws the same one (same seed)."""
    perm = torch.randperm(n, generator=generator, device=device)
    if not ctx.enabled:
        return perm
    per_rank = n // ctx.world_size  # equal shares: every rank runs the same number of steps
    return perm[ctx.rank : per_rank * ctx.world_size : ctx.world_size]


def train(
    model: nn.Module,
    data: DeviceData,
    config: TrainConfig,
    device: torch.device,
    amp_dtype: torch.dtype | None,
    ctx: DistContext,
    progress: Progress,
    phase: Phase | None = None,
) -> TrainResult:
    """Train ``model`` (already on ``device``) and evaluate it after every epoch.

    ``phase`` is told the current epoch (for the message of an interrupted run).
    """
    net: nn.Module = model
    if ctx.enabled:
        net = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    optimizer = make_optimizer(net, config)
    scaler = torch.amp.GradScaler(device.type) if amp_dtype == torch.float16 else None
    generator = torch.Generator(device=device)
    generator.manual_seed(config.seed)
    result = TrainResult()
    n = data.train_x.shape[0]
    net.train()
    for epoch in range(1, config.epochs + 1):
        if phase is not None:
            phase.at(f"epoch {epoch}/{config.epochs}")
        synchronize(device)
        start = time.perf_counter()
        perm = rank_permutation(n, generator, device, ctx)
        steps = math.ceil(perm.shape[0] / config.batch_size)
        losses: list[torch.Tensor] = []
        for step in range(steps):
            index = perm[step * config.batch_size : (step + 1) * config.batch_size]
            optimizer.zero_grad(set_to_none=True)
            loss = accumulate_gradients(
                net, data.train_x, data.train_y, index, config.accumulation, amp_dtype, scaler
            )
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            losses.append(loss)
            if progress.wants_bar(step, steps):
                progress.draw(epoch, config.epochs, step, steps, float(loss))
        epoch_losses = torch.stack(losses).float().cpu()  # waits for the device
        synchronize(device)
        seconds = time.perf_counter() - start
        samples = perm.shape[0] * ctx.world_size
        window = max(1, min(LOSS_WINDOW_MAX, steps // 10))
        if epoch == 1:
            result.loss_first = float(epoch_losses[:window].mean())
        result.loss_last = float(epoch_losses[-window:].mean())
        accuracy = evaluate(model, data.test_x, data.test_y, amp_dtype)
        stats = EpochStats(
            epoch=epoch,
            loss=float(epoch_losses.mean()),
            test_accuracy=accuracy,
            seconds=seconds,
            samples_per_second=samples / seconds,
        )
        result.epochs.append(stats)
        result.samples += samples
        result.train_seconds += seconds
        progress.line(
            f"epoch {epoch}/{config.epochs}  loss {stats.loss:.4f}  test accuracy "
            f"{accuracy:.4f}  {seconds:.2f} s  {stats.samples_per_second:,.0f} samples/s"
        )
    return result
