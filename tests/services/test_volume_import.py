"""CT volumes through the import service and the images service (issue 25).

A DICOM series folder, a multi-frame file or a NIfTI file named in a case's ``image`` column,
or a series folder inside a case folder, becomes one image of kind ``volume``: de-identified
(no planted identifier anywhere under the data folder), stored for plane access, recorded
with its shape and spacing. Films beside it import as before. An ambiguous or over-limit
entry fails the whole import with one message naming the case and the path, and leaves
nothing. The images service serves one plane at a time with its spacing, under the films'
access rules.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage
from pydicom.uid import generate_uid
from sqlalchemy import func, select, update
from starlette.applications import Starlette
from starlette.testclient import TestClient

from radconcord.backend import config
from radconcord.backend.datasets.pairs import parse_cases
from radconcord.backend.errors import InvalidInput, PermissionDenied
from radconcord.backend.imaging import volume as volume_module
from radconcord.backend.services.accounts import auth, sessions
from radconcord.backend.services.annotation import images as image_service
from radconcord.backend.services.transfer.imports import (
    delete_staged_study,
    import_cases,
    preview_import,
    preview_lines,
)
from radconcord.backend.types import Actor
from radconcord.db.models import Assignment, Case, Image, Pair, Study, StudyRole
from radconcord.webapp import api
from radconcord.webapp.api import images as images_api
from radconcord.webapp.state import SESSION_COOKIE

ADMIN = Actor.system()
HOSTILE = Path(__file__).resolve().parent.parent / "hostile_corpus.py"


def _corpus():
    if "hostile_corpus" not in sys.modules:
        spec = importlib.util.spec_from_file_location("hostile_corpus", HOSTILE)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["hostile_corpus"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["hostile_corpus"]


@pytest.fixture(autouse=True)
def _fresh_caches():
    image_service.clear_caches()
    yield
    image_service.clear_caches()


def _png(path: Path, value: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    arr = np.full((20, 16), value, np.uint8)
    arr[2:6, 2:6] = 255
    PILImage.fromarray(arr).save(path)
    return path


def _csv(folder: Path, rows: list[tuple[str, str]]) -> Path:
    lines = ["case_id,reference,candidate,source,image"]
    lines += [f"{cid},No effusion.,Small effusion.,gen-a,{image}" for cid, image in rows]
    path = folder / "cases.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _images(db) -> dict[str, list[Image]]:
    with db.read() as s:
        out: dict[str, list[Image]] = {}
        for case_id, image in s.execute(select(Case.external_id, Image)
                                        .join(Image, Image.case_id == Case.id)
                                        .order_by(Image.id)):
            s.expunge(image)
            out.setdefault(case_id, []).append(image)
        return out


def _stored(root: Path) -> list[Path]:
    return sorted(p for sub in ("images", "volumes") if (root / sub).exists()
                  for p in (root / sub).rglob("*"))


def _planted_under(root: Path) -> list[str]:
    """Planted identifiers in the stored images and volumes (contents and names)."""
    corpus = _corpus()
    found = []
    for path in _stored(root):
        if path.is_file():
            hits = corpus.find_planted(path.read_bytes()) + corpus.find_planted(
                path.name.encode())
            found += [f"{path.relative_to(root)}: {h}" for h in hits]
    return found


def test_films_case_and_ct_series_case_import_side_by_side(db, tmp_path):
    src = tmp_path / "input"
    _png(src / "films" / "frontal_pa.png", 30)
    _png(src / "films" / "lateral.png", 90)
    series = _corpus().build_hostile_series(src / "QUAXMIRE_ct")
    cases = parse_cases(_csv(src, [("films", "films/frontal_pa.png;films/lateral.png"),
                                   ("ct", "QUAXMIRE_ct")]))
    summary = import_cases(db, ADMIN, study_name="CT study", cases=cases)
    assert (summary.n_cases, summary.n_images, summary.n_pairs) == (2, 3, 2)

    images = _images(db)
    films = images["films"]
    assert [(i.kind, i.format, i.view) for i in films] == [
        ("film", "png", "PA"), ("film", "png", "LATERAL")]
    assert all(i.path.startswith("images/") for i in films)
    (ct,) = images["ct"]
    assert (ct.kind, ct.format, ct.width, ct.height) == ("volume", "volume", 10, 12)
    assert ct.path.startswith("volumes/")
    assert ct.meta["volume"]["shape"] == [12, 12, 10]
    assert ct.meta["volume"]["spacing"] == pytest.approx([2.5, 0.75, 0.5])
    assert ct.meta["volume"]["source"] == "series"
    assert ct.meta["hounsfield"] is True and ct.meta["modality"] == "CT"

    root = config.data_dir()
    store = root / ct.path
    assert sorted(p.name for p in store.iterdir()) == ["volume.json", "volume.npy"]
    # The values are HU, slices in position order (the files are named in reverse order).
    values = np.load(store / "volume.npy")
    for k in range(12):
        np.testing.assert_array_equal(values[k], _corpus().volume_pixels(k).astype(int) - 1024)
    # Nothing planted in any slice (nor the file and folder names) reached the data folder,
    # and no de-identification staging folder is left behind.
    assert _planted_under(root) == []
    assert not [p for p in (root / "volumes").iterdir() if p.name.startswith(".")]
    with db.read() as s:
        provenance = s.scalar(select(Study.provenance).where(Study.name == "CT study"))
    assert provenance["import_report"]["images"] == 3
    assert len(series.files) == 12


def test_a_series_folder_inside_a_case_folder_is_one_volume(db, tmp_path):
    """Looked up by case id in an images folder: the films of one case stay two images,
    the series folder inside the other case's folder becomes one volume (NIfTI files in a
    case folder are volumes too)."""
    base = tmp_path / "source"
    _png(base / "c1" / "c1_pa.png", 10)
    _png(base / "c1" / "c1_lateral.png", 20)
    _corpus().build_hostile_series(base / "c2" / "chest_ct", slices=5)
    (base / "c3").mkdir()
    _corpus().build_hostile_nifti(base / "c3" / "volume.nii.gz")
    cases_file = tmp_path / "cases.csv"
    cases_file.write_text("case_id,reference,candidate,source\n"
                          "c1,No effusion.,Effusion.,gen-a\n"
                          "c2,No nodule.,Nodule.,gen-a\n"
                          "c3,Clear lungs.,Opacity.,gen-a\n", encoding="utf-8")
    preview = preview_import(db, ADMIN, study_name="Lookup", cases_file=cases_file,
                             images_dir=base)
    assert preview.problems == () and preview.n_images == 4
    cases = parse_cases(cases_file, images_dir=base)
    assert [Path(i.path).name for i in cases[1].images] == ["chest_ct"]
    import_cases(db, ADMIN, study_name="Lookup", cases=cases)
    images = _images(db)
    assert [(i.kind, i.view) for i in images["c1"]] == [("film", "LATERAL"), ("film", "PA")]
    (c2,) = images["c2"]
    assert (c2.kind, c2.meta["volume"]["shape"]) == ("volume", [5, 12, 10])
    (c3,) = images["c3"]
    assert c3.kind == "volume" and c3.meta["volume"]["source"] == "nifti"
    assert c3.meta["volume"]["shape"] == [7, 10, 12]
    assert c3.meta["volume"]["spacing"] == pytest.approx([2.0, 0.8, 0.7])
    # A NIfTI file has no modality: taken as CT, so the values are HU and the CT presets apply.
    assert c3.meta["hounsfield"] is True
    # No header window in that NIfTI: it opens in the mediastinum window.
    auto = image_service.volume_plane(db, ADMIN, image_id=c3.id).header["presets"]["auto"]
    assert (auto["center"], auto["width"], auto["source"]) == (40.0, 400.0, "mediastinum")
    assert _planted_under(config.data_dir()) == []


def test_multiframe_and_nifti_paths_in_the_image_column(db, tmp_path):
    src = tmp_path / "input"
    src.mkdir()
    _corpus().build_hostile_multiframe(src / "enhanced.dcm")
    _corpus().build_hostile_nifti(src / "QUAXMIRE.nii")
    _csv(src, [("mf", "enhanced.dcm"), ("nii", "QUAXMIRE.nii")])
    # The dry run classifies the multi-frame DICOM file from its header, as the import does.
    preview = preview_import(db, ADMIN, study_name="Files", cases_file=src / "cases.csv")
    assert (preview.problems, preview.n_images, preview.n_volumes) == ((), 2, 2)
    assert "images found: 2 (2 volume(s), 0 film(s))" in "\n".join(preview_lines(preview))
    import_cases(db, ADMIN, study_name="Files", cases=parse_cases(
        _csv(src, [("mf", "enhanced.dcm"), ("nii", "QUAXMIRE.nii")])))
    images = _images(db)
    (mf,) = images["mf"]
    assert (mf.kind, mf.meta["volume"]["source"], mf.meta["volume"]["shape"]) == (
        "volume", "multiframe", [5, 12, 10])
    (nii,) = images["nii"]
    assert (nii.kind, nii.meta["volume"]["source"]) == ("volume", "nifti")
    assert _planted_under(config.data_dir()) == []


def _two_series(folder: Path) -> Path:
    corpus = _corpus()
    folder.mkdir(parents=True)
    for series in range(2):
        uid, study, frame = generate_uid(), generate_uid(), generate_uid()
        for k in range(3):
            ds = corpus.ct_slice((0.0, 0.0, 2.5 * k), corpus.volume_pixels(k), study_uid=study,
                                 series_uid=uid, frame_uid=frame)
            ds.save_as(folder / f"s{series}_{k}.dcm", enforce_file_format=True)
    return folder


def _nothing_written(db, root: Path) -> None:
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(Study)) == 0
        assert s.scalar(select(func.count()).select_from(Image)) == 0
    assert [p for p in _stored(root) if p.is_file()] == []


def test_an_ambiguous_folder_is_refused_naming_the_case_and_path(db, tmp_path):
    src = tmp_path / "input"
    _png(src / "a.png", 40)
    _two_series(src / "two_series")
    cases = parse_cases(_csv(src, [("fine", "a.png"), ("mixed", "two_series")]))
    with pytest.raises(InvalidInput) as err:
        import_cases(db, ADMIN, study_name="Bad", cases=cases)
    message = str(err.value)
    assert message.startswith("case mixed: ")
    assert str(src / "two_series") in message and "slices of 2 series" in message
    assert "ambiguous" in message
    _nothing_written(db, config.data_dir())
    # The dry run says the same, before anything is attempted.
    preview = preview_import(db, ADMIN, study_name="Bad", cases_file=src / "cases.csv")
    assert any(p.startswith("case mixed: ") and "ambiguous" in p for p in preview.problems)


def test_an_ambiguous_folder_in_a_case_folder_is_refused_naming_the_case(tmp_path):
    base = tmp_path / "source"
    _two_series(base / "c9" / "ct")
    cases_file = tmp_path / "cases.csv"
    cases_file.write_text("case_id,reference,candidate,source\nc9,No nodule.,Nodule.,g\n",
                          encoding="utf-8")
    with pytest.raises(InvalidInput) as err:
        parse_cases(cases_file, images_dir=base)
    message = str(err.value)
    assert "case id 'c9'" in message and str(base / "c9" / "ct") in message
    assert "slices of 2 series" in message


def test_a_folder_of_films_in_the_image_column_is_refused(db, tmp_path):
    src = tmp_path / "input"
    _png(src / "films" / "pa.png", 40)
    _png(src / "films" / "lat.png", 50)
    cases = parse_cases(_csv(src, [("f", "films")]))
    with pytest.raises(InvalidInput, match=r"^case f: .*films: a folder of 2-D films"):
        import_cases(db, ADMIN, study_name="Bad", cases=cases)
    _nothing_written(db, config.data_dir())


def test_a_volume_over_the_limit_is_refused_from_its_headers(db, tmp_path, monkeypatch):
    src = tmp_path / "input"
    _corpus().build_hostile_series(src / "ct", slices=6)
    _corpus().build_hostile_multiframe(src / "enhanced.dcm", frames=6)
    monkeypatch.setattr(volume_module, "MAX_SLICES", 5)
    # The dry run refuses both from their headers, the multi-frame file included.
    preview = preview_import(db, ADMIN, study_name="Big", cases_file=_csv(
        src, [("big", "ct"), ("bigmf", "enhanced.dcm")]))
    assert [p.split(":")[0] for p in preview.problems] == ["case big", "case bigmf"]
    assert "more than 5 files, over the limit" in preview.problems[0]
    assert "6 slices of 10 x 12 pixels exceeds the limit of 5 slices" in preview.problems[1]
    with pytest.raises(InvalidInput, match=r"^case big: .*ct: .*over the limit of 5 slices"):
        import_cases(db, ADMIN, study_name="Big", cases=parse_cases(_csv(src, [("big", "ct")])))
    _nothing_written(db, config.data_dir())


def test_a_late_failure_removes_the_stored_volume(db, tmp_path):
    """The volume of the first case is stored; the second case's series passes the header
    checks but one slice's pixel data is cut short: the whole import is undone, the first
    volume's folder included, and the message names the case and the slice."""
    import pydicom

    src = tmp_path / "input"
    _corpus().build_hostile_series(src / "ct", slices=4)
    bad = _corpus().build_hostile_series(src / "cut", slices=3)
    ds = pydicom.dcmread(bad.files[1])
    ds.PixelData = ds.PixelData[:20]
    ds.save_as(bad.files[1])
    cases = parse_cases(_csv(src, [("ct", "ct"), ("bad", "cut")]))
    with pytest.raises(InvalidInput, match=r"^case bad: ") as err:
        import_cases(db, ADMIN, study_name="Late", cases=cases)
    assert str(src / "cut") in str(err.value)
    _nothing_written(db, config.data_dir())
    assert list((config.data_dir() / "volumes").iterdir()) == []


