"""The web console's routes and pages: cluster, topics (partitions, offsets, sizes, configs), a
message browser, consumer groups with members, assignment and a lag chart.

Server-rendered HTML (every value escaped) with one small script on the group page that polls a
JSON endpoint and redraws the lag table and an inline SVG chart.  Read-only unless
``console.admin=true``: then topic creation and deletion are offered, as POSTs that must come from
the console's own pages (their Origin, or Referer, names this host), so another site cannot
trigger them from a browser that can reach the console.
"""

from __future__ import annotations

import datetime
import html
import json
import logging
from collections.abc import Set as AbstractSet
from typing import Any
from urllib.parse import quote, urlencode

from aiohttp import web

from pybroker.console.assets import CSS, GROUP_JS
from pybroker.metrics.lag import LagHistory, consumer_lag
from pybroker.metrics.recorder import BrokerMetrics
from pybroker.metrics.view import ClusterView, GroupState, PartitionState

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
FORMATS = ("text", "json", "hex")
PARTITION_ROWS = 1000  # a topic page lists this many partitions unless asked for all

VIEW = web.AppKey("view", ClusterView)
RECORDER = web.AppKey("recorder", BrokerMetrics)
HISTORY = web.AppKey("history", LagHistory)
ADMIN = web.AppKey("admin", bool)


def add_console_routes(
    app: web.Application, view: ClusterView, recorder: BrokerMetrics, history: LagHistory, *, admin: bool
) -> None:
    app[VIEW] = view
    app[RECORDER] = recorder
    app[HISTORY] = history
    app[ADMIN] = admin
    app.router.add_get("/", overview)
    app.router.add_get("/topics", topics)
    app.router.add_post("/topics", create_topic)
    app.router.add_get("/topics/{name}", topic)
    app.router.add_post("/topics/{name}/delete", delete_topic)
    app.router.add_get("/topics/{name}/messages", messages)
    app.router.add_get("/groups", groups)
    app.router.add_get("/groups/{group_id}", group)
    app.router.add_get("/api/groups/{group_id}", group_json)


# -- helpers ---------------------------------------------------------------------------------------
e = html.escape


def _num(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return str(n)


def _ts(ms: int) -> str:
    if ms < 0:
        return "-"
    when = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}Z"


def _page(request: web.Request, title: str, body: str, section: str, script: str = "") -> web.Response:
    admin = request.app[ADMIN]
    nav = "".join(
        f'<a href="{href}" class="{"active" if name == section else ""}">{label}</a>'
        for name, href, label in (
            ("overview", "/", "Cluster"),
            ("topics", "/topics", "Topics"),
            ("groups", "/groups", "Groups"),
        )
    )
    mode = '<span class="mode admin">admin</span>' if admin else '<span class="mode">read-only</span>'
    notice = request.query.get("notice")
    error = request.query.get("error")
    flash = (f'<div class="notice">{e(notice)}</div>' if notice else "") + (
        f'<div class="error">{e(error)}</div>' if error else ""
    )
    text = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)} · pybroker</title><style>{CSS}</style></head><body>"
        f'<header><span class="brand">pybroker</span>{nav}{mode}</header>'
        f"<main>{flash}<h1>{e(title)}</h1>{body}</main>"
        + (f"<script>{script}</script>" if script else "")
        + "</body></html>"
    )
    return web.Response(text=text, content_type="text/html")


