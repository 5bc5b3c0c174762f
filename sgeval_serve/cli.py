"""``sgeval serve``: start the service, and the admin's commands beside it.

    sgeval serve --config configs/serve/demo.yaml                 # start (host, port, workers from the file)
    sgeval serve --config C token alice [--admin] [--renew]       # issue a token (printed once)
    sgeval serve --config C submit pred.zip --benchmark psg --user lab --method "Baseline" [--approve]
    sgeval serve --config C reevaluate --outdated                 # queue submissions evaluated by another sgeval
"""

from __future__ import annotations

import logging
import secrets
import shutil
import sys

import click

import sgeval

from . import checks, uploads
from .settings import load_settings
from .store import Duplicate, StateError, Store


def _store(settings):
    try:
        return Store(settings.state_dir)
    except StateError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)


def _settings(ctx):
    try:
        return load_settings(ctx.obj["config"], **ctx.obj["overrides"])
    except sgeval.SGEvalError as error:
        for problem in error.problems:
            click.echo(f"error: {problem}", err=True)
        sys.exit(1)


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config", required=True, type=click.Path(dir_okay=False), help="the service's YAML file")
@click.option("--host", default=None, help="address to listen on (default: the file's host, else 127.0.0.1)")
@click.option("--port", type=int, default=None, help="port (default: the file's port, else 8000)")
@click.option("--workers", type=int, default=None, help="evaluation processes (default: the file's workers)")
@click.option("--state-dir", default=None, help="folder of the database and files (default: the file's state_dir)")
@click.pass_context
def main(ctx, config, host, port, workers, state_dir):
    """Run sgeval's benchmark service: uploads, queue, evaluation, leaderboards."""
    ctx.obj = {"config": config, "overrides": {"host": host, "port": port, "workers": workers, "state_dir": state_dir}}
    if ctx.invoked_subcommand is None:
        serve(_settings(ctx))


def serve(settings):
    import uvicorn

    from . import connections
    from .app import create_app

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    files = connections.ensure_open_files(settings.max_connections)
    if files:
        click.echo(f"error: {settings.source}: {files}", err=True)
        sys.exit(1)
    try:
        app = create_app(settings)
    except sgeval.SGEvalError as error:
        for problem in error.problems:
            click.echo(f"error: {problem}", err=True)
        sys.exit(1)
    except StateError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)
    click.echo(f"sgeval serve: http://{settings.host}:{settings.port}/ ({len(settings.benchmarks)} benchmark(s), "
               f"{settings.workers} evaluation worker(s), state in {settings.state_dir})", err=True)
    # proxy_headers=False: the app applies forwarded_allow_ips itself (create_app), so tests see it too.
    # limit_concurrency is not used: it answers 503 only once a request's head has arrived (connections.py).
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="info", proxy_headers=False,
                http=connections.protocol_class(settings), h11_max_incomplete_event_size=connections.MAX_HEAD_BYTES,
                timeout_keep_alive=5, backlog=max(64, settings.max_connections))


@main.command()
@click.argument("name")
@click.option("--admin", is_flag=True, help="the user can approve, hide, delete and see private submissions")
@click.option("--renew", is_flag=True, help="replace the token of an existing user")
@click.pass_context
def token(ctx, name, admin, renew):
    """Issue a token for a new user NAME (or a new token with --renew); prints it once."""
    store = _store(_settings(ctx))
    try:
        value = store.new_token_for(name) if renew else store.add_user(name, admin)
    except ValueError as error:
        raise click.ClickException(f"{error} (use --renew for a new token)") from None
    if value is None:
        raise click.ClickException(f"no user '{name}'")
    click.echo(value)


@main.command()
@click.argument("name")
@click.pass_context
def revoke(ctx, name):
    """Revoke the token of user NAME (their sessions end too)."""
    store = _store(_settings(ctx))
    user = store.user_by_name(name)
    if user is None:
        raise click.ClickException(f"no user '{name}'")
    store.revoke(user["id"])


@main.command()
@click.pass_context
def users(ctx):
    """List the users."""
    for user in _store(_settings(ctx)).users():
        role = ("admin" if user["admin"] else "submitter") + (", revoked" if user["revoked"] else "")
        click.echo(f"{user['name']}\t{role}\t{user['created']}")


@main.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--benchmark", required=True)
@click.option("--user", "user_name", required=True, help="the submitter (created if new)")
@click.option("--method", required=True)
@click.option("--paper-url", default="")
@click.option("--code-url", default="")
@click.option("--private", is_flag=True)
@click.option("--approve", is_flag=True, help="also put it on the approved board")
@click.option("--if-new", is_flag=True, help="do nothing if this user submitted the same file already")
@click.pass_context
def submit(ctx, path, benchmark, user_name, method, paper_url, code_url, private, approve, if_new):
    """Queue a prediction file as USER (an admin's command: no quota); the server evaluates it."""
    settings = _settings(ctx)
    spec = settings.benchmarks.get(benchmark)
    if spec is None:
        raise click.ClickException(f"no benchmark '{benchmark}' (have: {', '.join(settings.benchmarks)})")
    store = _store(settings)
    if store.user_by_name(user_name) is None:
        store.add_user(user_name)
    user = store.user_by_name(user_name)
    with open(path, "rb") as file:
        kind = uploads.sniff_kind(file.read(64))
    if kind is None:
        raise click.ClickException(f"{path}: not a ZIP archive or a JSON file")
    incoming = store.root / "incoming" / f"cli-{secrets.token_hex(8)}.{kind}"
    shutil.copyfile(path, incoming)
    try:
        checks.start()
        counts, problems = checks.check_upload_now(incoming, path, uploads.gt_info(spec), spec,
                                                   checks.Limits.of(settings))
        if problems:
            for problem in problems:
                click.echo(f"error: {problem}", err=True)
            sys.exit(1)
        upload = uploads.Upload({}, incoming, uploads.display_name(path), incoming.stat().st_size,
                                uploads.file_sha256(incoming), kind)
        fields = uploads.submission_row(user["id"], method, paper_url, code_url, not private, upload, counts)
        try:
            submission_id = store.add_submission(fields, incoming, spec, quota=False)
        except Duplicate as duplicate:
            if if_new:
                click.echo(f"{path}: already submitted by {user_name} (submission {duplicate.submission_id})", err=True)
                return
            raise click.ClickException(f"{path}: already submitted by {user_name} "
                                       f"(submission {duplicate.submission_id})") from None
    finally:
        incoming.unlink(missing_ok=True)
    if approve:
        store.set_flag(submission_id, "approved", 1)
    click.echo(f"submission {submission_id} queued ({counts['predicted']} images predicted, {counts['missing']} "
               f"without prediction); a running server evaluates it")


@main.command()
@click.argument("ids", nargs=-1, type=int)
@click.option("--outdated", is_flag=True, help="every submission last evaluated by another sgeval version")
@click.pass_context
def reevaluate(ctx, ids, outdated):
    """Queue new evaluations of submissions IDS (an admin's action)."""
    store = _store(_settings(ctx))
    if outdated:
        ids = list(ids) + [row["id"] for row in store.submissions() if row["sgeval_version"]
                           and row["sgeval_version"] != sgeval.__version__]
    for submission_id in ids:
        queued = store.reevaluate(submission_id)
        click.echo(f"submission {submission_id}: " + ("no such submission" if queued is None
                                                      else f"evaluation {queued} queued"))
