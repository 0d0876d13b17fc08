"""Importing a plugin's code: a local plugin named by module or by ``.py`` path (:func:`load_local_module`), with
the messages that say how to name it, and the guard every plugin import and registration runs under
(:func:`exit_is_import_error`)."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import os
import re
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flexkit._files import NotRegularFileError, file_kind
from flexkit.errors import ConfigError

__all__ = ["exit_is_import_error", "load_local_module"]


def load_local_module(spec: str, base_dir: str | os.PathLike[str] | None = None) -> Any:
    """Import a plugin given as a module name (``my_pkg.hooks``) or a ``.py`` path (relative paths are
    resolved against ``base_dir``, default the current directory).

    A plugin that calls ``sys.exit()`` (or raises another ``BaseException`` but ``KeyboardInterrupt``) while
    it is imported raises :class:`ImportError` saying so, so it is reported as a failed plugin instead of
    ending the command. A module name that is not found gets a hint at the path form (``./my_hooks.py``).
    """
    if not isinstance(spec, str) or not spec:
        raise ConfigError("a plugin must be a module name or a path to a .py file")
    if not (spec.endswith(".py") or "/" in spec or os.sep in spec):
        return _import_by_name(spec, base_dir)
    path = Path(spec).expanduser()
    if not path.is_absolute():
        path = Path(base_dir or ".") / path
    path = path.resolve()
    _check_plugin_file(path)
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    module_name = f"flexkit_local_{re.sub(r'[^0-9a-zA-Z_]', '_', path.stem)}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    try:
        with exit_is_import_error():
            module_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def _check_plugin_file(path: Path) -> None:
    """Refuse a plugin path that is missing or not a regular file, saying what it is."""
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise FileNotFoundError(f"no such file: {path}") from None
    if stat.S_ISDIR(mode):
        if (path / "__init__.py").is_file():
            raise IsADirectoryError(
                f"{path} is a directory (a package), not a .py file; name the package as a module instead, "
                f'plugins = ["{path.name}"] with {path.parent} on PYTHONPATH, or give the path of one of its .py files'
            )
        raise IsADirectoryError(f"{path} is a directory, not a .py file")
    if not stat.S_ISREG(mode):
        raise NotRegularFileError(f"{path} is {file_kind(mode)}, not a regular .py file")


def _import_by_name(spec: str, base_dir: str | os.PathLike[str] | None) -> Any:
    """``importlib.import_module(spec)``; when ``spec`` itself is not found, the error says how to name a file."""
    try:
        with exit_is_import_error():
            return importlib.import_module(spec)
    except ModuleNotFoundError as exc:
        if not exc.name or not (spec == exc.name or spec.startswith(exc.name + ".")):
            raise  # the plugin was found, and it imports something missing
        as_path = "./" + spec.replace(".", "/") + ".py"
        near = Path(base_dir or ".") / as_path
        found = f"; {near.resolve()} exists" if near.is_file() else ""
        raise ModuleNotFoundError(
            f"{exc} (a module name is imported from sys.path, not from the pipeline's folder{found}: for a file, "
            f'write its path, plugins = ["{as_path}"])',
            name=exc.name,
        ) from None


@contextlib.contextmanager
def exit_is_import_error() -> Iterator[None]:
    """Run a plugin's import or registration code: turn ``sys.exit()`` (or any ``BaseException`` but
    ``KeyboardInterrupt``) into :class:`ImportError`, so it is reported as a plugin failure instead of ending the
    process silently; and send what it prints to stderr, so that a plugin printing on import cannot corrupt a
    command's machine-readable output (``flexkit plugins --json``, ``schema``, ``preview --json``)."""
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    except (Exception, KeyboardInterrupt):
        raise
    except SystemExit as exc:
        raise ImportError(f"the plugin called sys.exit({exc.code!r}) while it was imported") from None
    except BaseException as exc:
        raise ImportError(f"the plugin raised {type(exc).__name__} while it was imported: {exc}") from None
