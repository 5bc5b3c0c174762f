"""sgeval_plots -- paper-ready figures of sgeval results, drawn with matplotlib (which sgeval.py
never imports; this module is the only one that does).

A *run* is any object with ``label`` (the model's name in legends) and ``results`` (the results
dict of ``sgeval.evaluate``, or its JSON file read back). Every function writes ``stem.<format>``
for each of ``formats`` (png, pdf, svg), creating the folder, and returns the paths it wrote.
Nothing to draw (no runs, no predicates, no value of the asked key) writes nothing and returns [].
A null value is drawn as missing: no bar, a gap in a line. The predicate order and the confusions
to outline are the caller's (sgeval_report's predicate_order and top_confusions, the order and rows
of its tables); this module imports neither sgeval nor sgeval_report. ``sgeval_report.write_plots``
draws every figure into a folder.

Figures
-------
per_predicate_recall  Grouped bars, one per model and predicate: the per-predicate values of an
                      m-type key (R@k of each predicate for mR@k), in percent. Predicates in the
                      given order; each given group (head / body / tail) a shaded span of them
                      named above the plot.
recall_vs_k           R@k and mR@k (percent) against k: colour = model, line style and marker =
                      metric. Absolute k on the first panel, relative k (xN: N times the image's GT
                      relation count) on a second one when there is any; k on a log axis.
protocol_comparison   Per model, one bar per instance matching protocol of ``by_protocol`` (the
                      headline protocol first, solid; the others hatched), one panel per key: how
                      much of a score the protocol makes. A run without ``by_protocol`` shows its
                      headline protocol only.
confusion_matrix      A run's ``predicate_confusion``: rows = GT predicates by frequency, columns =
                      the same predicates, any other predicted predicate, then "no prediction"; a
                      cell is the share (%) of the row's GT triplets whose pair the top k predicts
                      with the column's predicate (white: none). The given confusions (GT
                      predicate, predicted predicate) are outlined and labelled with their share.

Figures have fixed sizes (constrained layout, never a tight bounding box): PAGE_WIDTH (two
columns) for the per-predicate and confusion figures, COLUMN_WIDTH for one panel and PAGE_WIDTH
for two (``panel_size``); PNG at DPI. The same input gives the same bytes: no dates or software
versions in the files, SVG ids hashed with a fixed salt. Colours: Okabe and Ito's colour-blind-safe
palette for models and protocols, one-hue Blues (light to dark) for the confusion matrix.
"""

import math
import re
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import NullLocator
from matplotlib.transforms import blended_transform_factory

FORMATS = ("png", "pdf", "svg")
DPI = 200  # PNG resolution, dots per inch
COLUMN_WIDTH = 3.4  # inches: one column of a two-column paper
PAGE_WIDTH = 7.0  # inches: both columns
PANEL_HEIGHT = 2.4  # inches: recall_vs_k and protocol_comparison
PER_PREDICATE_SIZE = (PAGE_WIDTH, 2.8)
CONFUSION_SIZE = (PAGE_WIDTH, 6.6)
FONT_SIZE, SMALL_FONT_SIZE, TINY_FONT_SIZE = 7, 6, 5  # points: labels, ticks and legends, crowded ticks
LINE_WIDTH = 0.6  # points: axes, ticks
# Okabe and Ito's colour-blind-safe palette (blue, orange, bluish green, vermillion, reddish purple,
# sky blue, yellow, black); models and protocols take the colours in this order, cycling.
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
HATCHES = ("", "////", "....", "xxxx", "\\\\\\\\", "++++", "oooo", "----")  # protocols, with the colours
METRIC_STYLES = {"R": ("-", "o"), "mR": ("--", "s")}  # recall_vs_k: family -> (line style, marker)
CONFUSION_COLORMAP = "Blues"  # one hue, light to dark: readable without colour vision
NO_PREDICTION = "no prediction"  # the confusion matrix's last column
# No dates and no software versions in the files (the same input gives the same bytes).
METADATA = {"png": {"Software": None},
            "pdf": {"CreationDate": None, "ModDate": None, "Creator": None, "Producer": None},
            "svg": {"Date": None, "Creator": None}}
# Read by savefig only: fixed SVG ids, TrueType fonts in PDF (not Type 3), the figure's own size.
SAVE_SETTINGS = {"svg.hashsalt": "sgeval", "pdf.fonttype": 42, "savefig.bbox": "standard"}


# ---------------------------------------------------------------------------------------------
# Shared pieces
# ---------------------------------------------------------------------------------------------


