// tickd's dashboard. One module, no dependencies: it signs in with the access token (kept in
// this tab's sessionStorage and sent in an Authorization header), reads the server-sent
// events of GET /api/v1/events for the cluster, the clocks and their tick statistics (drawn
// as SVG built element by element), and acts on clocks through
// PUT /api/v1/clocks/{id}/{pause|resume|tick}. Every value from the server reaches the page
// as text, never as markup.

const TOKEN_KEY = "tickd-token";
const RECONNECT_MS = 1000;

const $ = (id) => document.getElementById(id);

let token = null;
let stream = null; // the AbortController of the open event stream
let clocks = { total: 0, clocks: [] };
let stats = { bucket_seconds: 10, series: [], clocks: new Map() };
let lastLeader; // undefined until the first cluster event

function headers() {
  return { Authorization: `Bearer ${token}` };
}

// Ticktok's dashboard took the token as ?api_key=; it is accepted once, then taken out of the
// address bar and the history.
function tokenFromAddress() {
  const url = new URL(window.location.href);
  const key = url.searchParams.get("api_key");
  if (key === null) return null;
  url.searchParams.delete("api_key");
  window.history.replaceState(null, "", url.pathname + url.search + url.hash);
  return key;
}

async function signIn(candidate) {
  const response = await fetch("/api/v1/cluster", {
    headers: { Authorization: `Bearer ${candidate}` },
  });
  if (!response.ok) {
    throw new Error(response.status === 403 ? "This token is not the cluster's access token."
      : `The node answered ${response.status}.`);
  }
  token = candidate;
  sessionStorage.setItem(TOKEN_KEY, candidate);
  show(true);
  listen();
}

function signOut(message) {
  token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  if (stream) stream.abort();
  stream = null;
  show(false);
  $("sign-in-error").textContent = message || "";
}

function show(signedIn) {
  $("sign-in").hidden = signedIn;
  $("cluster-view").hidden = !signedIn;
  $("clocks-view").hidden = !signedIn;
  $("ticks-view").hidden = !signedIn;
  $("sign-out").hidden = !signedIn;
  $("connection").textContent = signedIn ? `connected to ${window.location.host}` : "not signed in";
}

// Reads the event stream until it ends, then opens it again.
async function listen() {
  if (stream) stream.abort();
  const controller = new AbortController();
  stream = controller;
  while (token && stream === controller) {
    try {
      const response = await fetch("/api/v1/events", {
        headers: headers(),
        signal: controller.signal,
      });
      if (response.status === 403) {
        signOut("The access token was refused; sign in again.");
        return;
      }
      if (!response.ok || !response.body) throw new Error(`events: ${response.status}`);
      $("connection").textContent = `connected to ${window.location.host}`;
      await readEvents(response.body, dispatch);
    } catch (error) {
      if (controller.signal.aborted) return;
      $("connection").textContent = `reconnecting to ${window.location.host}…`;
    }
    await new Promise((resolve) => setTimeout(resolve, RECONNECT_MS));
  }
}

// Server-sent events: blocks of `event:` and `data:` lines, ended by a blank line.
async function readEvents(body, onEvent) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let kind = "message";
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, end).replace(/\r$/, "");
      buffer = buffer.slice(end + 1);
      if (line === "") {
        if (data.length) onEvent(kind, data.join("\n"));
        kind = "message";
        data = [];
      } else if (line.startsWith("event:")) {
        kind = line.slice(6).trim();
      } else if (line.startsWith("data:")) {
        data.push(line.slice(5).replace(/^ /, ""));
      }
    }
  }
}

function dispatch(kind, data) {
  if (kind === "cluster") renderCluster(JSON.parse(data));
  if (kind === "clocks") {
    clocks = JSON.parse(data);
    renderClocks();
  }
  if (kind === "stats") {
    const body = JSON.parse(data);
    stats = {
      bucket_seconds: body.bucket_seconds,
      series: body.series,
      clocks: new Map(body.clocks.map((entry) => [entry.id, entry])),
    };
    renderClocks();
    renderSeries();
  }
}

