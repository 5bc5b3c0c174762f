"""``sgeval convert``: the converters' command line (``python -m sgeval_convert`` is the same).

    sgeval convert FAMILY [OPTIONS] ARGS...       # one converter: sgeval convert hilo --gt psg.json results.pkl out.zip
    sgeval convert FAMILY --help                  # its options
    sgeval convert --config configs/hilo.yaml     # the raw output a config's conversion recipe names, when needed

Each family is the ``main`` command of the module of that name (``openimages-gt``: ``gt_main`` of
openimages.py; ``COMMANDS``), imported when it is named (or when ``--help`` lists the families).
``--config`` and its options are recipe.py's.
"""

from __future__ import annotations

import importlib

import click
from click.core import ParameterSource

import sgeval

from . import common, recipe

# The families in the order --help lists them: prediction converters, then the dataset converters.
FAMILIES = ("openpsg", "hilo", "pairnet", "sgb", "openimages", "ag", "coco-panoptic", "vg150", "gqa200", "openimages-gt", "ag-gt",
            "zeroshot")
# family -> (module of this package, its click command); the others are module <family>, command main
COMMANDS = {"openimages-gt": ("openimages", "gt_main"), "ag-gt": ("ag", "gt_main"),
            "coco-panoptic": ("coco_panoptic", "main")}


def module_of(family):
    """(module name, command name) of a family."""
    return COMMANDS.get(family, (family, "main"))


class _Families(click.Group):
    """A group whose commands are the families' ``main`` commands, each imported when it is needed."""

    def list_commands(self, ctx):
        return list(FAMILIES)

    def get_command(self, ctx, name):
        if name not in FAMILIES:
            return None
        module, command = module_of(name)
        return getattr(importlib.import_module(f".{module}", __package__), command)

    def resolve_command(self, ctx, args):
        if args and args[0] not in FAMILIES:
            raise click.UsageError(f"no family '{args[0]}'; the families are {', '.join(FAMILIES)}", ctx)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx, formatter):
        width = formatter.width - 6 - max(map(len, FAMILIES))
        rows = [(name, self.get_command(ctx, name).get_short_help_str(width)) for name in FAMILIES]
        with formatter.section("Families (sgeval convert FAMILY --help for a family's options)"):
            formatter.write_dl(rows)


# the parameters of --config (name: option)
RECIPE_OPTIONS = {"recipe_path": "--recipe", "raw": "--raw", "gt": "--gt", "pred": "--pred", "force": "--force",
                  "workers": "--workers", "quiet": "--quiet"}


@click.group(cls=_Families, invoke_without_command=True, no_args_is_help=True,
             subcommand_metavar="FAMILY [ARGS]...", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False),
              help="Instead of a family: an sgeval YAML config; convert the raw output its conversion recipe names "
                   "into its pred, if that is missing or stale (what `make eval` runs first).")
@click.option("--recipe", "recipe_path", type=click.Path(exists=True, dir_okay=False),
              help="With --config: the conversion recipe (family, raw, options) [default: convert/<config name>.yaml "
                   "in the config's folder].")
@click.option("--raw", help="With --config: the raw model output (overrides the recipe's raw).")
@click.option("--gt", help="With --config: the GT JSON (overrides the config's gt).")
@click.option("--pred", help="With --config: the converted output .zip (overrides the config's pred).")
@click.option("--force", is_flag=True, help="With --config: convert even when the output is up to date.")
@click.option("--workers", type=click.IntRange(1, sgeval.MAX_WORKERS), default=1, show_default=True,
              help="With --config: processes converting images and encoding their masks (same output for any number).")
@click.option("--quiet", is_flag=True, help="With --config: no progress bar.")
@click.pass_context
def main(ctx, config_path, recipe_path, raw, gt, pred, force, workers, quiet):
    """Convert a model's raw output to an sgeval prediction ZIP (openpsg, hilo, pairnet, sgb, openimages, ag,
    coco-panoptic),
    or a dataset's files to sgeval's GT JSON or zero-shot list (vg150, gqa200, openimages-gt, ag-gt, zeroshot).

    With --config instead of a family: convert the raw output named by a config's conversion recipe,
    when the config's pred is missing or stale.
    """
    given = [option for name, option in RECIPE_OPTIONS.items()
             if ctx.get_parameter_source(name) is not ParameterSource.DEFAULT]
    if ctx.invoked_subcommand is not None:
        if config_path is not None or given:
            raise click.UsageError(f"{' '.join(['--config'] * (config_path is not None) + given)} "
                                   f"cannot go with a family; a family's options follow its name")
        return
    if config_path is None:
        raise click.UsageError("name a family, or give --config")
    message, summary = sgeval.run_cli(
        lambda progress: recipe.prepare(config_path, raw, gt, pred, force, progress, recipe_path, workers),
        "converting", quiet)
    click.echo(message, err=True)
    if summary is not None:
        click.echo(common.describe(summary), err=True)
