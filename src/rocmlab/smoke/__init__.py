"""``rocmlab smoke``: prove that this machine's GPU (or GPUs, under torchrun) trains correctly.

- ``options``: the validated command-line options; ``job``: running them (report, exit code,
  interrupts; no torch at import); ``checks``: the checks in order (device, data, process group,
  numeric truth, training, speed, learning)
- ``model``, ``train``, ``numeric``, ``techniques``, ``matmul_probe``: what runs on the device
- ``amp``, ``gates``, ``report``, ``interrupt``: choices, thresholds, the JSON report and signals
  (no torch)

The dataset comes from ``rocmlab.datasets``, the rank's device and process group from
``rocmlab.torchjob``.
"""
