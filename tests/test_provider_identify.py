"""The identification rule: one test per source kind, fallbacks, parsing and bad input.

What identifies an intended delivery (run, destination, the user's own id) is read from
each request by an ``Identify`` rule (issue 24); these tests hold each kind of source to
the request it reads, without a server, then check the rule reaches a running provider from
``ProviderProcess.start(identify=...)`` and from the command line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import requests

from fake_providers import Identify, ProviderError, ProviderProcess, ProviderStartError
from fake_providers._identify import Seen, Source


def _seen(**kwargs: object) -> Seen:
    return Seen.make(
        headers=[("Content-Type", "application/json"), ("X-Run-Id", "run-h")],
        path="/hooks/shop-1/orders/42",
        query={"run": "run-q"},
        raw=b'{"order": {"id": 42, "items": [{"sku": "a/b"}]},'
        b' "text": "Order #42 [ref ch-0123456789ab]"}',
        content_type="application/json",
        **kwargs,  # type: ignore[arg-type]
    )


def read(
    source: str, name: str = "destination", seen: Seen | None = None
) -> tuple[str | None, str]:
    return Source.parse(source).read(seen or _seen(), name)


def test_json_pointer_reads_nested_values_and_array_items() -> None:
    assert read("json:/order/id")[0] == "42"
    assert read("json:/order/items/0/sku")[0] == "a/b"


def test_json_pointer_miss_says_how_far_it_got_and_what_was_there() -> None:
    value, where = read("json:/order/customer")
    assert value is None
    assert where == "/order has no key 'customer' (has: id, items)"


def test_form_field() -> None:
    seen = Seen.make(
        headers=[],
        raw=b"customer=cus_1&metadata%5Brun_id%5D=r1",
        content_type="application/x-www-form-urlencoded",
    )
    assert read("form:metadata[run_id]", seen=seen)[0] == "r1"
    assert read("json:/customer", seen=seen) == (None, "the body is a form, not JSON")


def test_header_is_case_insensitive() -> None:
    assert read("header:x-run-id")[0] == "run-h"
    value, where = read("header:X-Delivery-Id")
    assert value is None
    assert where.startswith("no header X-Delivery-Id (has: Content-Type, X-Run-Id)")


def test_query_parameter() -> None:
    assert read("query:run")[0] == "run-q"


def test_path_template_takes_the_variable_named_like_the_field_else_the_first() -> None:
    assert read("path:/hooks/{destination}/orders/{delivery}", "delivery")[0] == "42"
    assert read("path:/hooks/{destination}/orders/{delivery}", "destination")[0] == "shop-1"
    assert read("path:/hooks/{shop}/orders/{n}", "run")[0] == "shop-1"
    assert read("path:/{destination:path}")[0] == "hooks/shop-1/orders/42"
    value, where = read("path:/api/{destination}")
    assert value is None
    assert "does not match /api/{destination}" in where


def test_envelope_recipient_and_sender() -> None:
    seen = Seen.make(headers=[], envelope={"rcpt": "alice@example.com", "from": "shop@x.test"})
    assert read("envelope:rcpt", seen=seen)[0] == "alice@example.com"
    assert read("envelope:from", seen=seen)[0] == "shop@x.test"


def test_regex_takes_group_one_or_the_whole_match() -> None:
    assert read(r"regex:Order #(\d+)")[0] == "42"
    assert read(r"regex:ch-[0-9a-f]{12}")[0] == "ch-0123456789ab"
    assert read(r"regex:Invoice (\d+)")[0] is None


def test_literal() -> None:
    assert read("literal:run-fixed")[0] == "run-fixed"


def test_sources_are_tried_in_order_and_a_miss_names_every_one_tried() -> None:
    rule = Identify.parse(
        {"run": ["json:/run_id", "header:X-Run-Id"], "destination": ["json:/to", "json:/dest"]}
    )
    found = rule.read(_seen())
    assert found.values["run"] == "run-h"
    assert found.values["destination"] is None
    reason = found.unattributed()
    assert reason is not None
    assert reason.startswith("unattributed: destination rule found no value (json:/to: ")
    assert "json:/dest: the body has no key 'dest'" in reason


def test_the_users_own_id_attributes_a_delivery_without_a_run() -> None:
    rule = Identify.of(
        destination="path:/hooks/{destination}/orders/{n}", delivery="json:/order/id"
    )
    assert rule.read(_seen()).unattributed() is None


def test_rules_parse_from_a_table_or_field_equals_source_strings_and_overlay_defaults() -> None:
    from_table = Identify.parse({"run": "header:X-Run-Id", "delivery": ["json:/id", "query:id"]})
    from_flags = Identify.parse(["run=header:X-Run-Id", "delivery=json:/id", "delivery=query:id"])
    assert from_table == from_flags
    assert from_table.to_json() == {
        "run": ["header:X-Run-Id"],
        "delivery": ["json:/id", "query:id"],
    }
    merged = from_table.over(Identify.of(destination="envelope:rcpt", run="json:/run_id"))
    assert [str(s) for s in merged.run] == ["header:X-Run-Id"]
    assert [str(s) for s in merged.destination] == ["envelope:rcpt"]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"runid": "json:/x"}, "identify: unknown field 'runid'; expected one of run, destination"),
        ({"run": "xml:/x"}, "identify.run: identify source 'xml:/x': expected KIND:ARG"),
        ({"run": "json:x"}, "a JSON pointer starts with '/'"),
        ({"run": "regex:("}, "bad regular expression"),
        ({"run": "path:/no/vars"}, "expected a path template such as /hooks/{destination}"),
        ({"run": "envelope:to"}, "expected envelope:rcpt or :from"),
        ({"run": []}, "identify.run: expected a source string or a non-empty list"),
        (["run"], "identify: expected FIELD=SOURCE"),
        (42, "identify: expected a table"),
    ],
)
def test_a_bad_rule_is_one_clear_error(given: object, message: str) -> None:
    with pytest.raises(ProviderError, match=None) as raised:
        Identify.parse(given)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_process_start_takes_a_rule_and_refuses_a_bad_one(tmp_path: Path) -> None:
    with pytest.raises(ProviderStartError, match="unknown field 'who'"):
        ProviderProcess.start(
            log_path=tmp_path / "bad.sqlite", preset="chat", identify={"who": "json:/x"}
        )
    with ProviderProcess.start(
        log_path=tmp_path / "log.sqlite",
        preset="chat",
        identify=["run=regex:run=(\\S+)", "destination=literal:C-fixed"],
    ) as provider:
        provider.restart()  # the rule survives a restart (it travels with the options)
        info = provider.admin.info()
        response = requests.post(
            f"{provider.url}/api/chat.postMessage",
            json={"channel": "C1", "text": "done run=r-9"},
            headers=provider.auth_headers(),
            timeout=5,
        )
        assert response.json()["ok"] is True
        [effect] = provider.admin.accepted()
    assert info["options"]["identify"] == {
        "run": ["regex:run=(\\S+)"],
        "destination": ["literal:C-fixed"],
    }
    assert (effect.run_id, effect.destination, effect.reason) == ("r-9", "C-fixed", None)


def test_the_server_command_refuses_a_bad_rule_in_one_line_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "fake_providers",
            "serve",
            "--preset",
            "webhook",
            "--log",
            str(tmp_path / "x.sqlite"),
            "--identify",
            "destination=header",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "fake_providers: identify.destination: identify source 'header': expected KIND:ARG"
        " with KIND one of json, form, header, query, path, envelope, regex, literal"
    ]


def test_crash_harness_providers_serve_refuses_a_bad_rule_in_one_line_exit_2() -> None:
    from click.testing import CliRunner

    from fake_providers._cli import providers

    result = CliRunner().invoke(
        providers, ["serve", "--preset", "smtp", "--identify", "run=json:no-slash"]
    )
    assert result.exit_code == 2
    assert "identify.run: identify source 'json:no-slash': a JSON pointer starts with '/'" in (
        result.output
    )
    assert "Traceback" not in result.output


def test_a_scenario_sets_the_rule_in_its_provider_options_and_a_bad_one_is_one_line(
    tmp_path: Path,
) -> None:
    base = Path(__file__).resolve().parent.parent / "scenarios" / "boundary-before-retry.toml"
    text = base.read_text()
    assert "\n[provider]\n" in text
    good = text.replace(
        "\n[provider]\n",
        '\n[provider]\noptions = { identify = { delivery = "json:/delivery_id" } }\n',
    )
    (tmp_path / "good.toml").write_text(good)
    (tmp_path / "bad.toml").write_text(good.replace("json:/delivery_id", "jsn:/x"))
    cli = Path(sys.executable).parent / "crash-harness"
    ok = subprocess.run(
        [str(cli), "scenarios", "check", str(tmp_path / "good.toml")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    bad = subprocess.run(
        [str(cli), "scenarios", "check", str(tmp_path / "bad.toml")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert bad.returncode == 2
    [line] = bad.stderr.strip().splitlines()
    assert line.endswith(
        "[provider.options] identify.delivery: identify source 'jsn:/x': expected KIND:ARG"
        " with KIND one of json, form, header, query, path, envelope, regex, literal"
    )
