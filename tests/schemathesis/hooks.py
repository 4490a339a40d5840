"""Hooks for fuzzing tickd with schemathesis (tests/tests/api_fuzz.rs runs it).

Two rules that a JSON schema cannot state:

- A clock name is limited to 200 bytes of UTF-8 (SPEC §1), and JSON Schema counts characters.
  The schema says `maxLength: 200`, which every valid name meets; a generated name of at most
  200 characters but more than 200 bytes is neither valid (tickd refuses it) nor schema-invalid,
  so it is filtered out of both positive and negative cases.
- A schedule's pattern in the document describes Ticktok's forms exactly; tickd's calendar
  forms (cron, `@daily`, `every.MON.at.09:30`, `TZ=…`, `@at …`) are valid too but no pattern
  can state their grammar. A generated schedule that might be one (it starts with `TZ=`, `@`
  other than `@never`, a digit or `*`, or holds `.at.`) is therefore neither surely valid nor
  surely invalid, and is filtered out of registrations (tests/tests/schedules_api.rs and
  domain/tests/ cover the calendar forms). The preview's schedule has no pattern at all.
- `POST /api/v1/cluster/nodes` refuses a body whose `api` and `raft` are the same address, a
  rule between two fields; such bodies are filtered out where schemathesis asks the hooks, and
  elsewhere (its coverage phase builds bodies without them) `raft` is moved to 127.0.0.2.
- `POST /api/v1/cluster/nodes` makes the leader dial the given Raft address. Fuzzing must never
  send traffic off this machine, so before every request any address-like value (anything with
  a colon) is pointed at 127.0.0.1, keeping the generated port text.
- A webhook registration makes the leader post ticks to its URL. Host names resolve nowhere
  (the test runs the nodes with a resolver of their own), but an address literal needs no
  resolver: a public one would be accepted and tried. So before every registration a webhook
  URL whose host is not plainly a name (an IPv6 literal, a host whose last label is a number
  in any form a URL parser reads as IPv4, percent-encoded hosts, anything that does not split)
  is pointed at 127.0.0.1, keeping the rest of the URL: the fuzz cluster refuses loopback
  receivers, so such a registration is a 400 and no tick is sent anywhere.

And one record: every answer's operation and status, a line each in the file named by
TICKD_FUZZ_ANSWERS, from which the test tells that no operation answered only 403 (an
operation the run never got past the token gate of was not fuzzed).
"""

import os
import re
import urllib.parse

import schemathesis

MAX_NAME_BYTES = 200


def _is(ctx, method, path):
    operation = ctx.operation
    return operation is not None and operation.method.upper() == method and operation.path == path


def _may_be_calendar(schedule):
    if not isinstance(schedule, str) or schedule == "@never":
        return False
    return schedule.startswith(("TZ=", "@", "*")) or schedule[:1].isdigit() or ".at." in schedule


@schemathesis.hook
def filter_body(ctx, body):
    if not isinstance(body, dict):
        return True
    if _is(ctx, "POST", "/api/v1/clocks"):
        if _may_be_calendar(body.get("schedule")):
            return False
        name = body.get("name")
        if isinstance(name, str):
            return not (len(name) <= MAX_NAME_BYTES < len(name.encode("utf-8", "surrogatepass")))
    if _is(ctx, "POST", "/api/v1/cluster/nodes"):
        return "api" not in body or body.get("api") != body.get("raft")
    return True


# A host that is plainly a name: labels of letters, digits and hyphens, the last one holding a
# letter and not of the `0x…` form a URL parser reads as a hexadecimal IPv4 part.
_NAME = re.compile(r"^[a-z0-9-]+(\.[a-z0-9-]+)*\.?$")
_HEX_PART = re.compile(r"^0x[0-9a-f]*$")


def _plainly_a_name(host):
    if not _NAME.match(host):
        return False
    last = host.rstrip(".").rsplit(".", 1)[-1]
    return any(c.isalpha() for c in last) and not _HEX_PART.match(last)


def _local_webhook_url(url):
    """`url`, or the same URL pointed at 127.0.0.1 when its host may be an address."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = (parts.hostname or "").lower()
        port = parts.port
    except ValueError:
        return "http://127.0.0.1/"
    if _plainly_a_name(host):
        return url
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = "127.0.0.1" if port is None else f"127.0.0.1:{port}"
    netloc = f"{userinfo}@{netloc}" if userinfo else netloc
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


@schemathesis.hook
def before_call(ctx, case, kwargs):
    if not isinstance(case.body, dict) or case.operation.method.upper() != "POST":
        return
    if case.operation.path == "/api/v1/clocks":
        channel = case.body.get("channel")
        if isinstance(channel, dict) and isinstance(channel.get("url"), str):
            channel["url"] = _local_webhook_url(channel["url"])
        return
    if case.operation.path != "/api/v1/cluster/nodes":
        return
    for field in ("api", "raft"):
        value = case.body.get(field)
        if isinstance(value, str) and ":" in value:
            case.body[field] = "127.0.0.1:" + value.rsplit(":", 1)[1]
    if case.body.get("raft") == case.body.get("api") and isinstance(case.body.get("raft"), str):
        case.body["raft"] = case.body["raft"].replace("127.0.0.1:", "127.0.0.2:", 1)


@schemathesis.hook
def after_call(ctx, case, response):
    answers = os.environ.get("TICKD_FUZZ_ANSWERS")
    if not answers:
        return
    with open(answers, "a", encoding="utf-8") as record:
        record.write(f"{case.operation.method.upper()} {case.operation.path} {response.status_code}\n")
