"""Regenerate the README's demo table and figure (run by `make figures`, after `make demo`).

    python -m tools.make_figures     # from the repository root

The table: `sgeval report demo/results.json demo/results-b.json` (Markdown), written between the
README's `<!-- demo-table -->` and `<!-- /demo-table -->` lines. The figure: demo/plots/protocols.png
copied to docs/protocols.png. tests/core/test_report.py checks that the README's table is what the
report gives for the demo.
"""

import shutil
import sys
from pathlib import Path

import sgeval_report

ROOT = Path(__file__).resolve().parents[1]
RESULTS = [ROOT / "demo" / "results.json", ROOT / "demo" / "results-b.json"]
START, END = "<!-- demo-table -->", "<!-- /demo-table -->"


def demo_table(results_paths):
    """The README's table: the report's main table of the demo's two models, in Markdown."""
    runs = sgeval_report.load_runs([str(path) for path in results_paths])
    return sgeval_report.render(sgeval_report.build_tables(runs, ["main"]), "markdown")


def readme_table(readme_text):
    """The text between the README's table markers."""
    return readme_text.split(START, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def main():
    missing = [str(path) for path in RESULTS if not path.exists()]
    if missing:
        sys.exit(f"make_figures: {', '.join(missing)} missing; run make demo first")
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    head, rest = text.split(START, 1)
    readme.write_text(f"{head}{START}\n{demo_table(RESULTS)}{END}{rest.split(END, 1)[1]}", encoding="utf-8")
    (ROOT / "docs").mkdir(exist_ok=True)
    shutil.copyfile(ROOT / "demo" / "plots" / "protocols.png", ROOT / "docs" / "protocols.png")
    print(f"wrote the table into {readme} and docs/protocols.png")


if __name__ == "__main__":
    main()
