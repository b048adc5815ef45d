# syntax=docker/dockerfile:1
# The execpods sidecar image: `docker build -t execpods/sidecar:0.1.0 .`
#
# Two stages. `build` turns uv.lock into a hash-checked requirements file (`uv export --frozen`:
# the lock as committed, never re-resolved), installs exactly those wheels into a virtual
# environment, then the workspace's own runtime packages without their dependencies. `runtime`
# copies only that environment onto the same pinned base: no uv, no compilers, no sources, and a
# non-root user. The simulator, the client and the development tools are not in the image.

ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 UV_PYTHON_DOWNLOADS=never
RUN pip install uv==0.13.9
WORKDIR /src
COPY pyproject.toml uv.lock ./
COPY packages ./packages
RUN uv export --frozen --no-dev --no-emit-workspace --package execpods-sidecar \
        --output-file /tmp/requirements.txt \
    && python -m venv /opt/execpods \
    && /opt/execpods/bin/pip install --require-hashes --only-binary :all: \
        -r /tmp/requirements.txt \
    && /opt/execpods/bin/pip install --no-deps \
        ./packages/core ./packages/k8s_adapter ./packages/contract ./packages/sidecar \
    && /opt/execpods/bin/pip uninstall --yes pip

FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --system --gid 10001 execpods \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin execpods
COPY --from=build /opt/execpods /opt/execpods
ENV PATH=/opt/execpods/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
# gRPC (the default listen address is loopback: a driver in the same pod), health, metrics.
EXPOSE 50551 8081 9464
ENTRYPOINT ["execpods-sidecar"]
CMD ["serve"]