def _table(
    headers: list[str], rows: list[list[str]], *, numeric: AbstractSet[int] = frozenset(), body_id: str = ""
) -> str:
    head = "".join(f'<th class="{"num" if i in numeric else ""}">{e(h)}</th>' for i, h in enumerate(headers))
    body = "".join(
        "<tr>"
        + "".join(f'<td class="{"num" if i in numeric else ""}">{c}</td>' for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    if not rows:
        body = f'<tr><td colspan="{len(headers)}" class="muted">none</td></tr>'
    tbody = f'<tbody id="{body_id}">' if body_id else "<tbody>"
    return f"<table><thead><tr>{head}</tr></thead>{tbody}{body}</tbody></table>"


def _cards(items: list[tuple[str, str, str]]) -> str:
    return (
        '<div class="cards">'
        + "".join(
            f'<div class="card"><div class="label">{e(label)}</div>'
            f'<div class="value" id="{ident}">{value}</div></div>'
            for label, value, ident in items
        )
        + "</div>"
    )


def _redirect(path: str, **query: str) -> web.HTTPSeeOther:
    return web.HTTPSeeOther(path + ("?" + urlencode(query) if query else ""))


def _topic_href(name: str) -> str:
    return "/topics/" + quote(name, safe="")


def _group_href(group_id: str) -> str:
    return "/groups/" + quote(group_id, safe="")


def _state(state: str) -> str:
    return f'<span class="state {e(state)}">{e(state)}</span>'


# -- cluster ---------------------------------------------------------------------------------------
async def overview(request: web.Request) -> web.Response:
    view: ClusterView = request.app[VIEW]
    recorder: BrokerMetrics = request.app[RECORDER]
    parts = view.partitions()
    open_, queued, in_flight = view.connection_counts()
    groups = view.groups()
    totals = recorder.topics.values()
    body = _cards(
        [
            ("Cluster id", e(view.cluster_id), "cluster-id"),
            ("Controller", str(view.controller_id()), "controller"),
            ("Topics", _num(len(view.topics())), "topic-count"),
            ("Partitions", _num(len(parts)), "partition-count"),
            ("Under-replicated", _num(sum(1 for p in parts if p.under_replicated)), "under-replicated"),
            ("Offline", _num(sum(1 for p in parts if p.offline)), "offline"),
            ("Groups", _num(len(groups)), "group-count"),
            ("Connections", _num(open_), "connections"),
            ("Bytes in", _bytes(sum(t.bytes_in for t in totals)), "bytes-in"),
            ("Messages in", _num(sum(t.messages_in for t in totals)), "messages-in"),
            ("Bytes out", _bytes(sum(t.bytes_out for t in totals)), "bytes-out"),
            ("Event-loop lag", f"{recorder.loop_lag_last * 1000:.1f} ms", "loop-lag"),
        ]
    )
    brokers = _table(
        ["Node id", "Host", "Port", "Listener", "Role"],
        [
            [
                str(b.node_id),
                e(b.host),
                str(b.port),
                e(b.listener),
                "broker, controller" if b.node_id == view.controller_id() else "broker",
            ]
            for b in view.brokers()
        ],
    )
    body += f"<h2>Brokers</h2>{brokers}"
    body += (
        f'<p class="muted">{queued} request(s) queued, {in_flight} waiting '
        "(long-poll fetch, acks=all, group joins).</p>"
    )
    return _page(request, "Cluster", body, "overview")


# -- topics ----------------------------------------------------------------------------------------
def _topic_totals(parts: list[PartitionState]) -> tuple[int, int, int]:
    return (
        sum(p.high_watermark - p.log_start_offset for p in parts),
        sum(p.size_bytes for p in parts),
        sum(p.segments for p in parts),
    )


async def topics(request: web.Request) -> web.Response:
    view: ClusterView = request.app[VIEW]
    admin = request.app[ADMIN]
    by_topic: dict[str, list[PartitionState]] = {}
    for p in view.partitions():
        by_topic.setdefault(p.topic, []).append(p)
    rows = []
    for t in view.topics():
        messages, size, segments = _topic_totals(by_topic.get(t.name, []))
        row = [
            f'<a href="{_topic_href(t.name)}">{e(t.name)}</a>'
            + (' <span class="muted">internal</span>' if t.internal else ""),
            _num(t.partitions),
            _num(messages),
            _bytes(size),
            _num(segments),
        ]
        if admin:
            row.append(
                f'<form class="inline" method="post" action="{_topic_href(t.name)}/delete" '
                f"onsubmit=\"return confirm('Delete topic {e(t.name, quote=True)}?')\">"
                '<button class="danger" type="submit">Delete</button></form>'
            )
        rows.append(row)
    headers = ["Topic", "Partitions", "Messages", "Size", "Segments"] + ([""] if admin else [])
    body = _table(headers, rows, numeric={1, 2, 3, 4})
    if admin:
        body += (
            "<h2>Create a topic</h2>"
            '<form class="bar" method="post" action="/topics" id="create-topic">'
            '<label>Name <input name="name" required></label>'
            '<label>Partitions <input name="partitions" type="number" min="1" value="1"></label>'
            "<label>Configs (key=value per line) "
            '<textarea name="configs" rows="2" cols="40"></textarea></label>'
            '<button type="submit">Create</button></form>'
        )
    return _page(request, "Topics", body, "topics")


async def topic(request: web.Request) -> web.Response:
    view: ClusterView = request.app[VIEW]
    name = request.match_info["name"]
    t = view.topic(name)
    if t is None:
        raise web.HTTPNotFound(text=f"no topic {name}")
    parts = view.partitions(name)
    messages, size, segments = _topic_totals(parts)
    body = _cards(
        [
            ("Topic id", e(str(t.topic_id)), "topic-id"),
            ("Partitions", _num(t.partitions), "partitions"),
            ("Messages", _num(messages), "messages"),
            ("Size", _bytes(size), "size"),
            ("Segments", _num(segments), "segments"),
        ]
    )
    body += f'<p><a href="{_topic_href(name)}/messages">Browse messages →</a></p>'
    rows = [
        [
            f'<a href="{_topic_href(name)}/messages?partition={p.partition}">{p.partition}</a>',
            _num(p.log_start_offset),
            _num(p.log_end_offset),
            _num(p.high_watermark),
            _num(p.high_watermark - p.log_start_offset),
            _bytes(p.size_bytes),
            _num(p.segments),
            str(p.leader),
            ", ".join(map(str, p.replicas)),
            ", ".join(map(str, p.isr)),
        ]
        for p in (parts if request.query.get("all") else parts[:PARTITION_ROWS])
    ]
    more = ""
    if len(rows) < len(parts):
        more = (
            f'<p class="muted">Showing {len(rows):,} of {len(parts):,} partitions. '
            f'<a href="?all=1">Show all</a></p>'
        )
    body += (
        "<h2>Partitions</h2>"
        + more
        + _table(
            [
                "Partition",
                "Start offset",
                "End offset",
                "High watermark",
                "Messages",
                "Size",
                "Segments",
                "Leader",
                "Replicas",
                "ISR",
            ],
            rows,
            numeric={0, 1, 2, 3, 4, 5, 6},
        )
    )
    config_rows = [
        [
            e(c.name),
            '<span class="null">sensitive</span>'
            if c.sensitive
            else ("<span class=null>null</span>" if c.value is None else e(c.value)),
            e(c.source),
        ]
        for c in view.topic_configs(name)
    ]
    body += "<h2>Configs</h2>" + _table(["Name", "Value", "Source"], config_rows)
    return _page(request, f"Topic {name}", body, "topics")


def _parse_timestamp(text: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 time (UTC when it names no zone)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    when = datetime.datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


def _render_bytes(data: bytes | None, fmt: str, *, note: bool = True, inline: bool = False) -> str:
    """A key, value or header value as text, pretty-printed JSON or hex (inline: one line, for headers)."""
    if data is None:
        return '<span class="null">null</span>'
    tag = "code" if inline else "pre"
    if fmt == "hex":
        return f"<{tag}>{data.hex(' ')}</{tag}>"
    text = data.decode("utf-8", errors="replace")
    if fmt == "json" and not inline:
        try:
            return f"<pre>{e(json.dumps(json.loads(text), indent=2, ensure_ascii=False))}</pre>"
        except ValueError:
            return f"<pre>{e(text)}</pre>" + ('<span class="muted">(not JSON)</span>' if note else "")
    return f"<{tag}>{e(text)}</{tag}>"


async def messages(request: web.Request) -> web.Response:
    view: ClusterView = request.app[VIEW]
    name = request.match_info["name"]
    t = view.topic(name)
    if t is None:
        raise web.HTTPNotFound(text=f"no topic {name}")
    q = request.query
    error = ""
    try:
        partition = int(q.get("partition", "0"))
        limit = min(max(int(q.get("limit", DEFAULT_LIMIT)), 1), MAX_LIMIT)
    except ValueError:
        partition, limit, error = 0, DEFAULT_LIMIT, "partition and limit must be numbers"
    fmt = q.get("format", "text")
    if fmt not in FORMATS:
        fmt = "text"
    parts = {p.partition: p for p in view.partitions(name)}
    p = parts.get(partition)
    if p is None:
        raise web.HTTPNotFound(text=f"no partition {name}-{partition}")
    offset = p.log_start_offset
    try:
        if q.get("timestamp", "").strip():
            found = view.offset_for_timestamp(name, partition, _parse_timestamp(q["timestamp"]))
            offset = p.high_watermark if found is None else found
        elif q.get("offset", "").strip():
            offset = int(q["offset"])
    except ValueError as exc:
        error = f"cannot seek: {exc}"
    records = []
    if not error:
        try:
            records = view.read_records(name, partition, offset, limit)
        except Exception as exc:  # noqa: BLE001 - a batch that cannot be decoded: say so on the page
            log.warning("console: reading %s-%d from offset %d failed: %s", name, partition, offset, exc)
            error = f"cannot read from offset {offset}: {exc}"

    options = "".join(
        f'<option value="{i}"{" selected" if i == partition else ""}>{i}</option>' for i in sorted(parts)
    )
    formats = "".join(f"<option{' selected' if f == fmt else ''}>{f}</option>" for f in FORMATS)
    form = (
        f'<form class="bar" method="get" id="seek">'
        f'<label>Partition <select name="partition">{options}</select></label>'
        f'<label>Offset <input name="offset" value="{e(q.get("offset", ""))}" '
        f'placeholder="{p.log_start_offset}"></label>'
        f'<label>or timestamp <input name="timestamp" value="{e(q.get("timestamp", ""))}" '
        'placeholder="ms or 2026-01-31T12:00:00Z"></label>'
        f'<label>Limit <input name="limit" type="number" min="1" max="{MAX_LIMIT}" value="{limit}"></label>'
        f'<label>Show as <select name="format">{formats}</select></label>'
        '<button type="submit">Seek</button></form>'
    )
    rows = [
        [
            str(r.offset),
            e(_ts(r.timestamp)),
            _render_bytes(r.key, fmt, note=False),
            _render_bytes(r.value, fmt),
            "<br>".join(f"<b>{e(k)}</b>: {_render_bytes(v, fmt, inline=True)}" for k, v in r.headers)
            or '<span class="muted">-</span>',
        ]
        for r in records
    ]
    span = (
        f"offsets {_num(p.log_start_offset)} to {_num(p.high_watermark - 1)}"
        if p.high_watermark > p.log_start_offset
        else "empty"
    )
    body = (f'<div class="error">{e(error)}</div>' if error else "") + form
    body += (
        f'<p class="muted">Partition {partition}: {span}. '
        f"Showing {len(records)} message(s) from offset {_num(offset)}.</p>"
    )
    body += _table(["Offset", "Timestamp", "Key", "Value", "Headers"], rows, numeric={0}, body_id="messages")
    if records:
        nxt = records[-1].offset + 1
        query = {"partition": str(partition), "offset": str(nxt), "limit": str(limit), "format": fmt}
        body += f'<p><a id="next-page" href="?{urlencode(query)}">Next {limit} →</a></p>'
    return _page(request, f"Messages of {name}", body, "topics")


def _origin_ok(request: web.Request) -> bool:
    own = f"{request.scheme}://{request.host}"
    origin = request.headers.get("Origin")
    if origin is not None:
        return origin == own
    referer = request.headers.get("Referer", "")
    return referer == own or referer.startswith(own + "/")


def _check_admin(request: web.Request) -> None:
    if not request.app[ADMIN]:
        raise web.HTTPForbidden(text="the console is read-only (set console.admin=true to manage topics)")
    if not _origin_ok(request):
        raise web.HTTPForbidden(text="cross-site request refused")


async def create_topic(request: web.Request) -> web.Response:
    _check_admin(request)
    view: ClusterView = request.app[VIEW]
    form = await request.post()
    name = str(form.get("name", "")).strip()
    try:
        partitions = int(str(form.get("partitions", "1")) or "1")
        configs: dict[str, str] = {}
        for line in str(form.get("configs", "")).splitlines():
            if line.strip():
                key, sep, value = line.partition("=")
                if not sep:
                    raise ValueError(f"config line {line!r} is not key=value")
                configs[key.strip()] = value.strip()
        await view.create_topic(name, partitions, configs)
    except Exception as exc:  # noqa: BLE001 - shown to the user, as kafka-topics would print it
        log.info("console: creating topic %r failed: %s", name, exc)
        raise _redirect(
            "/topics", error=f"cannot create topic {name}: {getattr(exc, 'message', None) or exc}"
        ) from None
    log.info("console: created topic %s with %d partitions", name, partitions)
    raise _redirect(_topic_href(name), notice=f"created topic {name}")


async def delete_topic(request: web.Request) -> web.Response:
    _check_admin(request)
    view: ClusterView = request.app[VIEW]
    name = request.match_info["name"]
    try:
        view.delete_topic(name)
    except Exception as exc:  # noqa: BLE001
        raise _redirect(
            "/topics", error=f"cannot delete topic {name}: {getattr(exc, 'message', None) or exc}"
        ) from None
    log.info("console: deleted topic %s", name)
    raise _redirect("/topics", notice=f"deleted topic {name}")


# -- groups ----------------------------------------------------------------------------------------
async def groups(request: web.Request) -> web.Response:
    view: ClusterView = request.app[VIEW]
    all_groups = view.groups()
    totals: dict[str, int] = {}
    for row in consumer_lag(view, [g.group_id for g in all_groups]):
        totals[row.group_id] = totals.get(row.group_id, 0) + row.lag
    rows = [
        [
            f'<a href="{_group_href(g.group_id)}">{e(g.group_id)}</a>',
            e(g.group_type),
            _state(g.state),
            _num(len(g.members)),
            _num(totals.get(g.group_id)),
        ]
        for g in all_groups
    ]
    body = _table(["Group", "Type", "State", "Members", "Lag"], rows, numeric={3, 4})
    return _page(request, "Consumer groups", body, "groups")


def _group_data(view: ClusterView, history: LagHistory, g: GroupState) -> dict[str, Any]:
    rows = {(r.topic, r.partition): r for r in consumer_lag(view, [g.group_id])}
    assigned = {tp for m in g.members for tp in m.assignment}
    hws = (
        {(p.topic, p.partition): p.high_watermark for p in view.partitions()} if assigned - set(rows) else {}
    )
    partitions = []
    for tp in sorted(set(rows) | assigned):
        r = rows.get(tp)
        partitions.append(
            {
                "topic": tp[0],
                "partition": tp[1],
                "committed": None if r is None else r.committed_offset,
                "log_end": r.log_end_offset if r is not None else hws.get(tp),
                "lag": None if r is None else r.lag,
            }
        )
    return {
        "group_id": g.group_id,
        "type": g.group_type,
        "state": g.state,
        "members": [
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "instance_id": m.instance_id,
                "assignment": [list(tp) for tp in m.assignment],
            }
            for m in g.members
        ],
        "partitions": partitions,
        "total_lag": sum(r.lag for r in rows.values()),
        "history": history.of(g.group_id),
    }


def _find_group(request: web.Request) -> GroupState:
    view: ClusterView = request.app[VIEW]
    group_id = request.match_info["group_id"]
    g = view.group(group_id)
    if g is None:
        raise web.HTTPNotFound(text=f"no group {group_id}")
    return g


async def group_json(request: web.Request) -> web.Response:
    g = _find_group(request)
    return web.json_response(_group_data(request.app[VIEW], request.app[HISTORY], g))


async def group(request: web.Request) -> web.Response:
    g = _find_group(request)
    history: LagHistory = request.app[HISTORY]
    data = _group_data(request.app[VIEW], history, g)
    body = _cards(
        [
            ("State", _state(g.state), "group-state-card"),
            ("Type", e(g.group_type) + (f" ({e(g.protocol)})" if g.protocol else ""), "group-type"),
            ("Members", _num(len(g.members)), "member-count"),
            ("Total lag", _num(data["total_lag"]), "total-lag"),
        ]
    ).replace('<span class="state', '<span id="group-state" class="state', 1)
    members = [
        [
            e(m.member_id),
            e(m.client_id),
            e(m.client_host),
            e(m.instance_id or "-"),
            e(", ".join(f"{t}-{p}" for t, p in m.assignment)) or '<span class="muted">-</span>',
        ]
        for m in g.members
    ]
    body += "<h2>Members</h2>" + _table(
        ["Member id", "Client id", "Host", "Instance id", "Assignment"], members
    )
    body += (
        "<h2>Lag over time</h2>"
        '<svg id="lag-chart" class="chart" width="640" height="200" viewBox="0 0 640 200" role="img" '
        'aria-label="total lag over time"></svg>'
        f'<p class="muted">Total lag, sampled every {history.interval_s:g} s '
        f"(kept for the last {history.samples} samples).</p>"
        "<noscript>The lag chart needs JavaScript.</noscript>"
    )
    body += "<h2>Offsets</h2>" + _table(
        ["Topic", "Partition", "Committed offset", "Log end offset", "Lag"],
        [],
        numeric={1, 2, 3, 4},
        body_id="offsets-body",
    )
    payload = json.dumps(data).replace("</", "<\\/")
    body = (
        f'<div id="group" data-api="/api/groups/{quote(g.group_id, safe="")}" '
        f'data-interval="{int(history.interval_s * 1000)}">{body}</div>'
        f'<script type="application/json" id="group-data">{payload}</script>'
    )
    return _page(request, f"Group {g.group_id}", body, "groups", script=GROUP_JS)