def slug(label):
    """A file name part for a label: lowercase, each run of other characters than a-z and 0-9
    replaced by "-" ("run" when nothing is left)."""
    return re.sub(r"[^a-z0-9]+", "-", str(label).lower()).strip("-") or "run"


def unique_slugs(labels):
    """slug() of each label, made unique in order by "-2", "-3", ... on repeats."""
    taken, slugs = set(), []
    for label in labels:
        name, number = slug(label), 1
        while name in taken:
            number += 1
            name = f"{slug(label)}-{number}"
        taken.add(name)
        slugs.append(name)
    return slugs


def panel_size(n_panels):
    """(width, height) in inches of a figure of n side-by-side panels: one column or the page."""
    return (COLUMN_WIDTH if n_panels == 1 else PAGE_WIDTH, PANEL_HEIGHT)


def colour(index):
    return OKABE_ITO[index % len(OKABE_ITO)]


def _scale(key):
    """Percent for recalls; PRank is a mean rank and stays as it is."""
    return 1.0 if key.startswith("PRank") else 100.0


def _value(value, scale=100.0):
    """value * scale as a float; NaN (drawn as missing) for None."""
    return math.nan if value is None else scale * float(value)


def _figure(size):
    return Figure(figsize=size, dpi=DPI, layout="constrained")


def _tidy(ax, grid_axis="y"):
    """Paper style: thin axes and ticks, small tick labels, no top or right spine, a light grid."""
    ax.tick_params(labelsize=SMALL_FONT_SIZE, width=LINE_WIDTH, length=2.5)
    for side, spine in ax.spines.items():
        spine.set_linewidth(LINE_WIDTH)
        spine.set_visible(side in ("left", "bottom"))
    if grid_axis:
        ax.grid(axis=grid_axis, color="0.88", linewidth=0.4)
        ax.set_axisbelow(True)


def _legend(fig, handles):
    fig.legend(handles=handles, loc="outside upper center", ncols=min(len(handles), 6), frameon=False,
               fontsize=SMALL_FONT_SIZE, handlelength=2.2, columnspacing=1.2)


def _save(stem, formats, size, draw, *args):
    """Write stem.<format> for each format, each from a figure of size drawn afresh by
    draw(figure, *args) (a figure saved twice may lay out differently the second time); returns
    the paths."""
    formats = (formats,) if isinstance(formats, str) else tuple(formats)
    unknown = [name for name in formats if name not in FORMATS]
    if unknown:
        raise ValueError(f"unknown figure format {', '.join(map(str, unknown))}: choose from {', '.join(FORMATS)}")
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    with matplotlib.rc_context(SAVE_SETTINGS):
        for name in formats:
            path = stem.parent / f"{stem.name}.{name}"
            fig = _figure(size)
            draw(fig, *args)
            fig.savefig(path, format=name, dpi=DPI, metadata=METADATA[name], facecolor="white")
            paths.append(path)
    return paths


# ---------------------------------------------------------------------------------------------
# Per-predicate recall
# ---------------------------------------------------------------------------------------------


def _per_predicate_name(key):
    """The per-predicate value of an m-type key: mR@50 -> R@50, mNgR@50 -> ngR@50."""
    if key.startswith("mNg"):
        return "ng" + key[3:]
    return key.removeprefix("m")


def _group_spans(ax, groups):
    """Shade each predicate group's span of bars and name it above the plot."""
    above = blended_transform_factory(ax.transData, ax.transAxes)
    for index, (name, start, stop) in enumerate(groups):
        ax.axvspan(start - 0.5, stop - 0.5, color="0.9" if index % 2 == 0 else "0.96", linewidth=0, zorder=0)
        ax.text((start + stop - 1) / 2, 1.01, name, transform=above, ha="center", va="bottom",
                fontsize=SMALL_FONT_SIZE)


def per_predicate_recall(runs, order, stem, formats=("png",), key="mR@50"):
    """Grouped bars of each predicate's value of key (per model). order = (names, groups): the
    predicates from left to right and [(group name, start, stop)] index ranges of names to shade,
    as sgeval_report.predicate_order gives them."""
    runs = list(runs)
    tables = [(run.results.get("per_predicate") or {}).get(key) for run in runs]
    if all(table is None for table in tables):
        return []
    names, groups = order
    if not names:
        return []
    return _save(stem, formats, PER_PREDICATE_SIZE, _draw_per_predicate, runs, tables, key, names, groups)


