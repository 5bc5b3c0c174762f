"""sgeval report -- paper tables and figures from sgeval results files (one per model).

    python sgeval.py report results/*.json                     # Markdown on stdout
    sgeval report results/*.json --format latex --output table.tex --label results/hilo.json=HiLo
    sgeval report results/*.json --tables all --output report.md --plots figures/ --plot-formats png,pdf

Tables (``--tables``, comma-separated, or ``all``):

* ``main``: one row per model, the chosen metrics (``--metrics`` families or keys, ``--k`` cut-offs)
  of one protocol (``--protocol``; default: each file's headline protocol), in percent with
  ``--decimals`` decimals (PRank: a mean rank, lower is better); best value per column in bold,
  second underlined (with three rows or more). Default metrics: R, mR, or the headline protocol's
  own columns (``Protocol.report_metrics``: an ``oi`` headline PySGG's Open Images columns, an
  ``ag`` headline STTran's with / semi / no constraint recall and TEMPURA's mR at every k).
* ``protocols``: per model, ``--compare-metrics`` under every protocol the runs evaluated
  (``--protocols``; headline first), and the protocol audit of each run under the table.
* ``predicates``: one row per predicate (by GT frequency, in head / body / tail groups when the
  run defined them or its training statistics allow the frequency split): GT count and the m-type
  metrics among the chosen ones, per model.
* ``confusion``: per model, the top ``--top`` predicate confusions: GT predicate, the predicate
  the first row on its pair has, how many GT triplets and their share.

Formats (``--format``, case-insensitive): ``markdown`` (or ``md``), ``latex`` (or ``tex``; booktabs:
``\\usepackage{booktabs}``), ``csv`` (full precision, no marks). Results that are not comparable
are refused (different GT, mode, task, IoU threshold or aggregation rules), or with
``--allow-mixed`` shown with a mark; results of different sgeval versions are always marked.
``--plots DIR`` draws the figures of sgeval_plots.py (needs matplotlib: ``pip install sgeval[plots]``).
"""

from __future__ import annotations

import csv
import io
import json
import re
import typing
from pathlib import Path

import click
import yaml

import sgeval

MAX_RESULTS_BYTES = 1 << 28  # a results file larger than this is refused
MAX_LABELS_BYTES = 1 << 24  # and a --labels file
MAX_NUMBER = 2 ** 53  # a results file's numbers are within +-this (metrics are fractions, ranks and counts)
TABLES = ("main", "protocols", "predicates", "confusion", "segmentation")
FORMATS = ("markdown", "latex", "csv")
FORMAT_ALIASES = {"md": "markdown", "tex": "latex"}  # the usual short names, accepted too
NO_K_KEYS = ("InstR", "R@inf", "mR@inf", "PRank", *sgeval.OI_SCALARS, *sgeval.PQ_KEYS)
SEGMENTATION_KEYS = ("PQ", "SQ", "RQ", "PQ_th", "PQ_st", "R@inf", "mR@inf")  # and the headline mR@k
OWN_COLUMNS = "; ".join(f"on {name} results: {','.join(unit.report_metrics)}" for name, unit in sgeval.PROTOCOLS.items()
                        if unit.report_metrics != sgeval.Protocol.report_metrics)  # the --metrics help
LOWER_IS_BETTER = ("PRank",)


class ReportError(sgeval.SGEvalError):
    """A results file or option the report cannot use (one line per problem)."""


class Run(typing.NamedTuple):
    """One results file: its label in tables and legends, its path and its parsed content."""

    label: str
    path: str
    results: dict


class Table(typing.NamedTuple):
    """A table before rendering. Cells are text (str), counts (int) or metric values (float, None)."""

    name: str  # main, protocols, predicates, confusion-<label>
    title: str
    columns: list  # [(group, header, flat header)] for every column; group "" = no group
    rows: list  # [[cell, ...]]; the first cell is the row label
    kinds: list  # per column: "text", "count", "percent" (a [0, 1] value) or "rank" (PRank)
    notes: list  # lines under the table
    best: bool  # mark the best and second value of each metric column


# ---------------------------------------------------------------------------------------------
# Reading results files
# ---------------------------------------------------------------------------------------------


def _number_map(value, where, problems, integer=False):
    """A {name: number or None} mapping (counts only when integer), or a problem."""
    good = _count if integer else lambda v: v is None or _finite(v)
    if not isinstance(value, dict) or not all(map(good, value.values())):
        problems.append(f"{where}: expected a mapping of names to " + ("counts (integers from 0 to 2**53)" if integer
                                                                      else "finite numbers (within +-2**53) or null"))
        return False
    return True


def _text(value):
    return isinstance(value, str)


