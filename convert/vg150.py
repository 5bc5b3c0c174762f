"""``python -m convert.vg150 ...`` in a checkout, or ``python convert/vg150.py ...`` where sgeval is
installed: runs ``sgeval_convert.vg150`` (installed: ``sgeval convert vg150 ...``). Import that module
for the converter's functions."""

import importlib.util
import runpy
import sys

if __name__ != "__main__":
    raise ImportError(f"{__name__} only runs the converter; import sgeval_convert.vg150 instead")
if importlib.util.find_spec("sgeval_convert") is None:
    sys.exit("error: sgeval_convert is not importable here: run `python -m convert.vg150 ...` from the repository "
             "root, or install sgeval and run `sgeval convert vg150 ...`")
runpy.run_module("sgeval_convert.vg150", run_name="__main__", alter_sys=True)
