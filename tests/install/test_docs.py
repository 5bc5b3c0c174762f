"""The documentation says what the code does: README.md, docs/*.md and the folders' READMEs.

- Every command line (in a ``sh`` block, or an inline code span) that runs ``sgeval``,
  ``python sgeval.py``, ``python -m sgeval_convert|sgeval_serve|<module>`` or ``make`` names a
  command, subcommands and options that exist: checked against the click commands themselves
  (what ``--help`` lists) and the Makefile's targets.
- Every ``python`` block compiles (but those after ``<!-- test: skip -->``); those after a ``<!-- test: run -->`` line run, in order, in a
  folder where ``demo/data`` is the demo data and ``configs/`` the repository's (as from the
  repository root after ``make demo-data``).
- Every ``yaml`` block after a ``<!-- test: config -->`` line is a valid sgeval config.
- Every relative link points at a file that exists and, with ``#anchor``, at one of its headings.
"""

import importlib
import importlib.util
import re
import shlex
from pathlib import Path

import click
import pytest
import yaml

import sgeval

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), ROOT / "sgeval_convert" / "README.md",
               ROOT / "evalai" / "README.md", ROOT / "bench" / "README.md", *(ROOT / "tools").glob("*/README.md")])
SHELL = {"sh", "bash", "shell", "console"}
FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```", re.M | re.S)
MARK = re.compile(r"<!-- test: (\w+) -->")
SUBCOMMANDS = {"report": "sgeval_report", "serve": "sgeval_serve", "convert": "sgeval_convert"}


def relative(path):
    return path.relative_to(ROOT).as_posix()


def blocks(path):
    """(language, code, mark or None, line number) of each fenced block of a Markdown file."""
    text = path.read_text()
    for match in FENCE.finditer(text):
        mark = MARK.fullmatch(text[:match.start()].rstrip().rsplit("\n", 1)[-1].strip())
        line = text.count("\n", 0, match.start()) + 1
        yield match.group(1), match.group(2), mark.group(1) if mark else None, line


def prose(path):
    """The text of a Markdown file outside its fenced blocks."""
    return FENCE.sub("", path.read_text())


# ---------------------------------------------------------------------------------------------
# Command lines
# ---------------------------------------------------------------------------------------------

def shell_lines(code):
    """The command lines of a shell block: continuations joined, comments and prompts dropped."""
    for line in code.replace("\\\n", " ").splitlines():
        line = line.strip().removeprefix("$ ")
        if line and not line.startswith("#"):
            yield line


def inline_commands(path):
    """Inline code spans of the prose that are command lines."""
    for span in re.findall(r"`([^`\n]+)`", prose(path)):
        if re.match(r"((\S*/)?python3? sgeval\.py|sgeval (-|report|serve|convert)|make [a-z])", span):
            yield span


def words(line):
    """The words of a command line; <placeholders> are one word, [optional] brackets dropped."""
    line = re.sub(r"<[^<>]*>", "PLACEHOLDER", line)
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError as error:
        raise AssertionError(f"cannot split {line!r}: {error}") from None
    return [token.strip("[]") for token in tokens if token.strip("[]")]


def make_targets():
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z][\w.-]*)\s*:(?!=)", text, re.M))


def sgeval_command():
    """The click command of an evaluation (what `sgeval` runs when no subcommand is named)."""
    commands = [value for value in vars(sgeval).values() if isinstance(value, click.Command)]
    assert len(commands) == 1, f"expected one click command in sgeval, found {len(commands)}"
    return commands[0]


def command_of(argv):
    """(click command, its arguments) for a command line's words after the program, or None when
    the line runs no sgeval command."""
    if argv[:1] and argv[0] in SUBCOMMANDS:
        return importlib.import_module(SUBCOMMANDS[argv[0]]).main, argv[1:]
    return sgeval_command(), argv


def option_names(command):
    names = {"-h", "--help"}
    for param in command.params:
        if isinstance(param, click.Option):
            names.update(param.opts + param.secondary_opts)
    return names


def check_arguments(command, args, where):
    """The options each (sub)command is given exist, and so do the subcommands named."""
    chosen = False  # a group's subcommand was named
    index = 0
    while index < len(args):
        word = args[index]
        index += 1
        if word.startswith("-") and len(word) > 1 and not re.match(r"-\d", word):
            name, _, value = word.partition("=")
            assert name in option_names(command), f"{where}: {command.name} has no option {name}"
            param = next(p for p in command.params if isinstance(p, click.Option) and name in p.opts + p.secondary_opts) \
                if name not in ("-h", "--help") else None
            if param is not None and not param.is_flag and not value and index < len(args):
                value = args[index]
                index += 1
            if param is not None and isinstance(param.type, click.Choice) and value and \
                    not re.search(r"[|*]|PLACEHOLDER|\.\.\.", value):
                choices = {c.lower() for c in param.type.choices}
                assert value.lower() in choices, f"{where}: {name} {value}: not one of {sorted(choices)}"
        elif isinstance(command, click.Group) and not chosen and word not in ("...", "PLACEHOLDER"):
            sub = command.get_command(click.Context(command), word)
            assert sub is not None, f"{where}: {command.name} has no subcommand {word}"
            command, chosen = sub, True


