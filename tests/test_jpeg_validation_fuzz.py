"""A kept JPEG is checked at 1/8 scale: that check must accept and reject exactly the files
the full-size decode does. A seeded corpus of 300 corruptions (benchmarks/jpeg_fuzz.py
runs thousands, on real photos too) guards the property."""

from __future__ import annotations

import collections
import hashlib

import pytest
from PIL import ImageFile

from tests.helpers.jpeg_corruptions import KINDS, cases, generated_jpegs, verdict


@pytest.fixture(scope="module")
def corpus():
    return list(cases(generated_jpegs(seed=4, height=200, width=152), 300, seed=11))


def test_the_corpus_holds_accepted_and_rejected_files_of_every_kind(corpus):
    """Else identical verdicts would prove little: every kind is there, and the full-size
    check both accepts and rejects (for more than one reason)."""
    outcomes = collections.Counter(
        (case.kind, verdict(case.data, scaled_check=False)[:2]) for case in corpus
    )
    assert {kind for kind, _ in outcomes} == set(KINDS)
    labels = {outcome for _, outcome in outcomes}
    assert ("reject", "image_truncated") in labels
    assert ("reject", "image_unreadable") in labels
    assert any(label[0] == "accept" for label in labels)


@pytest.mark.parametrize("truncated_ok", [False, True])
def test_scaled_and_full_decodes_give_the_same_verdict(corpus, truncated_ok, monkeypatch):
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", truncated_ok)
    differing = [
        (case.photo, case.description, full, scaled)
        for case in corpus
        if (full := verdict(case.data, scaled_check=False))
        != (scaled := verdict(case.data, scaled_check=True))
    ]
    assert differing == []


def test_the_decode_that_also_makes_the_thumbnail_gives_the_same_verdict(corpus):
    """With the duplicate search on, a kept JPEG is drafted to the smallest scale of at least
    64 px (1/2 for these 200x152 photos, not 1/8): the verdict must not move either."""
    differing = [
        (case.photo, case.description, full, thumbed)
        for case in corpus
        if (full := verdict(case.data, scaled_check=False))
        != (thumbed := verdict(case.data, scaled_check=True, thumbnail=True))
    ]
    assert differing == []


def test_an_intact_jpeg_is_kept_byte_for_byte_at_its_full_size():
    for data in generated_jpegs(seed=5, height=121, width=83).values():
        full, scaled = (verdict(data, scaled_check=flag) for flag in (False, True))
        assert scaled == full
        source = hashlib.sha256(data).hexdigest()[:16]
        assert scaled == ("accept", 121, 83, False, source)
