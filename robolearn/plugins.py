"""Parts of one's own, named ``module:Name`` where a setting takes a built-in name: ``env.task=my_task:Slider``,
``algo=my_algo:Reinforce``. The name is what a run's config keeps, so eval, play, export and resume import it
again by the same name."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any


def import_named(name: str, setting: str) -> Any:
    """``Name`` from ``module`` for ``module:Name``, imported. The module is looked for on ``sys.path``, then in
    the current directory (as ``python -m`` would; the ``robolearn`` script alone does not search it).
    Errors name ``setting`` (``env.task``, ``algo``) and what to do."""
    module_name, colon, attr = name.partition(":")
    if not (colon and module_name and attr):
        raise ValueError(f"{setting}={name}: give a part of your own as module:Name")
    module = import_module_of(module_name, f"{setting}={name}")
    if not hasattr(module, attr):
        if module_name == "__main__":  # a run trained from a script or notebook that defined it, read elsewhere
            raise ValueError(f"{setting}={name}: '__main__' is the script (or notebook) running now, which has no "
                             f"'{attr}'; one defined in the script that trained is found again only in that process: "
                             f"move it into a module (e.g. my_module.py beside the script) and name it my_module:{attr}")
        where = f" ({module.__file__})" if getattr(module, "__file__", None) else ""  # (-c, a notebook: none)
        raise ValueError(f"{setting}={name}: module '{module_name}'{where} has no '{attr}'")
    return getattr(module, attr)


def import_module_of(module_name: str, said: str) -> Any:
    """``module_name`` imported from ``sys.path`` or the current directory (see :func:`import_named`); a module
    not found is a ValueError beginning with ``said`` (the setting as given)."""
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name == module_name or module_name.startswith(f"{err.name}."):  # its own, not one it imports
            raise ValueError(f"{said}: no module '{module_name}' on the Python path or in "
                             f"{os.getcwd()}; run from its folder, or add that to PYTHONPATH") from None
        raise
