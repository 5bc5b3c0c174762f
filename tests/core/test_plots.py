"""The figures of sgeval_plots.py, drawn from the demo's results (plus a predicate confusion made
here) for two models, one by one and all of them by sgeval_report.write_plots (as `sgeval report
--plots` draws them): every file written at its fixed size and readable, the same bytes when drawn
again, null values, runs without protocols, groups or confusion, 56 long predicate names, empty
input, the file names of write_plots, and the predicate order and confusion table by hand."""

import copy
import json
import re
import typing
from xml.etree import ElementTree

import numpy as np
import pytest
from conftest import ROOT, sgeval
from PIL import Image

import sgeval_plots as plots
import sgeval_report as report
from tools import make_demo

pytestmark = pytest.mark.filterwarnings("error")  # e.g. a constrained layout that could not fit the labels

FIGURES = ("per_predicate", "recall_vs_k", "protocols", "pq_vs_mr_inf", "confusion-model-a", "confusion-model-b-ours")
# Width and height in inches of each figure of two runs of the demo (which has absolute and relative k).
DEMO_SIZES = {"per_predicate": plots.PER_PREDICATE_SIZE, "recall_vs_k": plots.panel_size(2),
              "protocols": plots.panel_size(2), "pq_vs_mr_inf": (plots.COLUMN_WIDTH, plots.COLUMN_WIDTH),
              "confusion-model-a": plots.CONFUSION_SIZE,
              "confusion-model-b-ours": plots.CONFUSION_SIZE}


class Run(typing.NamedTuple):
    label: str
    results: dict


def synthetic_confusion(results, correct_share):
    """A predicate_confusion for results: of each predicate's GT triplets, correct_share (rounded
    down) predicted right, half of the rest as the next predicate of the GT list, one of every
    fifth predicate's as "leaning on" (a predicate without GT), the rest not predicted."""
    names = list(results["gt_relations_per_predicate"])
    counts, missed = {}, {}
    for index, (name, total) in enumerate(results["gt_relations_per_predicate"].items()):
        right = int(total * correct_share)
        wrong = (total - right) // 2
        row = {name: right, names[(index + 1) % len(names)]: wrong}
        if index % 5 == 0 and total - right - wrong > 0:
            row["leaning on"] = 1
        row = {predicted: n for predicted, n in row.items() if n > 0}
        if row:
            counts[name] = row
        if total - sum(row.values()):
            missed[name] = total - sum(row.values())
    return {"k": "50", "counts": counts, "no_prediction": missed}


def scaled(results, factor):
    """A copy of results with every metric and per-predicate value times factor (a weaker model)."""
    results = copy.deepcopy(results)
    sections = [results, *results.get("by_protocol", {}).values()]
    tables = [section["metrics"] for section in sections]
    tables += [table for section in sections for table in section["per_predicate"].values()]
    for table in tables:
        for key, value in table.items():
            table[key] = None if value is None else value * factor
    return results


@pytest.fixture(scope="session")
def demo_results(tmp_path_factory):
    """The demo's results (configs/demo.yaml on freshly made demo data), as read from JSON."""
    folder = tmp_path_factory.mktemp("demo")
    gt, pred = make_demo.make_demo(folder / "data")
    config = sgeval.load_config(ROOT / "configs" / "demo.yaml", gt=str(gt), gt_seg=str(folder / "data" / "panoptic"),
                                pred=str(pred), output=str(folder / "results.json"), workers=1)  # not demo/'s
    return json.loads(json.dumps(sgeval.evaluate(config)))


@pytest.fixture
def runs(demo_results):
    """Model A: the demo with a predicate confusion and head / body / tail groups; "Model B (ours)":
    its values times 0.8 and another confusion."""
    a = copy.deepcopy(demo_results)
    counts = a["gt_relations_per_predicate"]
    names = sorted(counts, key=lambda name: -counts[name])
    a["predicate_groups"] = {"head": names[:5], "body": names[5:15], "tail": names[15:]}
    a["predicate_confusion"] = a["by_protocol"][a["config"]["protocol"]]["predicate_confusion"] = \
        synthetic_confusion(a, 0.5)
    b = scaled(a, 0.8)
    b["predicate_confusion"] = synthetic_confusion(b, 0.3)
    return [Run("Model A", a), Run("Model B (ours)", b)]