def test_deleting_the_study_removes_its_volume_folder(db, tmp_path):
    src = tmp_path / "input"
    _corpus().build_hostile_series(src / "ct", slices=3)
    summary = import_cases(db, ADMIN, study_name="Gone",
                           cases=parse_cases(_csv(src, [("ct", "ct")])))
    (ct,) = _images(db)["ct"]
    store = config.data_dir() / ct.path
    assert store.is_dir()
    assert delete_staged_study(db, summary.study_id) == 1
    assert not store.exists()


def test_an_exported_volume_is_a_nifti_that_imports_again(db, tmp_path):
    import json

    from radconcord.backend.imaging.volume import open_volume
    from radconcord.backend.services.transfer.exports import export_study

    src = tmp_path / "input"
    _png(src / "pa.png", 30)
    _corpus().build_hostile_series(src / "ct", slices=5)
    import_cases(db, ADMIN, study_name="Out", cases=parse_cases(
        _csv(src, [("film", "pa.png"), ("ct", "ct")])))
    (ct,) = _images(db)["ct"]
    out = tmp_path / "export"
    export_study(db, ADMIN, study_name="Out", fmt="jsonl", out_dir=out)
    pairs = [json.loads(line) for line in (out / "pairs.jsonl").read_text().splitlines()]
    image = next(p for p in pairs if p["case_id"] == "ct")["images"][0]
    assert image["format"] == "volume" and image["path"].endswith(".nii.gz")
    assert image["sha256"] == ct.sha256
    manifest = json.loads((out / "manifest.json").read_text())
    assert image["path"] in manifest["files"]
    # The same values, spacing and orientation as stored, and no identifier.
    back = open_volume(out / image["path"], modality="CT")
    assert back.header.shape == (5, 12, 10)
    assert back.header.spacing == pytest.approx((2.5, 0.75, 0.5))
    stored = np.load(config.data_dir() / ct.path / "volume.npy")
    assert np.allclose(back.header.affine_array(), json.loads(
        (config.data_dir() / ct.path / "volume.json").read_text())["affine"])
    for k, values in back.iter_slices():
        np.testing.assert_array_equal(values, stored[k])
    assert _corpus().find_planted((out / image["path"]).read_bytes()) == []
    # The export imports again: the volume is a volume again, with the same values.
    import_cases(db, ADMIN, study_name="Again", cases=parse_cases(out / "pairs.jsonl"))
    with db.read() as s:
        again = s.scalars(select(Image).join(Case).join(Study).where(
            Study.name == "Again", Image.kind == "volume")).one()
        path = again.path
    np.testing.assert_array_equal(np.load(config.data_dir() / path / "volume.npy"), stored)