def check_line(line, where, targets):
    argv = words(line)
    while argv and re.match(r"^[A-Z_]+=", argv[0]):  # VAR=value before the command
        argv = argv[1:]
    if not argv:
        return False
    program, rest = argv[0], argv[1:]
    if program == "make":
        named = [word for word in rest if "=" not in word and not word.startswith("-")]
        for target in named:
            assert target in targets, f"{where}: the Makefile has no target {target}"
        return True
    if program == "sgeval":
        command, args = command_of(rest)
        check_arguments(command, args, where)
        return True
    if re.fullmatch(r"(\S*/)?python3?(\.\d+)?", program) and rest:
        if rest[0] == "sgeval.py":
            command, args = command_of(rest[1:])
            check_arguments(command, args, where)
            return True
        if rest[0] == "-m" and len(rest) > 1 and not rest[1].startswith("pytest"):
            module = rest[1]
            assert importlib.util.find_spec(module) is not None, f"{where}: no module {module}"
            if module in SUBCOMMANDS.values():
                check_arguments(importlib.import_module(module).main, rest[2:], where)
            return True
    return False


def command_lines():
    for path in DOCS:
        for language, code, _, line in blocks(path):
            if language in SHELL:
                for command in shell_lines(code):
                    yield path, line, command
        for span in inline_commands(path):
            yield path, 0, span


def test_every_command_line_names_commands_and_options_that_exist():
    targets, checked, problems = make_targets(), 0, []
    for path, line, command in command_lines():
        where = f"{relative(path)}:{line}: {command}"
        try:
            checked += check_line(command, where, targets)
        except AssertionError as error:
            problems.append(str(error))
    assert not problems, "\n".join(problems)
    assert checked > 50  # the docs hold many; a parser that finds none would pass silently


def test_the_checker_catches_what_it_should():
    targets = make_targets()
    for line in ("python sgeval.py --config c.yaml --no-such-option 1", "sgeval report --nope x.json",
                 "sgeval convert no-such-family a b", "sgeval --protocol nope", "make no-such-target",
                 "sgeval serve --config s.yaml no-such-subcommand", "python -m no_such_module"):
        with pytest.raises(AssertionError):
            check_line(line, line, targets)
    for line in ("python sgeval.py --config c.yaml --protocol sgb --no-audit", "make eval MODEL=psg WORKERS=2",
                 "sgeval convert sgb --gt g.json --task predcls a b", "sgeval serve --config s.yaml token bob --admin",
                 "sgeval report r.json --format latex", "python -m sgeval_convert hilo --help"):
        assert check_line(line, line, targets)


# ---------------------------------------------------------------------------------------------
# Examples
# ---------------------------------------------------------------------------------------------

def python_blocks():
    for path in DOCS:
        for language, code, mark, line in blocks(path):
            if language == "python":
                yield path, code, mark, line


def test_every_python_example_compiles():
    """(A block of signatures, not code, is marked ``<!-- test: skip -->``.)"""
    for path, code, mark, line in python_blocks():
        if mark != "skip":
            compile(code, f"{relative(path)}:{line}", "exec")


def test_the_marked_examples_are_what_the_docs_hold():
    """A mark belongs to the block right after it: one mark per marked block, no stray marks."""
    for path in DOCS:
        marks = len(re.findall(r"^<!-- test: \w+ -->$", path.read_text(), re.M))
        assert marks == sum(1 for *_, mark, _ in blocks(path) if mark), relative(path)


@pytest.fixture
def demo_folder(demo_data, tmp_path, monkeypatch):
    """A folder laid out as the repository root after make demo-data: demo/data and configs/."""
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "data").symlink_to(demo_data)
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("path", [path for path in DOCS if any(mark == "run" for *_, mark, _ in blocks(path))],
                         ids=relative)
def test_the_runnable_examples_run_on_the_demo_data(path, demo_folder, capsys):
    namespace = {"__name__": "__docs__"}
    for language, code, mark, line in blocks(path):
        if mark == "run":
            assert language == "python", f"{relative(path)}:{line}: only python blocks run"
            exec(compile(code, f"{relative(path)}:{line}", "exec"), namespace)


def test_the_config_examples_are_valid_configs():
    found = 0
    for path in DOCS:
        for language, code, mark, line in blocks(path):
            if mark == "config":
                assert language == "yaml", f"{relative(path)}:{line}"
                config = sgeval.make_config({"gt": "g.json", **yaml.safe_load(code)})
                assert config is not None
                found += 1
    assert found


# ---------------------------------------------------------------------------------------------
# Links
# ---------------------------------------------------------------------------------------------

def anchor(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path):
    seen, result = {}, set()
    for heading in re.findall(r"^#{1,6} (.+)$", prose(path), re.M):
        name = anchor(heading)
        result.add(f"{name}-{seen[name]}" if name in seen else name)
        seen[name] = seen.get(name, 0) + 1
    return result


def test_every_relative_link_points_at_a_file_and_heading():
    problems = []
    for path in DOCS:
        for target in re.findall(r"\]\(([^)\s]+)\)", prose(path)):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, fragment = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            if not linked.exists():
                problems.append(f"{relative(path)}: {target}: no such file")
            elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
                problems.append(f"{relative(path)}: {target}: no such heading in {relative(linked)}")
    assert not problems, "\n".join(problems)


def test_the_docs_send_readers_nowhere_outside_the_repository():
    for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        text = path.read_text()
        for word in ("SPEC", "../shared", "papers/"):
            assert word not in text, f"{relative(path)} mentions {word}"