def _texts(value):
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _finite(value):
    """A number a table can show: finite and within MAX_NUMBER (a larger int does not fit a float)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and -MAX_NUMBER <= value <= MAX_NUMBER


def _count(value):
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_NUMBER


FIELDS = (  # (path, check, what it must be, required): the fields the report reads besides the sections
    (("sgeval_version",), _text, "a version string", True),
    (("config",), lambda v: isinstance(v, dict), "a mapping", True),
    (("config", "k"), lambda v: _texts(v) and v, "a list of cut-off labels", True),
    (("config", "protocol"), _text, "a protocol name", True),
    (("config", "imr_k"), _texts, "a list of cut-off labels", False),
    (("config", "model"), lambda v: v is None or _text(v), "a name or null", False),
    (("config", "task"), _text, "a task name", False),
    (("config", "gt_seg"), lambda v: v is None or _text(v), "a path or null", False),
    (("config", "iou_threshold"), _finite, "a number", False),
    (("images",), lambda v: isinstance(v, dict), "a mapping", True),
    (("images", "evaluated"), _count, "a count", True),
    (("protocol_audit",), lambda v: v is None or isinstance(v, dict), "a mapping or null", False),
    (("protocol_audit", "per_image_mean"), lambda v: isinstance(v, dict) and all(map(_finite, v.values())),
     "a mapping of names to numbers", False),
    (("predicate_groups",), lambda v: v is None or isinstance(v, dict) and all(map(_texts, v.values())),
     "a mapping of group names to lists of predicate names", False),
)
_MISSING = object()


def _at(value, path):
    for key in path:
        value = value.get(key, _MISSING) if isinstance(value, dict) else _MISSING
    return value


def _check_fields(results, where, problems):
    for path, check, what, required in FIELDS:
        if not isinstance(_at(results, path[:-1]), dict):
            continue  # its parent is reported (or null where that is allowed)
        value = _at(results, path)
        if value is _MISSING and not required:
            continue
        if value is _MISSING or not check(value):
            problems.append(f"{where}{'.'.join(path)}: expected {what}")


def _each(value, where, problems, check_item):
    """check_item(key, item) for each item of a mapping, or a problem when value is not one."""
    if not isinstance(value, dict):
        problems.append(f"{where}: expected a mapping")
        return
    for key, item in value.items():
        check_item(key, item)


def _check_section(section, where, problems):
    """A protocol's part of a results file: metrics, per_predicate (and predicate_confusion);
    where: the problems' prefix ("file: " or "file: by_protocol.unique.")."""
    if not isinstance(section, dict):
        problems.append(f"{where.rstrip('.')}: expected a mapping")
        return
    _number_map(section.get("metrics"), f"{where}metrics", problems)
    rules = section.get("rules", {})
    if not isinstance(rules, dict) or not all(map(_text, rules.values())):
        problems.append(f"{where}rules: expected a mapping of rule names to values")
    _each(section.get("per_predicate", {}), f"{where}per_predicate", problems,
          lambda key, values: _number_map(values, f"{where}per_predicate.{key}", problems))
    confusion = section.get("predicate_confusion")
    if confusion is not None:
        if not isinstance(confusion, dict) or not isinstance(confusion.get("counts"), dict) or not _text(
                confusion.get("k")):
            problems.append(f"{where}predicate_confusion: expected a mapping with k and counts")
        else:
            for name, row in confusion["counts"].items():
                _number_map(row, f"{where}predicate_confusion.counts.{name}", problems, integer=True)
            _number_map(confusion.get("no_prediction", {}), f"{where}predicate_confusion.no_prediction", problems,
                        integer=True)


PQ_MEANS = ("All", "Things", "Stuff")


def _check_panoptic_quality(section, where, problems):
    """The panoptic_quality section (pq: true; absent or null otherwise): rule, merge and source names,
    the means (a mapping of numbers, or null where no category counts) and per_category."""
    if section is None:
        return
    if not isinstance(section, dict):
        problems.append(f"{where}panoptic_quality: expected a mapping or null")
        return
    for key in ("rule", "merge", "source"):  # (source: since the panoptic segmentations of predictions)
        if not _text(section.get(key)) and (key != "source" or key in section):
            problems.append(f"{where}panoptic_quality.{key}: expected a name")
    for key in PQ_MEANS:
        if section.get(key) is not None:
            _number_map(section[key], f"{where}panoptic_quality.{key}", problems)
    _each(section.get("per_category", {}), f"{where}panoptic_quality.per_category", problems,
          lambda name, values: _number_map(values, f"{where}panoptic_quality.per_category.{name}", problems))


def read_results(path):
    """The parsed results file at path, checked for every field the report reads; ReportError otherwise."""
    data = _read_file(path, "the results file", MAX_RESULTS_BYTES)
    try:
        results = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as error:  # not UTF-8, not JSON, too deep, a number of too many digits
        raise ReportError([f"{path}: cannot read the results file: {' '.join(str(error).split())}"]) from None
    if not isinstance(results, dict) or "sgeval_version" not in results:
        raise ReportError([f"{path}: not an sgeval results file (no sgeval_version)"])
    problems = []
    _check_fields(results, f"{path}: ", problems)
    _check_section(results, f"{path}: ", problems)
    _check_panoptic_quality(results.get("panoptic_quality"), f"{path}: ", problems)
    _number_map(results.get("gt_relations_per_predicate"), f"{path}: gt_relations_per_predicate", problems, True)
    _number_map(results.get("training_relations_per_predicate", {}), f"{path}: training_relations_per_predicate",
                problems, True)
    _each(results.get("by_protocol", {}), f"{path}: by_protocol", problems,
          lambda protocol, section: _check_section(section, f"{path}: by_protocol.{protocol}.", problems))
    if problems:
        raise ReportError(problems)
    return results