KILLED_VOLUME_IMPORT = """
import os, sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from radconcord.backend.services.transfer import imports
from radconcord.backend.types import Actor, CandidateInput, CaseInput, ImageInput
from radconcord.db.session import Database

db = Database(sys.argv[1], migrate=False)
real = imports.VolumeStore.write

def write(source, dest):
    real(source, dest)
    os._exit(9)  # killed with the volume stored, before its row is written

imports.VolumeStore.write = write
imports.import_cases(db, Actor.system(), study_name="Killed", cases=[CaseInput(
    "ct", "Ref.", [CandidateInput("Cand.", "g")], [ImageInput(path=Path(sys.argv[2]))])])
"""


def test_a_volume_import_killed_after_storing_is_removed_by_the_next_import(db, tmp_path):
    import os
    import subprocess

    series = _corpus().build_hostile_series(tmp_path / "input" / "ct", slices=3)
    root = config.data_dir()
    env = dict(os.environ, RADCONCORD_DATA_DIR=str(root))
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", KILLED_VOLUME_IMPORT, db.url,
                           str(series.folder), str(repo)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 9, proc.stderr
    stores = [p for p in (root / "volumes").iterdir() if not p.name.startswith(".")]
    assert len(stores) == 1 and (stores[0] / "volume.npy").is_file()
    # The next import removes the dead import's study and the store it had named.
    import_cases(db, ADMIN, study_name="Killed", cases=parse_cases(
        _csv(tmp_path / "input", [("ct", "ct")])))
    (ct,) = _images(db)["ct"]
    left = [p for p in (root / "volumes").iterdir() if not p.name.startswith(".")]
    assert left == [root / ct.path]


