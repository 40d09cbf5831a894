"""docker-compose.yml (+ the PostgreSQL override): app and worker on one image, wired right.

Docker is not run here; the files are parsed and their commands checked against the real
command-line parser, so a renamed option or command breaks this test, not a deployment.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def _load(name: str) -> dict:
    return yaml.safe_load((REPO / name).read_text())


def _worker_parser() -> argparse.ArgumentParser:
    from radconcord.backend.cli import jobs as cli_jobs

    parser = argparse.ArgumentParser()
    cli_jobs.register(parser.add_subparsers(dest="command", required=True))
    return parser


def test_app_and_worker_share_one_image_and_one_data_volume():
    services = _load("docker-compose.yml")["services"]
    assert {"app", "worker", "migrate"} <= set(services)
    images = {services[n]["image"] for n in services}
    assert images == {"radconcord:latest"}
    assert all(services[n]["build"]["context"] == "." for n in services)
    for name in services:
        assert "radconcord-data:/data" in services[name]["volumes"]
        assert services[name]["environment"]["RADCONCORD_SEED_DEMO"] == "0"
        assert services[name]["environment"]["RADCONCORD_DATA_DIR"] == "/data"
    app = services["app"]
    assert app["command"][:3] == ["streamlit", "run", "webapp/server.py"]
    assert (REPO / "webapp" / "server.py").is_file()
    assert app["ports"] == ["127.0.0.1:8501:8501"]  # never on every interface
    assert services["migrate"]["command"] == ["python", "-m", "backend", "init-db"]
    for name in ("app", "worker", "worker-gpu"):
        assert services[name]["depends_on"]["migrate"]["condition"] == (
            "service_completed_successfully")


def test_worker_commands_parse_with_the_real_command_line():
    services = _load("docker-compose.yml")["services"]
    parser = _worker_parser()
    for name, device in (("worker", "cpu"), ("worker-gpu", "cuda:0")):
        command = services[name]["command"]
        assert command[:4] == ["python", "-m", "backend", "worker"]
        args = parser.parse_args(command[3:])
        assert args.device == device and not args.once
    assert services["worker-gpu"]["profiles"] == ["gpu"]
    assert "worker" not in services["worker"].get("profiles", [])


def test_postgres_override_sets_the_url_for_every_service():
    base = _load("docker-compose.yml")["services"]
    override = _load("docker-compose.postgres.yml")["services"]
    assert override["db"]["image"].startswith("postgres:")
    for name in base:
        url = override[name]["environment"]["DATABASE_URL"]
        assert url.startswith("postgresql+psycopg://radconcord:") and url.endswith(
            "@db:5432/radconcord")
        assert override[name]["depends_on"]["db"]["condition"] == "service_healthy"
