"""Plugins: modules that register ops (and their rules) before a graph is verified, given to
``torchlean-verify --plugin`` as a module name or a ``.py`` file, and imported again in each
worker process."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any


class PluginError(Exception):
    """A plugin could not be imported (the message names it and why)."""


def load_plugin(spec: str, option: str = "--plugin") -> ModuleType:
    """Import a plugin: a module name, or the path of a ``.py`` file; returns the module."""
    try:
        if spec.endswith(".py") or os.sep in spec:
            if not os.path.isfile(spec):
                raise PluginError(f"{option} {spec}: no such file")
            name = "torchlean_plugin_" + os.path.splitext(os.path.basename(spec))[0]
            mod_spec = importlib.util.spec_from_file_location(name, spec)
            if mod_spec is None or mod_spec.loader is None:
                raise PluginError(f"{option} {spec}: cannot import this file")
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[name] = module
            mod_spec.loader.exec_module(module)
            return module
        return importlib.import_module(spec)
    except PluginError:
        raise
    except Exception as e:
        raise PluginError(f"{option} {spec}: {type(e).__name__}: {e}") from None


def load_callable(spec: str, option: str = "--function") -> Callable[..., Any]:
    """``module:name`` or ``path/file.py:name`` (a dotted name reaches attributes) -> the
    callable."""
    mod_part, sep, attr = spec.rpartition(":")
    if not sep or not mod_part or not attr:
        raise PluginError(f"{option} {spec}: expected MODULE:CALLABLE or FILE.py:CALLABLE")
    module = load_plugin(mod_part, option)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PluginError(f"{option} {spec}: {mod_part} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise PluginError(f"{option} {spec}: {attr} is not callable")
    return obj


__all__ = ["PluginError", "load_callable", "load_plugin"]
