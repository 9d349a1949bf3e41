"""`python -m tfm ...`: see tfm/cli.py."""

from .cli import main

raise SystemExit(main())
