"""Makes molecule/shared importable from every scenario's testinfra tests."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "shared"))