def _draw_per_predicate(fig, runs, tables, key, names, groups):
    ax = fig.add_subplot()
    positions, width = np.arange(len(names)), 0.8 / len(runs)
    for index, table in enumerate(tables):
        values = np.array([_value((table or {}).get(name), _scale(key)) for name in names])
        shown = np.isfinite(values)
        ax.bar(positions[shown] + (index - (len(runs) - 1) / 2) * width, values[shown], width,
               color=colour(index), linewidth=0)
    _group_spans(ax, groups)
    if len(names) > 20:
        ax.set_xticks(positions, names, rotation=90, ha="center", va="top")
    else:
        ax.set_xticks(positions, names, rotation=45, ha="right", va="center", rotation_mode="anchor")
    _tidy(ax)
    ax.tick_params(axis="x", labelsize=TINY_FONT_SIZE if len(names) > 40 else SMALL_FONT_SIZE, length=0)
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_ylim(bottom=0)
    unit = " (%)" if _scale(key) == 100 else ""
    ax.set_ylabel(f"{_per_predicate_name(key)} per predicate{unit}", fontsize=FONT_SIZE)
    _legend(fig, [Patch(facecolor=colour(index), label=run.label) for index, run in enumerate(runs)])


# ---------------------------------------------------------------------------------------------
# Recall against k
# ---------------------------------------------------------------------------------------------


def _k_value(label):
    """The number of a cut-off label: "50" -> 50.0, "x0.5" -> 0.5."""
    return float(label.removeprefix("x"))


def _recall_lines(runs, relative):
    """[(run index, family, k labels, values in percent)] of the runs' R@k and mR@k, absolute or
    relative k; a metric absent from a run's results gives no line."""
    lines = []
    for index, run in enumerate(runs):
        metrics = run.results.get("metrics") or {}
        ks = [str(k) for k in (run.results.get("config") or {}).get("k") or []]
        for family in METRIC_STYLES:
            chosen = [k for k in ks if k.startswith("x") == relative and f"{family}@{k}" in metrics]
            if chosen:
                lines.append((index, family, chosen, [_value(metrics[f"{family}@{k}"]) for k in chosen]))
    return lines


def _k_axis(ax, labels):
    """A log k axis with a tick and label at each cut-off (the first label of each value)."""
    ticks = {}
    for label in labels:
        ticks.setdefault(_k_value(label), label)
    values = sorted(ticks)
    ax.set_xscale("log")
    ax.set_xticks(values, [ticks[value] for value in values])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(values[0] / 1.4, values[-1] * 1.4)


def recall_vs_k(runs, stem, formats=("png",)):
    """R@k and mR@k against k; absolute and relative k on separate panels."""
    runs = list(runs)
    panels = [(relative, lines) for relative in (False, True) if (lines := _recall_lines(runs, relative))]
    if not panels:
        return []
    return _save(stem, formats, panel_size(len(panels)), _draw_recall_vs_k, runs, panels)


def _draw_recall_vs_k(fig, runs, panels):
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (relative, lines) in zip(axes, panels):
        for index, family, labels, values in lines:
            style, marker = METRIC_STYLES[family]
            ax.plot([_k_value(label) for label in labels], values, color=colour(index), linestyle=style,
                    marker=marker, linewidth=1.0, markersize=3.5)
        _tidy(ax, grid_axis="both")
        _k_axis(ax, [label for line in lines for label in line[2]])
        ax.set_ylim(bottom=0)
        ax.set_xlabel("k (times the image's GT relations)" if relative else "k", fontsize=FONT_SIZE)
        ax.set_title("relative k" if relative else "absolute k", fontsize=FONT_SIZE)
    axes[0].set_ylabel("recall (%)", fontsize=FONT_SIZE)
    families = [family for family in METRIC_STYLES if any(line[1] == family for _, lines in panels for line in lines)]
    _legend(fig, [Line2D([], [], color=colour(index), linewidth=1.0, label=run.label) for index, run in enumerate(runs)]
            + [Line2D([], [], color="0.3", linestyle=METRIC_STYLES[family][0], marker=METRIC_STYLES[family][1],
                      linewidth=1.0, markersize=3.5, label=f"{family}@k") for family in families])


# ---------------------------------------------------------------------------------------------
# Protocols side by side
# ---------------------------------------------------------------------------------------------


def protocol_metrics(results):
    """{protocol: metrics}: by_protocol's sections (headline first) or the headline protocol alone."""
    if results.get("by_protocol"):
        return {name: section.get("metrics") or {} for name, section in results["by_protocol"].items()}
    return {(results.get("config") or {}).get("protocol", "headline"): results.get("metrics") or {}}