function cell(row, text, className) {
  const td = row.insertCell();
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function renderCluster(status) {
  const body = $("nodes").tBodies[0];
  body.replaceChildren();
  const leader = status.nodes.find((node) => node.id === status.leader);
  const leaderApplied = leader && leader.last_applied;
  for (const node of status.nodes) {
    const row = body.insertRow();
    row.dataset.node = node.id;
    row.dataset.role = node.role;
    if (node.id === status.leader) row.classList.add("leader");
    if (!node.reachable) row.classList.add("unreachable");
    cell(row, `${node.id}`);
    cell(row, node.id === status.leader ? "Leader" : node.role, "role");
    cell(row, node.api);
    cell(row, node.last_applied ?? "—");
    const lag = leaderApplied != null && node.last_applied != null
      ? Math.max(0, leaderApplied - node.last_applied) : null;
    cell(row, lag ?? "—");
    cell(row, node.reachable ? "yes" : "no");
    cell(row, node.version ?? "—");
    cell(row, offsetText(node));
  }
  renderFailingReceivers(status.failing_receivers);
  $("cluster-summary").textContent = status.leader == null
    ? `no leader · term ${status.term}`
    : `leader node ${status.leader} · term ${status.term} · level ${status.cluster_level}`;
  $("cluster-summary").dataset.leader = status.leader ?? "";
  if (status.leader !== lastLeader) {
    if (lastLeader !== undefined || status.leader != null) {
      const item = document.createElement("li");
      const when = new Date().toLocaleTimeString();
      item.textContent = status.leader == null ? `${when}: no leader (term ${status.term})`
        : `${when}: node ${status.leader} leads (term ${status.term})`;
      $("leader-changes").prepend(item);
    }
    lastLeader = status.leader;
  }
}

// The receivers the leader sees failing: which one holds webhook ticks back, for how long and
// why. The leader names the 20 failing longest; the summary counts them all.
function renderFailingReceivers(report) {
  const failing = report ? report.longest : [];
  $("failing-receivers").hidden = failing.length === 0;
  $("failing-summary").textContent = report ? `${report.count} as the leader sees them` : "";
  $("failing-list").replaceChildren(...failing.map((receiver) => {
    const item = document.createElement("li");
    item.dataset.receiver = receiver.receiver;
    const circuit = receiver.circuit_open ? ", backed off (circuit open)" : "";
    item.textContent = `${receiver.receiver}: ${receiver.failures} failed attempts in a row for `
      + `${durationText(receiver.failing_for_ms)}${circuit}; last: ${receiver.last_error}`;
    return item;
  }));
}

function durationText(ms) {
  const seconds = Math.round(ms / 1000);
  if (seconds < 120) return `${seconds} s`;
  const minutes = Math.round(seconds / 60);
  return minutes < 120 ? `${minutes} min` : `${Math.round(minutes / 60)} h`;
}

function offsetText(node) {
  if (node.clock_offset_ms == null) return "—";
  const sign = node.clock_offset_ms > 0 ? "+" : "";
  const within = node.clock_within_bound === false ? " (beyond the bound)" : "";
  return `${sign}${node.clock_offset_ms} ms ±${node.clock_offset_uncertainty_ms}${within}`;
}

// The filters of GET /api/v1/clocks, applied to the streamed list: a name contains the text,
// a schedule or status equals it, or, after `!`, does not.
function matches(clock) {
  const name = $("filter-name").value.trim().toLowerCase();
  if (name && !clock.name.toLowerCase().includes(name)) return false;
  return equalsOrNot($("filter-schedule").value.trim(), clock.schedule)
    && equalsOrNot($("filter-status").value, clock.status);
}

function equalsOrNot(wanted, value) {
  if (!wanted) return true;
  return wanted.startsWith("!") ? value !== wanted.slice(1) : value === wanted;
}

// The clocks table keeps one row per clock across renders, updated in place: a stream event
// that arrives while a button is being clicked must not replace the button under the pointer.
const rows = new Map(); // clock id → its <tr>
const COLUMNS = ["name", "schedule", "status", "channel", "next", "last-tick", "lateness",
  "late", "coalesced", "dropped", "retried", "failed", "given_up", "leased", "redelivered",
  "acked", "skipped", "actions"];
const column = (name) => COLUMNS.indexOf(name);

function clockRow(clock) {
  let row = rows.get(clock.id);
  if (!row) {
    row = document.createElement("tr");
    row.dataset.id = clock.id;
    for (const name of COLUMNS) row.insertCell().className = name;
    row.cells[column("actions")].append(button(clock.id, "pause"), button(clock.id, "tick"));
    rows.set(clock.id, row);
  }
  return row;
}

function setCell(row, name, text, className) {
  const td = row.cells[column(name)];
  if (td.textContent !== String(text)) td.textContent = text;
  td.className = className || name;
  return td;
}

function renderClocks() {
  const body = $("clocks").tBodies[0];
  const shown = clocks.clocks.filter(matches);
  const kept = new Set(shown.map((clock) => clock.id));
  for (const [id, row] of rows) {
    if (!kept.has(id)) {
      row.remove();
      rows.delete(id);
    }
  }
  shown.forEach((clock, index) => {
    const row = clockRow(clock);
    row.dataset.name = clock.name;
    setCell(row, "name", clock.name);
    setCell(row, "schedule", clock.schedule);
    setCell(row, "status", clock.status, `status ${clock.status}`);
    setCell(row, "channel", clock.channel);
    // The next tick in the clock's own zone, as its schedule reads; UTC in the tooltip.
    const next = setCell(row, "next", clock.next_tick_local == null
      ? "—" : clock.next_tick_local.replace("T", " ").replace(/\.\d{3}/, ""));
    next.title = clock.next_tick == null ? "" : `${clock.next_tick} (UTC); zone ${clock.zone}`;
    renderTicks(row, stats.clocks.get(clock.id));
    const toggle = row.cells[column("actions")].firstChild;
    const action = clock.status === "PAUSED" ? "resume" : "pause";
    if (toggle.dataset.action !== action) {
      toggle.dataset.action = action;
      toggle.textContent = capitalized(action);
    }
    // Moved only when out of place, so that a row under the pointer stays where it is.
    if (body.rows[index] !== row) body.insertBefore(row, body.rows[index] || null);
  });
  const listed = clocks.clocks.length < clocks.total ? ` (the first ${clocks.clocks.length})` : "";
  $("clocks-summary").textContent = `${shown.length} shown of ${clocks.total}${listed}`;
}

// A clock's tick statistics: its last delivered tick, how late its recent ticks were (the last
// one, with a sparkline of up to 8), its late, coalesced and dropped counts, and how its
// deliveries went: ticks retried, failed attempts and ticks given up (webhook clocks), ticks
// held by leases, redelivered after a lease ran out, and acked (leased http queues), and the
// instants overlap control skipped.
function renderTicks(row, ticks) {
  const last = ticks && ticks.last_tick;
  const lastCell = setCell(row, "last-tick",
    last ? new Date(last.delivered_at).toLocaleTimeString() : "—");
  lastCell.title = last ? `scheduled at ${last.scheduled_at}${last.manual ? " (manual)" : ""}` : "";
  const lateness = row.cells[column("lateness")];
  lateness.replaceChildren(last ? `${last.lateness_ms} ms` : "—");
  lateness.title = "";
  if (ticks && ticks.recent_lateness_ms.length > 1) {
    lateness.append(sparkline(ticks.recent_lateness_ms));
    lateness.title = `${ticks.recent_lateness_ms.join(", ")} ms`;
  }
  for (const count of ["late", "coalesced", "dropped", "retried", "failed", "given_up",
    "redelivered"]) {
    const value = ticks ? ticks[count] : 0;
    setCell(row, count, value, value > 0 ? `${count} warn` : count);
  }
  for (const count of ["leased", "acked", "skipped"]) {
    setCell(row, count, ticks ? ticks[count] : 0);
  }
  row.dataset.delivered = ticks ? ticks.delivered : 0;
}

const SVG = "http://www.w3.org/2000/svg";

function svg(name, attributes) {
  const element = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, value);
  return element;
}