def _read_file(path, what, limit):
    """The bytes of a regular file of at most limit bytes (sgeval.read_regular), or ReportError."""
    try:
        return sgeval.read_regular(path, what, limit)
    except sgeval.SGEvalError as error:
        raise ReportError(error.problems) from None


def default_labels(paths, results):
    """Each run's label: its config's model name, else its file name; parent/name where names repeat."""
    labels = [result["config"].get("model") or Path(path).stem for path, result in zip(paths, results)]
    return [f"{Path(path).parent.name}/{label}" if labels.count(label) > 1 and not result["config"].get("model")
            else label for path, label, result in zip(paths, labels, results)]


def load_runs(paths, labels=None):
    """Run of each results file; labels maps a path (as given, or a file's name or stem) to a label."""
    results = [read_results(path) for path in paths]
    names = default_labels(paths, results)
    for index, path in enumerate(paths):
        for key in (str(path), Path(path).name, Path(path).stem):
            if labels and key in labels:
                names[index] = str(labels[key])
                break
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ReportError([f"report: several results files are labelled '{name}'; give them labels with --label "
                           f"FILE=NAME" for name in repeated])
    return [Run(label, str(path), result) for label, path, result in zip(names, paths, results)]


# ---------------------------------------------------------------------------------------------
# Which numbers: protocols, metric keys, comparability
# ---------------------------------------------------------------------------------------------


def section(run, protocol=None):
    """The results part of one protocol (None: the headline), or None when the run lacks it."""
    results = run.results
    if protocol in (None, results["config"]["protocol"]):
        return results
    return results.get("by_protocol", {}).get(protocol)


def metric_keys(runs, families, ks):
    """Metric keys from families (R, mR, ...: one per k; IMR, wIMR: per imr_k; InstR, Rinf, PRank)
    and explicit keys ("R@50", "mR@50/head"), in the order given."""
    imr_ks = runs[0].results["config"].get("imr_k", []) if runs else []
    keys = []
    for item in families:
        if "@" in item or item in NO_K_KEYS:
            keys.append(item)
        elif item == "Rinf":
            keys += ["R@inf", "mR@inf"]
        else:
            keys += [f"{item}@{k}" for k in (imr_ks if item in ("IMR", "wIMR") else ks)]
    return list(dict.fromkeys(keys))


def default_ks(runs):
    """The absolute cut-offs every run reports, in the first run's order."""
    common = set.intersection(*(set(run.results["config"]["k"]) for run in runs))
    return [k for k in runs[0].results["config"]["k"] if k in common and not k.startswith("x")] or \
        [k for k in runs[0].results["config"]["k"] if k in common]


def headline_k(ks):
    """The cut-off of the one-number views (protocol comparison, predicates, plots): 50 when there."""
    return "50" if "50" in ks else ks[0]


def _gt_fingerprint(results):
    images = results.get("images", {})
    relations = results["gt_relations_per_predicate"]
    return f"{images.get('evaluated')} images, {sum(relations.values())} relations"


COMPARED = {  # what must be equal for numbers to share a table: name -> value of a run (and protocol)
    "GT": lambda results, part: (_gt_fingerprint(results), json.dumps(results["gt_relations_per_predicate"],
                                                                      sort_keys=True)),
    "mode": lambda results, part: ("mask" if results["config"].get("gt_seg") else "box",),
    "task": lambda results, part: (results["config"].get("task", "sgdet"),),
    "IoU threshold": lambda results, part: (str(results["config"].get("iou_threshold")),),
    "aggregation rules": lambda results, part: None if part is None else (", ".join(
        f"{k} {v}" for k, v in sorted((part.get("rules") or {}).items())),),
}


def comparability(runs, protocol, allow_mixed):
    """(marks {label: [letter]}, notes): runs that differ from the first in what COMPARED names are
    refused (ReportError), or marked with allow_mixed; another sgeval version is always marked."""
    marks, notes, refused = {run.label: [] for run in runs}, [], []
    first = runs[0]
    checks = [(name, lambda run, get=get: get(run.results, section(run, protocol))) for name, get in
              COMPARED.items()]
    checks.append(("sgeval version", lambda run: (str(run.results["sgeval_version"]),)))
    for name, value_of in checks:  # None: the run lacks the protocol (its cells are dashes)
        differing = [run for run in runs[1:] if None not in (value_of(run), value_of(first))
                     and value_of(run) != value_of(first)]
        if not differing:
            continue
        text = f"{name}: {first.label} ({value_of(first)[0]}) vs " + ", ".join(
            f"{run.label} ({value_of(run)[0]})" for run in differing)
        if name != "sgeval version" and not allow_mixed:
            refused.append(f"report: the results differ in {text}; their numbers are not comparable in one table "
                           f"(--allow-mixed shows them with a mark)")
            continue
        letter = "abcdefghijklmnopqrstuvwxyz"[len(notes) % 26]
        notes.append(f"{letter}: {name} differs from {first.label}'s: {text}")
        for run in differing:
            marks[run.label].append(letter)
    if refused:
        raise ReportError(refused)
    return marks, notes


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------


