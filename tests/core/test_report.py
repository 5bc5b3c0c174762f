"""sgeval report (sgeval_report.py): every table in every format from the demo's two models, the
numbers checked against their results JSON; refusing and marking results that do not belong in
one table; bad results files; the command line; the README's demo table."""

import csv
import io
import json
import re
import shutil
import subprocess
import sys

from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from conftest import ROOT, sgeval

import sgeval_report
from tools import make_demo, make_figures


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo's Model A and Model B evaluated as make demo does: {"A": path, "B": path}."""
    out = tmp_path_factory.mktemp("demo")
    gt, pred = make_demo.make_demo(out / "data")
    paths = {}
    for name, prediction in (("A", pred), ("B", pred.parent / "pred-b.zip")):
        paths[name] = out / f"results-{name}.json"
        sgeval.evaluate(sgeval.load_config(ROOT / "configs" / "demo.yaml", gt=str(gt), gt_seg=str(out / "data" / "panoptic"),
                                           pred=str(prediction), output=str(paths[name]), model=f"Model {name}"))
    return paths


def results(path):
    return json.loads(path.read_text())


def report(*args):
    result = CliRunner().invoke(sgeval_report.main, [str(arg) for arg in args], catch_exceptions=False)
    return result


def markdown_table(text, title):
    """(header, rows) of the Markdown table under **title**, marks removed."""
    block = text.split(f"**{title}**", 1)[1].strip().split("\n\n")[0].splitlines()
    rows = [[re.sub(r"\*\*|</?ins>|<sup>.*?</sup>", "", cell.strip()) for cell in line.strip("|").split("|")]
            for line in block]
    return rows[0], rows[2:]


def markdown_rows(text, title):
    """(header, {row label: [cells]}) of the Markdown table under **title**."""
    header, rows = markdown_table(text, title)
    return header, {row[0]: row[1:] for row in rows}


def percent(value):
    return f"{100 * value:.1f}"


def test_main_table_in_markdown_holds_the_results(demo):
    text = report(demo["A"], demo["B"]).output
    header, rows = markdown_rows(text, "Results")
    assert header == ["Model", "R@20", "R@50", "R@100", "mR@20", "mR@50", "mR@100"]
    for name in "AB":
        metrics = results(demo[name])["metrics"]
        assert rows[f"Model {name}"] == [percent(metrics[key]) for key in header[1:]]
    assert "Protocol unique; mask mode, task sgdet, 31 images" in text


def test_best_is_bold_and_second_underlined_from_three_rows(demo, tmp_path):
    third = results(demo["B"])
    third["config"]["model"] = "Model C"
    third["metrics"] = {key: value / 2 for key, value in third["metrics"].items()}
    (tmp_path / "c.json").write_text(json.dumps(third))
    text = report(demo["A"], demo["B"], tmp_path / "c.json", "--metrics", "R@20,mR@20").output
    a, b = (results(demo[name])["metrics"] for name in "AB")
    best, second = ("A", "B") if a["R@20"] > b["R@20"] else ("B", "A")
    assert f"| Model {best} | **{percent(max(a['R@20'], b['R@20']))}** |" in text
    assert f"| Model {second} | <ins>{percent(min(a['R@20'], b['R@20']))}</ins> |" in text
    assert f"| Model C | {percent(third['metrics']['R@20'])} |" in text
    two = report(demo["A"], demo["B"], "--metrics", "R@20", "--tables", "main").output  # two rows: the best only
    assert "<ins>" not in two and two.count("**") == 2 + 2  # the title and one value


def test_equal_shown_values_share_the_mark(demo, tmp_path):
    shutil.copy(demo["A"], tmp_path / "copy.json")
    text = report(demo["A"], tmp_path / "copy.json", "--label", f"{tmp_path / 'copy.json'}=copy", "--metrics",
                  "R@20").output
    assert text.count(f"**{percent(results(demo['A'])['metrics']['R@20'])}**") == 2


