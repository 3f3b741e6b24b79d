# Image of the zsched processes (dispatcher, worker, CLI) with the example app.
#   docker build -t zsched:local .
#   docker run --rm zsched:local zsched --help
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The wheel is built in a stage of its own and installed as users install it: the source tree
# never reaches the final image, so nothing can import it instead of the installed package.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY zsched ./zsched
COPY lua ./lua
RUN pip wheel --no-deps --wheel-dir /dist .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /dist /dist
RUN pip install /dist/*.whl && rm -rf /dist

# The example app the compose workers import as examples.app:app (only examples/ is in /app).
WORKDIR /app
COPY examples ./examples
ENV PYTHONPATH=/app

RUN useradd --system --uid 10001 --no-create-home zsched
USER zsched

# 9100: dispatcher metrics, 9101: worker metrics (the --metrics-port of docker-compose.yml).
EXPOSE 9100 9101
# SIGTERM lets a worker finish or hand back its runs (graceful shutdown).
STOPSIGNAL SIGTERM
CMD ["zsched", "--help"]
