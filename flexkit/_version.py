"""The flexkit version (read by the build backend and by ``flexkit --version``)."""

__version__ = "0.1.0"

#: The core distribution's name on the package index (the import name stays ``flexkit``; the index's
#: ``flexkit`` is an unrelated project). First-party plugin distributions are named ``flexkit-rft-*``.
DISTRIBUTION = "flexkit-rft"