def test_latex_is_booktabs_with_grouped_headers(demo):
    text = report(demo["A"], demo["B"], "--format", "latex", "--k", "20,x10", "--metrics", "R,mR,PRank").output
    assert text.startswith("% sgeval report: needs \\usepackage{booktabs}\n\\begin{table}[t]")
    for line in ("\\toprule", "\\midrule", "\\bottomrule", "\\label{tab:sgeval-main}",
                 " & \\multicolumn{2}{c}{R@K} & \\multicolumn{2}{c}{mR@K} &  \\\\",
                 "\\cmidrule(lr){2-3} \\cmidrule(lr){4-5}",
                 "Model & 20 & $\\times$10 & 20 & $\\times$10 & PRank \\\\"):
        assert line in text.splitlines(), line
    a, b = (results(demo[name])["metrics"] for name in "AB")
    lower = min(("A", a), ("B", b), key=lambda item: item[1]["PRank"])[0]  # PRank: lower is better
    row = next(line for line in text.splitlines() if line.startswith(f"Model {lower} &"))
    assert row.endswith(f"\\textbf{{{results(demo[lower])['metrics']['PRank']:.2f}}} \\\\")


def test_formats_have_their_short_names(demo):
    for name, spellings in (("markdown", ("md", "MD", "Markdown")), ("latex", ("tex", "LaTeX")), ("csv", ("CSV",))):
        text = report(demo["A"], "--format", name).output
        assert all(report(demo["A"], "--format", spelling).output == text for spelling in spellings)
    assert "markdown (or md), latex (or tex), csv." in report("--help").output
    refused = CliRunner().invoke(sgeval_report.main, [str(demo["A"]), "--format", "html"])
    assert refused.exit_code == 2 and "'html' is not one of 'markdown', 'latex', 'csv', 'md', 'tex'" in refused.output


def test_csv_has_full_precision_and_no_marks(demo):
    text = report(demo["A"], demo["B"], "--format", "csv", "--tables", "main,protocols").output
    blocks = [list(csv.reader(io.StringIO(block))) for block in text.strip().split("\n\n")]
    assert [block[0] for block in blocks] == [["table", "main"], ["table", "protocols"]]
    main = {row[0]: row[1:] for row in blocks[0][2:]}
    assert [float(v) for v in main["Model A"]] == [100 * results(demo["A"])["metrics"][key]
                                                  for key in blocks[0][1][1:]]
    assert blocks[1][1][1:3] == ["R@50 unique (headline)", "R@50 singlempo"]
    by_protocol = results(demo["B"])["by_protocol"]
    assert float({row[0]: row for row in blocks[1][2:]}["Model B"][4]) == 100 * by_protocol["openpsg"]["metrics"]["R@50"]


def test_protocol_comparison_and_the_audit_lines(demo):
    text = report(demo["A"], demo["B"], "--tables", "protocols", "--compare-metrics", "R@20,PR@50").output
    header, rows = markdown_rows(text, "Protocol comparison")
    protocols = ["unique", "singlempo", "multimpo", "openpsg"]
    assert header[1:] == [f"{key} {name}" + " (headline)" * (name == "unique") for key in ("R@20", "PR@50")
                          for name in protocols]
    for name in "AB":
        by_protocol = results(demo[name])["by_protocol"]
        assert rows[f"Model {name}"] == [percent(by_protocol[p]["metrics"][key]) for key in ("R@20", "PR@50")
                                         for p in protocols]
        mean = results(demo[name])["protocol_audit"]["per_image_mean"]
        assert (f"- Protocol audit (per image), Model {name}: repeated triplets {mean['repeated_triplets']:.2f}, "
                f"repeated pairs {mean['repeated_pairs']:.2f}") in text


