# The daemon image: a sidecar next to the Spark driver, sharing the checkpoint volume.
# The daemon itself needs no JVM and no Spark; only the demo and tests do.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY epochstate ./epochstate
COPY daemon ./daemon
COPY client ./client
COPY proto ./proto
COPY spark_plugin ./spark_plugin
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --uid 10001 --create-home epochstate
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER epochstate
ENV EPOCHSTATE_LISTEN=0.0.0.0:7070 \
    EPOCHSTATE_DATA_DIR=/var/lib/epochstate
VOLUME /var/lib/epochstate
EXPOSE 7070
HEALTHCHECK NONE
ENTRYPOINT ["epochstate", "daemon"]
