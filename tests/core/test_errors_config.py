"""Bad configuration (SPEC section 8): config values (make_config), YAML files (load_config) and
command line options. Every problem is one SGEvalError line naming the config (or the YAML file)
and the key; all problems are reported together."""

import re

import pytest
from click.testing import CliRunner
from conftest import (assert_cli_reports, checked, config_problems, matching, only, perfect_case, sgeval,
                      write_yaml)


# -------------------------------------------------------------------------------- config values


def test_config_unknown_key_lists_the_valid_keys(tmp_path):
    values = perfect_case(tmp_path)
    problem = only(config_problems({**values, "kk": [20]}), "config", None, "kk")
    for field in sgeval.dataclasses.fields(sgeval.Config):
        assert field.name in problem


@pytest.mark.parametrize("k", [["0"], ["-5"], ["abc"], ["x0"], ["x-1"], ["xnan"], ["xinf"], ["20.5"], ["x"],
                               [True], ["\u0663"], ["1_0"], ["x1_0"], ["x1e"], ["+5"], ["x1e400"], ["9" * 5000], ["x1e2"],
                               ["x1e308"], ["x1E-3"], ["1e2"]])
def test_config_bad_k(tmp_path, k):
    values = perfect_case(tmp_path)
    only(config_problems({**values, "k": ["20", *k]}), "config", None, "k", str(k[0])[:50])


@pytest.mark.parametrize("k", [[], "", " , "])
def test_config_empty_k(tmp_path, k):
    only(config_problems({**perfect_case(tmp_path), "k": k}), "config", None, "k")


@pytest.mark.parametrize("protocol", ["bogus", "", None, "UNIQUE"])
def test_config_bad_protocol(tmp_path, protocol):
    problem = only(config_problems({**perfect_case(tmp_path), "protocol": protocol}), "config", None, "protocol")
    assert "unique" in problem and "multimpo" in problem


@pytest.mark.parametrize("workers", [0, -1, "two", None, 1.5, True, sgeval.MAX_WORKERS + 1, 10**9, "\u00b2", "\u0663",
                                     "9" * 5000, "1_0"])
def test_config_bad_workers(tmp_path, workers):
    only(config_problems({**perfect_case(tmp_path), "workers": workers}), "config", None, "workers")


@pytest.mark.parametrize("threshold", [0, 1.5, "half", None, float("nan")])
def test_config_bad_iou_threshold(tmp_path, threshold):
    only(config_problems({**perfect_case(tmp_path), "iou_threshold": threshold}), "config", None, "iou_threshold")


def test_config_bad_absent_predicates(tmp_path):
    only(config_problems({**perfect_case(tmp_path), "absent_predicates": "drop"}), "config", None, "absent_predicates")


@pytest.mark.parametrize("metrics", [["R", "Foo"], "R,mr"])
def test_config_unknown_metric_family(tmp_path, metrics):
    problem = only(config_problems({**perfect_case(tmp_path), "metrics": metrics}), "config", None, "metric")
    assert "Foo" in problem or "mr" in problem
    assert all(family in problem for family in sgeval.METRIC_FAMILIES)


def test_config_missing_gt_and_pred():
    """gt is always required; pred only where a file is evaluated (an Evaluator needs none)."""
    assert config_problems({}) == ["config: 'gt' is required"]
    with pytest.raises(sgeval.SGEvalError) as caught:
        sgeval.make_config({}, need_pred=True)
    problems = caught.value.problems
    assert len(problems) == 2, problems
    assert matching(problems, "config", None, "'gt'") and matching(problems, "config", None, "'pred'")
    with pytest.raises(sgeval.SGEvalError, match="'pred' is required"):
        sgeval.evaluate(sgeval.make_config({"gt": "psg.json"}))


def test_config_problems_are_collected(tmp_path):
    problems = config_problems({"k": ["20", "0"], "protocol": "x", "workers": 0, "metrics": ["Q"]})
    assert len(problems) == 5, problems  # gt, k, metrics, protocol, workers


