"""The demo CT study (issue 25): a synthetic chest CT phantom, drawn deterministically,
imported through the real import path as a second demo study beside the chest demo.

The chest demo ("Demo study", 8 cases x 3 generators) is unchanged; the CT study has one case
whose image is a volume (de-identified, stored under ``volumes/``, served plane by plane),
three candidates, and both demo raters assigned to every pair. Seeding again adds nothing.
"""

from __future__ import annotations

import time
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from sqlalchemy import select

from radconcord.backend import config
from radconcord.backend.datasets import demo_ct
from radconcord.backend.services.accounts import auth, seed
from radconcord.backend.services.annotation import images as image_service
from radconcord.backend.services.annotation import rating
from radconcord.db.models import Image, Study


def test_the_phantom_is_deterministic_anisotropic_and_has_its_anatomy(tmp_path):
    vol = demo_ct.phantom_volume()
    assert vol.shape == demo_ct.SHAPE == (40, 96, 96) and vol.dtype == np.int16
    np.testing.assert_array_equal(vol, demo_ct.phantom_volume())
    assert set(np.unique(vol)) == {demo_ct.AIR, demo_ct.SOFT, demo_ct.LUNG, demo_ct.BONE}
    mid = vol[20]
    assert mid[48, 2] == demo_ct.AIR  # outside the body
    assert mid[47, 29] == demo_ct.LUNG and mid[47, 67] == demo_ct.LUNG  # both lungs
    assert mid[72, 48] == demo_ct.BONE  # the vertebra
    assert mid[42, 50] == demo_ct.SOFT  # the heart between the lungs
    # The nodule: soft tissue inside the right lung (image left), in an upper slice only.
    k, r, c = demo_ct.NODULE_CENTRE
    assert vol[k, r, c] == demo_ct.SOFT and c < 48 and k > 20
    assert vol[k, r, c - 5] == demo_ct.LUNG
    assert vol[10, r, c] == demo_ct.LUNG  # not in a lower slice
    # Ribs on every other slice.
    assert (vol[28] == demo_ct.BONE).sum() > (vol[29] == demo_ct.BONE).sum()

    path = demo_ct.write_phantom(tmp_path / "p.nii.gz")
    img = nib.load(path)
    assert img.shape == (96, 96, 40)
    assert tuple(float(z) for z in img.header.get_zooms()) == pytest.approx((0.9, 0.9, 2.5))
    np.testing.assert_array_equal(np.asarray(img.dataobj).transpose(2, 1, 0), vol)


def test_the_candidates_carry_known_errors_and_the_reference_the_nodule():
    assert "right upper lobe" in demo_ct.REFERENCE and "nodule" in demo_ct.REFERENCE
    errors = demo_ct.ct_demo_errors()
    assert list(errors) == ["gen-A", "gen-B", "gen-C"]
    assert errors["gen-A"] == []
    assert [e["category"] for e in errors["gen-B"]] == [2]  # the nodule is missed
    assert [e["category"] for e in errors["gen-C"]] == [3, 1, 5]
    assert "nodule" not in demo_ct.CANDIDATES["gen-B"][0]


def test_seeding_adds_the_ct_study_beside_the_chest_demo(db, fast_password_hashing):
    chest = seed.seed_demo(db)
    start = time.perf_counter()
    first = seed.seed_ct_demo(db)
    elapsed = time.perf_counter() - start
    assert elapsed < 10  # small: a first start stays fast (about 0.2 s here)
    assert (first.study_name, first.study_created, first.n_pairs,
            first.assignments_created) == (seed.DEMO_CT_STUDY, True, 3, 6)
    again = seed.seed_ct_demo(db)
    assert (again.study_created, again.assignments_created, again.n_pairs) == (False, 0, 3)
    # The chest demo is as before.
    assert chest.n_pairs == 24

    r1 = auth.authenticate(db, username="rater1", password="radconcord-rater1")
    r2 = auth.authenticate(db, username="rater2", password="radconcord-rater2")
    for rater in (r1, r2):
        listed = rating.rater_studies(db, rater)
        # The chest demo first: where a rater's screen opens is unchanged.
        assert [(s.name, s.total) for s in listed] == [(seed.DEMO_STUDY, 24),
                                                       (seed.DEMO_CT_STUDY, 3)]
    queue = rating.rater_queue(db, r1, study_name=seed.DEMO_CT_STUDY)
    views = [rating.get_pair(db, r1, opaque_id=q.opaque_id) for q in queue]
    assert {v.reference_text for v in views} == {demo_ct.REFERENCE}
    assert {v.candidate_text for v in views} == {t for t, _ in demo_ct.CANDIDATES.values()}
    assert all(len(v.images) == 1 for v in views)

    with db.read() as s:
        (image,) = s.scalars(select(Image).where(Image.kind == "volume")).all()
        provenance = s.scalar(select(Study.provenance)
                              .where(Study.name == seed.DEMO_CT_STUDY))
        s.expunge(image)
    assert image.path.startswith("volumes/")
    assert image.meta["volume"]["shape"] == [40, 96, 96]
    assert image.meta["volume"]["spacing"] == pytest.approx([2.5, 0.9, 0.9])
    assert image.meta["volume"]["source"] == "nifti"
    assert image.meta["hounsfield"] is True and image.meta["modality"] == "CT"
    assert provenance["synthetic"] is True
    assert provenance["written_errors"] == demo_ct.ct_demo_errors()
    assert "SYNTHETIC" in provenance["notes"][demo_ct.CASE_ID]
    # Stored as HU values, voxel for voxel; the staging folder of the phantom is gone.
    stored = np.load(config.data_dir() / image.path / "volume.npy")
    np.testing.assert_array_equal(stored, demo_ct.phantom_volume())
    assert not list(Path(config.data_dir()).rglob(demo_ct.FILE_NAME))

    # A demo rater gets planes of it, as the viewer asks for them.
    image_service.clear_caches()
    try:
        plane = image_service.volume_plane(db, r1, image_id=image.id, plane="axial",
                                           index=demo_ct.NODULE_CENTRE[0])
        assert (plane.header["index"], plane.header["count"]) == (29, 40)
        values = np.frombuffer(plane.data, "<i2").reshape(96, 96)
        np.testing.assert_array_equal(values, demo_ct.phantom_slice(29))
        coronal = image_service.volume_plane(db, r1, image_id=image.id, plane="coronal")
        assert coronal.header["count"] == 96
    finally:
        image_service.clear_caches()
