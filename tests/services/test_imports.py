"""Importing cases and ReXVal files; serving images with access control; the demo study."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pydicom
import pytest
from PIL import Image as PILImage
from pydicom.data import get_testdata_file
from sqlalchemy import func, select

from radconcord.backend.datasets import rexval
from radconcord.backend.datasets.demo import demo_cases
from radconcord.backend.datasets.pairs import parse_cases
from radconcord.backend.errors import InvalidInput, NotFound, PermissionDenied
from radconcord.backend.imaging.deid import DEID_PROFILE
from radconcord.backend.scoring.hashing import input_hash
from radconcord.backend.services.accounts.seed import import_demo
from radconcord.backend.services.annotation import images as image_service
from radconcord.backend.services.transfer.imports import import_cases, import_rexval
from radconcord.backend.types import Actor, CandidateInput, CaseInput, ImageInput
from radconcord.db.models import (
    Assignment,
    Case,
    Image,
    Pair,
    Rating,
    RatingEvent,
    Report,
    Study,
    User,
)

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "rexval_mini"
ADMIN = Actor.system()


@pytest.fixture(autouse=True)
def _cheap_argon2(monkeypatch):
    """Real argon2id with cheap parameters: the importer hashes one password per rater."""
    from argon2 import PasswordHasher

    from radconcord.backend.services.transfer import imports

    monkeypatch.setattr(imports, "_hasher", PasswordHasher(time_cost=1, memory_cost=1024,
                                                           parallelism=1))


def _count(db, model) -> int:
    with db.begin() as s:
        return s.scalar(select(func.count()).select_from(model))


def _stored_images(root: Path) -> list[Path]:
    folder = root / "images"
    return sorted(folder.iterdir()) if folder.exists() else []


def _png(path: Path, value: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    arr = np.full((16, 24), value, np.uint8)
    arr[4:8, 4:8] = 255
    PILImage.fromarray(arr).save(path)
    return path


@pytest.fixture
def case_file(tmp_path) -> Path:
    src = tmp_path / "input"
    _png(src / "c1_lateral.png")
    shutil.copy(get_testdata_file("CT_small.dcm"), src / "c1_scan.dcm")
    f = src / "cases.csv"
    f.write_text(
        "case_id,reference,candidate,source,images\n"
        "c1,No effusion.,No effusion.,gen-A,c1_scan.dcm;c1_lateral.png\n"
        "c1,No effusion.,Left effusion.,gen-B,\n"
        "c2,Cardiomegaly.,Normal heart.,gen-A,\n"
    )
    return f


def _rater(db, username: str = "reader1") -> Actor:
    with db.begin() as s:
        user = User(username=username, role="rater", password_hash="x")
        s.add(user)
        s.flush()
        return Actor(user.id, username, "rater")


def test_import_cases_creates_study_pairs_and_deidentified_images(db, tmp_path, case_file):
    summary = import_cases(db, ADMIN, study_name="s1", cases=parse_cases(case_file),
                           raters_per_pair=2, seed=5, provenance={"file": "cases.csv"})
    assert (summary.n_cases, summary.n_pairs, summary.n_images, summary.n_reports) == (2, 3, 2, 5)
    with db.begin() as s:
        study = s.scalar(select(Study).where(Study.name == "s1"))
        assert (study.raters_per_pair, study.seed) == (2, 5)
        assert study.provenance["file"] == "cases.csv"
        deid = study.provenance["deidentification"]
        assert deid["profile"] == DEID_PROFILE["profile"] and deid["version"] == 2
        assert len(deid["uid_salt_id"]) == 12
        assert study.provenance["import_report"] == {"images": 2, "burned_in_annotation": []}
        pairs = s.scalars(select(Pair).order_by(Pair.position)).all()
        assert [p.position for p in pairs] == [0, 1, 2]
        assert [p.source for p in pairs] == ["gen-A", "gen-B", "gen-A"]
        assert len({p.opaque_id for p in pairs}) == 3
        assert all(len(p.opaque_id) == 16 for p in pairs)
        assert pairs[0].reference_id == pairs[1].reference_id  # one reference report per case
        images = s.scalars(select(Image).order_by(Image.id)).all()
        shas = [i.sha256 for i in images]
        assert pairs[0].input_hash == input_hash("No effusion.", "No effusion.", shas)
        assert pairs[2].input_hash == input_hash("Cardiomegaly.", "Normal heart.", [])
        dicom, png = images
        assert (dicom.format, png.format) == ("dicom", "png")
        assert png.view == "LATERAL"  # from the file name
        assert (png.width, png.height) == (24, 16)
        assert dicom.meta["modality"] == "CT" and "PatientName" not in dicom.meta
        for image in images:
            assert image.path == f"images/{image.sha256}.{'dcm' if image is dicom else 'png'}"
            stored = tmp_path / image.path
            assert hashlib.sha256(stored.read_bytes()).hexdigest() == image.sha256
    ds = pydicom.dcmread(tmp_path / dicom.path)
    original = pydicom.dcmread(get_testdata_file("CT_small.dcm"))
    assert ds.PatientName == "" and ds.PatientIdentityRemoved == "YES"
    assert ds.StudyInstanceUID != original.StudyInstanceUID
    assert ds.PixelData == original.PixelData
    assert not list((tmp_path / "images").glob(".*.tmp"))


def test_import_requires_admin(db, case_file):
    rater = _rater(db)
    with pytest.raises(PermissionDenied):
        import_cases(db, rater, study_name="s1", cases=parse_cases(case_file))
    assert _count(db, Study) == 0


def test_bad_image_changes_nothing(db, tmp_path, case_file):
    bad = tmp_path / "input" / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 30)
    cases = parse_cases(case_file)
    cases.append(CaseInput("c3", "Ref.", [CandidateInput("Cand.", "gen-A")],
                           [ImageInput(path=bad)]))
    with pytest.raises(InvalidInput, match="case c3: .*broken.png"):
        import_cases(db, ADMIN, study_name="s1", cases=cases)
    for model in (Study, Case, Report, Image, Pair):
        assert _count(db, model) == 0
    # c1's two images were written before c3 failed; they are removed again.
    assert _stored_images(tmp_path) == []


def test_failed_transaction_removes_written_files(db, tmp_path, case_file):
    import_cases(db, ADMIN, study_name="taken", cases=[
        CaseInput("other", "R.", [CandidateInput("C.", "x")])])
    with pytest.raises(InvalidInput, match="study 'taken' already exists"):
        import_cases(db, ADMIN, study_name="taken", cases=parse_cases(case_file))
    assert _stored_images(tmp_path) == []
    assert _count(db, Case) == 1


def test_each_import_creates_its_own_cases(db, tmp_path, case_file):
    # Cases are scoped by study: a second study with the same case ids gets its own cases,
    # reports and image rows (an earlier import is never "reused" or changed).
    import_cases(db, ADMIN, study_name="s1", cases=parse_cases(case_file))
    second = import_cases(db, ADMIN, study_name="s2", cases=parse_cases(case_file))
    assert (second.n_cases_reused, second.n_cases, second.n_images, second.n_reports,
            second.n_pairs) == (0, 2, 2, 5, 3)
    assert _count(db, Case) == 4 and _count(db, Report) == 10 and _count(db, Image) == 4
    assert _count(db, Pair) == 6
    with db.begin() as s:
        rows = s.execute(select(Study.name, Case.external_id, Image.format)
                         .join(Case, Case.study_id == Study.id)
                         .join(Image, Image.case_id == Case.id)).all()
        hashes = s.execute(select(Pair.study_id, Pair.position, Pair.input_hash)).all()
    assert sorted(rows) == [("s1", "c1", "dicom"), ("s1", "c1", "png"),
                            ("s2", "c1", "dicom"), ("s2", "c1", "png")]
    by_pos: dict[int, set[str]] = {}
    for _, pos, h in hashes:
        by_pos.setdefault(pos, set()).add(h)
    # Text-only pairs keep one cache key; the DICOM is re-de-identified with a new salt.
    assert len(by_pos[2]) == 1


def test_invalid_case_lists_are_rejected(db):
    with pytest.raises(InvalidInput, match="no cases"):
        import_cases(db, ADMIN, study_name="s", cases=[])
    dup = CaseInput("a", "R.", [CandidateInput("C.", "g"), CandidateInput("C.", "g")])
    with pytest.raises(InvalidInput, match="case 'a': the same candidate"):
        import_cases(db, ADMIN, study_name="s", cases=[dup])
    assert _count(db, Study) == 0


def test_import_rexval_creates_raters_assignments_ratings(db):
    summary = import_rexval(db, ADMIN, gt_path=FIXTURE / rexval.GT_FILENAME,
                            ratings_path=FIXTURE / rexval.RATINGS_FILENAME, study_name="rexval")
    assert (summary.n_pairs, summary.n_raters, summary.n_ratings) == (12, 3, 432)
    gt = rexval.read_gt(FIXTURE / rexval.GT_FILENAME)
    with db.begin() as s:
        study = s.scalar(select(Study))
        files = study.provenance["files"]
        for name in (rexval.GT_FILENAME, rexval.RATINGS_FILENAME):
            assert files[name] == hashlib.sha256((FIXTURE / name).read_bytes()).hexdigest()
        pairs = s.scalars(select(Pair).order_by(Pair.position)).all()
        expected = [(row.study_id, t, text) for row in gt.rows
                    for t, text in zip(gt.candidate_types, row.candidates, strict=True)]
        assert [(p.case.external_id, p.source, p.candidate.text) for p in pairs] == expected
        users = s.scalars(select(User).order_by(User.username)).all()
        assert [u.username for u in users] == [f"rexval_rater_{i}" for i in range(3)]
        assert all(u.role == "rater" and u.password_hash.startswith("$argon2") for u in users)
        assert s.scalar(select(func.count()).select_from(Assignment).where(
            Assignment.completed_at.is_not(None))) == 36
        assert s.scalar(select(func.count()).select_from(RatingEvent).where(
            RatingEvent.action == "import")) == 432
        rater0 = users[0].id
        stored = s.scalar(select(Rating.count).where(
            Rating.rater_id == rater0, Rating.pair_id == pairs[1].id, Rating.category == 3,
            Rating.significant.is_(True)))
    ratings = rexval.read_ratings(FIXTURE / rexval.RATINGS_FILENAME, gt)
    row = next(r for r in ratings.rows if (r.study_number, r.candidate_type, r.error_category,
                                           r.rater_index, r.clinically_significant)
               == (0, "bertscore", 3, 0, True))
    assert stored == row.num_errors


def test_import_rexval_bad_file_changes_nothing(db, tmp_path):
    shutil.copy(FIXTURE / rexval.GT_FILENAME, tmp_path / rexval.GT_FILENAME)
    bad = tmp_path / rexval.RATINGS_FILENAME
    lines = (FIXTURE / rexval.RATINGS_FILENAME).read_text().splitlines()
    lines[10] = "0,radgraph,9,0,True,1"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(InvalidInput, match="row 9 .*field 'error_category'"):
        import_rexval(db, ADMIN, gt_path=tmp_path / rexval.GT_FILENAME, ratings_path=bad,
                      study_name="r")
    for model in (Study, User, Pair, Rating):
        assert _count(db, model) == 0


def test_rendered_image_access_control(db, case_file):
    import_cases(db, ADMIN, study_name="s1", cases=parse_cases(case_file))
    image_service.clear_caches()
    reader, other = _rater(db, "reader"), _rater(db, "other")
    with db.begin() as s:
        image_ids = s.scalars(select(Image.id).order_by(Image.id)).all()
        pair = s.scalar(select(Pair).where(Pair.position == 1))  # case c1
        s.add(Assignment(study_id=pair.study_id, rater_id=reader.user_id, pair_id=pair.id,
                         order_index=0))
        pair_id = pair.id
    png = image_service.rendered_image(db, reader, image_id=image_ids[0], preset="lung")
    assert png.startswith(b"\x89PNG")
    with PILImage.open(__import__("io").BytesIO(png)) as img:
        assert img.size == (128, 128)
    assert image_service.rendered_image(db, reader, image_id=image_ids[0], preset="lung") == png
    with pytest.raises(PermissionDenied):
        image_service.rendered_image(db, other, image_id=image_ids[0])
    with pytest.raises(PermissionDenied):
        image_service.rendered_image(db, other, image_id=9999)
    with pytest.raises(NotFound):
        image_service.rendered_image(db, ADMIN, image_id=9999)
    with pytest.raises(InvalidInput, match="manual"):
        image_service.rendered_image(db, ADMIN, image_id=image_ids[0], preset="manual")
    manual = image_service.rendered_image(db, ADMIN, image_id=image_ids[0], preset="manual",
                                          center=40, width=400, zoom=2.0)
    with PILImage.open(__import__("io").BytesIO(manual)) as img:
        assert img.size == (64, 64)
    thumb = image_service.thumbnail(db, ADMIN, image_id=image_ids[1], max_side=16)
    with PILImage.open(__import__("io").BytesIO(thumb)) as img:
        assert max(img.size) == 16
    infos = image_service.images_for_pair(db, reader, pair_id=pair_id)
    assert [i.image_id for i in infos] == list(image_ids)
    assert infos[0].meta["modality"] == "CT" and infos[1].view == "LATERAL"
    with pytest.raises(PermissionDenied):
        image_service.images_for_pair(db, other, pair_id=pair_id)


def test_demo_study_imports_with_real_and_synthetic_images(db):
    cases = demo_cases()
    assert 6 <= len(cases) <= 10
    assert all(sorted(c.source for c in case.candidates) == ["gen-A", "gen-B", "gen-C"]
               for case in cases)
    summary = import_demo(db, ADMIN, study_name="demo")
    assert summary.n_pairs == 3 * len(cases)
    assert summary.n_images == 4
    with db.begin() as s:
        by_case = {c.external_id: c.images for c in s.scalars(select(Case)).all()}
    cr = by_case["demo-01-cr-pa"][0]
    assert (cr.format, cr.view, cr.meta["photometric"]) == ("dicom", "PA", "MONOCHROME1")
    j2k = by_case["demo-02-cr-j2k"][0]
    # De-identification re-encodes the pixels uncompressed (explicit VR little endian).
    assert j2k.meta["transfer_syntax"] == "1.2.840.10008.1.2.1"
    phantom = by_case["demo-03-synthetic-phantom"]
    assert [(i.format, i.view) for i in phantom] == [("png", "PA"), ("png", "LATERAL")]
    assert sum(1 for images in by_case.values() if not images) == len(cases) - 3


def test_burned_in_annotation_is_flagged_in_the_studys_import_report(db, tmp_path):
    ds = pydicom.dcmread(get_testdata_file("CT_small.dcm"))
    ds.BurnedInAnnotation = "YES"
    marked = tmp_path / "in" / "smith_john_burned.dcm"
    marked.parent.mkdir(parents=True)
    ds.save_as(marked)
    clean = _png(tmp_path / "in" / "plain.png")
    cases = [CaseInput("b1", "R.", [CandidateInput("C.", "g")], [ImageInput(path=marked)]),
             CaseInput("b2", "R2.", [CandidateInput("C2.", "g")], [ImageInput(path=clean)])]
    summary = import_cases(db, ADMIN, study_name="burned", cases=cases)
    assert any("BurnedInAnnotation" in w for w in summary.warnings)
    with db.read() as s:
        provenance = s.scalar(select(Study.provenance))
        path = s.scalar(select(Image.path).where(Image.format == "dicom"))
    assert provenance["import_report"] == {
        "images": 2, "burned_in_annotation": [{"case_id": "b1", "image": path}]}
    # The report names the case and the stored file, never the source file's name.
    assert "smith" not in json.dumps(provenance).lower()