def protocol_comparison(runs, stem, formats=("png",), keys=("R@50", "mR@50")):
    """Per model, a bar per protocol (one panel per key); keys no run has are left out."""
    runs = list(runs)
    sections = [protocol_metrics(run.results) for run in runs]
    keys = [key for key in keys if any(key in metrics for section in sections for metrics in section.values())]
    if not keys:
        return []
    protocols = list(dict.fromkeys(name for section in sections for name in section))
    headline = (runs[0].results.get("config") or {}).get("protocol")
    return _save(stem, formats, panel_size(len(keys)), _draw_protocols, runs, sections, keys, protocols, headline)


def _model_ticks(ax, positions, labels, panel_width):
    """Model names under their bars, slanted when the longest would not fit its share of the panel
    (a character taken as 0.6 em wide)."""
    slanted = len(labels) * max(len(label) + 2 for label in labels) * 0.6 * SMALL_FONT_SIZE / 72 > 0.9 * panel_width
    ax.set_xticks(positions, labels, rotation=30 if slanted else 0, ha="right" if slanted else "center",
                  rotation_mode="anchor")
    ax.tick_params(axis="x", length=0)


def _draw_protocols(fig, runs, sections, keys, protocols, headline):
    axes = fig.subplots(1, len(keys), squeeze=False)[0]
    positions, width = np.arange(len(runs)), 0.8 / len(protocols)
    for ax, key in zip(axes, keys):
        top = 0.0
        for index, protocol in enumerate(protocols):
            values = np.array([_value(section.get(protocol, {}).get(key), _scale(key)) for section in sections])
            shown = np.isfinite(values)
            bars = ax.bar(positions[shown] + (index - (len(protocols) - 1) / 2) * width, values[shown], width,
                          color=colour(index), hatch=HATCHES[index % len(HATCHES)], hatchcolor="0.2",
                          edgecolor="white", linewidth=0.3)
            ax.bar_label(bars, fmt="%.1f", fontsize=TINY_FONT_SIZE, padding=1, rotation=90)
            top = max([top, *values[shown]])
        _tidy(ax)
        _model_ticks(ax, positions, [run.label for run in runs], fig.get_figwidth() / len(keys))
        ax.set_ylim(0, 1.25 * top if top > 0 else 1)
        ax.set_title(key, fontsize=FONT_SIZE)
    axes[0].set_ylabel("score (%)", fontsize=FONT_SIZE)
    _legend(fig, [Patch(facecolor=colour(index), hatch=HATCHES[index % len(HATCHES)], hatchcolor="0.2",
                        edgecolor="white", label=f"{protocol} (headline)" if protocol == headline else protocol)
                  for index, protocol in enumerate(protocols)])


# ---------------------------------------------------------------------------------------------
# Segmentation quality against relation recall
# ---------------------------------------------------------------------------------------------


def pq_vs_recall(runs, stem, formats=("png",), recall_key="mR@inf"):
    """Models as points, PQ against mR@inf (the fair-PSGG paper's reading: segmentation quality
    and the recall its masks allow belong together); runs without PQ are left out."""
    points = [(run.label, (run.results.get("metrics") or {}).get("PQ"),
               (run.results.get("metrics") or {}).get(recall_key)) for run in runs]
    points = [(label, pq, recall) for label, pq, recall in points if pq is not None and recall is not None]
    if not points:
        return []
    return _save(stem, formats, (COLUMN_WIDTH, COLUMN_WIDTH), _draw_pq_vs_recall, points, recall_key)


def _draw_pq_vs_recall(fig, points, recall_key):
    ax = fig.subplots()
    for index, (label, pq, recall) in enumerate(points):
        ax.scatter(100 * pq, 100 * recall, s=18, color=colour(index), marker="os^Dv<>P"[index % 8], label=label,
                   zorder=3)
    _tidy(ax, "both")
    ax.set_xlabel("PQ (%)", fontsize=FONT_SIZE)
    ax.set_ylabel(f"{recall_key} (%)", fontsize=FONT_SIZE)
    values = [100 * v for _, pq, recall in points for v in (pq, recall)]
    low, high = min(values), max(values)
    margin = max(2.0, 0.1 * (high - low))
    ax.set_xlim(max(0, low - margin), min(100, high + margin))
    ax.set_ylim(max(0, low - margin), min(100, high + margin))
    ax.legend(fontsize=TINY_FONT_SIZE, frameon=False, loc="best")


# ---------------------------------------------------------------------------------------------
# Predicate confusion
# ---------------------------------------------------------------------------------------------


