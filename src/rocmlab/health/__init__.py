"""``rocmlab health``: the doctor's checks that matter on a running node, and what changed since
the last run, in tiers a scheduler or a timer can afford (docs/health.md).

- tier 0, passive (no GPU work, 5 s): the driver, the device nodes and their group, the GPU
  count, new amdgpu lines in the kernel log, PCIe links, RAS error counters and PCIe replays that
  rose since the last run, ROCm and framework versions against what the host was provisioned
  with, free space for ROCm, the venvs and /boot;
- tier 1 (30 s): tier 0 and a small matrix multiply on each GPU, checked against an exact sum;
- tier 2 (a few minutes): tier 1, the smoke job, and the all-reduce across the node's GPUs.

Each check runs in a process of its own (rocmlab.health.runner) and is cut at its budget
(rocmlab.health.table, one table): a check that hangs is reported as ``error`` and the run ends
within its tier's budget. Checks return the doctor's Result (rocmlab.doctor.model); the doctor's
own checks are called, never copied. What must be compared with the last run (counters, kernel
log lines) is kept in a state file (rocmlab.health.state).
"""
