"""`execpods-sidecar`: serve the allocator over gRPC, or list the settings.

Settings come from, lowest precedence first: defaults, `--properties-file` (a real
spark-defaults.conf), environment variables (EXECPODS_*), `--conf key=value`, and the dedicated
flags. The flags and variables are generated from the setting specs (`setting(..., flag=, env=)`),
so a property's key, help, variable and default are written once, where the setting is declared.
Every value is validated before anything starts; a bad one exits with status 2 and a message
naming the flag or property.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from importlib import metadata

from execpods.core import ExecpodsError, SettingsError
from execpods.core.settingkit import SettingSpec
from execpods.sidecar.config.effective import print_effective
from execpods.sidecar.config.properties import read_properties_file_lines
from execpods.sidecar.config.settings import Settings, all_families, all_specs, flagged_specs
from execpods.sidecar.server import SidecarServer
from execpods.sidecar.telemetry.logformat import (
    JsonFormatter,
    configure_log_format,
    stamp_app_id,
    stderr_as_json,
)
from execpods.sidecar.wiring import connect

logger = logging.getLogger(__name__)

PROG = "execpods-sidecar"
LISTENING_PREFIX = f"{PROG}: listening on "
METRICS_PREFIX = f"{PROG}: metrics on "
PROPERTIES_FILE_ENV = "EXECPODS_PROPERTIES_FILE"
LOG_LEVEL_ENV = "EXECPODS_LOG_LEVEL"
DEFAULT_LOG_LEVEL = "INFO"
INSECURE_KEY = "execpods.sidecar.insecure"
"""As Kubernetes controllers do: the decisions that change the cluster are logged by default."""


class UsageError(Exception):
    """A bad flag, file or setting: printed with the program name, exit status 2."""


def parse_conf(pairs: Sequence[str]) -> dict[str, str]:
    properties: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--conf {pair!r}: expected key=value")
        properties[key.strip()] = value
    return properties


def collect_sourced(
    args: argparse.Namespace, environ: Mapping[str, str]
) -> dict[str, tuple[str, str]]:
    """Each property in force with where it came from, by precedence: file < environment <
    --conf < flags (as `spark-submit --verbose` tells them apart)."""
    sourced: dict[str, tuple[str, str]] = {}
    properties_file = args.properties_file or environ.get(PROPERTIES_FILE_ENV)
    if properties_file:
        for key, (value, line) in read_properties_file_lines(properties_file).items():
            sourced[key] = (value, f"{properties_file}:{line}")
    flagged = flagged_specs()
    for spec in flagged:
        if spec.env is not None and environ.get(spec.env):
            sourced[spec.key] = (environ[spec.env], f"${spec.env}")
    for key, value in parse_conf(args.conf).items():
        sourced[key] = (value, "--conf")
    if getattr(args, "insecure", False):
        sourced[INSECURE_KEY] = ("true", "--insecure")
    for spec in flagged:
        flag_value: str | None = getattr(args, _dest(spec), None)
        if flag_value is not None and spec.flag is not None:
            sourced[spec.key] = (flag_value, spec.flag)
    return sourced


def collect_properties(args: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, str]:
    """The properties in force, by precedence: file < environment < --conf < flags."""
    return {key: value for key, (value, _) in collect_sourced(args, environ).items()}


def load_settings(args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    sourced = collect_sourced(args, environ)
    try:
        return Settings.from_properties({key: value for key, (value, _) in sourced.items()})
    except SettingsError as error:
        raise UsageError(_with_origin(_with_flag(str(error)), sourced)) from None


def _with_origin(message: str, sourced: Mapping[str, tuple[str, str]]) -> str:
    """Name the file and line (or the variable) that set the property a message names."""
    if message.startswith("unknown setting"):
        where = [
            f"{key} at {origin}"
            for key, (_, origin) in sorted(sourced.items())
            if ":" in origin and not origin.startswith("-") and f" {key}" in message
        ]
        return message + (f" [{'; '.join(where)}]" if where else "")
    for key, (_, origin) in sorted(sourced.items(), key=lambda item: -len(item[0])):
        if message.startswith(key) and ":" in origin and not origin.startswith("-"):
            return f"{origin}: {message}"
    return message


def _with_flag(message: str) -> str:
    """Add the flag and variable that set a property to a message naming the property."""
    for spec in flagged_specs():
        if spec.flag is not None and message.startswith(spec.key):
            via = spec.flag + (f" / {spec.env}" if spec.env else "")
            return f"{message} (set with {via})"
    return message


def _dest(spec: SettingSpec) -> str:
    return (spec.flag or spec.key).lstrip("-").replace("-", "_")


def flag_help(spec: SettingSpec) -> str:
    """A flag's help, all from its spec: meaning, property, variable and default."""
    env = f"; env {spec.env}" if spec.env else ""
    default = f"; default {spec.default_text}" if spec.default_text else ""
    return f"{spec.doc} ({spec.key}{env}{default})".replace("%", "%%")


def _add_setting_flags(parser: argparse.ArgumentParser) -> None:
    for spec in flagged_specs():
        if spec.flag is not None:
            parser.add_argument(spec.flag, dest=_dest(spec), metavar="VALUE", help=flag_help(spec))
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any setting by its property name (repeatable; see `settings`)",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help=f"serve anonymous plaintext callers beyond loopback ({INSECURE_KEY}=true); warns",
    )
    parser.add_argument(
        "--properties-file",
        help=f"Spark-style properties file (env {PROPERTIES_FILE_ENV})",
    )


def version() -> str:
    """The installed distribution's version: the workspace's one version (tools/release.py)."""
    return metadata.version(PROG)