@pytest.mark.parametrize("aggregation", ["mean", "", None, "POOLED", ["pooled"]])
def test_config_bad_aggregation(tmp_path, aggregation):
    problems = config_problems({**perfect_case(tmp_path), "aggregation": aggregation})
    problem = only(problems, "config", None, "aggregation")
    assert "per_image" in problem and "pooled" in problem


@pytest.mark.parametrize("protocols, bad", [(["unique", "bogus"], "bogus"), ("singlempo,bogus", "bogus"),
                                            (["MultiMPO"], "MultiMPO"), ("unique, single", "single")])
def test_config_unknown_protocol_in_protocols(tmp_path, protocols, bad):
    problem = only(config_problems({**perfect_case(tmp_path), "protocols": protocols}), "config", None, "protocol",
                   f"'{bad}'")
    assert all(name in problem for name in sgeval.PROTOCOLS)


@pytest.mark.parametrize("imr_k", [["x1"], ["0"], ["-2"], ["1.5"], ["ten"], [True], "x10"])
def test_config_bad_imr_k(tmp_path, imr_k):
    bad = imr_k if isinstance(imr_k, str) else str(imr_k[0])
    values = {**perfect_case(tmp_path), "imr_k": ["10", *imr_k] if isinstance(imr_k, list) else imr_k}
    only(config_problems(values), "config", None, "imr_k", f"'{bad}'", "positive integer")


@pytest.mark.parametrize("imr_k", [[], "", " , "])
def test_config_empty_imr_k(tmp_path, imr_k):
    only(config_problems({**perfect_case(tmp_path), "imr_k": imr_k}), "config", None, "imr_k")


@pytest.mark.parametrize("tau", [-0.1, 1.5, "half", "0.5", None, True, float("nan"), float("inf")])
def test_config_bad_wimr_tau(tmp_path, tau):
    problem = only(config_problems({**perfect_case(tmp_path), "wimr_tau": tau}), "config", None, "wimr_tau")
    assert re.search(r"\[0(\.0)?, 1(\.0)?\]", problem), problem  # the closed range [0, 1]


def test_config_wimr_tau_bounds_are_valid(tmp_path):
    for tau in (0, 1, 0.0, 1.0):
        assert sgeval.make_config({**perfect_case(tmp_path), "wimr_tau": tau}).wimr_tau == tau


def test_config_iou_threshold_message_states_the_range(tmp_path):
    problem = only(config_problems({**perfect_case(tmp_path), "iou_threshold": 0}), "config", None, "iou_threshold")
    assert "(0, 1]" in problem, problem  # not an internal bound such as "[1e-09, 1.0]"


@pytest.mark.parametrize("value", ["yes", "true", 1, 0, None])
def test_config_per_predicate_not_a_boolean(tmp_path, value):
    only(config_problems({**perfect_case(tmp_path), "per_predicate": value}), "config", None, "per_predicate", "true")


def test_config_newer_key_problems_are_collected(tmp_path):
    problems = config_problems({**perfect_case(tmp_path), "aggregation": "mean", "protocols": ["bogus"], "imr_k": "x1",
                                "wimr_tau": 2, "per_predicate": "yes"})
    assert len(problems) == 5, problems
    for key in ("aggregation", "protocol", "imr_k", "wimr_tau", "per_predicate"):
        assert matching(problems, "config", None, key), key


# ----------------------------------------------------------------------------------- YAML files


@pytest.mark.parametrize("text, words", [
    ("k: [1, 2\nprotocol: unique\n", "YAML"), ("gt: a\n  pred: b\n bad: [", "YAML"), ("\tgt: x\n", "YAML"),
    ("- gt: a\n- pred: b\n", "mapping"), ("just a string\n", "mapping"), ("42\n", "mapping")],
    ids=["unclosed", "indentation", "tab", "list", "string", "number"])
