"""sgeval report and the Open Images converter against hostile numbers and names (issue 36):
integers of hundreds of digits, 1e308 and other numbers a table cannot show, negative counts are
one clean error naming the field (never an OverflowError, a ZeroDivisionError or ``inf`` in a
table); model names pass through Markdown as text -- no link, image, HTML tag, emphasis, code,
math, cell or line break of theirs survives -- and through LaTeX without a line break."""

import json

import pytest
from click.testing import CliRunner
from conftest import perfect_case
from fuzz.oracle import markdown_problem
from hypothesis import given, settings
from hypothesis import strategies as st

import sgeval
import sgeval_report
from sgeval_convert import openimages


@pytest.fixture(scope="module")
def results_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("results")
    values = perfect_case(folder)
    sgeval.evaluate(sgeval.make_config({**values, "output": str(folder / "results.json"), "confusion_k": "20",
                                        "protocols": ["openpsg"]}))
    return folder / "results.json"


def report(*args):
    return CliRunner().invoke(sgeval_report.main, [str(arg) for arg in args], catch_exceptions=False)


def with_change(results_file, tmp_path, change, text=None):
    """A copy of the results file with change(results) applied (or text as its content)."""
    results = json.loads(results_file.read_text())
    if change is not None:
        change(results)
    path = tmp_path / "changed.json"
    path.write_text(text if text is not None else json.dumps(results))
    return path


HUGE = 10 ** 400
NUMBERS = {  # name -> (change, the field the error names)
    "metric of 400 digits": (lambda r: r["metrics"].update({"R@20": HUGE}), "metrics"),
    "metric 1e308": (lambda r: r["metrics"].update({"R@20": 1e308}), "metrics"),
    "metric -1e300": (lambda r: r["metrics"].update({"R@20": -1e300}), "metrics"),
    "metric 2**53 + 1": (lambda r: r["metrics"].update({"R@20": 2 ** 53 + 1}), "metrics"),
    "GT count of 400 digits": (lambda r: r["gt_relations_per_predicate"].update({"on": HUGE}),
                               "gt_relations_per_predicate"),
    "negative GT count": (lambda r: r["gt_relations_per_predicate"].update({"on": -1}), "gt_relations_per_predicate"),
    "images of 400 digits": (lambda r: r["images"].update({"evaluated": HUGE}), "images.evaluated"),
    "negative images": (lambda r: r["images"].update({"evaluated": -3}), "images.evaluated"),
    "IoU of 400 digits": (lambda r: r["config"].update({"iou_threshold": HUGE}), "config.iou_threshold"),
    "audit of 400 digits": (lambda r: r.update({"protocol_audit": {"per_image_mean": {"self_pairs": HUGE}}}),
                            "protocol_audit.per_image_mean"),
    "per-predicate of 400 digits": (lambda r: r["per_predicate"]["mR@20"].update({"on": HUGE}),
                                    "per_predicate.mR@20"),
    "protocol metric of 400 digits": (lambda r: r["by_protocol"]["openpsg"]["metrics"].update({"R@20": HUGE}),
                                      "by_protocol.openpsg.metrics"),
    "confusion count of 400 digits": (
        lambda r: r["predicate_confusion"]["counts"]["on"].update({"on": HUGE}), "predicate_confusion.counts.on"),
    "negative confusion counts": (
        lambda r: r["predicate_confusion"]["counts"]["on"].update({"on": -5, "riding": 5}),
        "predicate_confusion.counts.on"),
}


@pytest.mark.parametrize("name", NUMBERS)
def test_numbers_a_table_cannot_show_are_one_clean_error(results_file, tmp_path, name):
    change, field = NUMBERS[name]
    path = with_change(results_file, tmp_path, change)
    result = report(path, "--tables", "all")
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines()[0].startswith(f"error: {path}: {field}: expected"), result.stderr
    assert "inf" not in result.output


