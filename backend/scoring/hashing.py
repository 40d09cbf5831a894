"""The pair input hash: the score cache's key for a pair's content.

This is the single definition; importers, the runner and the worker all call it so that a
pair scored from a CLI file and the same pair inside a study share cached scores.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

HASH_VERSION = "v1"


def input_hash(reference: str, candidate: str, image_sha256s: Sequence[str] = ()) -> str:
    """Return the hex sha256 identifying a pair's inputs.

    The digest covers ``"v1\\x00" + reference + "\\x00" + candidate + "\\x00" +
    ",".join(image_sha256s)``, UTF-8 encoded. Texts are hashed exactly as given (no
    normalisation), because metrics see them exactly as given.

    Args:
        reference: Reference (ground-truth) report text.
        candidate: Candidate (generated) report text.
        image_sha256s: Hex sha256 digests of the pair's image files, in the pair's order.

    Returns:
        64 lowercase hex characters.
    """
    if isinstance(image_sha256s, str):
        # A bare string would be joined character by character: a silent, wrong hash.
        raise TypeError("image_sha256s must be a sequence of hex digests, not str")
    payload = "\x00".join((HASH_VERSION, reference, candidate, ",".join(image_sha256s)))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()

