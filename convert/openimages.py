"""``python -m convert.openimages ...`` in a checkout, or ``python convert/openimages.py ...`` where sgeval is
installed: runs ``sgeval_convert.openimages`` (installed: ``sgeval convert openimages ...``). Import that module
for the converter's functions."""

import importlib.util
import runpy
import sys

if __name__ != "__main__":
    raise ImportError(f"{__name__} only runs the converter; import sgeval_convert.openimages instead")
if importlib.util.find_spec("sgeval_convert") is None:
    sys.exit("error: sgeval_convert is not importable here: run `python -m convert.openimages ...` from the repository "
             "root, or install sgeval and run `sgeval convert openimages ...`")
runpy.run_module("sgeval_convert.openimages", run_name="__main__", alter_sys=True)
