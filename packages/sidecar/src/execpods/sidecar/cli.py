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
import logging
import os
import sys
from collections.abc import Mapping, Sequence

from execpods.core import ExecpodsError, SettingsError, SettingSpec
from execpods.sidecar.logformat import configure_log_format, stamp_app_id
from execpods.sidecar.properties import read_properties_file
from execpods.sidecar.server import SidecarServer
from execpods.sidecar.settings import Settings, all_families, all_specs, flagged_specs
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


def collect_properties(args: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, str]:
    """The properties in force, by precedence: file < environment < --conf < flags."""
    properties: dict[str, str] = {}
    properties_file = args.properties_file or environ.get(PROPERTIES_FILE_ENV)
    if properties_file:
        properties.update(read_properties_file(properties_file))
    flagged = flagged_specs()
    for spec in flagged:
        if spec.env is not None and environ.get(spec.env):
            properties[spec.key] = environ[spec.env]
    properties.update(parse_conf(args.conf))
    if getattr(args, "insecure", False):
        properties[INSECURE_KEY] = "true"
    for spec in flagged:
        value = getattr(args, _dest(spec))
        if value is not None:
            properties[spec.key] = value
    return properties


def load_settings(args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    properties = collect_properties(args, environ)
    try:
        return Settings.from_properties(properties)
    except SettingsError as error:
        raise UsageError(_with_flag(str(error))) from None


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Executor pod allocation for a driver in any language, over gRPC."
    )
    parser.add_argument(
        "--log-level",
        default=None,
        help=f"DEBUG, INFO, WARNING or ERROR (env {LOG_LEVEL_ENV}; default {DEFAULT_LOG_LEVEL})",
    )
    parser.add_argument(
        "--log-format",
        default=None,
        help="text or json (one JSON object per line; env EXECPODS_LOG_FORMAT; default text)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="serve the ExecutorAllocator gRPC service")
    _add_setting_flags(serve)
    commands.add_parser("settings", help="list every setting with its default and meaning")
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
    stamp_app_id(settings.sidecar.app_id)
    runtime = await asyncio.to_thread(connect, settings)
    server = SidecarServer(runtime)
    server.install_signal_handlers()
    address = await server.start()
    if server.ops.metrics_address:  # before the listening line, which says all is ready
        print(f"{METRICS_PREFIX}http://{server.ops.metrics_address}/metrics", flush=True)
    print(f"{LISTENING_PREFIX}{address}", flush=True)
    await server.wait_stopped()
    report = server.shutdown_report
    if report is not None and not report.complete:
        raise PodsLeft(report.describe(runtime.app_id))


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
            print_settings()
            return 0
        settings = load_settings(args, env)
        asyncio.run(serve(settings))
    except UsageError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    except SettingsError as error:
        print(f"{PROG}: error: {_with_flag(str(error))}", file=sys.stderr)
        return 2
    except PodsLeft as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 1
    except ExecpodsError as error:  # e.g. the driver pod does not exist, the API refused
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
