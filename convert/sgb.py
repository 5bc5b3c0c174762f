"""``python -m convert.sgb ...`` in a checkout, or ``python convert/sgb.py ...`` where sgeval is
installed: runs ``sgeval_convert.sgb`` (installed: ``sgeval convert sgb ...``). Import that module
for the converter's functions."""

import importlib.util
import runpy
import sys

if __name__ != "__main__":
    raise ImportError(f"{__name__} only runs the converter; import sgeval_convert.sgb instead")
if importlib.util.find_spec("sgeval_convert") is None:
    sys.exit("error: sgeval_convert is not importable here: run `python -m convert.sgb ...` from the repository "
             "root, or install sgeval and run `sgeval convert sgb ...`")
runpy.run_module("sgeval_convert.sgb", run_name="__main__", alter_sys=True)
