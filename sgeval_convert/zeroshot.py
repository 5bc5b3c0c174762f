"""Convert a ``zeroshot_triplet.pytorch`` to sgeval's ``zeroshot_triplets`` JSON.

    sgeval convert zeroshot zeroshot_triplet.pytorch out.json [--gt vg150.json]

Reads Scene-Graph-Benchmark's file (``maskrcnn_benchmark/data/datasets/evaluation/vg/``, shipped
by PySGG too: a legacy-format torch.save of an int64 tensor (5971, 3)) and SHA-GCL's variant
(``zeroshot_triplet_new.pytorch``: a zip-format torch.save of an int32 numpy array), without torch
(torchfile.py). Rows are (subject class, object class, predicate), 1-based, as
Scene-Graph-Benchmark's zero-shot recall reads them; the output is sgeval's
``[[subject category, object category, predicate], ...]``, 0-based, in the file's row order.
``--gt`` checks every row against the GT JSON's vocabulary (SHA-GCL's predicates are in its own
order: use a GT JSON in that order).
"""

from __future__ import annotations

import json
import os

import click
import numpy as np

import sgeval
from . import common, torchfile


def read_rows(path):
    """The (N, 3) int64 rows of a zeroshot_triplet file, 0-based; ConvertError naming the file."""
    value = torchfile.load(path)
    if not isinstance(value, np.ndarray):
        raise common.ConvertError([f"{path}: holds a {type(value).__name__}; expected a tensor or numpy array of "
                                   f"(subject class, object class, predicate) rows"])
    if value.ndim != 2 or value.shape[1] != 3 or value.dtype.kind not in "biuf":
        raise common.ConvertError([f"{path}: holds an array of shape {value.shape}, dtype {value.dtype}; expected "
                                   f"(N, 3) integer rows (subject class, object class, predicate)"])
    if value.dtype.kind == "f" and not np.array_equal(value, np.round(value)):
        raise common.ConvertError([f"{path}: holds non-integer values; expected integer class ids"])
    rows = value.astype(np.int64)
    if rows.size and rows.min() < 1:
        raise common.ConvertError([f"{path}: row {int(np.argmax((rows < 1).any(axis=1)))} holds a value below 1; "
                                   f"the rows are 1-based class ids"])
    return rows - 1


def _check_vocabulary(rows, path, gt):
    """Every row within the GT JSON's object and predicate classes."""
    truth = sgeval.read_gt(gt)
    n_objects, n_predicates = len(truth.object_classes), len(truth.predicate_classes)
    outside = np.flatnonzero((rows[:, :2] >= n_objects).any(axis=1) | (rows[:, 2] >= n_predicates))
    if outside.size:
        raise common.ConvertError([f"{path}: row {int(outside[0])} (0-based {rows[outside[0]].tolist()}) and "
                                   f"{outside.size - 1} more are outside {gt}'s vocabulary of {n_objects} object "
                                   f"classes and {n_predicates} predicates"])


def convert(raw, out, gt=None):
    """Write the rows of ``raw`` to the JSON ``out`` (module docstring); returns the row count.
    Raises common.ConvertError and then writes nothing."""
    rows = read_rows(raw)
    if gt is not None:
        _check_vocabulary(rows, raw, gt)
    partial = f"{out}.partial"
    with open(partial, "w") as handle:
        handle.write("[" + ",\n ".join(json.dumps(row) for row in rows.tolist()) + "]\n")
    os.replace(partial, out)
    return len(rows)


@click.command(short_help="zero-shot list from a zeroshot_triplet.pytorch",
               context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("raw", type=click.Path(exists=True, dir_okay=False))
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("--gt", type=click.Path(exists=True, dir_okay=False),
              help="GT JSON whose vocabulary every row must fit (optional).")
def main(raw, out, gt):
    """Convert a zeroshot_triplet.pytorch (1-based rows) to sgeval's zeroshot_triplets JSON (0-based)."""
    count = sgeval.run_cli(lambda progress: convert(raw, out, gt), "converting", True)
    click.echo(f"wrote {out}: {count} zero-shot triplet types")


if __name__ == "__main__":
    main()
