"""Conversion recipes: convert the raw model output that a config's ``pred`` is made from, when
needed (what `make eval` runs first)::

    sgeval convert --config configs/hilo.yaml [--recipe configs/convert/hilo.yaml]
                   [--raw results/hilo.pkl] [--gt psg.json] [--pred out.zip] [--force] [--quiet]

(``python -m sgeval_convert --config ...`` the same; in a checkout also ``python -m convert --config ...``.)
The config is a plain sgeval config: ``pred`` is the converted file, ``gt`` the annotations (read
with ``sgeval.load_config``, so ``--gt`` and ``--pred`` override them as they do for sgeval). How to
make ``pred`` is the config's conversion recipe, a YAML file of its own: by default
``convert/<config name>.yaml`` in the config's folder (configs/hilo.yaml -> configs/convert/hilo.yaml),
or ``--recipe``. A recipe names the ``family`` (openpsg, hilo, pairnet, sgb, openimages, ag) and
the ``raw`` output, plus any option of that family's ``convert`` function (``ng_top``,
``ng_per_predicate``; openpsg, hilo and pairnet ``predicate_source``; openpsg also ``layout``; sgb
and openimages ``task``; openimages has no other; ag ``task`` and ``attention``, both required: an
option without a default must be named)::

    family: hilo
    raw: results/hilo.pkl
    predicate_source: rel_dists

Nothing is converted when the config has no recipe, or when ``pred`` is up to date: newer than the
raw output and the GT, and its convert.json records the same family, raw output, GT and options.
When the raw output is missing but ``pred`` exists, ``pred`` is kept.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import os
import zipfile
from pathlib import Path

import yaml

import sgeval
from . import common

FAMILIES = ("openpsg", "hilo", "pairnet", "sgb", "openimages", "ag")  # the modules of this package a recipe can name
NOT_OPTIONS = ("raw", "out", "gt", "progress", "workers")  # convert() parameters that do not change the output
RECIPES = "convert"  # the folder, beside a config, that holds the conversion recipes


def default_recipe(config_path):
    """Where a config's conversion recipe is by default: <config's folder>/convert/<config's stem>.yaml."""
    config_path = Path(config_path)
    return config_path.parent / RECIPES / f"{config_path.stem}.yaml"


def _yaml_mapping(path, what):
    """The mapping in a YAML file ({} when empty); ConvertError when unreadable or not a mapping."""
    text = _yaml_text(path, f"the {what}")
    try:
        values = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise common.ConvertError([f"{path}: cannot read the {what}: {' '.join(str(error).split())}"]) from None
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise common.ConvertError([f"{path}: the {what} must be a mapping of keys to values"])
    return values


MAX_YAML_BYTES = 1 << 24  # a config or recipe file


def _yaml_text(path, what):
    """The text of a YAML file: a regular file (sgeval.read_regular) of UTF-8, within MAX_YAML_BYTES."""
    try:
        return sgeval.read_regular(path, what, MAX_YAML_BYTES).decode("utf-8")
    except sgeval.SGEvalError as error:
        raise common.ConvertError(error.problems) from None
    except UnicodeDecodeError as error:
        raise common.ConvertError([f"{path}: cannot read {what}: {error}"]) from None


def _refuse_convert_key(config_path, recipe):
    """A config written for the old layout (a 'convert' mapping inside it) says where that went."""
    try:
        values = yaml.safe_load(_yaml_text(config_path, "the YAML config"))
    except (ValueError, yaml.YAMLError):
        return  # sgeval.load_config reports it
    if isinstance(values, dict) and "convert" in values:
        raise common.ConvertError([f"{config_path}: 'convert' is not an sgeval config key; move its mapping "
                                   f"(family, raw, options) into the conversion recipe {recipe}"])


@dataclasses.dataclass(frozen=True)
class Plan:
    """What to convert: the recipe's family and options, the raw output and the config's gt and pred."""

    recipe: str
    family: str
    convert: object  # the family's convert(raw, out, gt, ..., progress) function
    raw: str
    gt: str
    pred: str
    options: dict


def plan(config_path, raw=None, gt=None, pred=None, recipe=None):
    """The Plan for a config and the overrides; the recipe is ``recipe`` (which must exist), else
    default_recipe(config_path), and None when that does not exist. Raises common.ConvertError for
    a missing, unreadable or malformed recipe (and sgeval.SGEvalError for a bad config)."""
    named = recipe is not None  # a named recipe must exist; the default one need not
    recipe = Path(recipe) if named else default_recipe(config_path)
    _refuse_convert_key(config_path, recipe)
    config = sgeval.load_config(config_path, gt=gt, pred=pred)
    if not named and not recipe.exists():
        return None
    values = _yaml_mapping(recipe, "conversion recipe")
    family, configured_raw = values.pop("family", None), values.pop("raw", None)
    raw = raw or configured_raw
    if family not in FAMILIES:
        raise common.ConvertError([f"{recipe}: 'family' must be one of {', '.join(FAMILIES)}, not {family!r}"])
    if not raw:
        raise common.ConvertError([f"{recipe}: 'raw' (the model's raw output) is required"])
    convert = importlib.import_module(f".{family}", __package__).convert
    parameters = {name: parameter.default for name, parameter in inspect.signature(convert).parameters.items()
                  if name not in NOT_OPTIONS}
    unknown = sorted(set(values) - set(parameters))
    if unknown:
        raise common.ConvertError([f"{recipe}: unknown key '{key}'; valid keys: family, raw, "
                                   f"{', '.join(parameters)}" for key in unknown])
    required = [name for name, default in parameters.items() if default is None and name not in values]
    if required:
        raise common.ConvertError([f"{recipe}: '{name}' is required for family {family} (it has no default)"
                                   for name in required])
    return Plan(str(recipe), family, convert, str(raw), config.gt, config.pred, {**parameters, **values})


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
        with sgeval.open_regular(pred, "the prediction ZIP") as handle, zipfile.ZipFile(handle) as archive:
            recorded = json.loads(archive.read(common.PROVENANCE))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return f"{pred} has no readable {common.PROVENANCE}"
    wanted = {"family": family, "raw": os.path.abspath(raw), "gt": os.path.abspath(gt), "options": options}
    changed = [key for key, value in wanted.items() if recorded.get(key) != value]
    return f"{pred} was converted with another {' and '.join(changed)}" if changed else None


def prepare(config_path, raw=None, gt=None, pred=None, force=False, progress=None, recipe=None, workers=1):
    """Convert when needed; returns (message, summary or None)."""
    found = plan(config_path, raw, gt, pred, recipe)
    if found is None:
        return f"{config_path}: nothing to convert (no conversion recipe {default_recipe(config_path)})", None
    if not os.path.exists(found.raw):
        if os.path.exists(found.pred) and not force:
            return f"{found.raw} not found; evaluating the existing {found.pred}", None
        named_by = "--raw" if raw else found.recipe
        raise common.ConvertError([f"{found.raw}: the raw output named by {named_by} does not exist"])
    reason = "--force" if force else stale_reason(found.pred, found.raw, found.gt, found.family, found.options)
    if reason is None:
        return f"{found.pred} is up to date (converted from {found.raw})", None
    parallel = {"workers": workers} if "workers" in inspect.signature(found.convert).parameters else {}
    summary = found.convert(found.raw, found.pred, gt=found.gt, progress=progress, **parallel, **found.options)
    return f"converting {found.raw} -> {found.pred} ({reason})", summary
