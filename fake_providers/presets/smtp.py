"""``smtp``: a real SMTP server on loopback (aiosmtpd) with AUTH and a mailbox over HTTP.

Follows plain SMTP (RFC 5321) with SMTP AUTH (RFC 4954, mechanisms PLAIN and LOGIN):

- SMTP has no idempotency: ``Message-ID`` (RFC 5322) names a message but a server does
  not deduplicate on it, so a resend is a second mail. Every accepted DATA is logged once
  per recipient, ``fresh``, with ``idempotency_key`` = the Message-ID sent (or null),
  ``provider_message_id`` = the queue id of the final ``250 2.0.0 OK queued as <id>``.
- AUTH is required before MAIL (``530 5.7.0`` otherwise); a wrong username/password is
  ``535 5.7.8`` and logged ``unauthenticated``. The username is the credential id, the
  password its secret. Plain-text AUTH without TLS is allowed only because the server
  binds loopback (aiosmtpd's ``auth_require_tls=False``).
- The credential's scope globs are the recipients it may send to: ``RCPT TO`` outside them
  is ``550 5.7.1`` and logged ``refused``.
- Any RFC 5322 message is taken; nothing harness-specific is needed. Attribution is an
  ``Identify`` rule per recipient; by default destination = the envelope recipient
  (``RCPT TO``), run_id and delivery_id from the ``X-Run-Id`` and ``X-Delivery-Id``
  headers, recognizer from ``X-Recognizer`` or else the first ``ch-<12 hex>`` in the
  subject or text. A scenario may read them elsewhere (``header:Subject`` with a
  ``regex:``, ``envelope:from``, ...); a mail whose rule finds no run is still delivered
  and logged ``unattributed: ...``.
- The whole message is kept: the DATA bytes as received (the log's ``request``, shown raw
  on the browse page) and, for the mailbox, its text, its HTML part and every MIME part's
  type and file name.
- After a timeout the sender can only search the mailbox: ``GET /v1/mailbox?to=&q=``
  over HTTP (bearer = the same secret; only recipients in the caller's scope).
- Faults act on DATA: ``accept_then_drop`` records the mail and closes the connection
  before the final 250; ``timeout`` holds the final reply; ``status`` answers DATA with
  that code (use SMTP codes such as 421, 451, 554) and records nothing accepted; ``slow``
  delays before accepting. A rule's destination matches any recipient.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
import warnings
from collections.abc import Mapping
from email.message import EmailMessage
from typing import TYPE_CHECKING, Any, NoReturn

from werkzeug.wrappers import Request

from fake_providers._attempt import Attempt, find_recognizer, payload_hash
from fake_providers._body import body_hash
from fake_providers._credentials import Credential, find_credential
from fake_providers._errors import ProviderError
from fake_providers._holds import HOLD_POLL_S
from fake_providers._identify import Identify, Seen
from fake_providers._mail import mime_parts, parse_mail, text_of
from fake_providers._options import integer
from fake_providers._preset import Core, Preset, PresetSpec
from fake_providers._records import FaultRule
from fake_providers._reply import Reply, json_response
from fake_providers._routing import Route

if TYPE_CHECKING:
    from aiosmtpd.smtp import SMTP, AuthResult, Envelope, Session

READY_TIMEOUT_S = 10.0


def _enhanced(code: int) -> str:
    """An RFC 3463 enhanced status code matching the reply's class."""
    return f"{code // 100}.3.0" if code >= 400 else "2.0.0"


def _header(message: EmailMessage, name: str) -> str | None:
    """A header as a plain string (the email package returns str subclasses), or None."""
    value = message.get(name)
    return None if value is None else str(value)