def test_predicate_table_groups_by_training_frequency(demo):
    text = report(demo["A"], demo["B"], "--tables", "predicates", "--k", "50").output
    header, rows = markdown_rows(text, "Per predicate")
    assert header == ["Predicate", "Group", "GT", "Model A mR@50", "Model B mR@50"]
    a, b = results(demo["A"]), results(demo["B"])
    assert {name: int(row[1]) for name, row in rows.items()} == a["gt_relations_per_predicate"]
    for name, row in rows.items():
        assert row[2:] == [percent(r["per_predicate"]["mR@50"][name]) for r in (a, b)]
    groups = [row[0] for row in rows.values()]
    assert groups == sorted(groups, key=["head", "body", "tail"].index) and set(groups) == {"head", "body", "tail"}
    expected = sgeval_report.predicate_groups(a)
    assert {name: row[0] for name, row in rows.items()} == {n: g for g, names in expected.items() for n in names
                                                           if n in rows}
    assert "grouped by the frequency split of the training relations" in text


def test_predicate_table_uses_the_runs_own_groups(demo, tmp_path):
    own = results(demo["A"])
    own["predicate_groups"] = {"frequent": ["over", "on"], "rare": ["beside"]}
    (tmp_path / "own.json").write_text(json.dumps(own))
    _, rows = markdown_rows(report(tmp_path / "own.json", "--tables", "predicates").output, "Per predicate")
    assert list(rows)[:3] == ["over", "on", "beside"] and rows["in"][0] == "-"


def test_top_confusions_are_the_largest_off_diagonal_cells(demo):
    text = report(demo["A"], demo["B"], "--tables", "confusion", "--top", "4").output
    for name in "AB":
        confusion = results(demo[name])["predicate_confusion"]
        cells = sorted(((-n, gt, p) for gt, row in confusion["counts"].items() for p, n in row.items() if p != gt))
        header, rows = markdown_table(text, f"Top predicate confusions: Model {name}")
        assert header == ["GT predicate", "Predicted as", "Triplets", "Share (%)", "Correct (%)"]
        assert [(-int(row[2]), row[0], row[1]) for row in rows] == cells[:4]
        for gt, _, count, share, correct in rows:
            total = sum(confusion["counts"][gt].values()) + confusion["no_prediction"].get(gt, 0)
            assert [share, correct] == [percent(int(count) / total), percent(confusion["counts"][gt].get(gt, 0) / total)]
    assert "Model B" in text and "on | standing on" in text  # Model B's planted confusion


def test_results_of_another_gt_are_refused_or_marked(demo, tmp_path):
    other = results(demo["B"])
    other["gt_relations_per_predicate"]["over"] += 1
    other["sgeval_version"] = "0.0.9"
    (tmp_path / "other.json").write_text(json.dumps(other))
    n = sum(results(demo["A"])["gt_relations_per_predicate"].values())
    refused = report(demo["A"], tmp_path / "other.json")
    assert refused.exit_code == 1
    assert refused.stderr.splitlines() == [
        f"error: report: the results differ in GT: Model A (31 images, {n} relations) vs Model B (31 images, {n + 1} "
        f"relations); their numbers are not comparable in one table (--allow-mixed shows them with a mark)"]
    marked = report(demo["A"], tmp_path / "other.json", "--allow-mixed").output
    assert "| Model B<sup>a,b</sup> |" in marked
    assert f"- a: GT differs from Model A's: GT: Model A (31 images, {n} relations) vs Model B (31 images, {n + 1} " \
           f"relations)" in marked
    assert "- b: sgeval version differs from Model A's: sgeval version: Model A (0.1.0) vs Model B (0.0.9)" in marked


def test_another_task_mode_or_headline_protocol_is_refused(demo, tmp_path):
    for field, value, expected in (("task", "predcls", "task: Model A (sgdet) vs Model B (predcls)"),
                                   ("gt_seg", None, "mode: Model A (mask) vs Model B (box)"),
                                   ("iou_threshold", 0.7, "IoU threshold: Model A (0.5) vs Model B (0.7)")):
        other = results(demo["B"])
        other["config"][field] = value
        (tmp_path / "other.json").write_text(json.dumps(other))
        assert expected in report(demo["A"], tmp_path / "other.json").stderr
    other = results(demo["B"])
    other["config"]["protocol"] = "openpsg"
    (tmp_path / "other.json").write_text(json.dumps(other))
    refused = report(demo["A"], tmp_path / "other.json")
    assert "different headline protocols (openpsg, unique); choose the protocol of the table with --protocol" in \
        refused.stderr
    chosen = report(demo["A"], tmp_path / "other.json", "--protocol", "singlempo", "--metrics", "R@20").output
    _, rows = markdown_rows(chosen, "Results")
    assert rows["Model B"] == [percent(other["by_protocol"]["singlempo"]["metrics"]["R@20"])]


