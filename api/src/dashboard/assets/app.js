// tickd's dashboard. One module, no dependencies: it signs in with the access token (kept in
// this tab's sessionStorage and sent in an Authorization header), reads the server-sent
// events of GET /api/v1/events for the cluster and the clocks, and acts on clocks through
// PUT /api/v1/clocks/{id}/{pause|resume|tick}. Every value from the server reaches the page
// as text, never as markup.

const TOKEN_KEY = "tickd-token";
const RECONNECT_MS = 1000;

const $ = (id) => document.getElementById(id);

let token = null;
let stream = null; // the AbortController of the open event stream
let clocks = { total: 0, clocks: [] };
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

function renderClocks() {
  const body = $("clocks").tBodies[0];
  body.replaceChildren();
  const shown = clocks.clocks.filter(matches);
  for (const clock of shown) {
    const row = body.insertRow();
    row.dataset.id = clock.id;
    row.dataset.name = clock.name;
    cell(row, clock.name, "name");
    cell(row, clock.schedule);
    cell(row, clock.status, `status ${clock.status}`);
    cell(row, clock.channel);
    cell(row, clock.next_at_ms == null ? "—" : new Date(clock.next_at_ms).toLocaleTimeString());
    const actions = cell(row, "", "actions");
    const toggle = clock.status === "PAUSED" ? "resume" : "pause";
    actions.append(button(clock, toggle), button(clock, "tick"));
  }
  const listed = clocks.clocks.length < clocks.total ? ` (the first ${clocks.clocks.length})` : "";
  $("clocks-summary").textContent = `${shown.length} shown of ${clocks.total}${listed}`;
}

function button(clock, action) {
  const element = document.createElement("button");
  element.type = "button";
  element.dataset.action = action;
  element.textContent = action[0].toUpperCase() + action.slice(1);
  element.addEventListener("click", () => act(clock, action));
  return element;
}

async function act(clock, action) {
  $("action-error").textContent = "";
  const path = `/api/v1/clocks/${encodeURIComponent(clock.id)}/${action}`;
  const response = await fetch(path, { method: "PUT", headers: headers() });
  if (!response.ok) {
    const body = await response.json().catch(() => ({}));
    $("action-error").textContent = `${action} ${clock.name}: ${body.message || response.status}`;
    return;
  }
  const updated = await response.json();
  const known = clocks.clocks.find((entry) => entry.id === clock.id);
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
