# RadConcord app image: Streamlit UI + scoring worker code, CPU torch by default.
# Build:  docker build -t radconcord .
# Run:    docker run -p 127.0.0.1:8501:8501 -v radconcord-data:/data radconcord
#         (one container runs the app and one CPU worker, scripts/serve.sh: `docker stop`
#         stops both; -e RADCONCORD_WORKER=0 runs the app alone)
# First admin (the image seeds no demo accounts; the command prints a one-time password that
# must be replaced at the first login):
#         docker run --rm -v radconcord-data:/data radconcord \
#             python -m backend user create --role admin --username lead
# Serve it to other computers through a reverse proxy with TLS (docs/deployment.md): the
# session cookie is then marked Secure, and the proxy's X-Forwarded-For drives the per-client
# login throttling.
# GPU hosts: build with --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128
FROM python:3.11-slim-bookworm

ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    RADCONCORD_DATA_DIR=/data \
    RADCONCORD_SEED_DEMO=0 \
    RADCONCORD_HOST=0.0.0.0 \
    RADCONCORD_PYTHON=python \
    HF_HUB_OFFLINE=1

# A JRE for METEOR 1.5 (pycocoevalcap's jar).
RUN apt-get update \
 && apt-get install -y --no-install-recommends default-jre-headless \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
# torch pinned and taken from the CPU index first so nothing resolves a CUDA build by accident;
# pyproject.toml names torch without a build, so this one satisfies it.
RUN pip install "torch==2.13.0" --index-url "${TORCH_INDEX}"

# The package (backend, db with its migrations, webapp, radconcord, demo assets) installed
# editable with its dependencies and every extra (PostgreSQL, report figures, ray,
# datasets): `streamlit run webapp/server.py` and the `radconcord` command run the same code.
COPY pyproject.toml setup.py README.md alembic.ini ./
COPY backend ./backend
COPY db ./db
COPY webapp ./webapp
COPY radconcord ./radconcord
COPY assets ./assets
COPY .streamlit ./.streamlit
COPY scripts/serve.sh ./scripts/serve.sh
RUN pip install -e ".[all]"

RUN useradd --create-home --uid 10001 radconcord && mkdir -p /data && chown radconcord /data
USER radconcord
VOLUME ["/data"]
EXPOSE 8501
HEALTHCHECK CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health')"
# The default command runs the app (webapp/server.py: the app plus its cookie routes and error
# boundary) and one worker, stopped together; more workers from the same image:
# docker run ... radconcord python -m backend worker (docker-compose.yml runs the app and the
# workers as separate services, with PostgreSQL as an option: docker-compose.postgres.yml).
CMD ["bash", "scripts/serve.sh", "--server.port=8501", "--server.headless=true"]
