# cwstore's demo against a PostgreSQL server (see docker-compose.yml).
FROM python:3.12-slim

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
WORKDIR /src
COPY . .
RUN pip install . && useradd --create-home cwstore
USER cwstore

CMD ["cwstore", "demo", "--dsn", "postgresql://postgres:postgres@postgres:5432/postgres"]
