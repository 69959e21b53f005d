"""Allow ``python -m rocmlab``."""

from rocmlab.cli import main

raise SystemExit(main())