def _key_column(key):
    """'mR@50' -> ('mR@K', '50', 'mR@50'); 'mR@50/head' -> ('mR@K head', '50', ...); 'InstR' -> ('', 'InstR', ...)."""
    if "@" not in key or key in ("R@inf", "mR@inf"):
        return "", key, key
    family, k = key.split("@", 1)
    k, _, group = k.partition("/")
    return f"{family}@K" + (f" {group}" if group else ""), k, key


def _column(header, group=""):
    return group, header, f"{group} {header}".strip()


def _kind(key):
    return "rank" if key in LOWER_IS_BETTER else "percent"


def _label(run, marks):
    return (run.label, marks.get(run.label, []))


def main_table(runs, keys, protocol, marks, notes):
    rows = [[_label(run, marks)] + [(section(run, protocol) or {}).get("metrics", {}).get(key) for key in keys]
            for run in runs]
    missing = [run.label for run in runs if section(run, protocol) is None]
    protocols = sorted({protocol or run.results["config"]["protocol"] for run in runs})
    first = runs[0].results
    lines = [f"Protocol {', '.join(protocols)}; {'mask' if first['config'].get('gt_seg') else 'box'} mode, "
             f"task {first['config'].get('task', 'sgdet')}, {first['images']['evaluated']} images. Values in "
             f"percent" + ("; PRank: mean rank, lower is better" if "PRank" in keys else "") + "."]
    if missing:
        lines.append(f"-: {protocol} not evaluated in the run of {', '.join(missing)}")
    return Table("main", "Results", [_column("Model")] + [_key_column(key) for key in keys], rows,
                 ["text"] + [_kind(key) for key in keys], lines + notes, True)


def protocol_names(runs):
    """Every protocol the runs evaluated: the first run's headline first, then in order of appearance."""
    names = [runs[0].results["config"]["protocol"]]
    for run in runs:
        names += [run.results["config"]["protocol"], *run.results.get("by_protocol", {})]
    return list(dict.fromkeys(names))


def audit_line(run):
    means = (run.results.get("protocol_audit") or {}).get("per_image_mean")  # checked by read_results
    if not means:
        return f"{run.label}: no protocol audit in its results"
    return f"{run.label}: " + ", ".join(f"{field.replace('_', ' ')} {value:.2f}" for field, value in means.items())


def protocols_table(runs, keys, marks, notes, protocols=None):
    protocols = protocols or protocol_names(runs)
    columns = [_column(name + (" (headline)" if name == runs[0].results["config"]["protocol"] else ""), key)
               for key in keys for name in protocols]
    rows = [[_label(run, marks)] + [(section(run, name) or {}).get("metrics", {}).get(key) for key in keys
                                    for name in protocols] for run in runs]
    lines = ["Same predictions and GT under each protocol; values in percent; -: not evaluated in that run."] + [
        f"Protocol audit (per image), {audit_line(run)}." for run in runs]
    return Table("protocols", "Protocol comparison", [_column("Model")] + columns, rows,
                 ["text"] + [_kind(key) for key, _, _ in columns], lines + notes, True)


def predicate_groups(results):
    """{group: [predicate names]} of a run: its own groups, else the frequency split of its
    training statistics (sgeval's rule), else {}."""
    if results.get("predicate_groups"):
        return results["predicate_groups"]
    training = results.get("training_relations_per_predicate") or {}
    names = list(dict.fromkeys([*results["gt_relations_per_predicate"], *training]))
    if not sum(training.values()):
        return {}
    groups = sgeval.predicate_groups("frequency", names, [training.get(name, 0) for name in names])
    return {group: [names[i] for i in members] for group, members in groups.items()}


def predicate_order(results):
    """(names, groups): the GT predicates of results by descending GT count (ties by name) or, with
    predicate groups, group by group in that order, the predicates of no group last; groups =
    [(group name, start, stop)] index ranges of names (groups without a GT predicate left out)."""
    counts = results.get("gt_relations_per_predicate") or {}
    by_count = sorted(counts, key=lambda name: (-counts[name], name))
    names, placed, groups = [], set(), []
    for group, members in (results.get("predicate_groups") or {}).items():
        chosen = [name for name in by_count if name in set(members) and name not in placed]
        if chosen:
            groups.append((group, len(names), len(names) + len(chosen)))
            names += chosen
            placed.update(chosen)
    return names + [name for name in by_count if name not in placed], groups


