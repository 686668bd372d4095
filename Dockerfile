# The daemon image: a sidecar next to the Spark driver, sharing the checkpoint volume.
# The daemon itself needs no JVM and no Spark: the image installs the [daemon] extra and the
# filesystems checkpoints live on in a cluster (S3, GCS, Azure, HDFS over WebHDFS).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY epochstate ./epochstate
COPY core ./core
COPY client ./client
COPY cli ./cli
COPY daemon ./daemon
COPY spark_plugin ./spark_plugin
COPY devtools ./devtools
COPY proto ./proto
RUN pip wheel --no-cache-dir --wheel-dir /wheels '.[daemon,s3,gcs,azure,hdfs]'

FROM python:3.11-slim
RUN useradd --uid 10001 --create-home epochstate
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels 'epochstate[daemon,s3,gcs,azure,hdfs]' && rm -rf /wheels
USER epochstate
# Beyond loopback the daemon starts only with TLS and auth configured (EPOCHSTATE_TLS__CERT, ...,
# or a --config file; docs/security.md), or with --insecure.
ENV EPOCHSTATE_LISTEN=0.0.0.0:7070 \
    EPOCHSTATE_DATA_DIR=/var/lib/epochstate
VOLUME /var/lib/epochstate
EXPOSE 7070
HEALTHCHECK NONE
ENTRYPOINT ["epochstate", "daemon"]