def test_a_killed_volume_imports_staging_folders_are_removed_later(db, tmp_path):
    """A kill -9 while a volume is de-identified or written leaves hidden staging folders
    under volumes/: the next import's cleanup removes those untouched for the stale time,
    never a fresh one (another import may be filling it)."""
    import datetime as dt
    import os

    from radconcord.backend import clock
    from radconcord.backend.services.transfer.imports import (
        STALE_IMPORT_AFTER,
        cleanup_stale_imports,
    )

    volumes = config.data_dir() / "volumes"
    old, fresh, store = volumes / ".deid.abc", volumes / ".0f3a.xyz", volumes / "0f3a"
    for folder in (old, fresh, store):
        (folder / "series").mkdir(parents=True)
        (folder / "series" / "0001.dcm").write_bytes(b"slice")
    stamp = (clock.utcnow() - STALE_IMPORT_AFTER - dt.timedelta(minutes=5)).timestamp()
    for folder in (old, store):
        os.utime(folder, (stamp, stamp))
    cleanup_stale_imports(db)
    assert not old.exists()
    # A fresh staging folder stays, and so does a store (no hidden name).
    assert fresh.exists() and store.exists()


# ------------------------------------------------------------------ serving one plane


@pytest.fixture
def ct_study(db, tmp_path, fast_password_hashing):
    src = tmp_path / "input"
    _png(src / "pa.png", 30)
    _corpus().build_hostile_series(src / "ct")
    import_cases(db, ADMIN, study_name="S", cases=parse_cases(
        _csv(src, [("film", "pa.png"), ("ct", "ct")])))
    actors = {}
    for name, role in (("r1", "rater"), ("r2", "rater"), ("boss", "admin")):
        auth.create_user(db, ADMIN, username=name, password=f"{name}-password", role=role)
        actors[name] = auth.authenticate(db, username=name, password=f"{name}-password")
    images = _images(db)
    with db.begin() as s:
        ct_case = s.scalar(select(Case.id).where(Case.external_id == "ct"))
        pair = s.scalar(select(Pair).where(Pair.case_id == ct_case))
        s.add(Assignment(study_id=pair.study_id, rater_id=actors["r1"].user_id,
                         pair_id=pair.id, order_index=0))
    return actors, images["ct"][0].id, images["film"][0].id


