"""``python -m convert.ag ...`` in a checkout, or ``python convert/ag.py ...`` where sgeval is
installed: runs ``sgeval_convert.ag`` (installed: ``sgeval convert ag ...``). Import that module
for the converter's functions."""

import importlib.util
import runpy
import sys

if __name__ != "__main__":
    raise ImportError(f"{__name__} only runs the converter; import sgeval_convert.ag instead")
if importlib.util.find_spec("sgeval_convert") is None:
    sys.exit("error: sgeval_convert is not importable here: run `python -m convert.ag ...` from the repository "
             "root, or install sgeval and run `sgeval convert ag ...`")
runpy.run_module("sgeval_convert.ag", run_name="__main__", alter_sys=True)
