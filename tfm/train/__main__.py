"""`python -m tfm.train ...`: see tfm/train/cli.py."""

from .cli import main

raise SystemExit(main())