def test_a_protocol_a_run_lacks_is_a_dash(demo, tmp_path):
    single = results(demo["B"])
    del single["by_protocol"]
    (tmp_path / "single.json").write_text(json.dumps(single))
    text = report(demo["A"], tmp_path / "single.json", "--tables", "main,protocols", "--protocol", "openpsg").output
    assert markdown_rows(text, "Results")[1]["Model B"] == ["-"] * 6
    assert "-: openpsg not evaluated in the run of Model B" in text
    assert markdown_rows(text, "Protocol comparison")[1]["Model B"][1:4] == ["-", "-", "-"]


@pytest.mark.parametrize("content, problem", [
    ("{", "cannot read the results file: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ("[]", "not an sgeval results file (no sgeval_version)"),
    ('{"sgeval_version": "1"}', "config: expected a mapping"),
])
def test_a_bad_results_file_is_one_clear_error(tmp_path, content, problem):
    (tmp_path / "bad.json").write_text(content)
    result = report(tmp_path / "bad.json")
    assert result.exit_code == 1 and result.stderr.splitlines()[0] == f"error: {tmp_path / 'bad.json'}: {problem}"


def test_wrong_types_name_the_field(demo, tmp_path):
    bad = results(demo["A"])
    bad["metrics"]["R@20"] = "high"
    bad["by_protocol"]["openpsg"]["predicate_confusion"]["counts"]["over"]["on"] = 1.5
    bad["gt_relations_per_predicate"]["over"] = True
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    lines = report(tmp_path / "bad.json").stderr.splitlines()
    where = tmp_path / "bad.json"
    assert lines == [f"error: {where}: metrics: expected a mapping of names to finite numbers (within +-2**53) or "
                     f"null",
                     f"error: {where}: gt_relations_per_predicate: expected a mapping of names to counts (integers "
                     f"from 0 to 2**53)",
                     f"error: {where}: by_protocol.openpsg.predicate_confusion.counts.over: expected a mapping of "
                     f"names to counts (integers from 0 to 2**53)"]


def test_a_huge_results_file_is_refused_before_reading(tmp_path, monkeypatch):
    monkeypatch.setattr(sgeval_report, "MAX_RESULTS_BYTES", 10)
    (tmp_path / "big.json").write_text(" " * 11)
    assert "cannot read the results file: 11 bytes, more than the 10 it may have" in report(tmp_path / "big.json").stderr


def test_labels_from_options_and_files(demo, tmp_path):
    (tmp_path / "labels.yaml").write_text(f"{demo['A'].name}: Ours\n")
    text = report(demo["A"], demo["B"], "--labels", tmp_path / "labels.yaml", "--label", f"{demo['B']}=Theirs").output
    assert set(markdown_rows(text, "Results")[1]) == {"Ours", "Theirs"}
    assert "is not FILE=LABEL" in report(demo["A"], "--label", "Ours").output
    same = report(demo["A"], demo["B"], "--label", f"{demo['B']}=Model A")
    assert same.stderr.splitlines() == ["error: report: several results files are labelled 'Model A'; give them "
                                        "labels with --label FILE=NAME"]


def test_unlabelled_files_are_named_by_file_then_folder(demo, tmp_path):
    for folder in ("hilo", "pairnet"):
        unnamed = results(demo["A"])
        unnamed["config"]["model"] = None
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "results.json").write_text(json.dumps(unnamed))
    text = report(tmp_path / "hilo" / "results.json", tmp_path / "pairnet" / "results.json").output
    assert list(markdown_rows(text, "Results")[1]) == ["hilo/results", "pairnet/results"]


