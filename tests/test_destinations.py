"""The destination normal forms, one per surface (``harness.destinations``)."""

from __future__ import annotations

import unicodedata

import pytest

from fake_providers._presets import PRESETS
from harness.destinations import EMAIL_SURFACES, OPAQUE_SURFACES, distinct, normal_form

ZOE = unicodedata.normalize("NFC", "zoë@example.com")


def test_email_folds_case_whitespace_and_unicode_form() -> None:
    assert normal_form("Alice@Example.com ", "smtp") == "alice@example.com"
    assert normal_form(unicodedata.normalize("NFD", " Zoë@Example.COM"), "smtp") == ZOE


@pytest.mark.parametrize("surface", sorted(OPAQUE_SURFACES))
def test_opaque_ids_keep_case_but_fold_whitespace_and_unicode_form(surface: str) -> None:
    assert normal_form("C0123abc", surface) != normal_form("C0123ABC", surface)
    assert normal_form("\tC0123abc ", surface) == "C0123abc"
    assert normal_form(unicodedata.normalize("NFD", ZOE), surface) == ZOE


def test_nfkc_compatibility_characters_are_not_folded() -> None:
    """NFC, not NFKC: a ligature or fullwidth letter may be part of a distinct name."""
    assert normal_form("\ufb01n@example.com", "smtp") != normal_form("fin@example.com", "smtp")
    assert normal_form("stra\u00dfe@example.com", "smtp") != "strasse@example.com"


def test_every_fake_preset_has_a_documented_form() -> None:
    assert set(PRESETS) == EMAIL_SURFACES | OPAQUE_SURFACES


def test_distinct_keeps_one_spelling_per_recipient() -> None:
    assert distinct(["alice@example.com", "Alice@Example.com", "bob@example.com"], "smtp") == [
        "Alice@Example.com",
        "bob@example.com",
    ]
    assert distinct(["C1", "c1", " C1"], "chat") == [" C1", "c1"]
