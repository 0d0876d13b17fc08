"""``python -m flexkit`` runs the command line."""

import sys

from flexkit.cli.main import main

sys.exit(main())
