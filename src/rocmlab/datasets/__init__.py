"""The datasets the smoke job trains on, and ``rocmlab fetch-mnist``. No torch.

- ``catalog``: each dataset's files, shapes, SHA-256 and normalisation constants
- ``idx``: the IDX file format; ``hashing``: SHA-256
- ``datadir``: finding, reading and verifying a dataset's files in a directory
- ``fetch``: staging them from a mirror URL or a directory
"""
