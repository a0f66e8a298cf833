# Development image for docker-compose.yml: the library installed in editable
# mode (with the test extra) into /opt/venv, and the repository mounted at
# /app by Compose, so the containers run the code of the working tree.
#
#   docker compose build        # or: make compose-build
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# make runs the test target; the PostgreSQL and MariaDB clients help debugging.
RUN apt-get update \
    && apt-get install -y --no-install-recommends make postgresql-client mariadb-client \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app

# Only what the install needs; the rest of the repository (examples, tests,
# database, ...) comes from the bind mount in docker-compose.yml.
COPY pyproject.toml README.md ./
COPY nsj_queue_lib ./nsj_queue_lib

# The Makefile's stamp is written too, so `make test VENV=/opt/venv` does not
# reinstall unless pyproject.toml changed after the image was built.
RUN python -m venv /opt/venv \
    && pip install -e '.[test,django]' \
    && touch /opt/venv/.installed-test

CMD ["python", "-c", "import nsj_queue_lib; print('nsj_queue_lib image: pick a service command in docker-compose.yml')"]