def predicates_table(runs, keys, protocol):
    first = runs[0].results
    counts = first["gt_relations_per_predicate"]
    groups = predicate_groups(first)
    names, spans = predicate_order({**first, "predicate_groups": groups})
    group_of = {name: group for group, start, stop in spans for name in names[start:stop]}
    m_keys = [key for key in keys if key.startswith(("mR@", "mNgR@", "IMR@")) and "/" not in key]
    columns = [_column("Predicate")] + ([_column("Group")] if groups else []) + [_column("GT")] + [
        _column(key, run.label) for run in runs for key in m_keys]
    rows = []
    for name in names:
        values = [((section(run, protocol) or {}).get("per_predicate", {}).get(key) or {}).get(name) for run in runs
                  for key in m_keys]
        rows.append([(name, [])] + ([group_of.get(name, "-")] if groups else []) + [counts[name]] + values)
    source = "the run's predicate_groups" if first.get("predicate_groups") else \
        "the frequency split of the training relations (head: half of them, body: up to 90%)"
    lines = [f"Per-predicate recall in percent (the per-predicate values behind {', '.join(m_keys)}), predicates by "
             f"GT count" + (f", grouped by {source}" if groups else "") + "."]
    return Table("predicates", "Per predicate", columns, rows,
                 ["text"] + (["text"] if groups else []) + ["count"] + ["percent"] * (len(columns) - 2 - bool(groups)),
                 lines, False)


def top_confusions(confusion, n):
    """The n largest cells (GT predicate, other predicate): (gt, predicted, count, share of gt's
    triplets, share of gt's triplets hit)."""
    totals = {gt: sum(row.values()) + confusion.get("no_prediction", {}).get(gt, 0)
              for gt, row in confusion["counts"].items()}
    cells = [(gt, predicted, count) for gt, row in confusion["counts"].items() for predicted, count in row.items()
             if predicted != gt]
    cells.sort(key=lambda cell: (-cell[2], cell[0], cell[1]))
    return [(gt, predicted, count, count / totals[gt], confusion["counts"][gt].get(gt, 0) / totals[gt])
            if totals[gt] else (gt, predicted, count, 0.0, 0.0) for gt, predicted, count in cells[:n]]


def confusion_tables(runs, protocol, n):
    tables = []
    for run in runs:
        confusion = (section(run, protocol) or {}).get("predicate_confusion")
        if not confusion:
            continue
        rows = [[(gt, []), predicted, count, share, correct]
                for gt, predicted, count, share, correct in top_confusions(confusion, n)]
        name = protocol or run.results["config"]["protocol"]
        tables.append(Table(f"confusion-{run.label}", f"Top predicate confusions: {run.label}",
                            [_column(text) for text in ("GT predicate", "Predicted as", "Triplets", "Share (%)",
                                                        "Correct (%)")],
                            rows, ["text", "text", "count", "percent", "percent"],
                            [f"Protocol {name}: GT triplets whose pair the first {confusion['k']} rows (its selection) "
                             f"reach with another predicate first. Share: of the GT predicate's triplets; correct: "
                             f"those of them hit (its pooled R@{confusion['k']})."], False))
    return tables


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------


def _value_text(value, kind, decimals):
    if value is None:
        return None
    if kind == "count":
        return str(value)
    return f"{value:.2f}" if kind == "rank" else f"{100 * value:.{decimals}f}"


def _ranks(table, decimals):
    """{(row, column): 1 best / 2 second} over the metric columns of a table with best set."""
    ranks = {}
    for column, kind in enumerate(table.kinds if table.best else ()):
        if kind not in ("percent", "rank"):
            continue
        shown = {row: _value_text(cells[column], kind, decimals) for row, cells in enumerate(table.rows)}
        valued = [text for text in shown.values() if text is not None]
        if len(valued) < 2:
            continue
        values = sorted({float(text) for text in valued}, reverse=kind != "rank")
        for place, value in enumerate(values[:2 if len(valued) >= 3 else 1], 1):
            ranks.update({(row, column): place for row, text in shown.items() if text is not None
                          and float(text) == value})
    return ranks


def _cells(table, decimals, text_of, mark_of, label_of):
    """Rendered cell strings of every row: text_of(text) escapes, mark_of(text, rank) marks."""
    ranks = _ranks(table, decimals)
    out = []
    for r, row in enumerate(table.rows):
        cells = []
        for c, (cell, kind) in enumerate(zip(row, table.kinds)):
            if isinstance(cell, tuple):
                cells.append(label_of(*cell))
            elif kind == "text":
                cells.append(text_of(str(cell)))
            else:
                text = _value_text(cell, kind, decimals)
                cells.append(mark_of(text, ranks.get((r, c))) if text is not None else text_of("-"))
        out.append(cells)
    return out


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")  # line breaks and control characters: spaces in a table


_HTML_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def _markdown_escape(text):
    """text shown as it is in a Markdown table: line breaks and control characters as spaces,
    HTML's & < > as entities, the punctuation of links, images, emphasis, code, math and cells
    escaped."""
    text = re.sub(r"[&<>]", lambda match: _HTML_ENTITIES[match.group()], _CONTROL.sub(" ", text))
    return re.sub(r"([|*_\\`\[\]~#!$])", r"\\\1", text)


