"""``python -m convert.gqa200 ...`` in a checkout, or ``python convert/gqa200.py ...`` where sgeval is
installed: runs ``sgeval_convert.gqa200`` (installed: ``sgeval convert gqa200 ...``). Import that module
for the converter's functions."""

import importlib.util
import runpy
import sys

if __name__ != "__main__":
    raise ImportError(f"{__name__} only runs the converter; import sgeval_convert.gqa200 instead")
if importlib.util.find_spec("sgeval_convert") is None:
    sys.exit("error: sgeval_convert is not importable here: run `python -m convert.gqa200 ...` from the repository "
             "root, or install sgeval and run `sgeval convert gqa200 ...`")
runpy.run_module("sgeval_convert.gqa200", run_name="__main__", alter_sys=True)
