"""The hostile corpus end to end: import, render, export, database; no identifier anywhere."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from sqlalchemy import func, select

from radconcord.backend import config
from radconcord.backend.errors import InvalidInput
from radconcord.backend.imaging.deid import BURNED_IN_WARNING, DEID_PROFILE
from radconcord.backend.services.annotation import images as image_service
from radconcord.backend.services.transfer.exports import export_study
from radconcord.backend.services.transfer.imports import import_cases
from radconcord.backend.types import Actor, CandidateInput, CaseInput, ImageInput
from radconcord.db.models import Assignment, Base, Image, Pair, Study, User

ADMIN = Actor.system()
HOSTILE = Path(__file__).resolve().parent.parent / "hostile_corpus.py"


def _corpus_module():
    # By path: the radgraph wheel installs a top-level ``tests`` package.
    if "hostile_corpus" not in sys.modules:
        spec = importlib.util.spec_from_file_location("hostile_corpus", HOSTILE)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["hostile_corpus"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["hostile_corpus"]


hc = _corpus_module()
# The corpus CT has bytes planted after its last pixel; pydicom warns about them on reading.
pytestmark = pytest.mark.filterwarnings("ignore:The pixel data is .* excess padding")


@pytest.fixture(autouse=True)
def _cheap_argon2(monkeypatch):
    from argon2 import PasswordHasher

    from radconcord.backend.services.transfer import imports

    monkeypatch.setattr(imports, "_hasher", PasswordHasher(time_cost=1, memory_cost=1024,
                                                           parallelism=1))


@pytest.fixture
def corpus(tmp_path_factory):
    # Outside the data folder, so that a scan of the data folder sees only what was stored.
    built = hc.build(tmp_path_factory.mktemp("hostile-input"))
    # File names carry identifiers too (exports from a PACS often do).
    named = built.folder / f"{hc.FAMILY}_{hc.GIVEN}_{hc.PATIENT_ID}.png"
    built.png[1] = built.png[1].rename(named)
    return built


def _cases(corpus) -> list[CaseInput]:
    files = corpus.files
    groups = [files[i : i + 3] for i in range(0, len(files), 3)]
    return [
        CaseInput(
            case_id=f"case-{n}",
            reference="No focal consolidation.",
            candidates=[CandidateInput("Clear lungs.", "gen-A"),
                        CandidateInput("Small left effusion.", "gen-B")],
            images=[ImageInput(path=p) for p in group],
        )
        for n, group in enumerate(groups)
    ]


def _dump_database(db) -> str:
    """Every row of every table, as text."""
    lines = []
    with db.read() as s:
        for table in Base.metadata.sorted_tables:
            for row in s.execute(select(table)).all():
                lines.append(f"{table.name}: {json.dumps(list(row), default=repr)}")
    return "\n".join(lines)


def test_no_planted_identifier_in_stored_files_renders_export_or_database(any_db, corpus,
                                                                          tmp_path):
    db = any_db
    summary = import_cases(db, ADMIN, study_name="hostile", cases=_cases(corpus),
                           raters_per_pair=1, seed=7, provenance={"file": "cases.csv"})
    assert summary.n_images == len(corpus.files)
    # The burned-in DICOM is flagged in the import report, and only that one.
    flagged = [w for w in summary.warnings if BURNED_IN_WARNING in w]
    assert len(flagged) == 1 and "dx_jpeg.dcm" in flagged[0]

    # Stored files (and, on SQLite, the database file itself) under the data folder.
    scanned = 0
    for path in sorted(config.data_dir().rglob("*")):
        if path.is_file():
            assert hc.find_planted(path.read_bytes()) == [], path
            scanned += 1
    assert scanned >= len(corpus.files)

    # What the viewer gets: renders at every preset, thumbnails and display metadata.
    with db.read() as s:
        image_ids = s.scalars(select(Image.id).order_by(Image.id)).all()
        pair_ids = s.scalars(select(Pair.id)).all()
        formats = sorted(s.scalars(select(Image.format)).all())
    assert len(image_ids) == len(corpus.files)
    assert formats == ["dicom", "dicom"] + ["png"] * 5  # JPEGs are stored as PNG
    for image_id in image_ids:
        for preset in ("header", "lung", "bone"):
            png = image_service.rendered_image(db, ADMIN, image_id=image_id, preset=preset)
            assert hc.find_planted(png) == [], (image_id, preset)
        assert hc.find_planted(image_service.thumbnail(db, ADMIN, image_id=image_id)) == []
    shown = []
    for pair_id in pair_ids:
        shown += image_service.images_for_pair(db, ADMIN, pair_id=pair_id)
    assert hc.find_planted(json.dumps([i.__dict__ for i in shown]).encode()) == []
    assert sum(1 for i in shown if i.meta.get("burned_in_annotation") == "YES") == 2  # 2 pairs
    # The viewer's warning beside the image: for the admin, never for a rater.
    with db.read() as s:
        burned = s.scalars(select(Image.id).where(Image.path.like("%.dcm"))).all()
    notes = image_service.image_warnings(db, ADMIN, image_ids=list(image_ids))
    assert len(notes) == 1 and set(notes) <= set(burned)
    assert "burned" in notes[next(iter(notes))].lower()
    # A rater assigned to every pair sees the images, but neither the note nor the flag.
    with db.begin() as s:
        user = User(username="reader", role="rater", password_hash="x")
        s.add(user)
        s.flush()
        study_id = s.scalar(select(Study.id).where(Study.name == "hostile"))
        s.add_all(Assignment(study_id=study_id, rater_id=user.id, pair_id=pid, order_index=n)
                  for n, pid in enumerate(pair_ids))
        rater = Actor(user.id, "reader", "rater")
    assert image_service.image_warnings(db, rater, image_ids=list(image_ids)) == {}
    for pair_id in pair_ids:
        for info in image_service.images_for_pair(db, rater, pair_id=pair_id):
            assert "burned_in_annotation" not in info.meta
            png = image_service.rendered_image(db, rater, image_id=info.image_id)
            assert hc.find_planted(png) == []

    # Every file of the export.
    out = tmp_path / "export"
    export_study(db, ADMIN, study_name="hostile", fmt="jsonl", out_dir=out)
    exported = [p for p in out.rglob("*") if p.is_file()]
    assert len([p for p in exported if p.parent.name == "images"]) == len(corpus.files)
    for path in exported:
        assert hc.find_planted(path.read_bytes()) == [], path
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["deidentification"] == DEID_PROFILE

    # Every row of every table.
    dump = _dump_database(db)
    assert "hostile" in dump  # the dump does see the data
    assert hc.find_planted(dump.encode()) == []


def test_image_over_the_pixel_limit_fails_the_import_with_one_line(any_db, corpus, tmp_path):
    """A PNG header claiming 30000 x 30000 pixels: the file and the limit named, nothing saved."""
    import struct
    import zlib

    data = bytearray(corpus.png[0].read_bytes())
    data[16:24] = struct.pack(">II", 30000, 30000)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])) & 0xFFFFFFFF)
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(bytes(data))
    cases = _cases(corpus)
    cases[-1].images.append(ImageInput(path=bomb))
    with pytest.raises(InvalidInput) as err:
        import_cases(any_db, ADMIN, study_name="bomb", cases=cases, raters_per_pair=1, seed=1)
    message = str(err.value)
    assert "\n" not in message
    assert str(bomb) in message
    assert "exceeds the limit of 67108864 pixels per frame (8192 x 8192)" in message
    with any_db.read() as s:
        assert s.scalar(select(func.count()).select_from(Study)) == 0
    images = config.data_dir() / "images"
    assert not images.exists() or not any(images.iterdir())