def render_markdown(table, decimals):
    headers = [flat for _, _, flat in table.columns]
    rows = _cells(table, decimals, _markdown_escape,
                  lambda text, rank: f"**{text}**" if rank == 1 else f"<ins>{text}</ins>" if rank == 2 else text,
                  lambda label, marks: _markdown_escape(label) + (f"<sup>{','.join(marks)}</sup>" if marks else ""))
    align = ["---" if kind == "text" else "---:" for kind in table.kinds]
    lines = [f"**{_markdown_escape(table.title)}**", "", "| " + " | ".join(map(_markdown_escape, headers)) + " |",
             "|" + "|".join(align) + "|"] + ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines + [""] + [f"- {_markdown_escape(note)}" for note in table.notes])


_LATEX_SPECIAL = {"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
                  "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}"}


def _latex_escape(text):
    text = "".join(_LATEX_SPECIAL.get(char, char) for char in _CONTROL.sub(" ", text))
    return re.sub(r"\bx(?=[0-9.]+\b)", r"$\\times$", text)  # relative cut-offs: x10 -> ×10


def render_latex(table, decimals):
    rows = _cells(table, decimals, _latex_escape,
                  lambda text, rank: rf"\textbf{{{text}}}" if rank == 1 else rf"\underline{{{text}}}" if rank == 2
                  else text,
                  lambda label, marks: _latex_escape(label) + (f"$^{{{','.join(marks)}}}$" if marks else ""))
    spans, start = [], 0  # runs of equal groups over the columns
    for index in range(1, len(table.columns) + 1):
        if index == len(table.columns) or table.columns[index][0] != table.columns[start][0]:
            spans.append((table.columns[start][0], start, index))
            start = index
    lines = [r"% sgeval report: needs \usepackage{booktabs}", r"\begin{table}[t]", r"\centering", r"\small",
             rf"\caption{{{_latex_escape(table.title)}}}",
             rf"\label{{tab:sgeval-{re.sub(r'[^A-Za-z0-9]+', '-', table.name).strip('-').lower()}}}",
             r"\begin{tabular}{" + "".join("l" if kind == "text" else "r" for kind in table.kinds) + "}", r"\toprule"]
    if any(group for group, _, _ in table.columns):
        lines.append(" & ".join(rf"\multicolumn{{{stop - start}}}{{c}}{{{_latex_escape(group)}}}" if group else
                                " & ".join([""] * (stop - start)) for group, start, stop in spans) + r" \\")
        lines.append(" ".join(rf"\cmidrule(lr){{{start + 1}-{stop}}}" for group, start, stop in spans if group))
    lines.append(" & ".join(_latex_escape(header) for _, header, _ in table.columns) + r" \\")
    lines.append(r"\midrule")
    lines += [" & ".join(row) + r" \\" for row in rows]
    lines += [r"\bottomrule", r"\end{tabular}"]
    lines += [r"\par\smallskip\footnotesize " + _latex_escape(note) for note in table.notes]
    return "\n".join(lines + [r"\end{table}"])


def render_csv(table, decimals):
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["table", table.name])
    writer.writerow([flat for _, _, flat in table.columns])
    for row in table.rows:
        writer.writerow([f"{cell[0]}{' [' + ','.join(cell[1]) + ']' if cell[1] else ''}" if isinstance(cell, tuple)
                         else "" if cell is None else repr(100 * cell) if kind == "percent" else cell
                         for cell, kind in zip(row, table.kinds)])
    return buffer.getvalue().rstrip("\n")


RENDERERS = {"markdown": render_markdown, "latex": render_latex, "csv": render_csv}


# ---------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------


def _require(runs, keys, protocols):
    """ReportError for keys no run reports and protocols no run evaluated."""
    problems = [f"report: no results file has protocol {name} (they have {', '.join(protocol_names(runs))})"
                for name in protocols if all(section(run, name) is None for run in runs)]
    if problems:
        raise ReportError(problems)
    available = {key for run in runs for name in protocols for key in (section(run, name) or {}).get("metrics", {})}
    missing = [key for key in keys if key not in available]
    if missing:
        problems.append(f"report: no results file has {', '.join(missing)} (see --metrics and --k; they have "
                        f"{', '.join(sorted(available)[:30])}{' ...' if len(available) > 30 else ''})")
    if problems:
        raise ReportError(problems)


