#!/usr/bin/env python3
"""Benchmark: the tutorial's MNIST training path against rocmlab's, side by side, same data.

Both paths train the same model (--model mlp: the tutorial's 784-128-64-10 MLP; --model cnn:
rocmlab's small CNN, 3 x conv + batch-norm + max-pool; same initial weights) with the tutorial's
hyperparameters: SGD lr 0.01, no momentum, batch 64, fp32.

  tutorial  a torch Dataset that converts each sample on access, as torchvision's MNIST with
            ToTensor() + Normalize((0.5,), (0.5,)) does (same tensor operations: copy, HWC view,
            CHW permute, contiguous, float, /255, clone, (x - 0.5) / 0.5), behind a
            DataLoader(batch_size=64, shuffle=True); the tutorial's loop, loss.item() every step.
            torchvision also round-trips every sample through a PIL image; --tutorial-decode pil
            adds that when Pillow and numpy are installed (they are not rocmlab dependencies).
  rocmlab   rocmlab.smoke.train: the dataset resident on the device, one permutation per epoch,
            index_select batches, losses kept on the device (normalised with the dataset's own
            mean/std instead of 0.5/0.5; the arithmetic per sample is the same).

  floor     the same model steps on pre-sliced, unshuffled batches: no data path at all. Not a
            way to train (no shuffling); it measures the model's own cost, which bounds the ratio.

Prints seconds per epoch, samples/s and test accuracy of each path and the ratio; --json writes
them with the machine's description. Usage:

  .venv/bin/python benchmarks/tutorial_vs_rocmlab.py --data .cache/data/mnist --repeat 3
  .venv/bin/python benchmarks/tutorial_vs_rocmlab.py --data .cache/data/mnist --model cnn
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from rocmlab.torchjob.torch_import import import_torch  # noqa: E402

torch = import_torch()

from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from rocmlab.datasets.datadir import load_dataset  # noqa: E402
from rocmlab.smoke.model import build_model  # noqa: E402
from rocmlab.smoke.train import TrainConfig, images_tensor, labels_tensor, to_device, train  # noqa: E402
from rocmlab.torchjob.device import cpu_name, probe_device, synchronize  # noqa: E402
from rocmlab.torchjob.distributed import DistContext  # noqa: E402
from rocmlab.torchjob.progress import Progress  # noqa: E402

BATCH, LR = 64, 0.01


class TutorialMNIST(Dataset):
    """Per-sample conversion on access, as torchvision.datasets.MNIST + ToTensor + Normalize."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, pil: bool) -> None:
        self.data = images  # N x 28 x 28 uint8, like torchvision's MNIST.data
        self.targets = labels
        self.pil = pil
        if pil:
            import numpy
            from PIL import Image

            self._np, self._image = numpy, Image

    def __len__(self) -> int:
        return self.data.shape[0]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        img, target = self.data[index], int(self.targets[index])
        if self.pil:  # torchvision: Image.fromarray(img.numpy(), mode="L"), ToTensor on the PIL
            pic = self._image.fromarray(img.numpy(), mode="L")
            img = torch.from_numpy(self._np.array(pic, self._np.uint8, copy=True))
        else:
            img = img.clone()  # ToTensor copies the pixels out of the image
        img = self.to_tensor(img)
        return self.normalize(img, (0.5,), (0.5,)), target

    @staticmethod
    def to_tensor(pixels: torch.Tensor) -> torch.Tensor:
        """torchvision.transforms.functional.to_tensor for an 8-bit grayscale image."""
        img = pixels.view(pixels.shape[0], pixels.shape[1], 1)
        img = img.permute((2, 0, 1)).contiguous()
        return img.to(dtype=torch.get_default_dtype()).div(255)

    @staticmethod
    def normalize(
        tensor: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...]
    ) -> torch.Tensor:
        """torchvision.transforms.functional.normalize (not in place)."""
        tensor = tensor.clone()
        mean_t = torch.as_tensor(mean, dtype=tensor.dtype, device=tensor.device)
        std_t = torch.as_tensor(std, dtype=tensor.dtype, device=tensor.device)
        if (std_t == 0).any():
            raise ValueError("std evaluated to zero")
        return tensor.sub_(mean_t.view(-1, 1, 1)).div_(std_t.view(-1, 1, 1))


def tutorial_path(
    train_set: TutorialMNIST,
    test_set: TutorialMNIST,
    device: torch.device,
    epochs: int,
    seed: int,
    kind: str,
) -> dict[str, Any]:
    """The tutorial's script, with the device fixed ('cuda', not 'hip') and timing added."""
    torch.manual_seed(seed)  # DataLoader shuffling
    trainloader = DataLoader(train_set, batch_size=BATCH, shuffle=True)
    model = build_model(seed, kind).to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    seconds = []
    for _epoch in range(epochs):
        synchronize(device)
        start = time.perf_counter()
        running_loss = 0.0
        for i, data in enumerate(trainloader, 0):
            inputs, labels = data
            inputs, labels = inputs.to(device), labels.to(device)
            optimizer.zero_grad()
            outputs = model(inputs)
            loss = criterion(outputs, labels)
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
            if i % 100 == 99:
                running_loss = 0.0  # the tutorial prints running_loss / 100 here
        synchronize(device)
        seconds.append(time.perf_counter() - start)
    correct = 0
    model.eval()  # batch-norm: running statistics, as rocmlab's evaluation uses
    with torch.no_grad():
        for inputs, labels in DataLoader(test_set, batch_size=1000):
            predicted = model(inputs.to(device)).argmax(1)
            correct += int((predicted == labels.to(device)).sum())
    return summarise("tutorial", seconds, len(train_set), correct / len(test_set))