def test_volume_planes_carry_values_spacing_and_position(db, ct_study):
    actors, ct_id, film_id = ct_study
    r1 = actors["r1"]
    axial = image_service.volume_plane(db, r1, image_id=ct_id, plane="axial", index=3)
    h = axial.header
    assert (h["rows"], h["cols"], h["index"], h["count"]) == (12, 10, 3, 12)
    assert h["spacing"] == pytest.approx([0.75, 0.5])
    assert h["dtype"] == "int16" and h["values"] == "HU"
    # Slice 3 lies at z = -100 + 2.5 * 3 mm (the series' axial direction is +z).
    assert h["position_mm"] == pytest.approx(-92.5)
    values = np.frombuffer(axial.data, "<i2").reshape(12, 10)
    np.testing.assert_array_equal(values, _corpus().volume_pixels(3).astype(int) - 1024)
    presets = h["presets"]
    assert {k: (p["center"], p["width"]) for k, p in presets.items()
            if k in ("lung", "mediastinum", "bone")} == {
        "lung": (-600.0, 1500.0), "mediastinum": (40.0, 400.0), "bone": (400.0, 1800.0)}
    assert presets["header"]["center"] == 40.0 and presets["header"]["width"] == 400.0
    # A volume opens with its header window (bone stands out from soft tissue).
    assert (presets["auto"]["center"], presets["auto"]["width"]) == (40.0, 400.0)

    coronal = image_service.volume_plane(db, r1, image_id=ct_id, plane="coronal", index=4)
    hc = coronal.header
    # Slices x columns, head (the last slice) first; rows 2.5 mm apart, columns 0.5 mm.
    assert (hc["rows"], hc["cols"], hc["count"]) == (12, 10, 12)
    assert hc["spacing"] == pytest.approx([2.5, 0.5])
    cor = np.frombuffer(coronal.data, "<i2").reshape(12, 10)
    np.testing.assert_array_equal(cor[0], _corpus().volume_pixels(11)[4].astype(int) - 1024)
    sagittal = image_service.volume_plane(db, r1, image_id=ct_id, plane="sagittal")
    hs = sagittal.header
    assert (hs["rows"], hs["cols"], hs["index"], hs["count"]) == (12, 12, 5, 10)
    assert hs["spacing"] == pytest.approx([2.5, 0.75])

    with pytest.raises(InvalidInput, match="axial index 12 is outside 0..11"):
        image_service.volume_plane(db, r1, image_id=ct_id, plane="axial", index=12)
    with pytest.raises(InvalidInput, match="plane must be one of"):
        image_service.volume_plane(db, r1, image_id=ct_id, plane="oblique")
    # The film route refuses a volume and the plane route a film, each saying why.
    with pytest.raises(InvalidInput, match="is a volume"):
        image_service.viewer_pixels(db, actors["boss"], image_id=ct_id)
    with pytest.raises(InvalidInput, match="is a 2-D film"):
        image_service.volume_plane(db, actors["boss"], image_id=film_id)
    # Films are served as before.
    assert image_service.viewer_pixels(db, actors["boss"], image_id=film_id).header[
        "format"] == "png"


