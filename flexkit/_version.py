"""The flexkit version (read by the build backend and by ``flexkit --version``)."""

__version__ = "0.1.0.dev0"
