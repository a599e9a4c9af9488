"""Reading a mail as received: its parts, its text and HTML, for the mailbox and the browse page.

One module so the SMTP preset (which stores a summary with each record) and the browse page
(which renders the raw bytes the log kept) read a message the same way.
"""

from __future__ import annotations

import contextlib
import email
import email.policy
from email.message import EmailMessage
from typing import Any


def parse_mail(raw: bytes) -> EmailMessage:
    """The message as the email package's modern API sees it (defects are noted, not raised)."""
    message = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    return message


def text_of(message: EmailMessage, preference: tuple[str, ...] = ("plain", "html")) -> str:
    """The body part a reader would see first (by ``preference``), decoded; "" if none."""
    body = message.get_body(preferencelist=preference)
    if body is None:
        return ""
    with contextlib.suppress(LookupError, ValueError):
        return str(body.get_content())
    return ""


def mime_parts(message: EmailMessage) -> list[dict[str, Any]]:
    """Every leaf MIME part: content type, disposition, file name and decoded size.

    What a reader needs to see what was sent besides the text (an HTML alternative, the
    attachments); the bytes themselves stay in the raw message the log keeps.
    """
    parts: list[dict[str, Any]] = []
    for part in message.walk():
        if part.is_multipart():
            continue
        payload = part.get_payload(decode=True)
        parts.append(
            {
                "content_type": part.get_content_type(),
                "disposition": part.get_content_disposition(),
                "filename": part.get_filename(),
                "size": len(payload) if isinstance(payload, bytes) else 0,
            }
        )
    return parts
