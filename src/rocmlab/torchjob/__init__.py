"""A PyTorch job on one rank or many, shared by ``rocmlab smoke`` and ``rocmlab allreduce``:
importing torch with a clear error (``torch_import``), the device a rank really uses (``device``),
its place in a torchrun job (``distenv``, no torch), the process group, its store and the
collectives that carry JSON between ranks (``distributed``), the store's port (``rendezvous``, no
torch) and the lines rank 0 prints (``progress``).

Importing this package imports no torch; ``device`` and ``distributed`` do, and are imported only
once a command runs.
"""
