"""When two destination strings are one recipient: a documented normal form per surface.

A roster is live data typed by people and imported from other systems, so one person can
appear as ``alice@example.com`` today and ``Alice@Example.com `` tomorrow. A checker that
groups effects by the exact string would count a message to each spelling as two different
recipients, and miss the duplicate the person actually received. Every checker that groups
effects or ledger rows by destination therefore compares ``normal_form(dest, surface)``,
where the surface is the provider preset the case ran against (``Policy.surface``).

The forms, and why:

- **Every surface**: Unicode NFC, then surrounding whitespace trimmed. NFC, not NFKC:
  NFC only merges canonically equivalent spellings (a precomposed ``é`` and ``e`` + a
  combining acute render and mean the same), which is the form internationalised mail
  (RFC 6530/6532) and the IETF's normalisation guidance prefer; NFKC also folds
  *compatibility* characters (ligatures, fullwidth and superscript forms), which can be part
  of a distinct name, so it could merge two recipients and fail a correct run as a
  duplicate. Whitespace around an identifier is never part of it on any of these surfaces
  (an e-mail address, a channel id, a queue name or a URL cannot end in a space), so it is
  trimmed everywhere; whitespace *inside* is kept.
- **E-mail (``smtp``)**: also lower-cased, local part and domain alike (Unicode's simple
  lower-case mapping, ``str.lower``; not full case folding, which also turns ``ß`` into
  ``ss`` and the ligature ``ﬁ`` into ``fi`` and could merge two mailboxes). The domain is
  case-insensitive (DNS). RFC 5321 section 2.4 lets the local part be case-sensitive in
  principle, but says hosts should avoid relying on that, and real mailbox providers (Gmail,
  Outlook, Yahoo, ...) fold it; the fake SMTP server's own mailbox search
  (``GET /v1/mailbox?to=``) matches the address case-insensitively too. Treating
  ``Alice@Example.com`` and ``alice@example.com`` as one person is what the recipient sees.
- **Opaque ids (``payments``, ``orders``, ``queue-fifo``, ``chat``, ``webhook``)**: case
  is kept. The fakes compare destinations exactly (the effect log, the chat thread of a
  channel, the queue a message-deduplication id is scoped to, the webhook endpoint an id is
  scoped to, the credential scope globs matched with ``fnmatchcase``), as the real services
  do (Slack channel and user ids, SQS queue names and URL paths are case-sensitive), so
  ``C0123abc`` and ``C0123ABC`` are two destinations there. Only NFC and trimming apply.

An unknown surface (a preset this module does not know, or none) gets the opaque-id form:
it folds the least, so it never invents a duplicate; it may miss a case-only one.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from typing import Final

#: surfaces whose destinations are e-mail addresses (lower-cased)
EMAIL_SURFACES: Final = frozenset({"smtp"})
#: surfaces whose destinations are ids the provider compares case-sensitively
OPAQUE_SURFACES: Final = frozenset({"payments", "orders", "queue-fifo", "chat", "webhook"})
#: the Unicode normal form every surface compares in
UNICODE_FORM: Final = "NFC"


def rule_for(surface: str | None) -> str:
    """``"email"`` or ``"opaque"``: which normal form a surface's destinations take."""
    return "email" if surface in EMAIL_SURFACES else "opaque"


def normal_form(destination: str, surface: str | None) -> str:
    """The spelling two destinations share exactly when they are one recipient on ``surface``."""
    text = unicodedata.normalize(UNICODE_FORM, destination).strip()
    if rule_for(surface) == "email":
        # lower(), not casefold(): full case folding also turns a sharp s into "ss" and a
        # ligature into letters, which can be a different mailbox.
        return unicodedata.normalize(UNICODE_FORM, text.lower())
    return text


def same_recipient(a: str, b: str, surface: str | None) -> bool:
    return normal_form(a, surface) == normal_form(b, surface)


def normal_set(destinations: Iterable[str], surface: str | None) -> frozenset[str]:
    """The recipients a list of destinations names (two spellings of one count once)."""
    return frozenset(normal_form(d, surface) for d in destinations)


def distinct(destinations: Iterable[str], surface: str | None) -> list[str]:
    """One spelling per recipient, the first in sorted order (a roster that lists a person
    twice still means one message to them)."""
    seen: set[str] = set()
    kept: list[str] = []
    for dest in sorted(destinations):
        key = normal_form(dest, surface)
        if key not in seen:
            seen.add(key)
            kept.append(dest)
    return kept