def confusion_table(confusion):
    """(rows, columns, counts_RC) of a predicate_confusion: rows = the GT predicates by triplet
    count (descending, ties by name); columns = the rows' predicates, other predicted predicates
    (by name), then NO_PREDICTION; counts_RC[r, c] = row r's GT triplets in column c."""
    counts, missed = confusion.get("counts") or {}, confusion.get("no_prediction") or {}
    totals = {name: sum(n or 0 for n in (counts.get(name) or {}).values()) + (missed.get(name) or 0)
              for name in {*counts, *missed}}
    rows = sorted((name for name in totals if totals[name] > 0), key=lambda name: (-totals[name], name))
    others = sorted({predicted for name in rows for predicted in counts.get(name) or {}} - set(rows))
    columns = rows + others
    counts_RC = np.zeros((len(rows), len(columns) + 1), np.int64)
    for r, name in enumerate(rows):
        row = counts.get(name) or {}
        counts_RC[r, :-1] = [row.get(predicted) or 0 for predicted in columns]
        counts_RC[r, -1] = missed.get(name) or 0
    return rows, columns + [NO_PREDICTION], counts_RC


def row_shares(counts_RC):
    """Each row of a confusion table divided by its total (a row sums to 1)."""
    return counts_RC / np.maximum(counts_RC.sum(axis=1, keepdims=True), 1)


def top_cells(marked, rows, columns):
    """[(row, column)] of confusion_table's cells of the marked confusions: (GT predicate, predicted
    predicate, ...) tuples such as the rows of sgeval_report.top_confusions."""
    row_of, column_of = {name: r for r, name in enumerate(rows)}, {name: c for c, name in enumerate(columns)}
    return [(row_of[gt], column_of[predicted]) for gt, predicted, *_ in marked]


def _crowded_font_size(n):
    """Tick label size for n labels on a CONFUSION_SIZE axis."""
    return SMALL_FONT_SIZE if n <= 30 else TINY_FONT_SIZE


def confusion_matrix(run, marked, stem, formats=("png",)):
    """The run's predicate_confusion, each row divided by its GT total, the marked confusions
    outlined (see top_cells)."""
    confusion = run.results.get("predicate_confusion")
    rows, columns, counts_RC = confusion_table(confusion or {})
    if not rows:
        return []
    shares_RC = row_shares(counts_RC)
    title = (f"{run.label}: predicate of the top-{confusion.get('k', '?')} prediction per GT triplet "
             f"({(run.results.get('config') or {}).get('protocol', 'headline')} protocol)")
    return _save(stem, formats, CONFUSION_SIZE, _draw_confusion, rows, columns, shares_RC,
                 top_cells(marked, rows, columns), title)


def _draw_confusion(fig, rows, columns, shares_RC, marked, title):
    ax = fig.add_subplot()
    colormap = matplotlib.colormaps[CONFUSION_COLORMAP].with_extremes(bad="white")  # empty cells white
    image = ax.imshow(np.ma.masked_equal(100 * shares_RC, 0), cmap=colormap, vmin=0, vmax=100,
                      interpolation="nearest", aspect="auto")
    ax.axvline(len(columns) - 1.5, color="0.3", linewidth=LINE_WIDTH)  # sets "no prediction" apart
    cell_size = 6 if len(rows) <= 20 else 5 if len(rows) <= 40 else 4
    for r, c in marked:
        ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor=OKABE_ITO[3], linewidth=0.8))
        ax.text(c, r, f"{100 * shares_RC[r, c]:.0f}", ha="center", va="center", fontsize=cell_size,
                color="black" if shares_RC[r, c] < 0.5 else "white")
    _tidy(ax, grid_axis=None)
    ax.spines[["top", "right"]].set_visible(True)
    ax.set_xticks(range(len(columns)), columns, rotation=90)
    ax.set_yticks(range(len(rows)), rows)
    ax.tick_params(axis="x", labelsize=_crowded_font_size(len(columns)))
    ax.tick_params(axis="y", labelsize=_crowded_font_size(len(rows)))
    ax.set_xlabel("predicted predicate", fontsize=FONT_SIZE)
    ax.set_ylabel("GT predicate", fontsize=FONT_SIZE)
    ax.set_title(title, fontsize=FONT_SIZE)
    bar = fig.colorbar(image, ax=ax, fraction=0.03, pad=0.01, aspect=50)
    bar.ax.tick_params(labelsize=SMALL_FONT_SIZE, width=LINE_WIDTH, length=2.5)
    bar.outline.set_linewidth(LINE_WIDTH)
    bar.set_label(f"share of the row's GT triplets (%); outlined: the {len(marked)} most frequent confusions",
                  fontsize=SMALL_FONT_SIZE)
