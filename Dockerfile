# syntax=docker/dockerfile:1
# The execpods sidecar image. `python3 tools/dev.py image` builds it with buildah on a Debian base
# it makes with debootstrap (no registry needed) and runs it against kubesim; with a registry,
# `mkdir -p build/wheelhouse && docker build -t execpods/sidecar:0.2.0 .` builds it too.
#
# Two stages. `build` turns uv.lock into a hash-checked requirements file (`uv export --frozen`:
# the lock as committed, never re-resolved), installs exactly those wheels into a virtual
# environment, then the workspace's own runtime packages without their dependencies. `runtime`
# copies only that environment onto the same pinned base: no uv, no pip, no compilers, no
# sources, and a non-root user. The kubernetes client's asyncio half (kubernetes/aio, 68 MB of
# the image) goes too: execpods uses only its synchronous client. The simulator, the client and the development tools are not in
# the image. `build/wheelhouse` (filled by tools/image.py) lets pip install without an index:
# with `--build-arg PIP_NO_INDEX=1` the build needs no network at all.
#
# The image also carries the Spark plugin's jar (`python3 tools/dev.py spark-plugin` builds it into
# integrations/spark/build): the cluster-mode driver pod template copies it from here into the
# driver's class path with an init container (docs/spark.md, "The plugin on the class path").
# The labels are the OCI image annotations; tools/image.py passes the version and the commit.

ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG PIP_NO_INDEX=
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 UV_PYTHON_DOWNLOADS=never \
    PIP_FIND_LINKS=/wheels PIP_NO_INDEX=${PIP_NO_INDEX}
WORKDIR /src
COPY build/wheelhouse /wheels
COPY pyproject.toml uv.lock LICENSE NOTICE ./
COPY packages ./packages
COPY integrations/spark/build/execpods-spark.jar ./
RUN python3 -m venv /opt/uv && /opt/uv/bin/pip install uv==0.13.9 \
    && /opt/uv/bin/uv export --frozen --no-dev --no-emit-workspace --package execpods-sidecar \
        --output-file /tmp/requirements.txt \
    && python3 -m venv /opt/execpods \
    && /opt/execpods/bin/pip install --require-hashes --only-binary :all: \
        -r /tmp/requirements.txt \
    && /opt/execpods/bin/pip install --no-deps \
        ./packages/core ./packages/k8s_adapter ./packages/contract ./packages/sidecar \
    && rm -rf /opt/execpods/lib/python3*/site-packages/kubernetes/aio \
    && /opt/execpods/bin/pip uninstall --yes setuptools pip

FROM ${PYTHON_IMAGE} AS runtime
ARG VERSION=0.2.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="execpods-sidecar" \
      org.opencontainers.image.description="Allocates Spark executor pods on Kubernetes, as a gRPC sidecar beside the driver" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/execpods/execpods" \
      org.opencontainers.image.url="https://github.com/execpods/execpods" \
      org.opencontainers.image.documentation="https://github.com/execpods/execpods/tree/main/docs" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="The execpods authors"
RUN groupadd --system --gid 10001 execpods \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin execpods
COPY --from=build /opt/execpods /opt/execpods
COPY --from=build /src/execpods-spark.jar /opt/execpods/share/spark/execpods-spark.jar
ENV PATH=/opt/execpods/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
# gRPC (the default listen address is loopback: a driver in the same pod), health, metrics.
EXPOSE 50551 8081 9464
ENTRYPOINT ["execpods-sidecar"]
CMD ["serve"]