def order(runs):
    """The predicate order of the figures: the report's, of the first run."""
    return report.predicate_order(runs[0].results)


def pixels(size_inches):
    return round(size_inches[0] * plots.DPI), round(size_inches[1] * plots.DPI)


def check_file(path, size_inches):
    """A non-empty, readable file of its format; a PNG of the figure's size at DPI."""
    assert path.stat().st_size > 0, path
    if path.suffix == ".png":
        with Image.open(path) as image:
            assert image.format == "PNG" and image.size == pixels(size_inches), (path, image.size)
    elif path.suffix == ".pdf":
        assert path.read_bytes().startswith(b"%PDF-"), path
    else:
        assert ElementTree.parse(path).getroot().tag == "{http://www.w3.org/2000/svg}svg", path


def test_write_plots_draws_every_figure_in_every_format_the_same_bytes_each_time(runs, tmp_path):
    first = report.write_plots(runs, tmp_path / "a" / "figures", formats=plots.FORMATS)
    assert [path.name for path in first] == [f"{name}.{fmt}" for name in FIGURES for fmt in plots.FORMATS]
    for path in first:
        assert path.parent == tmp_path / "a" / "figures"
        check_file(path, DEMO_SIZES[path.stem])
    # Again, but for model B's confusion matrix (one of a kind is enough and it is slow to draw).
    b = {key: value for key, value in runs[1].results.items() if key != "predicate_confusion"}
    second = report.write_plots([runs[0], Run(runs[1].label, b)], tmp_path / "b", formats=plots.FORMATS)
    assert [path.name for path in second] == [path.name for path in first[:-3]]
    for one, other in zip(first, second):
        assert one.read_bytes() == other.read_bytes(), one.name
    # A format's file does not depend on the others written with it; no date or software version.
    alone = plots.per_predicate_recall(runs, order(runs), tmp_path / "c" / "per_predicate", formats="svg")
    assert alone[0].read_bytes() == (tmp_path / "a" / "figures" / "per_predicate.svg").read_bytes()
    for path in first:
        assert not re.search(rb"CreationDate|Matplotlib v|<dc:date>|Software", path.read_bytes()), path


def test_one_figure_writes_the_formats_asked_beside_its_stem(runs, tmp_path):
    stem = tmp_path / "new" / "folder" / "recall.v2"
    assert plots.recall_vs_k(runs, stem, formats=("pdf", "png")) == [
        tmp_path / "new" / "folder" / "recall.v2.pdf", tmp_path / "new" / "folder" / "recall.v2.png"]
    assert plots.recall_vs_k(runs, tmp_path / "one", formats="svg") == [tmp_path / "one.svg"]
    with pytest.raises(ValueError, match="tiff.*png, pdf, svg"):
        plots.per_predicate_recall(runs, order(runs), tmp_path / "bad" / "x", formats=("png", "tiff"))
    assert not (tmp_path / "bad").exists()


def test_null_values_are_drawn_as_missing(runs, tmp_path):
    a, b = runs[0].results, runs[1].results
    for name in list(a["per_predicate"]["mR@50"])[::2]:
        a["per_predicate"]["mR@50"][name] = None
    b["per_predicate"]["mR@50"] = dict.fromkeys(b["per_predicate"]["mR@50"])  # every value null
    a["metrics"]["R@50"] = a["metrics"]["mR@x1"] = None
    b["metrics"] = dict.fromkeys(b["metrics"])
    a["by_protocol"]["openpsg"]["metrics"]["mR@50"] = None
    paths = report.write_plots(runs, tmp_path, formats=("png",))
    assert [path.stem for path in paths] == list(FIGURES)
    for path in paths:
        check_file(path, DEMO_SIZES[path.stem])
    # With every value null a figure is still drawn: axes, labels and legend, no bars or lines.
    assert plots.per_predicate_recall(runs[1:], order(runs[1:]), tmp_path / "b" / "p") == [tmp_path / "b" / "p.png"]
    assert plots.recall_vs_k(runs[1:], tmp_path / "b" / "r") == [tmp_path / "b" / "r.png"]