def test_config_malformed_yaml_or_not_a_mapping(tmp_path, text, words):
    path = write_yaml(tmp_path, text)
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.load_config(path)
    only(checked(info.value), path, None, words)


def test_config_unreadable_yaml(tmp_path):
    path = tmp_path / "missing.yaml"
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.load_config(path)
    only(checked(info.value), path)


def test_config_unknown_yaml_key_names_the_file(tmp_path):
    values = perfect_case(tmp_path)
    path = write_yaml(tmp_path, f"gt: {values['gt']}\npred: {values['pred']}\niou: 0.5\n")
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.load_config(path)
    problem = only(checked(info.value), path, None, "'iou'")
    assert "iou_threshold" in problem


# -------------------------------------------------------------------------------------- the CLI
# The CLI: each builder breaks a case and returns (YAML config path or None, option values,
# problem count); the library and the CLI report the same problems (assert_cli_reports).


def bad_options(tmp_path):
    return None, {**perfect_case(tmp_path), "k": "20,0,xq", "metrics": "R,Nope", "workers": "0"}, 4


def unknown_yaml_key(tmp_path):
    values = perfect_case(tmp_path)
    return write_yaml(tmp_path, f"gt: {values['gt']}\npred: {values['pred']}\nprotocl: unique\n"), {}, 1


def malformed_yaml(tmp_path):
    return write_yaml(tmp_path, "k: [1, 2\nprotocol: unique\n"), {}, 1


def missing_yaml(tmp_path):
    return tmp_path / "missing.yaml", {}, 1


def no_gt_no_pred(tmp_path):
    return None, {}, 2


def bad_newer_options(tmp_path):
    return None, {**perfect_case(tmp_path), "imr_k": "x1,0", "wimr_tau": "1.5", "protocols": "unique,bogus"}, 4


def bad_newer_yaml_keys(tmp_path):
    values = perfect_case(tmp_path)
    text = (f"gt: {values['gt']}\npred: {values['pred']}\naggregation: mean\nper_predicate: \"yes\"\n"
            "wimr_tau: half\nprotocols: [unique, singlempo, bogus]\n")
    return write_yaml(tmp_path, text), {}, 4


@pytest.mark.parametrize("build", [bad_options, unknown_yaml_key, malformed_yaml, missing_yaml, no_gt_no_pred,
                                  bad_newer_options, bad_newer_yaml_keys],
                         ids=lambda build: build.__name__)
def test_cli_reports_one_error_line_per_problem(tmp_path, build):
    assert_cli_reports(tmp_path, build)


@pytest.mark.parametrize("option, value", [("--aggregation", "mean"), ("--wimr-tau", "half"),
                                           ("--protocol", "bogus"), ("--iou-threshold", "x")])
def test_cli_option_of_the_wrong_type_is_a_usage_error(tmp_path, option, value):
    """click checks typed options before sgeval sees them: a usage error, no traceback."""
    values = perfect_case(tmp_path)
    result = CliRunner().invoke(sgeval.main, ["--quiet", "--gt", values["gt"], "--pred", values["pred"], option, value])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output and result.stdout == ""
    assert option in result.stderr and value in result.stderr


# ------------------------------------------------------------------------ hostile YAML and values


