"""Which delivery a request is: rules that read run, destination and the user's own id.

A real worker sends its provider's wire format (a Standard Webhooks POST, a Stripe form, a
Slack ``chat.postMessage``, an e-mail) and nothing that exists only for a test harness. So
the fake never *requires* harness fields: what identifies the intended delivery is read
from each request by an ``Identify`` rule, one list of *sources* per field, tried in order:

===================== ============================================================
source                reads
===================== ============================================================
``json:/a/0/b``       a JSON pointer (RFC 6901) into a JSON body
``form:name``         a form field (``application/x-www-form-urlencoded`` body)
``header:Name``       an HTTP header, or a mail header for ``smtp``
``query:name``        a URL query parameter
``path:/t/{name}``    the URL path matched against a template (``{x}``: one segment,
                      ``{x:path}``: the rest); the value is the variable named like the
                      field, else the first one
``envelope:rcpt``     the SMTP envelope recipient (``envelope:from``: MAIL FROM)
``regex:PATTERN``     a regular expression over the rendered text (group 1 if it has one)
``literal:VALUE``     a fixed value
===================== ============================================================

Fields: ``run`` (the run id), ``destination`` (who receives it), ``delivery`` (the user's
own id for the delivery: an order id, a job id) and ``recognizer`` (a canary in the text).
Every preset has default rules that read today's harness message shape first (``destination``,
``run_id``, ``delivery_id`` fields, ``X-Run-Id`` headers, ``[ref ch-...]``) and then the
real provider's own fields; a scenario or ``providers serve --identify FIELD=SOURCE``
replaces the sources of the fields it names. A request whose rule finds nothing is still
processed as the real provider would, and its record says so (``unattributed: ...``): the
harness shows it instead of silently counting it against nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Final

from fake_providers._errors import ProviderError

FIELDS: Final = ("run", "destination", "delivery", "recognizer")
"""The fields an ``Identify`` rule reads, in the order they are reported."""

KINDS: Final = ("json", "form", "header", "query", "path", "envelope", "regex", "literal")

_VAR: Final = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(:path)?\}")


@dataclass(frozen=True)
class Source:
    """One place a value may be read from: ``kind:arg`` (see the module docstring)."""

    kind: str
    arg: str
    _pattern: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def parse(cls, text: str) -> Source:
        """Parse ``kind:arg``; a bad spec is a ``ProviderError`` naming what was expected."""
        if not isinstance(text, str):
            raise ProviderError(f"identify source must be a string like 'json:/id', got {text!r}")
        kind, sep, arg = text.partition(":")
        kind = kind.strip().lower()
        if not sep or kind not in KINDS:
            raise ProviderError(
                f"identify source {text!r}: expected KIND:ARG with KIND one of {', '.join(KINDS)}"
            )
        if kind != "literal" and not arg:
            raise ProviderError(f"identify source {text!r}: {kind}: needs an argument")
        pattern: re.Pattern[str] | None = None
        if kind == "json" and arg and not arg.startswith("/"):
            raise ProviderError(f"identify source {text!r}: a JSON pointer starts with '/'")
        if kind == "envelope" and arg not in ("rcpt", "from"):
            raise ProviderError(f"identify source {text!r}: expected envelope:rcpt or :from")
        if kind == "regex":
            pattern = _compile(arg, text)
        if kind == "path":
            if not arg.startswith("/") or not _VAR.search(arg):
                raise ProviderError(
                    f"identify source {text!r}: expected a path template such as"
                    " /hooks/{destination}"
                )
            pattern = _template(arg, text)
        return cls(kind, arg, pattern)

    def __str__(self) -> str:
        return f"{self.kind}:{self.arg}"

    def read(self, seen: Seen, name: str) -> tuple[str | None, str]:
        """The value this source finds in ``seen`` (or None) and, if none, where it looked."""
        if self.kind == "json":
            return _pointer(seen.json, self.arg, seen.json_error)
        if self.kind == "form":
            if seen.form is None:
                return None, "the body is not a form"
            return _text(seen.form.get(self.arg)), f"no form field {self.arg!r}" + _listing(
                seen.form
            )
        if self.kind == "header":
            found = seen.headers.get(self.arg.lower())
            return _text(found), f"no header {self.arg}" + _listing(seen.header_names)
        if self.kind == "query":
            return _text(seen.query.get(self.arg)), f"no query parameter {self.arg!r}"
        if self.kind == "envelope":
            return _text(seen.envelope.get(self.arg)), f"no envelope {self.arg}"
        if self.kind == "literal":
            return _text(self.arg), "empty literal"
        assert self._pattern is not None
        if self.kind == "path":
            found_path = self._pattern.fullmatch(seen.path)
            if found_path is None:
                return None, f"path {seen.path!r} does not match {self.arg}"
            groups = found_path.groupdict()
            value = groups.get(name) or next(iter(groups.values()), None)
            return _text(value), f"path {seen.path!r}: empty {{{name}}}"
        found_text = self._pattern.search(seen.text)
        if found_text is None:
            return None, f"no match in the text ({_excerpt(seen.text)})"
        value = found_text.group(1) if found_text.re.groups else found_text.group(0)
        return _text(value), "empty match"


@dataclass(frozen=True)
class Identify:
    """Per-field source lists; an empty tuple for a field means "use the preset default"."""

    run: tuple[Source, ...] = ()
    destination: tuple[Source, ...] = ()
    delivery: tuple[Source, ...] = ()
    recognizer: tuple[Source, ...] = ()

    @classmethod
    def of(cls, **given: str | Sequence[str]) -> Identify:
        """Build from source strings: ``Identify.of(run="header:X-Run-Id")``."""
        return cls.parse(dict(given))

    @classmethod
    def parse(cls, value: object) -> Identify:
        """Parse a mapping ``{field: source | [sources]}`` (TOML, JSON), a list of
        ``FIELD=SOURCE`` strings (repeated ``--identify``; repeating a field adds a fallback),
        one such string, or an ``Identify``. Errors name the field and what was expected."""
        if isinstance(value, Identify):
            return value
        pairs: list[tuple[str, object]] = []
        if isinstance(value, Mapping):
            pairs = [(str(k), v) for k, v in value.items()]
        elif isinstance(value, str) or (
            isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
        ):
            items = [value] if isinstance(value, str) else list(value)
            for item in items:
                assert isinstance(item, str)
                stripped = item.strip()
                if stripped.startswith("{"):
                    try:
                        decoded = json.loads(stripped)
                    except json.JSONDecodeError:
                        raise ProviderError(f"identify: {item!r} is not valid JSON") from None
                    pairs.extend(_pairs(cls.parse(decoded)))
                    continue
                name, sep, source = item.partition("=")
                if not sep:
                    raise ProviderError(
                        f"identify: expected FIELD=SOURCE (FIELD one of {', '.join(FIELDS)}),"
                        f" got {item!r}"
                    )
                pairs.append((name.strip(), source.strip()))
        else:
            raise ProviderError(
                "identify: expected a table {field = source or [sources]} or FIELD=SOURCE"
                f" strings, got {value!r}"
            )
        by_field: dict[str, list[Source]] = {}
        for name, given in pairs:
            if name not in FIELDS:
                raise ProviderError(
                    f"identify: unknown field {name!r}; expected one of {', '.join(FIELDS)}"
                )
            specs = [given] if isinstance(given, str | Source) else given
            if not isinstance(specs, list | tuple) or not specs:
                raise ProviderError(
                    f"identify.{name}: expected a source string or a non-empty list of them"
                )
            for spec in specs:
                try:
                    parsed = spec if isinstance(spec, Source) else Source.parse(str(spec))
                except ProviderError as exc:
                    raise ProviderError(f"identify.{name}: {exc}") from None
                by_field.setdefault(name, []).append(parsed)
        return cls(**{k: tuple(v) for k, v in by_field.items()})

    def over(self, defaults: Identify) -> Identify:
        """These rules, with ``defaults`` for every field this one leaves empty."""
        return Identify(
            **{f.name: getattr(self, f.name) or getattr(defaults, f.name) for f in fields(self)}
        )

    def to_json(self) -> dict[str, list[str]]:
        """``{field: [source, ...]}`` for the fields that have sources."""
        return {
            f.name: [str(s) for s in getattr(self, f.name)]
            for f in fields(self)
            if getattr(self, f.name)
        }

    def __str__(self) -> str:
        parts = [f"{k}={'|'.join(v)}" for k, v in self.to_json().items()]
        return " ".join(parts) or "(preset defaults)"

    def read(self, seen: Seen) -> Identified:
        """Every field's value, and for each field that found none, what was tried."""
        values: dict[str, str | None] = {}
        misses: dict[str, str] = {}
        for name in FIELDS:
            sources: tuple[Source, ...] = getattr(self, name)
            values[name] = None
            looked: list[str] = []
            for source in sources:
                value, where = source.read(seen, name)
                if value is not None:
                    values[name] = value
                    break
                looked.append(f"{source}: {where}")
            if values[name] is None and sources:
                misses[name] = "; ".join(looked)
        return Identified(values, misses)