def test_a_run_without_protocols_groups_confusion_or_relative_k(demo_results, tmp_path):
    bare = copy.deepcopy(demo_results)
    del bare["by_protocol"], bare["predicate_confusion"]
    bare["predicate_groups"] = {}
    del bare["training_relations_per_predicate"]  # nor groups by write_plots' frequency split
    bare["config"]["k"] = ["20", "50", "100"]
    bare["metrics"] = {key: value for key, value in bare["metrics"].items() if "@x" not in key}
    paths = report.write_plots([Run("bare", bare)], tmp_path, formats=("png",))
    assert [path.name for path in paths] == ["per_predicate.png", "recall_vs_k.png", "protocols.png", "pq_vs_mr_inf.png"]
    check_file(paths[0], plots.PER_PREDICATE_SIZE)
    check_file(paths[1], plots.panel_size(1))  # absolute k only: one panel, one column wide
    check_file(paths[2], plots.panel_size(2))  # R@50 and mR@50 of the headline protocol


def test_write_plots_skips_a_figure_without_its_data_and_names_confusions_apart(runs, tmp_path):
    # No run has k = 30: no per-predicate figure and no protocol comparison; the rest is drawn, the
    # confusion files of labels of the same slug told apart.
    runs[1] = Run("model a!", runs[1].results)
    paths = report.write_plots(runs, tmp_path, k="30")
    assert [path.name for path in paths] == ["recall_vs_k.png", "pq_vs_mr_inf.png", "confusion-model-a.png",
                                             "confusion-model-a-2.png"]
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(path.name for path in paths)
    # A key in some runs only: drawn, the others' bars missing.
    del runs[1].results["per_predicate"]["mR@50"]
    assert [path.name for path in plots.per_predicate_recall(runs, order(runs), tmp_path / "mr")] == ["mr.png"]
    assert plots.protocol_comparison(runs, tmp_path / "none", keys=("R@7", "PRank@3")) == []


def test_empty_input_writes_nothing(demo_results, tmp_path):
    assert report.write_plots([], tmp_path) == []
    empty = {"config": {"k": ["50"], "protocol": "unique"}, "metrics": {}, "per_predicate": {"mR@50": {}},
             "gt_relations_per_predicate": {}, "predicate_groups": {},
             "predicate_confusion": {"k": "50", "counts": {}, "no_prediction": {}}}
    run = Run("empty", empty)
    assert report.write_plots([run], tmp_path, formats=plots.FORMATS) == []
    assert plots.per_predicate_recall([run], order([run]), tmp_path / "p") == []
    assert plots.recall_vs_k([run], tmp_path / "r") == []
    assert plots.protocol_comparison([run], tmp_path / "c") == []
    assert plots.confusion_matrix(run, [], tmp_path / "m") == []
    no_confusion = {key: value for key, value in demo_results.items() if key != "predicate_confusion"}
    assert plots.confusion_matrix(Run("none", no_confusion), [], tmp_path / "m") == []
    assert list(tmp_path.iterdir()) == []


def test_56_long_predicate_names_fit_the_fixed_sizes(tmp_path):
    words = ["standing in front of", "parked alongside", "hanging from", "looking at", "walking toward",
             "sitting on top of", "playing with"]
    names = [f"{words[i % len(words)]} {i}" for i in range(56)]
    counts = {name: 200 - 3 * i for i, name in enumerate(names)}
    results = {"config": {"k": ["20", "50", "100"], "protocol": "unique"},
               "metrics": {"R@20": 0.2, "R@50": 0.3, "R@100": 0.35, "mR@20": 0.1, "mR@50": 0.15, "mR@100": 0.2},
               "per_predicate": {"mR@50": {name: (i % 10) / 10 for i, name in enumerate(names)}},
               "gt_relations_per_predicate": counts,
               "predicate_groups": {"head": names[:10], "body": names[10:30], "tail": names[30:]}}
    results["predicate_confusion"] = synthetic_confusion(results, 0.4)
    runs = [Run("A model with a long name", results), Run("B", scaled(results, 0.5))]
    paths = plots.per_predicate_recall(runs, order(runs), tmp_path / "per_predicate", formats=("png", "pdf"))
    check_file(paths[0], plots.PER_PREDICATE_SIZE)
    marked = report.top_confusions(results["predicate_confusion"], 10)
    paths = plots.confusion_matrix(runs[0], marked, tmp_path / "confusion", formats=("png", "svg"))
    check_file(paths[0], plots.CONFUSION_SIZE)
    check_file(paths[1], plots.CONFUSION_SIZE)


