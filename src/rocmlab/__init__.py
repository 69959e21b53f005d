"""rocmlab: provision AMD ROCm GPU workstations and prove that every GPU trains."""

__version__ = "0.1.0"