@dataclass(frozen=True)
class Identified:
    """What an ``Identify`` rule read from one request."""

    values: Mapping[str, str | None]
    misses: Mapping[str, str]

    def unattributed(self, needed: Iterable[str] = ("run", "destination")) -> str | None:
        """The ``unattributed: ...`` reason if a needed field was not found, else None.

        A delivery is attributed when its destination and at least one of run or the user's
        own id (``delivery``) were read."""
        missing = [
            name
            for name in needed
            if self.values.get(name) is None
            and not (name == "run" and self.values.get("delivery") is not None)
        ]
        if not missing:
            return None
        said = "; ".join(
            f"{n} rule found no value ({self.misses.get(n, 'no rule')})" for n in missing
        )
        return f"unattributed: {said}"


@dataclass
class Seen:
    """A request as the rules see it: headers, path, query, body (JSON or form), text."""

    headers: Mapping[str, str] = field(default_factory=dict)
    """lower-cased header name -> value"""
    header_names: Sequence[str] = ()
    path: str = "/"
    query: Mapping[str, str] = field(default_factory=dict)
    json: Any = None
    json_error: str | None = "the body is not JSON"
    form: Mapping[str, str] | None = None
    text: str = ""
    envelope: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def make(
        cls,
        *,
        headers: Iterable[tuple[str, str]],
        path: str = "/",
        query: Mapping[str, str] | None = None,
        raw: bytes = b"",
        content_type: str = "",
        text: str | None = None,
        envelope: Mapping[str, str] | None = None,
    ) -> Seen:
        """Parse ``raw`` as JSON or a form by its content type (JSON also if it looks it)."""
        pairs = list(headers)
        seen = cls(
            headers={k.lower(): v for k, v in reversed(pairs)},
            header_names=[k for k, _ in pairs],
            path=path,
            query=dict(query or {}),
            envelope=dict(envelope or {}),
        )
        decoded = raw.decode("utf-8", errors="replace")
        kind = content_type.split(";")[0].strip().lower()
        if kind == "application/x-www-form-urlencoded":
            from urllib.parse import parse_qsl

            seen.form = dict(parse_qsl(decoded, keep_blank_values=True))
            seen.json_error = "the body is a form, not JSON"
        elif raw.strip():
            try:
                seen.json = json.loads(raw)
                seen.json_error = None
            except (json.JSONDecodeError, UnicodeDecodeError):
                seen.json_error = "the body is not valid JSON"
        else:
            seen.json_error = "the body is empty"
        seen.text = decoded if text is None else text
        return seen