def test_file_names_of_labels():
    assert plots.slug("Model B (ours)") == "model-b-ours"
    assert plots.unique_slugs(["Model A", "model a!", "MODEL-A", "ÜberNet v2.1", "***"]) == [
        "model-a", "model-a-2", "model-a-3", "bernet-v2-1", "run"]


def test_predicate_order_by_frequency_then_by_group():
    results = {"gt_relations_per_predicate": {"on": 5, "beside": 2, "above": 2, "has": 9}, "predicate_groups": {}}
    assert report.predicate_order(results) == (["has", "on", "above", "beside"], [])
    results["predicate_groups"] = {"head": ["on"], "body": ["not in the GT"], "tail": ["beside", "has", "gone"]}
    assert report.predicate_order(results) == (["on", "has", "beside", "above"], [("head", 0, 1), ("tail", 1, 3)])


def test_confusion_table_and_its_top_confusions():
    # on: 5 GT triplets (2 right, 1 as above, 1 as near, 1 not predicted); above: 4 (3 as on, 1 not
    # predicted); beside: 2, none predicted (absent from counts).
    confusion = {"k": "20", "counts": {"on": {"on": 2, "above": 1, "near": 1}, "above": {"on": 3}},
                 "no_prediction": {"on": 1, "above": 1, "beside": 2}}
    rows, columns, counts_RC = plots.confusion_table(confusion)
    assert rows == ["on", "above", "beside"]
    assert columns == ["on", "above", "beside", "near", plots.NO_PREDICTION]
    assert counts_RC.tolist() == [[2, 1, 0, 1, 1], [3, 0, 0, 0, 1], [0, 0, 0, 0, 2]]
    np.testing.assert_allclose(plots.row_shares(counts_RC), [[0.4, 0.2, 0, 0.2, 0.2], [0.75, 0, 0, 0, 0.25],
                                                             [0, 0, 0, 0, 1]])
    # The report's top confusions: by count, off the diagonal, "no prediction" (beside's 2) not
    # counted; ties by name.
    assert plots.top_cells(report.top_confusions(confusion, 10), rows, columns) == [(1, 0), (0, 1), (0, 3)]
    assert plots.top_cells(report.top_confusions(confusion, 1), rows, columns) == [(1, 0)]
    assert plots.top_cells(report.top_confusions(confusion, 0), rows, columns) == []


def test_only_sgeval_plots_imports_matplotlib_and_never_pyplot():
    imports = re.compile(r"^\s*(?:import|from)\s+matplotlib\b", re.MULTILINE)
    assert not imports.search((ROOT / "sgeval.py").read_text())
    source = (ROOT / "sgeval_plots.py").read_text()
    assert imports.search(source) and "pyplot" not in source and "bbox_inches" not in source


def test_pq_against_mr_inf_is_drawn_for_runs_with_pq_only(runs, tmp_path):
    """One point per model with PQ (the demo runs pq: true); runs without it are left out, and no
    run with it draws nothing."""
    assert [path.name for path in plots.pq_vs_recall(runs, tmp_path / "pq", formats="svg")] == ["pq.svg"]
    without = [Run(run.label, {**run.results, "metrics": {k: v for k, v in run.results["metrics"].items()
                                                            if k != "PQ"}}) for run in runs]
    assert plots.pq_vs_recall(without, tmp_path / "none", formats="svg") == []
