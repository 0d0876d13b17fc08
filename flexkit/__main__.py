"""``python -m flexkit`` runs the command line."""

import sys

from flexkit.cli import main

sys.exit(main())