def _pairs(rule: Identify) -> list[tuple[str, object]]:
    return [(k, list(v)) for k, v in rule.to_json().items()]


def _compile(arg: str, text: str) -> re.Pattern[str]:
    try:
        return re.compile(arg)
    except re.error as exc:
        raise ProviderError(f"identify source {text!r}: bad regular expression ({exc})") from None


def _template(arg: str, text: str) -> re.Pattern[str]:
    out, last = [], 0
    for found in _VAR.finditer(arg):
        out.append(re.escape(arg[last : found.start()]))
        segment = ".+" if found.group(2) else "[^/]+"
        out.append(f"(?P<{found.group(1)}>{segment})")
        last = found.end()
    out.append(re.escape(arg[last:]))
    return _compile("".join(out), text)


def _text(value: object) -> str | None:
    """A found value as text: strings as sent (the log is the ground truth: a recipient
    spelled with spaces is logged so, and the harness's normal form decides what is one
    recipient), numbers written out; blank or anything else counts as not found."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value
    return None


def _pointer(document: Any, pointer: str, error: str | None) -> tuple[str | None, str]:
    """RFC 6901: follow ``pointer``; on a miss, say how far it got and what was there."""
    if error is not None:
        return None, error
    node, walked = document, ""
    for raw_part in pointer.split("/")[1:]:
        part = raw_part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            where = walked or "the body"
            if isinstance(node, dict):
                return None, f"{where} has no key {part!r}" + _listing(node)
            return None, f"{where} is {type(node).__name__}, not an object with {part!r}"
        walked += "/" + raw_part
    value = _text(node)
    return value, f"{pointer} is {json.dumps(node)[:40]}, not a string or number"


def _listing(names: Iterable[str]) -> str:
    shown = sorted(str(n) for n in names)
    if not shown:
        return ""
    more = f", ... ({len(shown)} in all)" if len(shown) > 8 else ""
    return f" (has: {', '.join(shown[:8])}{more})"


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return repr(flat[:60] + ("..." if len(flat) > 60 else ""))
