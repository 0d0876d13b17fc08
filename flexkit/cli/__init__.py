"""The ``flexkit`` command line: the parser, one module per command family, ``flexkit preview``."""