def test_output_file_and_every_table(demo, tmp_path):
    result = report(demo["A"], demo["B"], "--tables", "all", "--output", tmp_path / "out" / "report.md")
    assert result.exit_code == 0 and result.stderr == f"wrote {tmp_path / 'out' / 'report.md'}\n"
    text = (tmp_path / "out" / "report.md").read_text()
    for title in ("Results", "Protocol comparison", "Per predicate", "Top predicate confusions: Model A",
                  "Top predicate confusions: Model B", "Segmentation quality and recall"):
        assert f"**{title}**" in text
    assert "unknown" not in text and "nan" not in text


def test_plots_through_the_report(demo, tmp_path):
    result = report(demo["A"], demo["B"], "--plots", tmp_path / "plots", "--plot-formats", "png,svg")
    assert result.exit_code == 0, result.output
    written = sorted(path.name for path in (tmp_path / "plots").iterdir())
    assert written == sorted(f"{stem}.{fmt}" for stem in ("per_predicate", "recall_vs_k", "protocols", "pq_vs_mr_inf",
                                                          "confusion-model-a", "confusion-model-b")
                             for fmt in ("png", "svg"))
    assert all((tmp_path / "plots" / name).stat().st_size > 1000 for name in written)
    assert "--plot-formats" in report(demo["A"], "--plots", tmp_path, "--plot-formats", "gif").output


def test_the_command_runs_through_sgeval_py(demo):
    run = subprocess.run([sys.executable, str(ROOT / "sgeval.py"), "report", str(demo["A"]), "--metrics", "R@20"],
                         capture_output=True, text=True, check=True)
    assert run.stdout.startswith("**Results**\n") and "| Model A |" in run.stdout


def test_sgeval_py_without_the_report_module_says_so(demo, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "sgeval_report", None)  # as for a copy of sgeval.py alone
    monkeypatch.setattr(sys, "argv", ["sgeval.py", "report", str(demo["A"])])
    with pytest.raises(SystemExit) as exit_:
        sgeval.cli()
    assert exit_.value.code == 1
    assert capsys.readouterr().err == "error: the report command needs sgeval_report beside sgeval.py (pip " \
                                      "install sgeval has it)\n"


def test_the_readme_shows_the_demo_table(demo):
    """make figures writes it; this keeps it true."""
    readme = (ROOT / "README.md").read_text()
    assert make_figures.readme_table(readme) == make_figures.demo_table([demo["A"], demo["B"]])


def test_unknown_metrics_and_protocols_are_named(demo):
    assert report(demo["A"], "--metrics", "R,Foo", "--tables", "main").stderr.startswith(
        "error: report: no results file has Foo@20, Foo@50, Foo@100 (see --metrics and --k; they have IMR@10, ")
    assert report(demo["A"], "--protocol", "sgb").stderr == \
        "error: report: no results file has protocol sgb (they have unique, singlempo, multimpo, openpsg)\n"
    chosen = report(demo["A"], demo["B"], "--tables", "protocols", "--protocols", "openpsg,unique").output
    assert markdown_rows(chosen, "Protocol comparison")[0] == [
        "Model", "R@50 openpsg", "R@50 unique (headline)", "mR@50 openpsg", "mR@50 unique (headline)"]


def test_non_finite_values_are_refused(demo, tmp_path):
    (tmp_path / "nan.json").write_text(demo["A"].read_text().replace('"R@20": 0.', '"R@20": NaN, "x": 0.', 1))
    assert f"error: {tmp_path / 'nan.json'}: metrics: expected a mapping of names to finite numbers" in \
        report(tmp_path / "nan.json").stderr


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2, 10**6) | st.floats(allow_nan=False)
                           | st.text(max_size=8), lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)


def _paths(value, prefix=()):
    """Every (path) to a value inside nested dicts and lists."""
    yield prefix
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, inner in items:
        yield from _paths(inner, (*prefix, key))


