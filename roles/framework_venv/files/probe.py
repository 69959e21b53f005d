"""Ask a Python interpreter which deep-learning framework it has: the distributions installed
(metadata only) and, with --import, what the framework says about itself.

Usage: probe.py torch|tensorflow|jax [--import] [DIST ...]  (DIST: more distributions to look up)
Prints one JSON object on its last line. Run by the framework_venv role with the venv's python.
"""

import contextlib
import json
import os
import sys
from importlib import metadata

KNOWN = {
    "torch": ["torch", "torchvision"],
    "tensorflow": [
        "tensorflow",
        "tensorflow-cpu",
        "tensorflow-rocm",
        "tensorflow-intel",
        "tf-nightly",
    ],
    "jax": ["jax", "jaxlib"],
}


def installed(names):
    """{name: version} of the distributions among NAMES that are installed."""
    found = {}
    for name in names:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


def ask_torch():
    import torch

    return {
        "torch_version": torch.__version__,
        "hip_version": getattr(torch.version, "hip", None),
        "cuda_version": torch.version.cuda,
        "cuda_available": bool(torch.cuda.is_available()),
    }


def ask_tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    return {
        "tf_version": tf.__version__,
        "built_with_rocm": bool(tf.test.is_built_with_rocm()),
        "gpus": [device.name for device in tf.config.list_physical_devices("GPU")],
    }


def ask_jax():
    import jax

    return {
        "jax_version": jax.__version__,
        "devices": sorted({device.platform for device in jax.devices()}),
    }


ASK = {"torch": ask_torch, "tensorflow": ask_tensorflow, "jax": ask_jax}


def main(argv):
    framework, options = argv[0], argv[1:]
    names = KNOWN[framework] + [a for a in options if not a.startswith("--")]
    result = {
        "python": ".".join(map(str, sys.version_info[:3])),
        "dists": installed(dict.fromkeys(names)),
    }
    if "--import" in options:
        result.update(ASK[framework]())
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