def test_a_rater_gets_only_the_volumes_of_their_pairs(db, ct_study):
    actors, ct_id, _ = ct_study
    with pytest.raises(PermissionDenied):
        image_service.volume_plane(db, actors["r2"], image_id=ct_id)
    # As for films: the study's adjudicator may see it too, and no one in a draft study.
    with db.begin() as s:
        study_id = s.scalar(select(Study.id).where(Study.name == "S"))
        s.add(StudyRole(study_id=study_id, user_id=actors["r2"].user_id, role="adjudicator"))
    assert image_service.volume_plane(db, actors["r2"], image_id=ct_id).header["count"] == 12
    with db.begin() as s:
        s.execute(update(Study).where(Study.id == study_id).values(status="draft"))
    for rater in ("r1", "r2"):
        with pytest.raises(PermissionDenied):
            image_service.volume_plane(db, actors[rater], image_id=ct_id)
    with db.begin() as s:
        s.execute(update(Study).where(Study.id == study_id).values(status="open"))
    pair_info = image_service.images_for_pair
    with db.read() as s:
        pair_id = s.scalar(select(Assignment.pair_id).where(
            Assignment.rater_id == actors["r1"].user_id))
    (info,) = pair_info(db, actors["r1"], pair_id=pair_id)
    assert (info.kind, info.format) == ("volume", "volume")
    assert info.meta["volume"]["shape"] == [12, 12, 10]
    assert "source_sha256" not in info.meta


def _get(client, db, actor, image_id, **params):
    client.cookies.clear()
    if actor is not None:
        ticket = sessions.create_session(db, actor)
        client.cookies.set(SESSION_COOKIE, sessions.exchange_ticket(db, ticket.ticket).token)
    return client.get(f"/_rc/api/images/{image_id}/plane", params=params)


def test_the_plane_route(db, ct_study):
    actors, ct_id, film_id = ct_study
    api.set_database(db)
    try:
        client = TestClient(Starlette(routes=images_api.routes("")))
        reply = _get(client, db, actors["r1"], ct_id, plane="sagittal", index=2)
        assert reply.status_code == 200, reply.text
        assert reply.headers["cache-control"] == "no-store"
        header, data = images_api.decode(reply.content)
        assert (header["plane"], header["index"], header["rows"], header["cols"]) == (
            "sagittal", 2, 12, 12)
        values = np.frombuffer(data, "<i2").reshape(12, 12)
        np.testing.assert_array_equal(values[-1],
                                      _corpus().volume_pixels(0)[:, 2].astype(int) - 1024)
        assert _get(client, db, actors["r2"], ct_id).status_code == 403
        assert _get(client, db, None, ct_id).status_code == 401
        bad = _get(client, db, actors["r1"], ct_id, index="x")
        assert bad.status_code == 400 and "index" in bad.json()["message"]
        assert _get(client, db, actors["boss"], film_id).status_code == 400
        assert _get(client, db, actors["boss"], 9999).status_code == 404
    finally:
        api.set_database(None)
