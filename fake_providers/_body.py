"""A message body in its normal form, and the hash the effect log keeps of it.

The log's ``payload_hash`` covers the whole request (JSON keys, headers, MIME framing), so it
can never equal a ledger's hash of the text it meant to send. ``body_hash`` is comparable: the
sha256 of the message text a reader sees, in one normal form on every surface:

- the text is what the preset reads as the message (``MessagePreset.text_of``: the first of
  its ``text_fields`` in a JSON or form body, e.g. ``body``, ``text``, ``description``,
  ``MessageBody``; on SMTP the first ``text/plain`` part, decoded);
- Unicode NFC; line ends ``\\r\\n`` and ``\\r`` become ``\\n``; trailing spaces and tabs of
  each line are dropped, and so are blank lines at the start and the end (what MIME
  encoders and chat renderers add or trim).

A ledger hashes the body it recorded for a delivery with the same function
(``harness.snapshot.body_hash``) for the two to be compared.
"""

from __future__ import annotations

import hashlib
import unicodedata


def body_normal_form(text: str) -> str:
    """``text`` as the comparison sees it (see the module docstring)."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    return "\n".join(line.rstrip(" \t") for line in text.split("\n")).strip("\n")


def body_hash(text: str) -> str:
    """sha256 (hex) of ``text`` in its normal form."""
    return hashlib.sha256(body_normal_form(text).encode()).hexdigest()
