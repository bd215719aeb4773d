// The work map (MAP-1): draws the workspace's graph from GET /api/v1/workspaces/{id}/map/ with
// Cytoscape.js (static/vendor/cytoscape, loaded before this module as window.cytoscape), and
// fetches it again, debounced, when the live socket says the workspace's work changed. Text from
// the server goes into the page through textContent only.

const root = document.querySelector("[data-work-map]");
const $ = (selector) => root.querySelector(selector);
const filters = $("[data-map-filters]");
const details = $("[data-map-details]");

const COLOURS = {
  agent: "#3451d1",
  conversation: "#475569",
  thread: "#7c3aed",
  artifact: "#c2410c",
  queued: "#ca8a04",
  running: "#0891b2",
  completed: "#16a34a",
  failed: "#dc2626",
  cancelled: "#9ca3af",
};
const SHAPES = { agent: "ellipse", conversation: "round-rectangle", thread: "diamond", artifact: "tag", task: "round-rectangle" };
const KIND_NAMES = { agent: "Agent", conversation: "Conversation", thread: "Side thread", artifact: "Artifact", task: "Task" };
const EDGE_NAMES = {
  works_on: "works on",
  handed_off: "handed off",
  waits_on: "waits on",
  asked_in: "asked in",
  works_in: "works in",
  thread_of: "side thread of",
  takes_part: "takes part in",
  contains: "contains",
  made: "made",
  produced: "produced",
};
const STRONG = new Set(["works_on", "handed_off", "made", "produced"]);
// Times as the rest of the pages show them ("Dec 7, 11:11 AM"): static/app.js, FORMATS.datetime.
const DATETIME = { day: "numeric", month: "short", hour: "2-digit", minute: "2-digit" };

/** Where a node starts its layout: a point drawn from its id, the same on every load (the
 * layout's own random start would move every node on each visit). */
