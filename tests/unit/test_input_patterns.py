"""Input patterns match the whole value (issue 21, probe item 8).

``re.match(r"^...$")`` accepts a trailing newline (``$`` matches before a final ``\\n``): a
grid cell ``"1s\\n"`` was stored as ``1s``. Every pattern that validates input now uses
``fullmatch``; these pin the ones outside the routes (the routes' own are in
``tests/services/test_route_probes.py``).
"""

from __future__ import annotations

import pytest

from radconcord.backend.datasets.radpref import _user_file_key
from radconcord.backend.errors import InvalidInput
from radconcord.backend.jobs.queue import check_device
from radconcord.backend.services.accounts import auth
from radconcord.backend.types import Actor


@pytest.mark.parametrize("name", ["rater\n", "rater\n\n", "ra ter", "\nrater", "rater\r"])
def test_a_username_with_a_newline_or_space_is_refused(db, fast_password_hashing, name):
    with pytest.raises(InvalidInput, match="username"):
        auth.create_user(db, Actor.system(), username=name, password="long-enough-pw-1",
                         role="rater")


def test_a_plain_username_is_still_taken(db, fast_password_hashing):
    made = auth.create_user(db, Actor.system(), username="rater.one_2", role="rater",
                            password="long-enough-pw-1")
    assert made.username == "rater.one_2"


@pytest.mark.parametrize("device", ["cpu\n", "cuda:0\n", "cuda:\n", "cuda:¹"])
def test_a_job_device_must_match_whole(device):
    with pytest.raises(InvalidInput, match="expected cpu, cuda or cuda:N"):
        check_device(device)


def test_radpref_user_files_sort_without_reading_non_ascii_digits_as_numbers():
    names = ["user_10.json", "user_2.json", "user_².json"]
    assert sorted(names, key=_user_file_key) == ["user_2.json", "user_10.json", "user_².json"]


def test_an_activity_client_id_must_match_whole(db):
    from radconcord.backend.services.annotation import activity

    for client_id in ("page-load-abc123\n", "page-load-abc123 "):
        with pytest.raises(InvalidInput, match="client_id: must be 8-64 letters"):
            activity.record_spans(db, Actor.system(), client_id=client_id, spans=[])
