"""``GET _rc/api/images/<id>/pixels`` through Starlette: cookie auth and the images service's
access rules, the resolution asked for (rounded up, capped, never upscaled), and values and
window metadata that give the backend's windowing exactly (a MONOCHROME1 15-bit CR from
pydicom-data, the demo study's RG1_UNCR.dcm, and vlut_04.dcm with a VOI LUT table)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydicom.data import get_testdata_file
from sqlalchemy import select
from starlette.applications import Starlette
from starlette.testclient import TestClient

from radconcord.backend import config
from radconcord.backend.imaging.load import VoiLut, load_image
from radconcord.backend.imaging.window import Window, display_values, resolve_window
from radconcord.backend.services.accounts import auth, sessions
from radconcord.backend.services.annotation import images as image_service
from radconcord.backend.services.transfer.imports import import_cases
from radconcord.backend.types import Actor, CandidateInput, CaseInput, ImageInput
from radconcord.db.models import Assignment, Case, Image, Pair
from radconcord.webapp import api
from radconcord.webapp.api import images as images_api
from radconcord.webapp.state import SESSION_COOKIE

SYSTEM = Actor.system()


def _login(db, actor) -> str:
    ticket = sessions.create_session(db, actor)
    return sessions.exchange_ticket(db, ticket.ticket).token


def _case(case_id: str, file: str, view: str) -> CaseInput:
    return CaseInput(case_id=case_id, reference="No effusion.",
                     candidates=[CandidateInput(text="Small effusion.", source="gen-a")],
                     images=[ImageInput(path=Path(get_testdata_file(file)), view=view)])


@pytest.fixture
def env(db, fast_password_hashing):
    import_cases(db, SYSTEM, study_name="S", cases=[
        _case("cr", "RG1_UNCR.dcm", "PA"), _case("lut", "vlut_04.dcm", "PA")])
    image_service.clear_caches()
    actors = {}
    for name, role in (("r1", "rater"), ("r2", "rater"), ("boss", "admin")):
        auth.create_user(db, SYSTEM, username=name, password=f"{name}-password", role=role)
        actors[name] = auth.authenticate(db, username=name, password=f"{name}-password")
    with db.begin() as s:
        ids = {c.external_id: c.id for c in s.scalars(select(Case))}
        images = {case: s.scalar(select(Image).where(Image.case_id == cid))
                  for case, cid in ids.items()}
        paths = {case: config.data_dir() / im.path for case, im in images.items()}
        image_ids = {case: im.id for case, im in images.items()}
        pair = s.scalar(select(Pair).where(Pair.case_id == ids["cr"]))
        # r1 rates the CR case only; r2 rates nothing.
        s.add(Assignment(study_id=pair.study_id, rater_id=actors["r1"].user_id,
                         pair_id=pair.id, order_index=0))
    api.set_database(db)
    client = TestClient(Starlette(routes=images_api.routes("")))
    yield db, actors, client, image_ids, paths
    api.set_database(None)
    image_service.clear_caches()


def _get(client, db, actor, image_id, **params):
    client.cookies.clear()
    if actor is not None:
        client.cookies.set(SESSION_COOKIE, _login(db, actor))
    return client.get(f"/_rc/api/images/{image_id}/pixels", params=params)


def _values(reply) -> tuple[dict, np.ndarray]:
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"] == "application/octet-stream"
    assert reply.headers["cache-control"] == "no-store"
    header, data = images_api.decode(reply.content)
    assert (len(reply.content) - len(data)) % 4 == 0  # values start 4-byte aligned
    values = np.frombuffer(data, dtype={"uint16": "<u2", "int16": "<i2",
                                        "float32": "<f4"}[header["dtype"]])
    return header, values.reshape(header["rows"], header["cols"])


def test_a_rater_gets_only_the_images_of_their_pairs(env):
    db, actors, client, ids, _ = env
    assert _get(client, db, actors["r1"], ids["cr"], max_side=256).status_code == 200
    refused = _get(client, db, actors["r1"], ids["lut"], max_side=256)
    assert refused.status_code == 403
    assert refused.json()["message"] == "this image belongs to no pair assigned to you"
    for image_id in (ids["cr"], ids["lut"], 9999):
        assert _get(client, db, actors["r2"], image_id).status_code == 403
    # No cookie, or a dead one: log in again.
    assert _get(client, db, None, ids["cr"]).status_code == 401
    client.cookies.set(SESSION_COOKIE, "not-a-session")
    assert client.get(f"/_rc/api/images/{ids['cr']}/pixels").status_code == 401
    # The admin sees every image; a missing one is a 404 for them.
    assert _get(client, db, actors["boss"], ids["lut"]).status_code == 200
    assert _get(client, db, actors["boss"], 9999).status_code == 404


@pytest.mark.parametrize("bad", ["5", "abc", "100000", "-3"])
def test_a_bad_max_side_is_refused_with_its_value(env, bad):
    db, actors, client, ids, _ = env
    reply = _get(client, db, actors["r1"], ids["cr"], max_side=bad)
    assert reply.status_code == 400
    assert "max_side" in reply.json()["message"] and bad in reply.json()["message"]


def test_resolution_follows_max_side_rounded_up_and_never_upscaled(env):
    db, actors, client, ids, paths = env
    full = load_image(paths["cr"])
    assert (full.height, full.width) == (1955, 1841)
    header, values = _values(_get(client, db, actors["r1"], ids["cr"], max_side=500))
    # 500 device pixels asked: 512 sent (the next multiple of 128), aspect kept.
    assert max(header["rows"], header["cols"]) == 512 and values.shape == (512, 482)
    assert (header["full_rows"], header["full_cols"]) == (1955, 1841)
    # Area averages of the stored values: inside the film's range, close to its mean.
    assert full.pixels.min() <= values.min() and values.max() <= full.pixels.max()
    assert abs(float(values.mean()) - float(full.pixels.mean())) < 0.01 * float(
        full.pixels.mean())
    for asked in (None, 1955, 4000):
        params = {} if asked is None else {"max_side": asked}
        header, values = _values(_get(client, db, actors["r1"], ids["cr"], **params))
        assert values.shape == (1955, 1841)


def test_full_resolution_values_window_exactly_as_the_backend(env):
    """MONOCHROME1 15-bit CR: the values are the modality values bit for bit, and the header
    (windows, function, presets, MONOCHROME1 flag) gives the backend's display values."""
    db, actors, client, ids, paths = env
    image = load_image(paths["cr"])
    header, values = _values(_get(client, db, actors["r1"], ids["cr"]))
    assert header["dtype"] == "uint16"
    np.testing.assert_array_equal(values.astype(np.float32), image.pixels)
    assert header["monochrome1"] is True and header["photometric"] == "MONOCHROME1"
    assert header["windows"] == [[15000.0, 30000.0]] and header["voi_function"] == "LINEAR"
    assert header["bits_stored"] == 15 and header["manual_step"] == 128.0
    assert (header["pixel_min"], header["pixel_max"]) == (float(image.pixels.min()),
                                                          float(image.pixels.max()))
    for preset in ("header", "lung", "bone"):
        sent = header["presets"][preset]
        window = Window(sent["center"], sent["width"], sent["function"])
        want = display_values(image, resolve_window(image, preset))
        got = display_values(image, window, pixels=values.astype(np.float32))
        np.testing.assert_array_equal(got, want)
    # MONOCHROME1: the lowest stored value is the brightest.
    shown = display_values(image, resolve_window(image, "header"))
    assert shown.flat[np.argmin(image.pixels)] > shown.flat[np.argmax(image.pixels)]


