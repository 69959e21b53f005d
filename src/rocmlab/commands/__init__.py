"""One module per ``rocmlab`` command.

Each module defines ``NAME`` and ``add_parser(subparsers)``, which registers the command's parser
with ``func`` set to the function that runs it. Modules import nothing heavy at the top: ``rocmlab
--help`` and the commands that need no PyTorch must work where torch is not installed.
"""
