"""`execpods-sidecar`: serve the allocator over gRPC, or list the settings.

Settings come from, lowest precedence first: defaults, `--properties-file` (Spark's
spark-defaults.conf format), environment variables (EXECPODS_*), `--conf key=value`, and the
dedicated flags. Every value is validated before anything starts; a bad one exits with status 2
and a message naming the flag or property.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from execpods.core import ExecpodsError, SettingsError
from execpods.sidecar.logformat import JsonFormatter, stamp_app_id
from execpods.sidecar.server import SidecarServer
from execpods.sidecar.settings import Settings, all_specs
from execpods.sidecar.wiring import connect

logger = logging.getLogger(__name__)

PROG = "execpods-sidecar"
LISTENING_PREFIX = f"{PROG}: listening on "
METRICS_PREFIX = f"{PROG}: metrics on "


@dataclass(frozen=True, slots=True)
class Option:
    """A dedicated flag (and maybe an environment variable) for one property."""

    flag: str
    key: str
    env: str | None
    help: str


OPTIONS: tuple[Option, ...] = (
    Option("--app-id", "spark.app.id", "EXECPODS_APP_ID", "application id (required)"),
    Option("--namespace", "spark.kubernetes.namespace", "EXECPODS_NAMESPACE", "namespace"),
    Option("--kubeconfig", "execpods.kubernetes.kubeconfig", "EXECPODS_KUBECONFIG", "kubeconfig"),
    Option("--context", "spark.kubernetes.context", "EXECPODS_CONTEXT", "kubeconfig context"),
    Option(
        "--api-url",
        "execpods.kubernetes.apiUrl",
        "EXECPODS_API_URL",
        "API server URL, used as is (e.g. a simulator)",
    ),
    Option(
        "--listen",
        "execpods.sidecar.listen",
        "EXECPODS_LISTEN",
        "host:port (port 0: any free port) or unix:<path>",
    ),
    Option(
        "--driver-pod-name",
        "spark.kubernetes.driver.pod.name",
        "EXECPODS_DRIVER_POD_NAME",
        "driver pod: executors get an owner reference to it",
    ),
    Option(
        "--image",
        "spark.kubernetes.executor.container.image",
        "EXECPODS_IMAGE",
        "executor container image",
    ),
    Option(
        "--pod-template",
        "spark.kubernetes.executor.podTemplateFile",
        "EXECPODS_POD_TEMPLATE",
        "executor pod template (YAML)",
    ),
    Option("--executor-cores", "spark.executor.cores", None, "cores per executor"),
    Option("--executor-memory", "spark.executor.memory", None, "executor memory, e.g. 4g"),
    Option(
        "--initial-executors",
        "spark.executor.instances",
        "EXECPODS_INITIAL_EXECUTORS",
        "executors requested at start",
    ),
)
PROPERTIES_FILE_ENV = "EXECPODS_PROPERTIES_FILE"
LOG_LEVEL_ENV = "EXECPODS_LOG_LEVEL"
LOG_FORMAT_ENV = "EXECPODS_LOG_FORMAT"


class UsageError(Exception):
    """A bad flag, file or setting: printed with the program name, exit status 2."""


def read_properties_file(path: str) -> dict[str, str]:
    """Spark's properties format: `key value` or `key=value` per line, `#` comments."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"--properties-file {path}: {error.strerror or error}") from None
    properties: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, value = _split_property(line)
        if not key:
            raise UsageError(f"--properties-file {path}:{number}: no key in {raw!r}")
        properties[key] = value
    return properties


def _split_property(line: str) -> tuple[str, str]:
    cut = [i for i in (line.find("="), line.find(" "), line.find("\t")) if i >= 0]
    if not cut:
        return line, ""
    at = min(cut)
    return line[:at].strip(), line[at + 1 :].strip().lstrip("=").strip()


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
    for option in OPTIONS:
        if option.env is not None and environ.get(option.env):
            properties[option.key] = environ[option.env]
    properties.update(parse_conf(args.conf))
    for option in OPTIONS:
        value = getattr(args, _dest(option.flag))
        if value is not None:
            properties[option.key] = value
    return properties


def load_settings(args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    properties = collect_properties(args, environ)
    try:
        return Settings.from_properties(properties)
    except SettingsError as error:
        raise UsageError(_with_flag(str(error))) from None


def _with_flag(message: str) -> str:
    """Add the flag and variable that set a property to a message naming the property."""
    for option in OPTIONS:
        if message.startswith(option.key):
            via = option.flag + (f" / {option.env}" if option.env else "")
            return f"{message} (set with {via})"
    return message


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _add_setting_flags(parser: argparse.ArgumentParser) -> None:
    for option in OPTIONS:
        env = f"; env {option.env}" if option.env else ""
        parser.add_argument(
            option.flag, dest=_dest(option.flag), help=f"{option.help} ({option.key}{env})"
        )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any setting by its property name (repeatable; see `settings`)",
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
        help=f"DEBUG, INFO, WARNING or ERROR (env {LOG_LEVEL_ENV}; default WARNING)",
    )
    parser.add_argument(
        "--log-format",
        default=None,
        help=f"text or json (one JSON object per line; env {LOG_FORMAT_ENV}; default text)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="serve the ExecutorAllocator gRPC service")
    _add_setting_flags(serve)
    commands.add_parser("settings", help="list every setting with its default and meaning")
    return parser


def _configure_logging(
    level_name: str | None, environ: Mapping[str, str], log_format: str | None = None
) -> None:
    name = (level_name or environ.get(LOG_LEVEL_ENV) or "WARNING").upper()
    level = logging.getLevelNamesMapping().get(name)
    if level is None:
        raise UsageError(f"--log-level {name!r}: use DEBUG, INFO, WARNING or ERROR")
    style = (log_format or environ.get(LOG_FORMAT_ENV) or "text").lower()
    if style not in ("text", "json"):
        raise UsageError(f"--log-format {style!r}: use text or json")
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if style == "json":
        for handler in logging.getLogger().handlers:
            handler.setFormatter(JsonFormatter())


async def serve(settings: Settings) -> None:
    """Run the sidecar until SIGTERM or SIGINT; prints the listening line when ready."""
    stamp_app_id(settings.sidecar.app_id)
    runtime = await asyncio.to_thread(connect, settings)
    server = SidecarServer(runtime)
    server.install_signal_handlers()
    address = await server.start()
    if server.ops.metrics_address:  # before the listening line, which says all is ready
        print(f"{METRICS_PREFIX}http://{server.ops.metrics_address}/metrics", flush=True)
    print(f"{LISTENING_PREFIX}{address}", flush=True)
    await server.wait_stopped()


def print_settings() -> None:
    for key, spec in sorted(all_specs().items()):
        print(f"{key}\n    {spec.doc}")


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        _configure_logging(args.log_level, env, args.log_format)
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
    except ExecpodsError as error:  # e.g. the driver pod does not exist, the API refused
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
