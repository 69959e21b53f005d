"""What every command shares, standard library only: exit codes and errors (``errors``), host
text made safe for a terminal or a JSON document (``textsafe``), bounded reads of files a host or
another account provides (``hostread``), atomic outputs (``outputs``) and the CLI's contract with
the roles (``contract``, from ``rocmlab/data/cli_contract.json``).

Nothing here imports a command's package (``smoke``, ``allreduce``, ``datasets``, ``doctor``,
``fleet``), ``rocmlab.commands`` or ``rocmlab.cli``: tests/python/test_import_graph.py checks it.
"""