function seat(id, side) {
  let hash = 2166136261; // FNV-1a, then two steps of mulberry32
  for (let i = 0; i < id.length; i++) hash = Math.imul(hash ^ id.charCodeAt(i), 16777619);
  const next = () => {
    hash = (hash + 0x6d2b79f5) | 0;
    let t = Math.imul(hash ^ (hash >>> 15), 1 | hash);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return { x: Math.round(next() * side), y: Math.round(next() * side) };
}
const byId = (a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

const cy = window.cytoscape({
  container: $("[data-map-canvas]"),
  minZoom: 0.2,
  maxZoom: 3,
  boxSelectionEnabled: false,
  style: [
    {
      selector: "node",
      style: {
        label: "data(label)",
        shape: (n) => SHAPES[n.data("kind")] || "ellipse",
        "background-color": (n) => COLOURS[n.data("kind") === "task" ? n.data("status") : n.data("kind")] || "#64748b",
        width: (n) => (n.data("kind") === "agent" ? 38 : 28),
        height: (n) => (n.data("kind") === "agent" ? 38 : n.data("kind") === "task" ? 22 : 28),
        "font-size": 11,
        "font-family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif",
        color: "#1f2430",
        "text-valign": "bottom",
        "text-margin-y": 4,
        "text-wrap": "ellipsis",
        "text-max-width": 130,
        "text-background-color": "#ffffff",
        "text-background-opacity": 0.85,
        "text-background-padding": 2,
        "border-width": 2,
        "border-color": "#ffffff",
      },
    },
    { selector: "node[kind = 'agent']", style: { "font-weight": 700, "font-size": 12 } },
    { selector: "node:selected", style: { "border-width": 4, "border-color": "#111827" } },
    {
      selector: "edge",
      style: {
        width: 1.5,
        "line-color": "#c4c8d0",
        "curve-style": "bezier",
        "target-arrow-shape": "none",
      },
    },
    {
      selector: "edge[?strong]",
      style: { width: 2, "line-color": "#8da0ea", "target-arrow-shape": "triangle", "target-arrow-color": "#8da0ea" },
    },
    {
      selector: "edge[kind = 'waits_on']",
      style: { width: 3, "line-color": "#111827", "line-style": "dashed", "target-arrow-shape": "triangle", "target-arrow-color": "#111827" },
    },
    { selector: "edge:selected", style: { "line-color": "#111827", width: 3 } },
  ],
});
let loads = 0;
// The tests read the graph through the library's own API.
window.workMap = { cy, loads: () => loads };

function query() {
  const params = new URLSearchParams();
  for (const name of ["agent", "since"]) {
    const value = filters.elements[name].value;
    if (value) params.set(name, value);
  }
  return params;
}

function showDetails(node) {
  details.replaceChildren();
  if (!node) {
    const hint = document.createElement("p");
    hint.className = "muted";
    hint.textContent = "Click a node to see what it is. Drag to pan, scroll or pinch to zoom.";
    details.append(hint);
    return;
  }
  const data = node.data();
  const kind = document.createElement("p");
  kind.className = "map-details__kind";
  kind.textContent = KIND_NAMES[data.kind] || data.kind;
  if (data.status) {
    const status = document.createElement("span");
    status.className = `status status--${data.status}`;
    status.textContent = data.status.replace("_", " ");
    kind.append(" ", status);
  }
  const title = document.createElement("h2");
  title.className = "map-details__title";
  title.textContent = data.label;
  details.append(kind, title);
  if (data.detail && data.detail !== data.label) {
    const text = document.createElement("p");
    text.className = "map-details__text";
    text.textContent = data.detail;
    details.append(text);
  }
  const facts = document.createElement("ul");
  facts.className = "map-details__facts";
  if (data.by) facts.append(fact(`By ${data.by}`));
  if (data.createdAt) facts.append(fact("Since ", localTime(data.createdAt)));
  for (const edge of node.connectedEdges()) {
    const outgoing = edge.source().id() === node.id();
    const other = outgoing ? edge.target() : edge.source();
    const verb = EDGE_NAMES[edge.data("kind")] || edge.data("kind");
    facts.append(fact(outgoing ? `${verb} → ${other.data("label")}` : `${other.data("label")} ${verb} this`));
  }
  details.append(facts);
  if (data.url) {
    const open = document.createElement("a");
    open.className = "button button--primary";
    open.href = data.url;
    open.dataset.mapOpen = "";
    open.textContent = `Open ${(KIND_NAMES[data.kind] || "it").toLowerCase()}`;
    details.append(open);
  }
}

function fact(...parts) {
  const item = document.createElement("li");
  item.append(...parts);
  return item;
}

function localTime(iso) {
  const at = new Date(iso);
  const time = document.createElement("time");
  time.dateTime = iso;
  time.textContent = at.toLocaleString([], DATETIME);
  time.title = at.toLocaleString([], { dateStyle: "full", timeStyle: "short" });
  return time;
}

let fetching = null;
async function load() {
  const params = query();
  const url = `${root.dataset.api}?${params}`;
  const response = await fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
  if (!response.ok) {
    $("[data-map-count]").textContent = "The map could not be loaded.";
    return;
  }
  const graph = await response.json();
  const selected = cy.$("node:selected").id();
  // The same nodes as before keep their places (and the person's pan and zoom): a refresh that
  // changes nothing must not move what they were about to click.
  const before = new Map(cy.nodes().map((n) => [n.id(), { ...n.position() }]));
  const same = graph.nodes.length === before.size && graph.nodes.every((n) => before.has(n.id));
  // The same work gives the same picture: nodes and edges in a fixed order, each node starting
  // from its own seat, and a layout that draws nothing at random from there.
  const nodes = [...graph.nodes].sort(byId);
  const edges = [...graph.edges].sort(byId);
  const side = 100 + 80 * Math.sqrt(nodes.length);
  cy.batch(() => {
    cy.elements().remove();
    cy.add(nodes.map((node) => ({ group: "nodes", data: node, position: same ? before.get(node.id) : seat(node.id, side) })));
    cy.add(edges.map((edge) => ({ group: "edges", data: { ...edge, strong: STRONG.has(edge.kind) } })));
  });
  if (!same) {
    // A narrow screen gets a tighter layout: fitted to its width, the labels stay readable.
    const narrow = cy.width() < 600;
    cy.layout({
      name: "cose",
      animate: false,
      randomize: false,
      padding: narrow ? 10 : 30,
      nodeRepulsion: () => (narrow ? 3000 : 9000),
      idealEdgeLength: () => (narrow ? 40 : 70),
      nodeDimensionsIncludeLabels: true,
    }).run();
    cy.fit(undefined, narrow ? 10 : 30);
    if (cy.zoom() > 1.6) cy.zoom({ level: 1.6, position: { x: cy.width() / 2, y: cy.height() / 2 } });
    cy.center();
  }
  const again = selected && cy.getElementById(selected);
  if (again && again.length) {
    again.select();
    showDetails(again);
  } else {
    showDetails(null);
  }
  const tasks = graph.nodes.filter((n) => n.kind === "task").length;
  $("[data-map-count]").textContent =
    `${graph.nodes.length} nodes · ${tasks} task${tasks === 1 ? "" : "s"}` + (graph.truncated ? " (the newest only)" : "");
  $("[data-map-empty]").hidden = graph.nodes.length > 0;
  loads += 1;
  root.dataset.loads = String(loads);
}

/** Load now, or once more after the load under way: bursts of events make one or two fetches. */
let again = false;
function reload() {
  if (fetching) {
    again = true;
    return;
  }
  fetching = load().finally(() => {
    fetching = null;
    if (again) {
      again = false;
      reload();
    }
  });
}

let timer = null;
function soon(ms = 400) {
  clearTimeout(timer);
  timer = setTimeout(reload, ms);
}

cy.on("tap", "node", (event) => showDetails(event.target));
cy.on("tap", (event) => event.target === cy && showDetails(null));

// Filters: kept in the address, so a reload or a shared link shows the same map.
const initial = new URLSearchParams(location.search);
for (const name of ["agent", "since"]) {
  const select = filters.elements[name];
  if (initial.get(name) && [...select.options].some((o) => o.value === initial.get(name))) select.value = initial.get(name);
}
filters.addEventListener("change", (event) => {
  if (event.target.matches("[data-map-workspace]")) {
    location.assign(`${event.target.value}?since=${filters.elements.since.value}`);
    return;
  }
  const params = query();
  history.replaceState(null, "", params.size ? `?${params}` : location.pathname);
  reload();
});
filters.addEventListener("submit", (event) => event.preventDefault());

// Live: static/app.js passes every event of the person's socket on as a "live:event".
const workspace = root.dataset.workspace;
document.addEventListener("live:event", ({ detail: event }) => {
  if (event.type === "live.connected") return soon(0);
  const task = event.task;
  if (event.type.startsWith("task.") && event.type !== "task.progress" && task?.workspaceId === workspace) soon();
  else if (event.type.startsWith("conversation.") || event.type.startsWith("artifact.")) soon(800);
  else if (event.type === "message.created" && (event.message?.payload?.artifactId || event.conversationKind === "thread")) soon(800);
});

reload();
