"""``rocmlab allreduce``: do the ranks of a torchrun job reduce correctly and fast?

- ``job``: the run (device, store, process group, sizes, pairs, report)
- ``exactsum``: contributions whose sum is known exactly; ``bandwidth``: nccl-tests' figures
- ``pairs``: which node pairs to measure and which are slow; ``liveness``: heartbeats and the
  watchdog that name lost ranks; ``msgsize``: ``--sizes`` and byte counts
- ``report``: the JSON document and the printed summary

The rank's device and process group come from ``rocmlab.torchjob``.
"""
