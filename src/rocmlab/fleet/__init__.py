"""``rocmlab fleet-report``: read every host's records in a reports directory and say which of
the declared hosts are ready, as JSON, HTML, JUnit XML and a plain-text table.

Standard library only (PyYAML is imported lazily, for YAML inventories when Ansible itself is not
on PATH): the command runs on the Ansible controller, which need not have PyTorch.

- ``inventory``: the declared hosts, from ``ansible-inventory`` or a YAML/INI inventory file
- ``fields``: typed access to JSON records, with errors that say which key is wrong and how
- ``records``: finding and validating the per-host and fleet-wide records
- ``rules``: each host's state, drift and slow flags, the fleet document (``schema``)
- ``html``, ``chart``, ``junit``, ``table``: the outputs
"""