def build_tables(runs, tables=("main", "protocols"), families=("R", "mR"), ks=None, protocol=None,
                 compare_keys=None, top=10, allow_mixed=False, compare_protocols=None):
    """The report's Tables for runs (see the module docstring for every option)."""
    ks = list(ks or default_ks(runs))
    if not ks:
        raise ReportError(["report: the results files share no cut-off k; choose them with --k"])
    protocols = {protocol or run.results["config"]["protocol"] for run in runs}
    if protocol is None and len(protocols) > 1:
        raise ReportError([f"report: the results files have different headline protocols ({', '.join(sorted(protocols))}); "
                           f"choose the protocol of the table with --protocol"])
    marks, notes = comparability(runs, protocol, allow_mixed)
    keys = metric_keys(runs, families, ks)
    _require(runs, keys, [protocol or runs[0].results["config"]["protocol"]])
    out = []
    if "main" in tables:
        out.append(main_table(runs, keys, protocol, marks, notes))
    if "protocols" in tables:
        k = headline_k(ks)
        compare_keys = compare_keys or [f"R@{k}", f"mR@{k}"]
        _require(runs, compare_keys, compare_protocols or protocol_names(runs))
        out.append(protocols_table(runs, compare_keys, marks, notes, compare_protocols))
    if "predicates" in tables:
        out.append(predicates_table(runs, keys, protocol))
    if "confusion" in tables:
        out += confusion_tables(runs, protocol, top)
    if "segmentation" in tables:
        out.append(segmentation_table(runs, [*SEGMENTATION_KEYS, f"mR@{headline_k(ks)}"], marks, notes))
    return out


def segmentation_table(runs, keys, marks, notes):
    """PQ, SQ, RQ (things, stuff) beside R@inf, mR@inf and the headline mR@k: the masks' quality and the
    recall they allow, together (runs without pq: true show '-')."""
    if not any((run.results.get("metrics") or {}).get("PQ") is not None for run in runs):
        raise ReportError(["report: the segmentation table needs panoptic quality: evaluate with pq: true (mask mode)"])
    rows = [[_label(run, marks)] + [(run.results.get("metrics") or {}).get(key) for key in keys] for run in runs]
    basis_of = {run.label: pq_basis(run.results.get("panoptic_quality") or {}) for run in runs}
    bases = sorted(set(basis_of.values()))
    lines = [f"Panoptic quality ({'; '.join(bases)}; _th things, _st stuff) beside the recall of the headline "
             f"protocol. Values in percent."]
    if len(bases) > 1:  # each rule makes other segments of the same masks: PQ compares across rules only so
        lines.append("The runs' segmentations or rules differ: " + ", ".join(
            f"{label} {basis}" for label, basis in basis_of.items()) + ".")
    return Table("segmentation", "Segmentation quality and recall", [_column("Model")] + [_key_column(key) for key in keys],
                 rows, ["text"] + [_kind(key) for key in keys], lines + notes, True)


def pq_basis(section):
    """Whose PQ a run's panoptic_quality section is, and of which segmentation (its rule, its source,
    its merge rule): e.g. 'panopticapi, masks merged by score-order'."""
    source = section.get("source", "masks")
    merged = f"merged by {section.get('merge', '-')}"
    segmentation = {"panoptic": "the model's panoptic segmentation", "masks": f"masks {merged}",
                    "mixed": f"panoptic segmentations and masks {merged}"}.get(source, "no segmentation")
    return f"{section.get('rule', 'panopticapi')}, {segmentation}"


def render(tables, fmt="markdown", decimals=1):
    """The tables as one text in fmt: one of FORMATS or FORMAT_ALIASES, in any case."""
    fmt = FORMAT_ALIASES.get(fmt.lower(), fmt.lower())
    return ("\n\n" if fmt == "csv" else "\n\n\n").join(RENDERERS[fmt](table, decimals) for table in tables) + "\n"


def _plots_module():
    """sgeval_plots (imported here: only --plots needs matplotlib); ReportError when it or
    matplotlib is not installed."""
    try:
        import sgeval_plots
    except ModuleNotFoundError as error:
        if error.name == "sgeval_plots":
            raise ReportError(["report: plots need sgeval_plots.py beside sgeval_report.py (pip install "
                               "'sgeval[plots]' has it)"]) from None
        raise ReportError([f"report: plots need matplotlib ({error}): pip install 'sgeval[plots]'"]) from None
    return sgeval_plots


def write_plots(runs, out_dir, formats=("png",), k="50"):
    """Every figure of sgeval_plots into out_dir: per_predicate (mR@k; the predicates table's order
    and groups), recall_vs_k, protocols (R@k, mR@k) and confusion-<slug of label> for each run with
    a predicate_confusion (its top 10 confusions outlined); a figure without data is skipped.
    Returns the paths written; ReportError when matplotlib is not installed."""
    plots, out_dir = _plots_module(), Path(out_dir)
    runs = [run._replace(results={**run.results, "predicate_groups": predicate_groups(run.results)})
            for run in runs]  # the groups of the predicate table shade the per-predicate figure too
    if not runs:
        return []
    written = plots.per_predicate_recall(runs, predicate_order(runs[0].results), out_dir / "per_predicate", formats,
                                         key=f"mR@{k}")
    written += plots.recall_vs_k(runs, out_dir / "recall_vs_k", formats)
    written += plots.protocol_comparison(runs, out_dir / "protocols", formats, keys=(f"R@{k}", f"mR@{k}"))
    written += plots.pq_vs_recall(runs, out_dir / "pq_vs_mr_inf", formats)
    for run, name in zip(runs, plots.unique_slugs(run.label for run in runs)):
        confusion = run.results.get("predicate_confusion")
        if confusion:
            written += plots.confusion_matrix(run, top_confusions(confusion, 10), out_dir / f"confusion-{name}",
                                              formats)
    return written


