"""The sidecar's Dockerfile: two stages, a pinned base, the lock's dependencies, a non-root user,
and nothing to build with in the image that ships.

No image is built here (the machine reaches no container registry); the file is parsed as
Docker reads it (continuation lines joined, `ARG`s before the first `FROM` substituted), and the
packages it installs are compared with the sidecar's declared workspace dependencies.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
BUILD_TOOLS = re.compile(r"\b(uv|pip|apt-get|apk|gcc|g\+\+|make|build-essential|cargo)\b")


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [rest for word, rest in self.instructions if word == keyword]


def _instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)
    result = []
    for line in joined.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        word, _, rest = stripped.partition(" ")
        result.append((word.upper(), " ".join(rest.split())))
    return result


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for word, rest in _instructions(text):
        if word == "FROM":
            image, _, name = rest.partition(" AS ")
            image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image)
            stages.append(Stage(base=image, name=name.strip()))
        elif stages:
            stages[-1].instructions.append((word, rest))
        elif word == "ARG":
            key, _, value = rest.partition("=")
            args[key] = value
    return args, stages


ARGS, STAGES = parse(DOCKERFILE.read_text(encoding="utf-8"))
FINAL = STAGES[-1]


def test_it_is_a_multi_stage_build_on_a_pinned_base() -> None:
    assert len(STAGES) >= 2
    assert all(stage.name for stage in STAGES), "every stage is named"
    for stage in STAGES:
        pinned_digest = re.search(r"@sha256:[0-9a-f]{64}$", stage.base)
        tag = stage.base.rsplit(":", 1)[1] if ":" in stage.base else "latest"
        pinned_tag = re.match(r"^\d+\.\d+\.\d+", tag) is not None
        assert pinned_digest or pinned_tag, f"{stage.base} is not pinned to a version or digest"


def test_the_final_stage_runs_as_a_non_root_user() -> None:
    users = FINAL.all("USER")
    assert users, "the final stage sets USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")
    assert user.isdigit(), "a numeric uid lets runAsNonRoot verify it"
    assert any(f"--uid {user}" in run for run in FINAL.all("RUN")), "the user is created"


def test_the_final_stage_has_no_build_tools_and_only_copies_the_environment() -> None:
    for run in FINAL.all("RUN"):
        assert not BUILD_TOOLS.search(run), f"the final stage runs a build tool: {run}"
    copies = FINAL.all("COPY")
    assert copies, "the final stage copies the built environment"
    assert all(c.startswith(f"--from={STAGES[0].name} ") for c in copies)
    assert FINAL.all("ENTRYPOINT") == ['["execpods-sidecar"]']


def test_the_build_installs_the_locked_dependencies_only() -> None:
    build = " ".join(STAGES[0].all("RUN"))
    assert "uv export --frozen" in build, "the lock as committed, never re-resolved"
    assert "--no-dev" in build
    assert "--package execpods-sidecar" in build
    assert "--require-hashes" in build
    copied = " ".join(STAGES[0].all("COPY"))
    assert "uv.lock" in copied


def _members() -> dict[str, str]:
    members = {}
    for path in (ROOT / "packages").glob("*/pyproject.toml"):
        project = tomllib.loads(path.read_text(encoding="utf-8"))["project"]
        members[project["name"]] = path.parent.name
    return members


def _workspace_closure(name: str, members: dict[str, str]) -> set[str]:
    """The workspace members `name` needs at run time, itself included."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        path = ROOT / "packages" / members[current] / "pyproject.toml"
        for requirement in tomllib.loads(path.read_text(encoding="utf-8"))["project"].get(
            "dependencies", []
        ):
            dependency = re.split(r"[<>=!~ \[;]", requirement, maxsplit=1)[0]
            if dependency in members:
                todo.append(dependency)
    return seen


def test_it_installs_exactly_the_workspace_packages_the_sidecar_needs() -> None:
    members = _members()
    wanted = {members[name] for name in _workspace_closure("execpods-sidecar", members)}
    build = " ".join(STAGES[0].all("RUN"))
    installed = set(re.findall(r"\./packages/(\w+)", build))
    assert installed == wanted
    assert "kubesim" not in installed
    assert "client" not in installed


def test_it_exposes_the_ports_of_the_example_pod() -> None:
    exposed = {int(p) for e in FINAL.all("EXPOSE") for p in e.split()}
    assert {50551, 8081, 9464} <= exposed


def _template_init_command() -> list[str]:
    import yaml

    template = ROOT / "deploy" / "overlays" / "cluster-mode" / "driver-pod-template.yaml"
    doc = yaml.safe_load(template.read_text(encoding="utf-8"))
    (plugin,) = [c for c in doc["spec"]["initContainers"] if c["name"] == "execpods-plugin"]
    command: list[str] = plugin["command"]
    return command


def test_the_image_carries_the_plugin_jar_where_the_driver_template_copies_it_from() -> None:
    jar = _template_init_command()[1]
    final = [c.split() for c in FINAL.all("COPY")]
    assert any(parts[-1] == jar for parts in final), f"no COPY to {jar}: {final}"
    built = [c.split() for c in STAGES[0].all("COPY")]
    assert ["integrations/spark/build/execpods-spark.jar", "./"] in built
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    assert "!integrations/spark/build/execpods-spark.jar" in ignored  # in the build context


def test_the_image_has_the_oci_labels_of_this_release() -> None:
    labels = dict(
        re.findall(r'(org\.opencontainers\.image\.[a-z]+)="([^"]*)"', " ".join(FINAL.all("LABEL")))
    )
    assert {"title", "version", "revision", "source", "licenses"} <= {
        k.rsplit(".", 1)[1] for k in labels
    }
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    defaults = dict(a.split("=", 1) for a in FINAL.all("ARG") if "=" in a)
    assert defaults["VERSION"] == project["version"]  # a release bumps both: drift fails here
