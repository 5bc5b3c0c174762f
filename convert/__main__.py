"""Convert the raw model output a config names, when needed (what `make eval` runs first).

    python -m convert --config configs/hilo.yaml [--raw results/hilo.pkl] [--gt psg.json] [--pred out.zip] [--force]

The config's ``convert`` mapping names the ``family`` (openpsg, hilo, pairnet) and the ``raw``
output, plus any option of that family's ``convert`` function (``predicate_source``, ``ng_top``,
``ng_per_predicate``; openpsg also ``layout``). ``pred`` is the converted file, ``gt`` the
annotations. Nothing is converted when the config has no ``convert`` mapping, or when ``pred`` is
up to date: newer than the raw output and the GT, and its convert.json records the same family,
raw output, GT and options. When the raw output is missing but ``pred`` exists, ``pred`` is kept.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
import zipfile
from pathlib import Path

import click

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from convert import common  # noqa: E402

FAMILIES = {"openpsg": "convert.openpsg", "hilo": "convert.hilo", "pairnet": "convert.pairnet"}
NOT_OPTIONS = ("raw", "out", "gt", "progress")  # convert() parameters that are not conversion options


def plan(config_path, raw=None, gt=None, pred=None):
    """(family, convert function, raw, gt, pred, options) from a config and overrides; None when the
    config names nothing to convert. Raises common.ConvertError for a malformed mapping."""
    config = common.sgeval.load_config(config_path, gt=gt, pred=pred)
    if not config.convert:
        return None
    values = dict(config.convert)
    family, configured_raw = values.pop("family", None), values.pop("raw", None)
    raw = raw or configured_raw
    if family not in FAMILIES:
        raise common.ConvertError([f"{config_path}: convert: 'family' must be one of {', '.join(FAMILIES)}, "
                                   f"not {family!r}"])
    if not raw:
        raise common.ConvertError([f"{config_path}: convert: 'raw' (the model's raw output) is required"])
    convert = importlib.import_module(FAMILIES[family]).convert
    parameters = {name: parameter.default for name, parameter in inspect.signature(convert).parameters.items()
                  if name not in NOT_OPTIONS}
    unknown = sorted(set(values) - set(parameters))
    if unknown:
        raise common.ConvertError([f"{config_path}: convert: unknown key '{key}'; valid keys: family, raw, "
                                   f"{', '.join(parameters)}" for key in unknown])
    return family, convert, str(raw), config.gt, config.pred, {**parameters, **values}


def _mtime(path):
    """Modification time of a file, or the newest of a directory and its .npz files."""
    if os.path.isdir(path):
        return max([os.path.getmtime(path)] + [entry.stat().st_mtime for entry in os.scandir(path)
                                               if entry.name.endswith(".npz")])
    return os.path.getmtime(path)


def stale_reason(pred, raw, gt, family, options):
    """Why ``pred`` must be (re)converted, or None when it is up to date."""
    if not os.path.exists(pred):
        return f"{pred} does not exist"
    if _mtime(pred) < max(_mtime(raw), _mtime(gt)):
        return f"{pred} is older than {raw} or {gt}"
    try:
        with zipfile.ZipFile(pred) as archive:
            recorded = json.loads(archive.read(common.PROVENANCE))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return f"{pred} has no readable {common.PROVENANCE}"
    wanted = {"family": family, "raw": os.path.abspath(raw), "gt": os.path.abspath(gt), "options": options}
    changed = [key for key, value in wanted.items() if recorded.get(key) != value]
    return f"{pred} was converted with another {' and '.join(changed)}" if changed else None


def prepare(config_path, raw=None, gt=None, pred=None, force=False, progress=None):
    """Convert when needed; returns (message, summary or None)."""
    found = plan(config_path, raw, gt, pred)
    if found is None:
        return f"{config_path}: nothing to convert (no 'convert' mapping)", None
    family, convert, raw, gt, pred, options = found
    if not os.path.exists(raw):
        if os.path.exists(pred) and not force:
            return f"{raw} not found; evaluating the existing {pred}", None
        raise common.ConvertError([f"{raw}: the raw output named by {config_path} does not exist"])
    reason = "--force" if force else stale_reason(pred, raw, gt, family, options)
    if reason is None:
        return f"{pred} is up to date (converted from {raw})", None
    summary = convert(raw, pred, gt=gt, progress=progress, **options)
    return f"converting {raw} -> {pred} ({reason})", summary


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="YAML config with a 'convert' mapping (family, raw, options).")
@click.option("--raw", help="Raw model output (overrides convert.raw).")
@click.option("--gt", help="OpenPSG psg.json (overrides gt).")
@click.option("--pred", help="Converted output .zip (overrides pred).")
@click.option("--force", is_flag=True, help="Convert even when the output is up to date.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def main(config_path, raw, gt, pred, force, quiet):
    """Convert the raw model output named by a config, if the converted file is missing or stale."""
    message, summary = common.sgeval.run_cli(
        lambda progress: prepare(config_path, raw, gt, pred, force, progress), "converting", quiet)
    click.echo(message, err=True)
    if summary is not None:
        click.echo(common.describe(summary), err=True)


if __name__ == "__main__":
    main()