def _global_flags(*, default: object) -> argparse.ArgumentParser:
    """`--log-level` and `--log-format`, accepted before and after the command.

    The command's copies default to SUPPRESS, so a flag given before the command is not reset
    by the command's parser when it is not repeated after it.
    """
    flags = argparse.ArgumentParser(add_help=False)
    flags.add_argument(
        "--log-level",
        default=default,
        help=f"DEBUG, INFO, WARNING or ERROR (env {LOG_LEVEL_ENV}; default {DEFAULT_LOG_LEVEL})",
    )
    flags.add_argument(
        "--log-format",
        default=default,
        help="text or json (one JSON object per line; env EXECPODS_LOG_FORMAT; default text)",
    )
    return flags


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Executor pod allocation for a driver in any language, over gRPC.",
        parents=[_global_flags(default=None)],
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    after = _global_flags(default=argparse.SUPPRESS)
    serve = commands.add_parser(
        "serve", help="serve the ExecutorAllocator gRPC service", parents=[after]
    )
    _add_setting_flags(serve)
    listing = commands.add_parser(
        "settings", help="list every setting with its default and meaning", parents=[after]
    )
    listing.add_argument(
        "--effective",
        action="store_true",
        help="print every effective value and where it came from (as spark-submit --verbose)",
    )
    _add_setting_flags(listing)
    return parser


def configure_logging(level_name: str | None, environ: Mapping[str, str]) -> int:
    """Log to stderr at `--log-level`, else $EXECPODS_LOG_LEVEL, else INFO; returns the level."""
    name = (level_name or environ.get(LOG_LEVEL_ENV) or DEFAULT_LOG_LEVEL).upper()
    level = logging.getLevelNamesMapping().get(name)
    if level is None:
        raise UsageError(f"--log-level {name!r}: use DEBUG, INFO, WARNING or ERROR")
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger().setLevel(level)  # also when a host (a test runner) configured logging
    return level


class PodsLeft(Exception):
    """Stopping could not delete the executor pods within execpods.shutdown.deleteGrace."""


async def serve(settings: Settings) -> None:
    """Run the sidecar until SIGTERM or SIGINT; prints the listening line when ready.

    Raises `PodsLeft` when stopping could not delete the application's executor pods.
    """
    runtime = await asyncio.to_thread(connect, settings)
    server = SidecarServer(runtime)
    server.install_signal_handlers()
    address = await server.start()
    if server.ops.metrics_address:  # before the listening line, which says all is ready
        announce(f"{METRICS_PREFIX}http://{server.ops.metrics_address}/metrics")
    announce(f"{LISTENING_PREFIX}{address}")
    await server.wait_stopped()
    report = server.shutdown_report
    if report is not None and not report.complete:
        raise PodsLeft(report.describe(runtime.app_id))


def announce(line: str) -> None:
    """A line on stdout for supervisors (the address, once ready); a JSON record in JSON mode,
    with the same text as its message, so a pod's merged output stays one JSON object a line."""
    if _json_mode():
        handler = logging.getLogger().handlers[0]
        record = logging.LogRecord(__name__, logging.INFO, __file__, 0, line, None, None)
        for filter_ in handler.filters:
            if isinstance(filter_, logging.Filter):
                filter_.filter(record)
        line = handler.format(record)
    print(line, flush=True)


@contextlib.contextmanager
def _quiet_closed_pipe() -> Iterator[None]:
    """`execpods-sidecar settings | head`: a reader that stops early is not an error."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        # Python would flush stdout again at exit and fail the same way: point it at /dev/null.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def print_settings() -> None:
    for key, spec in sorted(all_specs().items()):
        via = ", ".join(filter(None, (spec.flag, spec.env)))
        default = spec.default_text or "unset"
        print(f"{key} = {default}" + (f"  ({via})" if via else "") + f"\n    {spec.doc}")
    for prefix, family in sorted(all_families().items()):
        print(f"{prefix}NAME\n    {family.doc}")


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        configure_logging(args.log_level, env)
        if not configure_log_format(args.log_format, env):
            raise UsageError(f"--log-format {args.log_format!r}: use text or json")
        if args.command == "settings":
            with _quiet_closed_pipe():
                if args.effective:
                    sourced = collect_sourced(args, env)
                    try:
                        print_effective(sourced)
                    except SettingsError as error:
                        raise UsageError(_with_origin(_with_flag(str(error)), sourced)) from None
                else:
                    print_settings()
            return 0
        # The app id, as soon as it is known: on every line, the settings' own warnings included.
        app_id = collect_properties(args, env).get("spark.app.id")
        if app_id:
            stamp_app_id(app_id)
        settings = load_settings(args, env)
        stamp_app_id(settings.sidecar.app_id)
        with stderr_as_json() if _json_mode() else contextlib.nullcontext():
            asyncio.run(serve(settings))
    except UsageError as error:
        return _fail(str(error), 2)
    except SettingsError as error:
        return _fail(_with_flag(str(error)), 2)
    except (PodsLeft, ExecpodsError, OSError) as error:  # e.g. no driver pod, the API refused
        return _fail(str(error), 1)
    return 0


def _json_mode() -> bool:
    handlers = logging.getLogger().handlers
    return bool(handlers) and isinstance(handlers[0].formatter, JsonFormatter)


def _fail(message: str, status: int) -> int:
    """The error that ends the run: a log record in JSON mode, else a plain line on stderr."""
    if _json_mode():
        logger.error("%s: error: %s", PROG, message)
    else:
        print(f"{PROG}: error: {message}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