@pytest.mark.parametrize("digits", [4301, 5000])
def test_a_number_of_thousands_of_digits_is_one_clean_error(results_file, tmp_path, digits):
    text = results_file.read_text().replace('"sgeval_version"', f'"big": {"9" * digits}, "sgeval_version"', 1)
    path = with_change(results_file, tmp_path, None, text)
    lines = report(path).stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: cannot read the results file")


def test_the_largest_numbers_allowed_print_as_numbers(results_file, tmp_path):
    path = with_change(results_file, tmp_path, lambda r: r["metrics"].update({"R@20": 2 ** 53}))
    result = report(path, "--metrics", "R@20")
    assert result.exit_code == 0 and "inf" not in result.output and f"{100 * 2 ** 53:.1f}" in result.output


@pytest.mark.parametrize("size", [[HUGE, 5], [5, -HUGE], [1e308, 5], [5, float("inf")], [float("nan"), 5],
                                  [2 ** 40 + 1, 1], [0, 5], [True, 5], ["5", 5]])
def test_open_images_img_size_out_of_range_is_a_problem(size):
    problems = _Problems()
    entry = {"img_fn": "a", "img_size": size, "bbox": [[0, 0, 1, 1]], "det_labels": [0], "rel": [[0, 0, 0]]}
    assert openimages.convert_entry(0, entry, 1, 1, "gt.json", problems) is None
    assert len(problems) == 1 and "field 'img_size' must be [width, height]" in problems[0]


def test_open_images_img_size_beyond_the_pixel_limit_is_a_problem():
    problems = _Problems()
    entry = {"img_fn": "a", "img_size": [2 ** 40, 2 ** 40], "bbox": [[0, 0, 1, 1]], "det_labels": [0],
             "rel": [[0, 0, 0]]}
    assert openimages.convert_entry(0, entry, 1, 1, "gt.json", problems) is None
    assert "exceeds the limit" in problems[0]


class _Problems(list):
    def add(self, line):
        self.append(line)


# ----------------------------------------------------------------------------------------------
# Names in Markdown and LaTeX


NAMES = ["[click](javascript:alert(1))", "![x](http://example.com/pixel.png)", "<script>alert(1)</script>",
         "<img src=x onerror=alert(1)>", "a|b", "line\nbreak", "cr\rhere", "sep\u2028arator", "**bold** _it_",
         "`code`", "~~gone~~", "$x^2$", "&lt;b&gt;", "# heading", "<https://example.com>", "a\\|b", "\x00\x1b[31m"]


def markdown_of(results_file, tmp_path, name, fmt="markdown"):
    path = with_change(results_file, tmp_path, lambda r: r["config"].update({"model": name}))
    result = report(path, "--format", fmt, "--tables", "all", "--metrics", "R@20")
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("name", NAMES)
def test_markdown_shows_a_model_name_as_text(results_file, tmp_path, name):
    assert markdown_problem(markdown_of(results_file, tmp_path, name)) is None


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=30))
def test_any_name_is_inert_in_markdown(name):
    table = sgeval_report.Table("main", "Results", [("", "Model", "Model"), ("", "R@20", "R@20")],
                                [[(name, []), 0.5], [(name + "2", ["a"]), 0.25]], ["text", "percent"], [name], True)
    assert markdown_problem(sgeval_report.render([table])) is None


@pytest.mark.parametrize("name", ["two\n\nparagraphs", "cr\r\rhere", "sep\u2029x"])
def test_latex_has_no_line_break_of_a_name(results_file, tmp_path, name):
    text = markdown_of(results_file, tmp_path, name, "latex")
    assert "\n\n" not in text.split(r"\begin{tabular}")[1].split(r"\end{tabular}")[0]
    assert "\r" not in text and "\u2029" not in text


def test_a_confusion_row_without_triplets_is_not_a_division_by_zero(results_file, tmp_path):
    def zero(results):
        confusion = results["predicate_confusion"]
        confusion["counts"] = {name: dict.fromkeys(row, 0) for name, row in confusion["counts"].items()}
        confusion["no_prediction"] = dict.fromkeys(confusion.get("no_prediction", {}), 0)
    path = with_change(results_file, tmp_path, zero)
    assert report(path, "--tables", "confusion").exit_code == 0
