# The daemon image: `epochstate daemon` as its entry point, for the two layouts of deploy/
# (a native sidecar in the Spark driver pod; a StatefulSet group following object stores).
# It needs no JVM and no Spark: it installs the [daemon] extra and the extras of the filesystems
# checkpoints live on in a cluster (s3, gcs, azure, hdfs), every version pinned by
# deploy/constraints.txt (`make constraints` writes it; docs/kubernetes.md#the-image says why).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY deploy/constraints.txt ./deploy/
# The repository's distributions the daemon needs (one folder each, a src layout), and the
# root's, which gathers them and names the extras.
COPY proto ./proto
COPY core ./core
COPY client ./client
COPY cli ./cli
COPY daemon ./daemon
RUN pip wheel --no-cache-dir --wheel-dir /wheels --constraint deploy/constraints.txt \
        ./proto ./core ./client ./cli ./daemon '.[daemon,s3,gcs,azure,hdfs]'

FROM python:3.11-slim
# A numeric user and group, so the kubelet can check runAsNonRoot without a passwd lookup.
ARG UID=10001
RUN groupadd --gid "${UID}" epochstate \
    && useradd --uid "${UID}" --gid "${UID}" --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin epochstate \
    && mkdir -p /var/lib/epochstate \
    && chown "${UID}:${UID}" /var/lib/epochstate \
    && chmod 0750 /var/lib/epochstate
# The wheels are mounted, not copied: no layer of the image keeps them.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    --mount=type=bind,from=build,source=/src/deploy/constraints.txt,target=/constraints.txt \
    pip install --no-cache-dir --no-index --find-links /wheels --constraint /constraints.txt \
        'epochstate[daemon,s3,gcs,azure,hdfs]'
USER 10001:10001
# Nothing is written outside the data volume (and /tmp, an emptyDir in the manifests), so the
# root filesystem can be mounted read-only: no bytecode caches at run time.
# Beyond loopback the daemon starts only with TLS and auth configured (EPOCHSTATE_TLS__CERT, ...,
# or a --config file; docs/security.md), or with --insecure.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    EPOCHSTATE_LISTEN=0.0.0.0:7070 \
    EPOCHSTATE_HEALTH_LISTEN=0.0.0.0:7071 \
    EPOCHSTATE_METRICS_PORT=9100 \
    EPOCHSTATE_METRICS_ADDRESS=0.0.0.0 \
    EPOCHSTATE_DATA_DIR=/var/lib/epochstate
VOLUME /var/lib/epochstate
# gRPC (TLS), plaintext health probes (grpc.health.v1 only), Prometheus metrics.
EXPOSE 7070 7071 9100
# The Unix socket in the data directory needs no TLS options; the daemon answers SERVING
# only while ZooKeeper and ingest are well (docs/operations.md#health).
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 \
    CMD ["epochstate", "health", "--target", "unix:///var/lib/epochstate/epochstate.sock"]
# SIGTERM drains: health NOT_SERVING, stop accepting, drain calls (shutdown_grace), close the
# store, leave ZooKeeper. The daemon is PID 1 and handles the signal itself.
STOPSIGNAL SIGTERM
ENTRYPOINT ["epochstate", "daemon"]
