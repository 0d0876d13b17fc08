"""Root pytest configuration: the shared fixtures apply to ``tests/`` and to each plugin's ``plugins/*/tests/``."""

pytest_plugins = ("tests.fixtures",)
