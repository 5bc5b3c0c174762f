"""``python -m convert.pairnet ...`` in a checkout, or ``python convert/pairnet.py ...`` where sgeval is
installed: runs ``sgeval_convert.pairnet`` (installed: ``sgeval convert pairnet ...``). Import that module
for the converter's functions."""

import importlib.util
import runpy
import sys

if __name__ != "__main__":
    raise ImportError(f"{__name__} only runs the converter; import sgeval_convert.pairnet instead")
if importlib.util.find_spec("sgeval_convert") is None:
    sys.exit("error: sgeval_convert is not importable here: run `python -m convert.pairnet ...` from the repository "
             "root, or install sgeval and run `sgeval convert pairnet ...`")
runpy.run_module("sgeval_convert.pairnet", run_name="__main__", alter_sys=True)