function sparkline(values) {
  const top = Math.max(...values, 1);
  const step = 60 / Math.max(values.length - 1, 1);
  const points = values.map((value, i) => `${i * step},${14 - (value / top) * 12}`).join(" ");
  const chart = svg("svg", { class: "spark", viewBox: "0 0 60 16" });
  chart.append(svg("polyline", { points }));
  return chart;
}

// The cluster's last 15 minutes: deliveries per window as bars (coalesced and dropped ticks
// stacked in red), and the largest and mean lateness per window as lines.
const PLOT = { width: 900, height: 120, left: 48, bottom: 16, windows: 90 };

function renderSeries() {
  const width = (stats.bucket_seconds || 10) * 1000;
  const newest = Math.floor(Date.now() / width) * width;
  const first = newest - (PLOT.windows - 1) * width;
  const windows = stats.series
    .map((point) => ({ ...point, index: (Date.parse(point.start) - first) / width }))
    .filter((point) => point.index >= 0 && point.index < PLOT.windows);
  const delivered = windows.reduce((sum, point) => sum + point.delivered, 0);
  $("ticks-summary").textContent =
    `${delivered} delivered in the last 15 minutes, in ${stats.bucket_seconds}-second windows`;
  drawBars($("deliveries-plot"), windows);
  drawLateness($("lateness-plot"), windows);
}