def _choices(value, allowed, option):
    items = sgeval.as_list(value) if value else []
    if items == ["all"]:
        return list(allowed)
    unknown = [item for item in items if item not in allowed]
    if unknown:
        raise click.BadParameter(f"{', '.join(unknown)}; choose from {', '.join(allowed)} or all", param_hint=option)
    return items


def _labels(pairs, mapping_file):
    labels = {}
    if mapping_file:
        data = _read_file(mapping_file, "the labels", MAX_LABELS_BYTES)
        try:
            loaded = yaml.load(data.decode("utf-8"), Loader=yaml.BaseLoader)
        except (ValueError, RecursionError, yaml.YAMLError) as error:
            raise ReportError([f"{mapping_file}: cannot read the labels: {' '.join(str(error).split())}"]) from None
        if not isinstance(loaded, dict) or not all(isinstance(v, str) for v in loaded.values()):
            raise ReportError([f"{mapping_file}: expected a mapping of results files to labels"])
        labels.update(loaded)
    for pair in pairs:
        path, separator, label = pair.rpartition("=")
        if not separator or not path or not label:
            raise click.BadParameter(f"'{pair}' is not FILE=LABEL", param_hint="--label")
        labels[path] = label
    return labels


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("results", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--tables", "table_names", help="Tables, comma-separated: main, protocols, predicates, confusion, "
              "segmentation or all (default: main, protocols when a run has several, segmentation when one has PQ).")
@click.option("--metrics", help="Metric families (R, mR, ngR, ... one column per k) or keys (R@50, mR@50/head, "
              "PRank, wmAP_rel) (default: R,mR; " + OWN_COLUMNS + ").")
@click.option("--k", "ks", help="Cut-offs (default: the absolute ones every file has).")
@click.option("--protocol", help="Protocol of the main, predicates and confusion tables (default: the headline).")
@click.option("--compare-metrics", help="Keys of the protocol comparison (default: R@50, mR@50).")
@click.option("--protocols", "compare_protocols", help="Protocols of the comparison (default: all the runs have).")
@click.option("--label", "label_pairs", multiple=True, help="FILE=LABEL, the row label of a results file.")
@click.option("--labels", "labels_file", type=click.Path(dir_okay=False), help="YAML/JSON {file: label}.")
@click.option("--format", "fmt", type=click.Choice(FORMATS + tuple(FORMAT_ALIASES), case_sensitive=False),
              default="markdown", show_default=True, help="markdown (or md), latex (or tex), csv.")
@click.option("--decimals", type=click.IntRange(0, 6), default=1, show_default=True)
@click.option("--top", type=click.IntRange(1, 1000), default=10, show_default=True, help="Rows of the top confusions.")
@click.option("--allow-mixed", is_flag=True, help="Show results that are not comparable, marked, instead of refusing.")
@click.option("--output", help="Write the tables here (default: stdout).")
@click.option("--plots", "plots_dir", help="Also draw the figures into this folder (needs matplotlib).")
@click.option("--plot-formats", default="png", show_default=True, help="png, pdf, svg, comma-separated.")
def main(results, table_names, metrics, ks, protocol, compare_metrics, compare_protocols, label_pairs, labels_file,
         fmt, decimals, top, allow_mixed, output, plots_dir, plot_formats):
    """Paper tables (Markdown, LaTeX, CSV) and figures from sgeval results files, one per model."""
    plot_formats = _choices(plot_formats, ("png", "pdf", "svg"), "--plot-formats")

    def work(progress):
        runs = load_runs(list(results), _labels(label_pairs, labels_file))
        with_pq = any((run.results.get("metrics") or {}).get("PQ") is not None for run in runs)
        names = _choices(table_names, TABLES, "--tables") if table_names else \
            ["main"] + ["protocols"] * any("by_protocol" in run.results for run in runs) + ["segmentation"] * with_pq
        if sgeval.as_list(table_names or "") == ["all"] and not with_pq:  # all: the tables the runs can fill
            names.remove("segmentation")
        cutoffs = sgeval.as_list(ks) if ks else default_ks(runs)
        headline = protocol or runs[0].results["config"]["protocol"]
        families = sgeval.as_list(metrics) if metrics else \
            list(sgeval.PROTOCOLS[headline].report_metrics if headline in sgeval.PROTOCOLS else ("R", "mR"))
        tables = build_tables(runs, names, families, cutoffs, protocol,
                              sgeval.as_list(compare_metrics) if compare_metrics else None, top, allow_mixed,
                              sgeval.as_list(compare_protocols) if compare_protocols else None)
        text = render(tables, fmt, decimals)
        if output:
            sgeval.write_output(output, [text], "--output")
        else:
            click.echo(text, nl=False)
        return write_plots(runs, plots_dir, plot_formats, headline_k(cutoffs)) if plots_dir else []

    written = sgeval.run_cli(work, "report", quiet=True)
    for path in ([output] if output else []) + [str(path) for path in written]:
        click.echo(f"wrote {path}", err=True)


if __name__ == "__main__":
    main()
