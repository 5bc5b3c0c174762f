"""``python -m convert.openpsg ...`` in a checkout, or ``python convert/openpsg.py ...`` where sgeval is
installed: runs ``sgeval_convert.openpsg`` (installed: ``sgeval convert openpsg ...``). Import that module
for the converter's functions."""

import importlib.util
import runpy
import sys

if __name__ != "__main__":
    raise ImportError(f"{__name__} only runs the converter; import sgeval_convert.openpsg instead")
if importlib.util.find_spec("sgeval_convert") is None:
    sys.exit("error: sgeval_convert is not importable here: run `python -m convert.openpsg ...` from the repository "
             "root, or install sgeval and run `sgeval convert openpsg ...`")
runpy.run_module("sgeval_convert.openpsg", run_name="__main__", alter_sys=True)