def test_config_yaml_that_is_not_utf8(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_bytes(b"gt: \xff\xfe\n")
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.load_config(path)
    only(checked(info.value), path, None, "YAML", "utf-8")


def test_config_yaml_nested_too_deeply(tmp_path):
    path = write_yaml(tmp_path, "k: " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.load_config(path)
    only(checked(info.value), path, None, "YAML")


def test_config_yaml_alias_bomb_is_refused_without_expanding_it(tmp_path):
    """Nine levels of aliases, each doubling the one below: 2**9 copies if expanded, and 2**27 with
    a few more lines; the value is refused before anything walks or prints it."""
    lines = ['a0: &a0 ["x", "x"]'] + [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]" for i in range(1, 30)]
    path = write_yaml(tmp_path, "\n".join(lines).replace("a0:", "k:", 1) + "\n")
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.load_config(path)
    problems = checked(info.value)
    assert len(problems) == 29 and all("must be a value or a list of values" in p for p in problems)
    assert max(map(len, problems)) < 200


@pytest.mark.parametrize("k", ["x1" + "0" * 300, "x" + "9" * 30 + ".5", str(10**30)])
def test_huge_cut_offs_mean_every_triplet(tmp_path, k):
    """A cut-off larger than any list (relative or absolute) is valid: it takes every triplet."""
    values = perfect_case(tmp_path)
    results = sgeval.evaluate(sgeval.make_config({**values, "k": [k, "100"]}))
    label = results["config"]["k"][0]
    assert results["metrics"][f"R@{label}"] == results["metrics"]["R@100"] == 1.0


def test_unwritable_output_is_found_before_the_evaluation(tmp_path, monkeypatch):
    """An output path that cannot be written fails at once (nothing is read), and checking a
    writable one leaves no file behind when the evaluation then fails."""
    values = perfect_case(tmp_path)
    (tmp_path / "a_file").write_text("")
    output = tmp_path / "a_file" / "results.json"  # a file where its folder should be
    read = []
    monkeypatch.setattr(sgeval, "read_gt", lambda *args: read.append(args))
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.evaluate(sgeval.make_config({**values, "output": str(output)}))
    only(checked(info.value), output, None, "cannot write")
    assert not read
    monkeypatch.undo()
    writable = tmp_path / "new" / "results.json"
    with pytest.raises(sgeval.SGEvalError):
        sgeval.evaluate(sgeval.make_config({**values, "output": str(writable), "gt": str(tmp_path / "none.json")}))
    assert not writable.exists()


@pytest.mark.parametrize("k, labels", [("20, x.5", ("20", "x.5")), ("x10.", ("x10.",)), (" 7 ", ("7",)),
                                       ("020, 20, x10, x10.0, x2", ("020", "x10", "x2")), ([50, "x1"], ("50", "x1"))])
def test_config_k_spellings(tmp_path, k, labels):
    """Cut-offs are ASCII integers or x and a decimal number (Python's other number spellings,
    such as '1_0', '1e2' or other scripts' digits, are not cut-offs); a label comes back as it was
    written, and a later label of the same cut-off is left out."""
    config = sgeval.make_config({**perfect_case(tmp_path), "k": k})
    assert config.k == labels


def test_an_output_path_with_a_nul_is_a_problem(tmp_path):
    only(config_problems_of_run({**perfect_case(tmp_path), "output": str(tmp_path / "a\x00b")}), "a\\x00b",
         None, "cannot write")


def config_problems_of_run(values):
    with pytest.raises(sgeval.SGEvalError) as info:
        sgeval.evaluate(sgeval.make_config(values))
    return checked(info.value)


def test_very_long_problem_lines_are_cut():
    problem = sgeval.SGEvalError(["x" * 5000]).problems[0]
    assert len(problem) < 1100 and problem.endswith("(5000 characters)")


def test_a_long_cut_off_label_keeps_the_table_aligned(tmp_path):
    """A label as long as the user wrote it widens its column: every line of the R / mR grid has
    the header's length, and the label is printed as written."""
    label = "x1" + "0" * 40
    results = sgeval.evaluate(sgeval.make_config({**perfect_case(tmp_path), "k": ["20", label, "050"]}))
    assert results["config"]["k"] == ["20", label, "050"] and f"R@{label}" in results["metrics"]
    lines = sgeval.format_table(results).splitlines()
    grid = lines[1:lines.index(next(line for line in lines[2:] if not line.startswith(("R", "m", "n", "P", "z"))))]
    assert f"@{label}" in grid[0] and len({len(line) for line in grid}) == 1, grid
