"""sgeval on EvalAI: the evaluation script (evaluation_script/), a starter challenge config and its
templates, and the builder of what a host uploads (build.py). See README.md in this folder."""
