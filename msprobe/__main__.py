"""``python -m msprobe`` runs the msprobe command line."""

import sys

from msprobe.cli.main import main

sys.exit(main())