@settings(max_examples=200, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_changed_results_file_is_reported_or_refused_never_a_traceback(demo, tmp_path, data):
    """Any value of a results file replaced by any JSON value: every table renders in every format,
    or one ReportError names the problems."""
    changed = results(demo["A"])
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(sorted(_paths(changed), key=repr)))
        value = data.draw(JSON_VALUES)
        if not path:
            changed = value
            break
        parent = changed
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = value
    (tmp_path / "changed.json").write_text(json.dumps(changed))
    try:
        runs = sgeval_report.load_runs([str(demo["B"]), str(tmp_path / "changed.json")])
        tables = sgeval_report.build_tables(runs, sgeval_report.TABLES, allow_mixed=True)
    except sgeval_report.ReportError as error:
        assert error.problems
        return
    for fmt in sgeval_report.FORMATS:
        assert sgeval_report.render(tables, fmt)


def test_segmentation_table_puts_pq_beside_the_recall(demo):
    """The demo's configs/demo.yaml has pq: true: the segmentation table shows each model's PQ, SQ,
    RQ (things, stuff) with R@inf, mR@inf and mR@50, the numbers of its results file."""
    result = report(demo["A"], demo["B"], "--tables", "segmentation", "--format", "csv")
    assert result.exit_code == 0, result.output
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert rows[0] == ["table", "segmentation"]
    assert rows[1][1:] == ["PQ", "SQ", "RQ", "PQ_th", "PQ_st", "R@inf", "mR@inf", "mR@50"]
    for row, path in zip(rows[2:4], (demo["A"], demo["B"])):
        metrics = json.loads(Path(path).read_text())["metrics"]
        assert [float(value) for value in row[1:8]] == pytest.approx(
            [100 * metrics[key] for key in ("PQ", "SQ", "RQ", "PQ_th", "PQ_st", "R@inf", "mR@inf")], abs=1e-9)


def test_results_with_panoptic_quality_are_read_and_a_broken_section_is_named(demo, tmp_path):
    """The demo's results hold a panoptic_quality section (pq: true): read without complaint, in every
    table; a section of the wrong shape is one line per field, never a traceback."""
    assert results(demo["A"])["panoptic_quality"]["merge"] == "score-order"
    assert report(demo["A"], demo["B"], "--tables", "all").exit_code == 0
    bad = results(demo["A"])
    bad["panoptic_quality"]["merge"] = 3
    bad["panoptic_quality"]["source"] = ["panoptic"]
    bad["panoptic_quality"]["Things"] = {"PQ": "high"}
    bad["panoptic_quality"]["per_category"] = []
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    where = tmp_path / "bad.json"
    assert report(where).stderr.splitlines() == [
        f"error: {where}: panoptic_quality.merge: expected a name",
        f"error: {where}: panoptic_quality.source: expected a name",
        f"error: {where}: panoptic_quality.Things: expected a mapping of names to finite numbers (within +-2**53) or null",
        f"error: {where}: panoptic_quality.per_category: expected a mapping"]
    bad["panoptic_quality"] = ["score-order"]
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    assert report(where, "--tables", "segmentation").stderr.splitlines() == [
        f"error: {where}: panoptic_quality: expected a mapping or null"]


def test_segmentation_table_names_each_runs_rule_and_segmentation_when_they_differ(demo, tmp_path):
    other = results(demo["B"])
    other["panoptic_quality"]["merge"] = "first-wins"
    (tmp_path / "b.json").write_text(json.dumps(other))
    text = report(demo["A"], tmp_path / "b.json", "--tables", "segmentation").stdout
    assert "Panoptic quality (panopticapi, masks merged by first-wins; panopticapi, masks merged by score-order;" in text
    assert ("The runs' segmentations or rules differ: Model A panopticapi, masks merged by score-order, Model B "
            "panopticapi, masks merged by first-wins.") in text
    assert "differ:" not in report(demo["A"], demo["B"], "--tables", "segmentation").stdout
    other["panoptic_quality"].update(rule="openpsg", source="panoptic")
    (tmp_path / "b.json").write_text(json.dumps(other))
    assert "Model B openpsg, the model's panoptic segmentation." in report(
        demo["A"], tmp_path / "b.json", "--tables", "segmentation").stdout
