"""Plugins: modules that register ops (and their rules) before a graph is verified, given to
``torchlean-verify --plugin`` as a module name or a ``.py`` file, and imported again in each
worker process."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys


class PluginError(Exception):
    """A plugin could not be imported (the message names it and why)."""


def load_plugin(spec: str) -> None:
    """Import a plugin: a module name, or the path of a ``.py`` file."""
    try:
        if spec.endswith(".py") or os.sep in spec:
            if not os.path.isfile(spec):
                raise PluginError(f"--plugin {spec}: no such file")
            name = "torchlean_plugin_" + os.path.splitext(os.path.basename(spec))[0]
            mod_spec = importlib.util.spec_from_file_location(name, spec)
            if mod_spec is None or mod_spec.loader is None:
                raise PluginError(f"--plugin {spec}: cannot import this file")
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[name] = module
            mod_spec.loader.exec_module(module)
        else:
            importlib.import_module(spec)
    except PluginError:
        raise
    except Exception as e:
        raise PluginError(f"--plugin {spec}: {type(e).__name__}: {e}") from None


__all__ = ["PluginError", "load_plugin"]