function plotFrame(chart, top, unit) {
  chart.replaceChildren();
  const base = PLOT.height - PLOT.bottom;
  chart.append(svg("line", { class: "axis", x1: PLOT.left, y1: base, x2: PLOT.width, y2: base }));
  const label = (y, text) => {
    const element = svg("text", { x: PLOT.left - 6, y, "text-anchor": "end" });
    element.textContent = text;
    chart.append(element);
  };
  label(12, `${top}${unit}`);
  label(base, `0${unit}`);
  for (const [text, x] of [["−15 min", PLOT.left], ["now", PLOT.width - 20]]) {
    const element = svg("text", { x, y: PLOT.height - 2 });
    element.textContent = text;
    chart.append(element);
  }
  const slot = (PLOT.width - PLOT.left) / PLOT.windows;
  return {
    x: (index) => PLOT.left + index * slot,
    y: (value) => base - (value / top) * (base - 6),
    slot,
    base,
  };
}

function drawBars(chart, windows) {
  const top = Math.max(1, ...windows.map((p) => p.delivered + p.coalesced + p.dropped));
  const frame = plotFrame(chart, top, "");
  for (const point of windows) {
    const missed = point.coalesced + point.dropped;
    const x = frame.x(point.index) + 1;
    const width = Math.max(frame.slot - 2, 1);
    const y = frame.y(point.delivered);
    chart.append(svg("rect", {
      class: "delivered", x, y, width, height: frame.base - y, "data-start": point.start,
    }));
    if (missed > 0) {
      const above = frame.y(point.delivered + missed);
      chart.append(svg("rect", { class: "missed", x, y: above, width, height: y - above }));
    }
  }
}

function drawLateness(chart, windows) {
  const withTicks = windows.filter((point) => point.delivered > 0);
  const top = Math.max(1, ...withTicks.map((point) => point.lateness_max_ms));
  const frame = plotFrame(chart, top, " ms");
  for (const [field, className] of [["lateness_max_ms", "max"], ["lateness_mean_ms", "mean"]]) {
    const points = withTicks
      .map((point) => `${frame.x(point.index) + frame.slot / 2},${frame.y(point[field])}`)
      .join(" ");
    if (points) chart.append(svg("polyline", { class: className, points }));
  }
}

function capitalized(action) {
  return action[0].toUpperCase() + action.slice(1);
}

// A button acts on the clock `id` with the action its row shows at the time of the click.
function button(id, action) {
  const element = document.createElement("button");
  element.type = "button";
  element.dataset.action = action;
  element.textContent = capitalized(action);
  element.addEventListener("click", () => act(id, element.dataset.action));
  return element;
}

async function act(id, action) {
  $("action-error").textContent = "";
  const known = clocks.clocks.find((entry) => entry.id === id);
  const path = `/api/v1/clocks/${encodeURIComponent(id)}/${action}`;
  const response = await fetch(path, { method: "PUT", headers: headers() });
  if (!response.ok) {
    const body = await response.json().catch(() => ({}));
    const name = known ? known.name : id;
    $("action-error").textContent = `${action} ${name}: ${body.message || response.status}`;
    return;
  }
  const updated = await response.json();
  if (known && updated.status) {
    known.status = updated.status;
    renderClocks();
  }
}

function start() {
  $("sign-in").addEventListener("submit", (event) => {
    event.preventDefault();
    signIn($("token").value).catch((error) => { $("sign-in-error").textContent = error.message; });
  });
  $("sign-out").addEventListener("click", () => signOut());
  for (const id of ["filter-name", "filter-schedule", "filter-status"]) {
    $(id).addEventListener("input", renderClocks);
  }
  const stored = tokenFromAddress() || sessionStorage.getItem(TOKEN_KEY);
  if (stored) {
    signIn(stored).catch((error) => signOut(error.message));
  } else {
    show(false);
  }
}

start();