def test_a_voi_lut_table_is_sent_whole(env):
    db, actors, client, ids, paths = env
    image = load_image(paths["lut"])
    assert image.voi_lut is not None
    header, values = _values(_get(client, db, actors["boss"], ids["lut"]))
    sent = header["voi_lut"]
    assert header["presets"]["header"]["lut"] is True
    lut = VoiLut(first_mapped=sent["first_mapped"], bits=sent["bits"],
                 table=np.asarray(sent["table"], dtype=np.float32))
    want = display_values(image, resolve_window(image, "header"))
    got = display_values(image, Window(None, None, "LUT", lut=lut),
                         pixels=values.astype(np.float32))
    np.testing.assert_array_equal(got, want)
    assert header["monochrome1"] is False and header["manual_step"] == 1.0


def test_the_route_is_mounted_with_the_other_api_routes():
    paths = {route.path for route in api.routes("")}
    assert "/_rc/api/images/{image_id:int}/pixels" in paths
    assert images_api.routes("radconcord")[0].path == (
        "/radconcord/_rc/api/images/{image_id:int}/pixels")


def test_an_undecodable_file_is_a_clear_error_without_the_server_path(env):
    db, actors, client, ids, paths = env
    paths["lut"].write_bytes(b"not an image")  # the stored copy is damaged on disk
    reply = _get(client, db, actors["boss"], ids["lut"])
    assert reply.status_code == 400
    assert reply.json()["message"] == f"image {ids['lut']} cannot be decoded (see the server log)"
    assert str(paths["lut"].parent) not in reply.text
