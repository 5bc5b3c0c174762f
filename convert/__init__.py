"""Entry points of a checkout: ``python -m convert.<family> ...`` (from the repository root) runs the
converter ``sgeval_convert.<family>``, and ``python -m convert --config ...`` its conversion recipes,
as ``sgeval convert <family> ...`` and ``sgeval convert --config ...`` do once sgeval is installed.

The converters themselves are the package ``sgeval_convert`` (installed with sgeval, and beside this
folder in a checkout): import ``sgeval_convert.openpsg`` and so on. Each file here only runs one of
them, so that no file is imported under two names.
"""