class Smtp(Preset):
    """aiosmtpd on loopback; the HTTP side serves only the mailbox and the admin API."""

    name = "smtp"

    def __init__(self, core: Core, options: Mapping[str, Any]) -> None:
        super().__init__(core, options)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None

    def routes(self) -> list[Route]:
        return [Route("/v1/mailbox", ("GET",), self.mailbox)]

    # -- the SMTP listener ----------------------------------------------------------------

    def start(self, host: str) -> dict[str, Any]:
        from aiosmtpd.smtp import SMTP

        warnings.filterwarnings("ignore", message="Requiring AUTH while not requiring TLS")
        # aiosmtpd logs every connection and a deprecation note per AUTH at INFO/WARNING.
        logging.getLogger("mail.log").setLevel(logging.ERROR)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host.strip("[]"), int(self.options["smtp_port"])))
            sock.listen(64)
        except OSError as exc:
            sock.close()
            where = f"{host}:{self.options['smtp_port']}"
            raise ProviderError(f"cannot bind SMTP to {where}: {exc}") from None
        self.port = int(sock.getsockname()[1])
        loop = asyncio.new_event_loop()
        handler = _Handler(self)

        def factory() -> SMTP:
            return SMTP(
                handler,
                hostname="localhost",
                ident="crash-harness fake SMTP",
                authenticator=self._authenticate,
                auth_required=True,
                auth_require_tls=False,
                # internationalised mailboxes (RFC 6531), as real mail providers take them
                enable_SMTPUTF8=True,
                loop=loop,
            )

        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            server = loop.run_until_complete(loop.create_server(factory, sock=sock))
            ready.set()
            loop.run_forever()
            # Stopping: no new connections, and end the sessions still open (held replies
            # included) so nothing complains about tasks destroyed while pending.
            server.close()
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="smtp", daemon=True)
        self._thread.start()
        if not ready.wait(READY_TIMEOUT_S):
            raise ProviderError("the SMTP listener did not start")
        return {"smtp_port": self.port}

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        self._loop = self._thread = None

    def info(self) -> dict[str, Any]:
        return {"smtp_port": self.port}

    # -- SMTP hooks (run on the listener's event loop) -------------------------------------

    def _authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        from aiosmtpd.smtp import AuthResult, LoginPassword

        credential: Credential | None = None
        if isinstance(data, LoginPassword):
            login = data.login.decode(errors="replace")
            found = find_credential(self.core.credentials, data.password.decode(errors="replace"))
            if found is not None and found.credential_id == login:
                credential = found
        if credential is None:
            login_name = (
                data.login.decode(errors="replace") if isinstance(data, LoginPassword) else "?"
            )
            why = (
                f"AUTH {mechanism}: username {login_name!r} with that password matches"
                " no credential"
            )
            with self.core.lock:
                self.core.append(Attempt(), outcome="unauthenticated", status=535, reason=why)
            return AuthResult(success=False, handled=False)
        return AuthResult(success=True, auth_data=credential)

    def recipient(self, session: Session, envelope: Envelope, address: str) -> str:
        """RCPT TO: in scope, or 550 and a ``refused`` record."""
        credential = session.auth_data
        assert isinstance(credential, Credential)
        if not credential.allows(address):
            attempt = Attempt(credential_id=credential.credential_id, destination=address)
            globs = ", ".join(credential.scope)
            why = f"RCPT TO <{address}> is outside this credential's scope ({globs})"
            with self.core.lock:
                self.core.append(attempt, outcome="refused", status=550, reason=why)
            return f"550 5.7.1 <{address}>: recipient outside this credential's scope"
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"

    async def data(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        """DATA: faults, then one record per recipient, then the final reply."""
        core = self.core
        credential = session.auth_data
        assert isinstance(credential, Credential)
        raw = envelope.original_content or b""
        message = parse_mail(raw)
        text = raw.decode("utf-8", errors="replace")
        content = _mailbox_entry(envelope, message)
        attempts = [
            self._attempt(credential, message, raw, text, rcpt, envelope.mail_from or "")
            for rcpt in envelope.rcpt_tos
        ]
        with core.lock:
            fault = core.pick_fault([a.match_values() for a in attempts])
            if fault is not None and fault.fault == "status":
                return self._fail_by_status(attempts, fault)
            stage = "slow" if fault is not None and fault.fault == "slow" else "busy"
            token = core.enter_flight(attempts[0], stage)
        try:
            if fault is not None and fault.fault == "slow":
                assert fault.delay_s is not None
                await asyncio.sleep(fault.delay_s)
            queue_id = core.mint_id(attempts[0] if attempts else Attempt(), "", 6).upper()
            with core.lock:
                admitted_in = core.flight_epoch(token)
                if admitted_in != core.epoch:  # its epoch ended while it was held
                    return self._refuse_stale(attempts, admitted_in)
                self._accept(attempts, fault, queue_id, content)
                if fault is not None and fault.fault == "timeout":
                    core.flight_stage(token, "held")
                epoch = core.epoch
            if core.claim_hold():
                await self._hold_for_ever(server, token, epoch)
            if fault is not None and fault.fault == "timeout":
                assert fault.hold_s is not None
                await asyncio.sleep(fault.hold_s)
            if fault is not None and fault.drops:
                _cut(server)  # recorded; now cut the line before the final 250 ever leaves
                raise asyncio.CancelledError
            return f"250 2.0.0 OK queued as {queue_id}"
        finally:
            with core.lock:
                core.leave_flight(token)

    def _fail_by_status(self, attempts: list[Attempt], fault: FaultRule) -> str:
        """A ``status`` fault (caller holds the lock): DATA answered with its code, every
        recipient logged ``failed_by_fault``, nothing accepted."""
        assert fault.status is not None
        for attempt in attempts:
            self.core.append(
                attempt,
                outcome="failed_by_fault",
                status=fault.status,
                fault="status",
                reason=f"injected fault: DATA answered {fault.status}",
            )
        return f"{fault.status} {_enhanced(fault.status)} injected fault"

    def _refuse_stale(self, attempts: list[Attempt], admitted_in: int) -> str:
        """A mail held past the end of its epoch (caller holds the lock): refused with 451,
        every recipient logged ``stale_epoch`` in the epoch it arrived in."""
        why = f"epoch {admitted_in} ended while the message was held"
        for attempt in attempts:
            self.core.append(
                attempt,
                outcome="stale_epoch",
                status=451,
                epoch=admitted_in,
                reason=why,
            )
        return "451 4.3.0 epoch over; message refused"

    def _accept(
        self, attempts: list[Attempt], fault: FaultRule | None, queue_id: str, content: str
    ) -> None:
        """Log the mail ``fresh`` once per recipient (caller holds the lock)."""
        for attempt in attempts:
            self.core.append(
                attempt,
                outcome="fresh",
                status=250,
                fault=None if fault is None else fault.fault,
                provider_message_id=queue_id,
                content=content,
            )

    async def _hold_for_ever(self, server: SMTP, token: int, epoch: int) -> NoReturn:
        """A far-side crash point: the mail is logged; its 250 is never sent. The session
        ends when the sender dies (aiosmtpd cancels this coroutine on the lost connection)
        or the epoch is over (then the line is cut here)."""
        core = self.core
        with core.lock:
            core.leave_flight(token)
        while not core.hold_over(epoch):
            await asyncio.sleep(HOLD_POLL_S)
        _cut(server)
        raise asyncio.CancelledError

    def _attempt(
        self,
        credential: Credential,
        message: EmailMessage,
        raw: bytes,
        text: str,
        rcpt: str,
        mail_from: str,
    ) -> Attempt:
        """One recipient's record, attributed by the identification rule."""
        seen = Seen.make(
            headers=[(k, str(v)) for k, v in message.items()],
            raw=b"",
            text=f"{message.get('Subject', '')}\n{text_of(message)}",
            envelope={"rcpt": rcpt, "from": mail_from},
        )
        seen.json_error = "a mail has no JSON body"
        found = self.identify.read(seen)
        return Attempt(
            credential_id=credential.credential_id,
            destination=found.values["destination"] or rcpt,
            run_id=found.values["run"],
            delivery_id=found.values["delivery"],
            idempotency_key=_header(message, "Message-ID"),
            payload_hash=payload_hash(raw),
            body_hash=body_hash(text_of(message)),
            recognizer=found.values["recognizer"] or find_recognizer(text),
            reason=found.unattributed(("run",)),
            sent=raw,
        )

    # -- the mailbox over HTTP -------------------------------------------------------------

    def mailbox(self, request: Request) -> Reply:
        """GET /v1/mailbox?to=ADDR&q=TEXT: mails to recipients in the caller's scope,
        optionally to one address and containing TEXT (subject or body, any case)."""
        core = self.core
        credential = core.bearer_credential(request)
        if credential is None:
            return Reply(json_response(401, {"error": "unauthenticated"}))
        to = (request.args.get("to") or "").lower() or None
        query = (request.args.get("q") or "").lower()
        with core.lock:
            epoch = core.epoch
        out: list[dict[str, Any]] = []
        for found in core.log.messages(epoch=epoch):
            effect = found.effect
            rcpt = effect.destination or ""
            if not credential.allows(rcpt) or (to is not None and rcpt.lower() != to):
                continue
            stored = json.loads(found.content or "{}")
            haystack = f"{stored.get('subject', '')}\n{stored.get('text', '')}".lower()
            if query and query not in haystack:
                continue
            out.append(
                {
                    "id": effect.provider_message_id,
                    "message_id": effect.idempotency_key,
                    "to": rcpt,
                    "from": stored.get("from"),
                    "subject": stored.get("subject"),
                    "text": stored.get("text"),
                    "html": stored.get("html"),
                    "attachments": [
                        p["filename"] for p in stored.get("parts", []) if p.get("filename")
                    ],
                    "headers": stored.get("headers", {}),
                    "run_id": effect.run_id,
                    "delivery_id": effect.delivery_id,
                    "received_at": effect.received_at,
                }
            )
        return Reply(json_response(200, {"messages": out}))


def _mailbox_entry(envelope: Envelope, message: EmailMessage) -> str:
    """The mail as the mailbox keeps it (the log's ``content``): sender, subject, text,
    HTML part, every MIME part's type and file name, and the headers."""
    return json.dumps(
        {
            "from": envelope.mail_from,
            "subject": str(message.get("Subject", "")),
            "text": text_of(message),
            "html": text_of(message, ("html",)) or None,
            "parts": mime_parts(message),
            "headers": {k: str(v) for k, v in message.items()},
        },
        separators=(",", ":"),
    )


def _cut(server: SMTP) -> None:
    """Cut the SMTP connection with no reply."""
    transport = server.transport
    if isinstance(transport, asyncio.Transport):
        transport.abort()
    elif transport is not None:
        transport.close()


class _Handler:
    """aiosmtpd's handler object: forwards the hooks to the preset."""

    def __init__(self, preset: Smtp) -> None:
        self._preset = preset

    async def handle_RCPT(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        return self._preset.recipient(session, envelope, address)

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        return await self._preset.data(server, session, envelope)


def _build(core: Core, options: Mapping[str, Any]) -> Smtp:
    return Smtp(core, options)


SPEC = PresetSpec(
    name="smtp",
    models="plain SMTP server with AUTH on loopback (no dedupe; mailbox search over HTTP)",
    options=(
        integer(
            "smtp_port", default=0, help="SMTP port (0 picks a free one)", minimum=0, maximum=65535
        ),
    ),
    factory=_build,
    identify=Identify.of(
        run=["header:X-Run-Id"],
        destination=["envelope:rcpt"],
        delivery=["header:X-Delivery-Id"],
        recognizer=["header:X-Recognizer", r"regex:ch-[0-9a-f]{12}"],
    ),
)