def rocmlab_path(
    dataset: Any, device: torch.device, epochs: int, seed: int, kind: str
) -> dict[str, Any]:
    """rocmlab's training loop with the tutorial's hyperparameters."""
    data = to_device(dataset, device)
    config = TrainConfig(epochs, BATCH, "sgd", LR, 0.0, seed)
    model = build_model(seed, kind).to(device)
    result = train(model, data, config, device, None, DistContext(), Progress(enabled=False))
    seconds = [stats.seconds for stats in result.epochs]
    return summarise("rocmlab", seconds, data.train_x.shape[0], result.test_accuracy)


def floor_path(
    dataset: Any, device: torch.device, epochs: int, seed: int, kind: str
) -> dict[str, Any]:
    """The model's own cost: the same steps on pre-sliced, unshuffled batches (no data path).

    No training path with this model and batch size can be faster; it bounds the ratio.
    """
    data = to_device(dataset, device)
    model = build_model(seed, kind).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, foreach=True)
    criterion = nn.CrossEntropyLoss()
    n = data.train_x.shape[0]
    batches = [
        (data.train_x[i : i + BATCH], data.train_y[i : i + BATCH]) for i in range(0, n, BATCH)
    ]
    seconds = []
    for _epoch in range(epochs):
        synchronize(device)
        start = time.perf_counter()
        losses = []
        for x, y in batches:
            optimizer.zero_grad(set_to_none=True)
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
        torch.stack(losses).cpu()
        synchronize(device)
        seconds.append(time.perf_counter() - start)
    model.eval()
    with torch.no_grad():
        accuracy = float((model(data.test_x).argmax(1) == data.test_y).float().mean())
    return summarise("floor", seconds, n, accuracy)


def summarise(name: str, seconds: list[float], samples: int, accuracy: float) -> dict[str, Any]:
    per_epoch = sum(seconds) / len(seconds)
    return {
        "path": name,
        "seconds_per_epoch": per_epoch,
        "samples_per_second": samples / per_epoch,
        "test_accuracy": accuracy,
        "epoch_seconds": seconds,
    }


def machine(device: torch.device, device_name: str) -> dict[str, Any]:
    return {
        "cpu": cpu_name(),
        "cpu_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "omp_env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")},
        "device": str(device),
        "device_name": device_name,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=REPO / ".cache" / "data" / "mnist")
    parser.add_argument("--dataset", choices=("mnist", "fashion-mnist"), default="mnist")
    parser.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument(
        "--tutorial-decode",
        choices=("torch", "pil"),
        default="torch",
        help="pil: also round-trip each sample through a PIL image, as "
        "torchvision does (needs Pillow and numpy)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run both paths this many times, alternating, and keep each path's "
        "fastest run (other load on the machine only ever slows a run down)",
    )
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    device, info = probe_device(args.device)
    dataset = load_dataset(args.data, args.dataset)
    arrays = dataset.arrays
    pil = args.tutorial_decode == "pil"
    train_set = TutorialMNIST(
        images_tensor(arrays["train_images"]).view(-1, 28, 28),
        labels_tensor(arrays["train_labels"]),
        pil,
    )
    test_set = TutorialMNIST(
        images_tensor(arrays["test_images"]).view(-1, 28, 28),
        labels_tensor(arrays["test_labels"]),
        pil,
    )
    host = machine(device, info.device_name)
    print(
        f"machine: {host['cpu']}, {host['cpu_cores']} cores, torch {host['torch']} "
        f"({host['torch_threads']} threads), device {device} ({info.device_name})"
    )
    print(
        f"{args.model} on {args.dataset}, {args.epochs} epoch(s), SGD lr {LR}, batch {BATCH}, "
        "fp32; "
        f"tutorial decode: {args.tutorial_decode}; best of {max(1, args.repeat)} run(s) per path"
    )
    runs: dict[str, list[dict[str, Any]]] = {"tutorial": [], "rocmlab": [], "floor": []}
    for _ in range(max(1, args.repeat)):
        runs["tutorial"].append(
            tutorial_path(train_set, test_set, device, args.epochs, args.seed, args.model)
        )
        runs["rocmlab"].append(rocmlab_path(dataset, device, args.epochs, args.seed, args.model))
        runs["floor"].append(floor_path(dataset, device, args.epochs, args.seed, args.model))
    results = [min(path_runs, key=lambda r: r["seconds_per_epoch"]) for path_runs in runs.values()]
    for row, path_runs in zip(results, runs.values(), strict=True):
        row["all_seconds_per_epoch"] = [r["seconds_per_epoch"] for r in path_runs]
    print(f"{'path':<10}{'s/epoch':>10}{'samples/s':>12}{'accuracy':>10}")
    for row in results:
        print(
            f"{row['path']:<10}{row['seconds_per_epoch']:>10.2f}"
            f"{row['samples_per_second']:>12,.0f}{row['test_accuracy']:>10.4f}"
        )
    ratio = results[0]["seconds_per_epoch"] / results[1]["seconds_per_epoch"]
    bound = results[0]["seconds_per_epoch"] / results[2]["seconds_per_epoch"]
    print(f"{args.model}: rocmlab is {ratio:.2f}x faster per epoch than the tutorial's path")
    print(
        f"floor = the model's own steps on pre-sliced batches, no data path: no path can beat "
        f"{bound:.1f}x here"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "machine": host,
                    "model": args.model,
                    "dataset": args.dataset,
                    "epochs": args.epochs,
                    "tutorial_decode": args.tutorial_decode,
                    "repeat": max(1, args.repeat),
                    "results": results,
                    "speedup": ratio,
                    "speedup_bound": bound,
                },
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
