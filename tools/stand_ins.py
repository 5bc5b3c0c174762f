"""sys.modules helpers shared by the oracle checks (tools/openpsg_check, tools/sgb_check), which
load a tool's real source files under their own module names beside stand-ins for what they import."""

import importlib.util
import sys
import types


def module(name, **attributes):
    """The module `name` in sys.modules (made empty when absent), with `attributes` set on it."""
    found = sys.modules.get(name) or types.ModuleType(name)
    found.__dict__.update(attributes)
    sys.modules[name] = found
    return found


def load_source(name, path):
    """Execute the source file `path` as module `name` (its parent packages need not be real)."""
    spec = importlib.util.spec_from_file_location(name, path)
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded
    spec.loader.exec_module(loaded)
    return loaded
