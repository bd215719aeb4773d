// agntchat in the browser: the live socket, the composer, live lists and forms backed by the
// REST API. A plain ES module: no framework, no build step. The only HTML ever inserted is
// rendered (and sanitised) by our server; anything typed or received as data goes in through
// textContent.

const $ = (selector, root = document) => root.querySelector(selector);
const $$ = (selector, root = document) => [...root.querySelectorAll(selector)];
const page = document.body.dataset;
const me = page.userId;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// ---- talking to the server -----------------------------------------------------------------

class ApiError extends Error {
  constructor(message, code = "error", fields = {}, status = 0) {
    super(message);
    Object.assign(this, { code, fields, status });
  }
}

function statusSentence(status) {
  if (status === 403) return "You are not allowed to do that.";
  if (status === 404) return "That no longer exists, or you cannot see it.";
  if (status === 429) return "Too many requests at once. Wait a moment and try again.";
  if (status >= 500) return "The server had a problem. Try again in a moment.";
  return `The request failed (${status}).`;
}

const csrfToken = () => $('meta[name="csrf-token"]')?.content || "";

async function api(method, url, data) {
  let response;
  try {
    response = await fetch(url, {
      method,
      credentials: "same-origin",
      headers: {
        Accept: "application/json",
        "X-CSRFToken": csrfToken(),
        ...(data === undefined ? {} : { "Content-Type": "application/json" }),
      },
      body: data === undefined ? undefined : JSON.stringify(data),
    });
  } catch {
    throw new ApiError("The server could not be reached. Check your connection and try again.", "network");
  }
  if (response.status === 204) return null;
  const payload = await response.json().catch(() => null);
  if (!response.ok) {
    const error = payload?.error || {};
    throw new ApiError(
      error.message || statusSentence(response.status),
      error.code || `http_${response.status}`,
      error.fields || {},
      response.status,
    );
  }
  return payload;
}

async function fetchHtml(url) {
  let response;
  try {
    response = await fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } });
  } catch {
    throw new ApiError("The server could not be reached.", "network");
  }
  if (!response.ok) throw new ApiError(statusSentence(response.status), `http_${response.status}`, {}, response.status);
  return response.text();
}

/** Server-rendered HTML → nodes. */
function fragment(html) {
  const template = document.createElement("template");
  template.innerHTML = html;
  return template.content;
}

/** Rendered <li> items for these message ids (they come back in the same order). */
async function renderMessages(ids) {
  if (!ids.length) return [];
  return [...fragment(await fetchHtml(`/app/messages/?ids=${ids.join(",")}`)).children];
}

/** True while REGION holds something the person typed and has not sent, or a field they are in:
 * replacing it would lose it (or their place). */
const hasDraft = (region) =>
  (region.contains(document.activeElement) && document.activeElement.matches("textarea, input")) ||
  $$("textarea, input", region).some((field) =>
    ["checkbox", "radio"].includes(field.type)
      ? field.checked !== field.defaultChecked // a box's value is "on" whatever its attribute
      : field.type !== "hidden" && field.value !== field.defaultValue,
  );

const lastAskedFor = new Map(); // region name → number of the latest refresh that asked for it
let refreshes = 0;

/** Replace the [data-region=NAME] parts of this page with a fresh server rendering. A rendering
 * older than one asked for since is dropped (the later one is newer), and so is one for a region
 * with a draft in it. */
async function refreshRegions(...names) {
  const mine = ++refreshes;
  for (const name of names) lastAskedFor.set(name, mine);
  const fresh = new DOMParser().parseFromString(await fetchHtml(location.href), "text/html");
  for (const name of names) {
    if (lastAskedFor.get(name) !== mine) continue;
    const now = $(`[data-region="${name}"]`);
    const next = $(`[data-region="${name}"]`, fresh);
    if (now && next && !hasDraft(now)) {
      keepOpenCalls(now, next);
      now.replaceWith(next);
      decorate(next);
      setUpForms(next);
    }
  }
}

/** The tool calls opened (their input and output shown) in OLD stay open in its fresh rendering. */
function keepOpenCalls(old, fresh) {
  for (const open of $$("details[data-call-details][open]", old)) {
    $(`details[data-call-details="${open.dataset.callDetails}"]`, fresh)?.setAttribute("open", "");
  }
}

const debounced = new Map();
function soon(key, fn, ms = 250) {
  clearTimeout(debounced.get(key));
  debounced.set(key, setTimeout(fn, ms));
}

// ---- small page furniture --------------------------------------------------------------------

const FORMATS = {
  time: { hour: "2-digit", minute: "2-digit" },
  "time-s": { hour: "2-digit", minute: "2-digit", second: "2-digit" },
  date: { day: "numeric", month: "short", year: "numeric" },
  datetime: { day: "numeric", month: "short", hour: "2-digit", minute: "2-digit" },
};

/** Show server times in the reader's own time zone. */
function decorate(root = document) {
  for (const time of $$("time[data-local-time]", root)) {
    const when = new Date(time.dateTime);
    if (Number.isNaN(when.getTime())) continue;
    time.textContent = when.toLocaleString([], FORMATS[time.dataset.format || "time"]);
    time.title = when.toLocaleString([], { dateStyle: "full", timeStyle: "short" });
  }
  // Bars: their width set here, not in a style attribute (the CSP allows no inline styles).
  for (const bar of $$("[data-width]", root)) bar.style.width = `${Number(bar.dataset.width) || 0}%`;
  tickCountdowns(root);
}

function busy(button, on, label) {
  if (!button) return;
  if (on) {
    button.dataset.label = button.textContent;
    button.textContent = label || "Working…";
  } else if (button.dataset.label) {
    button.textContent = button.dataset.label;
  }
  button.disabled = on;
  button.toggleAttribute("aria-busy", on);
}

function initFurniture() {
  decorate();
  setInterval(tickCountdowns, 1000);
  // Card pictures come from other sites; one that does not load is hidden, not shown broken.
  document.addEventListener(
    "error",
    (event) => {
      if (event.target.matches?.("img.card__media")) event.target.hidden = true;
    },
    true,
  );
  document.addEventListener("click", async (event) => {
    const copy = event.target.closest("[data-copy]");
    if (copy) {
      const text = $(copy.dataset.copy)?.textContent || "";
      try {
        await navigator.clipboard.writeText(text);
      } catch {
        const range = document.createRange();
        range.selectNodeContents($(copy.dataset.copy));
        getSelection().removeAllRanges();
        getSelection().addRange(range);
        document.execCommand("copy");
      }
      const label = copy.textContent;
      copy.textContent = "Copied ✓";
      setTimeout(() => (copy.textContent = label), 2000);
    }
    // A button that shows or hides the element its data-toggle names (an edit form, say).
    const toggle = event.target.closest("[data-toggle]");
    if (toggle) {
      const target = $(toggle.dataset.toggle);
      if (target) {
        target.hidden = !target.hidden;
        toggle.setAttribute("aria-expanded", String(!target.hidden));
        if (!target.hidden) $("textarea, input:not([type=hidden])", target)?.focus();
      }
    }
    const move = event.target.closest("[data-move]");
    if (move) {
      const item = move.closest("[data-order-item]");
      const sibling = move.dataset.move === "up" ? item.previousElementSibling : item.nextElementSibling;
      if (sibling) {
        move.dataset.move === "up" ? sibling.before(item) : sibling.after(item);
        move.focus();
      }
    }
    // Menus built on <details> close when one clicks elsewhere.
    for (const open of $$("details[data-menu][open], details[data-switcher][open]")) {
      if (!open.contains(event.target)) open.open = false;
    }
  });
  document.addEventListener("change", (event) => {
    if (event.target.matches("[data-autosubmit]")) event.target.form.requestSubmit();
    if (event.target.matches("[data-visibility]")) syncPins(event.target.form);
    if (event.target.matches("[data-choice]")) syncChoice(event.target.form);
  });
  setUpForms();
}

/** A form offering several ways to give one thing (radios marked data-choice): only the chosen
 * way's pane is shown, and only its fields are checked and sent (the others are disabled). */
function syncChoice(form) {
  const chosen = $("[data-choice]:checked", form)?.value;
  for (const pane of $$("[data-choice-pane]", form)) {
    const on = pane.dataset.choicePane === chosen;
    pane.hidden = !on;
    for (const el of $$("input, textarea, select", pane)) el.disabled = !on;
  }
}

/** What forms of ROOT need set up once they are on the page. */
function setUpForms(root = document) {
  for (const form of $$("form", root)) {
    if ($("[data-visibility]", form)) syncPins(form);
    if ($("[data-choice]", form)) syncChoice(form);
  }
}

/** "Every workspace" or "only pinned ones": the pin boxes only matter for the second. */
function syncPins(form) {
  const pinned = $('[name="_visibility"]:checked', form)?.value === "pinned";
  for (const box of $$('[name="pinnedWorkspaces"]', form)) box.disabled = !pinned;
}

// ---- forms that talk to the REST API ---------------------------------------------------------

function setPath(data, path, value) {
  const keys = path.split(".");
  let node = data;
  for (const key of keys.slice(0, -1)) node = node[key] ??= {};
  node[keys.at(-1)] = value;
}

function getPath(data, path) {
  return path.split(".").reduce((node, key) => node?.[key], data);
}

/** A form's fields as the API's JSON: dotted names nest, data-type converts. */
function serialize(form) {
  const data = {};
  for (const el of form.elements) {
    const { name } = el;
    const type = el.dataset.type;
    if (!name || name.startsWith("_") || ["submit", "button"].includes(el.type)) continue;
    if (type === "list") {
      if (getPath(data, name) === undefined) setPath(data, name, []);
      if (!el.disabled && (el.type !== "checkbox" || el.checked)) getPath(data, name).push(el.value);
      continue;
    }
    if (el.disabled) continue;
    if (el.type === "radio") {
      if (el.checked) setPath(data, name, type === "int" ? Number(el.value) : el.value);
    } else if (el.type === "checkbox") {
      setPath(data, name, type === "int" ? (el.checked ? Number(el.value) : null) : el.checked);
    } else {
      const value = "raw" in el.dataset ? el.value : el.value.trim();
      if (type === "int") {
        // An emptied data-nullable field is sent as null: "back to the default".
        if (value !== "") setPath(data, name, Number(value));
        else if ("nullable" in el.dataset) setPath(data, name, null);
      } else if (type === "lines") {
        // One item a line (a pulse's checklist): empty lines are dropped.
        setPath(data, name, value.split("\n").map((line) => line.trim()).filter(Boolean));
      } else if (type === "csv") {
        setPath(data, name, value.split(",").map((part) => part.trim()).filter(Boolean));
      } else if (type === "bool") {
        setPath(data, name, value === "true");
      } else if (type === "zoned") {
        // A date and time read in the person's own time zone (data-zone), sent as UTC.
        if (value !== "") setPath(data, name, zonedToIso(value, el.dataset.zone));
      } else if (type === "null") {
        setPath(data, name, value === "" ? null : value);
      } else if (!(value === "" && "skipEmpty" in el.dataset)) {
        setPath(data, name, value);
      }
    }
  }
  // Shown everywhere: no pins (the API treats an empty list as "every workspace").
  if ($('[name="_visibility"]:checked', form)?.value === "all") data.pinnedWorkspaces = [];
  return data;
}

/** How far ZONE's wall clock is ahead of UTC at the instant MS, in ms. */
function zoneOffset(ms, zone) {
  const parts = {};
  const format = new Intl.DateTimeFormat("en-US", {
    timeZone: zone, hourCycle: "h23", year: "numeric", month: "numeric", day: "numeric",
    hour: "numeric", minute: "numeric", second: "numeric",
  });
  for (const { type, value } of format.formatToParts(new Date(ms))) parts[type] = Number(value);
  const wall = Date.UTC(parts.year, parts.month - 1, parts.day, parts.hour, parts.minute, parts.second);
  return wall - Math.floor(ms / 1000) * 1000;
}

/** A datetime-local VALUE ("2026-12-10T09:30") read in ZONE, as an ISO 8601 instant in UTC. */
function zonedToIso(value, zone) {
  const [date, time = "00:00"] = value.split("T");
  const [year, month, day] = date.split("-").map(Number);
  const [hour, minute] = time.split(":").map(Number);
  const wall = Date.UTC(year, month - 1, day, hour, minute);
  if (!zone) return new Date(year, month - 1, day, hour, minute).toISOString();
  let ms = wall - zoneOffset(wall, zone);
  ms = wall - zoneOffset(ms, zone); // once more, across a change of offset
  return new Date(ms).toISOString();
}

function flatten(fields, prefix = "") {
  return Object.entries(fields || {}).flatMap(([key, value]) =>
    value && typeof value === "object" && !Array.isArray(value)
      ? flatten(value, `${prefix}${key}.`)
      : [[`${prefix}${key}`, Array.isArray(value) ? value.join(" ") : String(value)]],
  );
}

function clearFormErrors(form) {
  const box = $("[data-form-error]", form);
  if (box) box.hidden = true;
  for (const el of $$(".field-error[data-js]", form)) el.remove();
  for (const el of $$("[aria-invalid]", form)) el.removeAttribute("aria-invalid");
  for (const el of $$("[data-added]", form)) el.hidden = true;
}

function showFormError(form, error) {
  const box = $("[data-form-error]", form);
  const unplaced = [];
  let summary = error.message;
  for (const [path, message] of flatten(error.fields)) {
    const field = form.elements.namedItem(path);
    const el = field instanceof RadioNodeList ? field[0] : field;
    if (el && el.type !== "hidden") {
      el.setAttribute("aria-invalid", "true");
      const note = document.createElement("p");
      note.className = "field-error";
      note.dataset.js = "";
      note.textContent = message;
      (el.closest(".field") || el.parentElement).append(note);
      summary = summary.replace(message, "").trim(); // said once: under its field
    } else {
      unplaced.push(`${path}: ${message}`);
    }
  }
  for (const el of $$("[data-reveal-on]", form)) if (el.dataset.revealOn === error.code) el.hidden = false;
  if (box) {
    box.textContent = [summary, ...unplaced].join(" ").trim();
    box.hidden = !box.textContent;
  } else {
    alert(error.message);
  }
}

function base64Of(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    // A data: URL ("data:…;base64,XXXX"): what follows the comma is the file in base64.
    reader.onload = () => resolve(String(reader.result).split(",", 2)[1] || "");
    reader.onerror = () => reject(new ApiError(`${file.name} could not be read.`, "file_unreadable"));
    reader.readAsDataURL(file);
  });
}

/** A file chosen in an <input type=file data-base64=NAME> is read here, in the browser, and goes
 * to the API as base64 in the form's (hidden) field NAME; data-max-bytes refuses a larger one. */
async function readFiles(form) {
  for (const input of $$('input[type="file"][data-base64]:enabled', form)) {
    const target = form.elements.namedItem(input.dataset.base64);
    const file = input.files?.[0];
    if (!target) continue;
    const most = Number(input.dataset.maxBytes || 0);
    if (file && most && file.size > most) {
      throw new ApiError(`${file.name} is over ${Math.round(most / 1024)} KB.`, "too_large");
    }
    target.value = file ? await base64Of(file) : "";
  }
}

const afterSubmit = {
  async reload() {
    const fresh = new DOMParser().parseFromString(await fetchHtml(location.href), "text/html");
    $("#main").replaceWith($("#main", fresh));
    decorate($("#main"));
    setUpForms($("#main"));
  },
  /** Off to the provider to connect an account (it sends the person back to our callback). */
  authorize(form, result) {
    location.assign(result.authorizeUrl);
  },
  redirect(form, result) {
    location.assign(form.dataset.redirect.replace(/\{(\w+)\}/g, (_, key) => encodeURIComponent(result?.[key] ?? "")));
  },
  home() {
    location.assign("/");
  },
  saved(form) {
    const note = $("[data-saved]", form);
    if (!note) return;
    note.hidden = false;
    setTimeout(() => (note.hidden = true), 4000);
  },
  /** The agent page's header shows what was just saved (name, handle, role), not the old. */
  "agent-saved"(form, result) {
    afterSubmit.saved(form);
    if (!result?.name) return;
    const set = (selector, text) => $(selector) && ($(selector).textContent = text);
    set("[data-agent-name]", result.name);
    set("[data-agent-initials]", result.name.slice(0, 2).toUpperCase());
    set("[data-agent-handle]", `@${result.handle}`);
    set("[data-agent-role]", result.role ? ` · ${result.role}` : "");
    document.title = document.title.replace(/^[^·]*·/, `${result.name} ·`);
  },
  async "key-created"(form, result) {
    const panel = $("[data-secret]");
    $("[data-secret-value]", panel).textContent = result.key;
    const command = $("[data-bridge-command]", panel);
    // The key goes in the environment: on the command line any process of the machine reads it (ps).
    command.textContent = `AGNTCHAT_AGENT_KEY=${result.key} ${command.dataset.program} --url ${command.dataset.server}`;
    panel.hidden = false;
    form.reset();
    await refreshRegions("key-table");
    // The bridge usually starts right after this: look for it often for a minute.
    const until = Date.now() + 60000;
    const beat = setInterval(() => (Date.now() > until ? clearInterval(beat) : pollPresence()), 2000);
  },
  async invitation(form, result) {
    const panel = $("[data-secret]");
    $("[data-secret-value]", panel).textContent = result.url;
    panel.hidden = false;
    form.reset();
    await refreshRegions("invitations");
  },
  /** A skill added (to an agent, or to one's own layer): say which tools assigning it granted,
   * then refresh the lists that changed (data-regions, space-separated). */
  async "skill-added"(form, result) {
    const note = $("[data-added]", form.closest("[data-add-skill]") || form);
    if (note) {
      const granted = result?.grantedTools || [];
      const where = result?.agentId ? "" : " It is in your skills, for all your agents.";
      note.textContent =
        `Added ${result?.name}.${where}` +
        (granted.length ? ` Granted the tools it uses: ${granted.join(", ")}.` : "");
      note.hidden = false;
    }
    form.reset();
    setUpForms(form.parentElement);
    const regions = (form.dataset.regions || "").split(" ").filter(Boolean);
    if (regions.length) await refreshRegions(...regions);
    else await afterSubmit.reload();
  },
  /** A Telegram link made: its one-time code, shown here only (docs/telegram.md). */
  "telegram-link"(form, result) {
    const panel = $("[data-telegram-code]");
    $("[data-secret-value]", panel).textContent = `/start ${result.code}`;
    $("[data-start-url]", panel).href = result.startUrl;
    $("[data-code-expires]", panel).textContent = new Date(result.codeExpiresAt).toLocaleTimeString();
    panel.hidden = false;
  },
  "thread-resolved"(form) {
    form.closest("li[data-message-id]")?.dispatchEvent(new CustomEvent("message:refresh", { bubbles: true }));
  },
  "artifact-version"(form, result) {
    location.assign(`?v=${result.number}`);
  },
};

function initForms() {
  document.addEventListener("submit", async (event) => {
    const form = event.target.closest("form[data-api]");
    if (!form) return;
    event.preventDefault();
    if (form.dataset.confirm && !confirm(form.dataset.confirm)) return;
    clearFormErrors(form);
    const button = $('[type="submit"]', form);
    busy(button, true, "Saving…");
    const method = form.dataset.api;
    try {
      await readFiles(form);
      const result = await api(method, form.action, method === "DELETE" ? undefined : serialize(form));
      busy(button, false);
      await (afterSubmit[form.dataset.success] || afterSubmit.reload)(form, result);
    } catch (error) {
      busy(button, false);
      if (error instanceof ApiError) showFormError(form, error);
      else throw error;
    }
  });
}

// ---- approvals: deciding, and the time left to decide ----------------------------------------

/** MS as "4:32" (or "1:04:32"), up to the next whole second. */
function clock(ms) {
  const total = Math.ceil(ms / 1000);
  const two = (n) => String(n).padStart(2, "0");
  const [hours, minutes, seconds] = [Math.floor(total / 3600), Math.floor(total / 60) % 60, total % 60];
  return hours ? `${hours}:${two(minutes)}:${two(seconds)}` : `${minutes}:${two(seconds)}`;
}

/** An approval prompt whose time ran out: it says so, its buttons are off (the server refuses a
 * decision now), and so does its call's line until the server's sweep marks the call expired. */
function expireApproval(approval) {
  if (!approval || "expired" in approval.dataset) return;
  approval.dataset.expired = "";
  for (const button of $$("[data-decide]", approval)) button.disabled = true;
  const countdown = $("[data-countdown]", approval);
  if (countdown) {
    countdown.textContent = "expired";
    countdown.classList.add("is-expired");
  }
  const status = $("[data-call-status]", approval.closest("[data-call-id]") || approval);
  if (status) status.textContent = "expired";
}

/** Each pending approval's "expires in 4:32", ticking from its request's expiresAt by the server's
 * clock: the rendering says what time it was there (data-server-now), so a browser clock set
 * wrong does not count. */
function tickCountdowns(root = document) {
  for (const el of $$("[data-countdown]", root)) {
    const approval = el.closest("[data-approval]");
    if (approval && "expired" in approval.dataset) continue;
    if (el.dataset.skew === undefined) {
      const there = Date.parse(el.dataset.serverNow);
      el.dataset.skew = String(Number.isNaN(there) ? 0 : there - Date.now());
    }
    const left = Date.parse(el.dataset.countdown) - (Date.now() + Number(el.dataset.skew));
    if (Number.isNaN(left)) continue;
    if (left > 0) {
      el.textContent = `expires in ${clock(left)}`;
      el.title = `Expires at ${new Date(Date.parse(el.dataset.countdown)).toLocaleTimeString()}`;
    } else {
      expireApproval(approval);
    }
  }
}

/** Approve, always allow or deny the call of BUTTON's approval prompt through the REST API, then
 * DONE() shows the call as it now stands. A refusal (expired, or decided by someone else
 * meanwhile) is shown in the server's words. */
async function decide(button, done) {
  const approval = button.closest("[data-approval]");
  const error = $("[data-approval-error]", approval);
  error.hidden = true;
  const choice = button.dataset.decide;
  for (const other of $$("[data-decide]", approval)) other.disabled = true;
  busy(button, true, `${button.textContent}…`);
  try {
    await api("POST", `/api/v1/permission-requests/${approval.dataset.approval}/decision/`, {
      decision: choice === "deny" ? "deny" : "approve",
      always: choice === "always",
    });
    done();
  } catch (err) {
    busy(button, false);
    if (err.code === "approval_expired") expireApproval(approval);
    else if (!("expired" in approval.dataset)) for (const other of $$("[data-decide]", approval)) other.disabled = false;
    error.textContent = err.message;
    error.hidden = false;
    error.scrollIntoView({ block: "nearest" });
  }
}

// ---- the live socket ---------------------------------------------------------------------------

const listeners = [];
const onLive = (fn) => listeners.push(fn);
const emit = (event) => {
  listeners.forEach((fn) => fn(event));
  // Other scripts of the page (static/inbox.js) hear the socket too, without a second one.
  document.dispatchEvent(new CustomEvent("agntchat:live", { detail: event }));
};
let liveState = ["Connecting…", "connecting"];
let liveSocket = null;

// Scripts of single pages (static/map.js) hear the socket too, as "live:event" on the document.
onLive((event) => document.dispatchEvent(new CustomEvent("live:event", { detail: event })));

/** Send a frame on the live socket if it is open; false otherwise (nothing is queued). */
function sendLive(frame) {
  if (liveSocket?.readyState !== WebSocket.OPEN) return false;
  liveSocket.send(JSON.stringify(frame));
  return true;
}

function showLiveState() {
  for (const el of $$("[data-live-status]")) {
    [el.textContent, el.dataset.state] = liveState;
  }
  document.body.dataset.live = liveState[1];
  // A lost socket means nothing new arrives: said above the page, not only in the sidebar.
  const banner = $("[data-live-banner]");
  if (banner) {
    const text =
      liveState[0] === "Logged out"
        ? "You are logged out in this tab: reload the page to log in again."
        : "Connection lost: reconnecting… New messages will appear once it is back.";
    banner.hidden = liveState[1] !== "offline";
    if (banner.textContent !== text) banner.textContent = text; // announced once, not per call
  }
}

function connectLive() {
  if (!me) return;
  let attempt = 0;
  const open = () => {
    const socket = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws/live/`);
    liveSocket = socket;
    const pinger = setInterval(() => socket.readyState === WebSocket.OPEN && socket.send('{"type":"ping"}'), 25000);
    socket.addEventListener("message", (message) => {
      let event;
      try {
        event = JSON.parse(message.data);
      } catch {
        return;
      }
      if (event.type === "hello") {
        liveState = ["Live", "connected"];
        showLiveState();
        // On every connect, the first too: what changed before this socket listened (since the
        // page was rendered, or while it was away) reached nobody here, so it is fetched.
        emit({ type: "live.connected" });
        attempt = 0;
      } else if (event.type !== "pong") {
        emit(event);
      }
    });
    socket.addEventListener("close", (closed) => {
      clearInterval(pinger);
      if (closed.code === 4401) {
        liveState = ["Logged out", "offline"];
        showLiveState();
        return;
      }
      liveState = ["Reconnecting…", "offline"];
      showLiveState();
      attempt += 1;
      // Spread at random (half to all of the backoff): every tab of a restarted node would
      // otherwise come back at the same instants.
      const backoff = Math.min(15000, 400 * 2 ** attempt);
      setTimeout(open, backoff * (0.5 + Math.random() / 2));
    });
  };
  open();
}

// ---- the shell: sidebar, unread counts, presence ------------------------------------------------

function initShell() {
  const app = $(".app");
  if (!app) return;
  const workspaceId = app.dataset.workspaceId;
  const toggle = $("[data-sidebar-toggle]");
  const backdrop = $("[data-sidebar-close]");
  const setOpen = (open) => {
    app.classList.toggle("sidebar-open", open);
    toggle.setAttribute("aria-expanded", String(open));
    backdrop.hidden = !open;
    if (open) $("#sidebar summary")?.focus();
  };
  toggle.addEventListener("click", () => setOpen(!app.classList.contains("sidebar-open")));
  backdrop.addEventListener("click", () => setOpen(false));
  // The open drawer covers the page, its toggle included: focus leaving it (Tab past its end)
  // closes it, or the person would go on typing into the page unseen behind the backdrop.
  document.addEventListener("focusin", (event) => {
    if (app.classList.contains("sidebar-open") && !event.target.closest("#sidebar")) setOpen(false);
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && app.classList.contains("sidebar-open")) {
      setOpen(false);
      toggle.focus();
    }
  });
  showLiveState();

  // Live changes made to the sidebar in place (an unread count bumped): a rendering fetched
  // meanwhile may have been drawn before them, and would undo them.
  let sidebarBumps = 0;
  const refreshSidebar = (again = true) =>
    soon("sidebar", async () => {
      const aside = $("#sidebar");
      const before = sidebarBumps;
      let html;
      try {
        html = await fetchHtml(aside.dataset.sidebarUrl);
      } catch (error) {
        // Removed from the workspace, or it was deleted: nothing here is ours any more.
        if (error.status === 404) location.assign("/");
        return;
      }
      aside.replaceChildren(fragment(html));
      decorate(aside);
      showLiveState();
      // Once more, drawn after them; only once, or a busy workspace would keep it fetching.
      if (again && sidebarBumps !== before) refreshSidebar(false);
    });

  const bumpUnread = (conversationId) => {
    const link = $(`#sidebar [data-conversation-id="${conversationId}"]`);
    if (!link) return false;
    if (link.getAttribute("aria-current") === "page" || link.dataset.joined !== "1") return true;
    const badge = $("[data-unread]", link);
    const count = $("[data-unread-count]", badge);
    // The server counts up to its cap (100) and says "99+" from there; so does this.
    const cap = parseInt(badge.dataset.unread, 10);
    const next = (parseInt(count.textContent, 10) || 0) + 1;
    count.textContent = count.textContent.endsWith("+") || next >= cap ? `${cap - 1}+` : String(next);
    badge.hidden = false;
    link.classList.add("has-unread");
    sidebarBumps += 1;
    return true;
  };

  onLive((event) => {
    switch (event.type) {
      case "agent.presence":
        setPresence(event.agentId, event.online);
        break;
      case "message.created": {
        const { message } = event;
        if (message.author?.type === "agent") setPresence(message.author.id, true);
        if (message.conversationId === page.conversationId) break;
        const mine = message.author?.id === me;
        const listed = mine ? $(`#sidebar [data-conversation-id="${message.conversationId}"]`) : bumpUnread(message.conversationId);
        // A conversation the sidebar does not list yet (a new channel, a DM someone opened, a
        // thread I just wrote in). Not others' side threads: they reach everyone who can read
        // their origin, and a refetch for each of their messages would be wasted.
        if (!listed && (mine || event.conversationKind !== "thread")) refreshSidebar();
        break;
      }
      case "live.connected":
        // An agent that came online or left between the page's render and this socket's
        // subscription announced it to nobody here.
        pollPresence();
        refreshSidebar();
        break;
      case "conversation.created":
        refreshSidebar();
        break;
      case "task.created":
      case "task.finished":
        if (event.task?.workspaceId === workspaceId) refreshSidebar();
        break;
      default:
        // Membership and workspace events: who is here, names and roles may have changed.
        if (event.workspaceId === workspaceId) {
          if (event.type === "workspace.deleted") location.assign("/");
          else refreshSidebar();
          if (page.page === undefined && $('[data-region="members"]')) refreshRegions("members");
        }
    }
  });

  // Connects and disconnects arrive live (agent.presence); a bridge that silently stops
  // heartbeating only expires in Redis, so a slow poll still catches that.
  setInterval(pollPresence, 15000);
  document.addEventListener("visibilitychange", pollPresence);
}

async function pollPresence() {
  const workspaceId = $(".app")?.dataset.workspaceId;
  if (!workspaceId || document.hidden) return;
  try {
    const data = await api("GET", `/api/v1/agents/?workspace=${workspaceId}`);
    for (const agent of data.results) setPresence(agent.id, agent.online);
    if (page.page === "agent") {
      // An agent pinned elsewhere is not in this workspace's list: ask about it directly.
      const shown = $("[data-page-agent]")?.dataset.pageAgent;
      if (shown && !data.results.some((a) => a.id === shown)) {
        setPresence(shown, (await api("GET", `/api/v1/agents/${shown}/`)).online);
      }
    }
  } catch {
    /* presence is decoration: try again at the next beat */
  }
}

function setPresence(agentId, online) {
  for (const holder of $$(`[data-agent-id="${agentId}"]`)) {
    for (const dot of $$("[data-presence]", holder)) {
      dot.classList.toggle("is-online", online);
      dot.title = online ? "Online" : "Offline";
      const text = $("[data-presence-text]", dot);
      if (text) text.textContent = online ? "online" : "offline";
    }
    for (const label of $$("[data-presence-label]", holder)) label.textContent = online ? "Online" : "Offline";
  }
}

const isOnline = (agentId) => !!$(`[data-agent-id="${agentId}"] [data-presence].is-online`);

// ---- the conversation ------------------------------------------------------------------------

const newRef = () =>
  globalThis.crypto?.randomUUID?.() || `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 12)}`;
const initialsOf = (name) =>
  (name || "?").split(/\s+/).filter(Boolean).slice(0, 2).map((w) => w[0]).join("").toUpperCase() || "?";

/** "■ Stop" for the running turn WORK_ID of CONVERSATION_ID (conversations.actions.stop_turn: the
 * agent posts what it has, marked stopped); SAY(words) tells how the request went. */
function stopButton(conversationId, workId, say) {
  const stop = document.createElement("button");
  stop.type = "button";
  stop.className = "button button--small";
  stop.dataset.stopTurn = "";
  stop.textContent = "■ Stop";
  stop.addEventListener("click", async () => {
    busy(stop, true, "Stopping…");
    try {
      await api("POST", `/api/v1/conversations/${conversationId}/stop/`, { work: workId });
      say("stopping…");
    } catch (error) {
      busy(stop, false);
      say(error.message);
    }
  });
  return stop;
}

/** Who is working right now: the agent holding the turn on a message, and tasks asked here. */
class Working {
  constructor(el, conversationId, agentNames) {
    Object.assign(this, { el, conversationId, agentNames, turns: new Map(), tasks: new Map() });
  }

  async decisions() {
    return (await api("GET", `/api/v1/conversations/${this.conversationId}/turns/`).catch(() => null))?.results || [];
  }

  /** After a person's message: which agent holds the turn on it? */
  async expect(message) {
    if (message.author?.type !== "person") return;
    await sleep(150);
    this.follow((await this.decisions()).find((d) => d.messageId === message.id));
  }

  follow(decision) {
    if (!decision || decision.finishedAt || !decision.queue.length) return;
    const holder = decision.queue[decision.position];
    // WORK: its running work item, which Stop stops before any text is written.
    const turn = { name: holder.name, messageId: decision.messageId, work: decision.work };
    this.turns.set(holder.agentId, turn);
    this.recheck(holder.agentId, turn);
    this.render();
  }

  /** Every two minutes, while TURN is shown: is it still open? A turn may run long, or wait a
   * quarter of an hour for a person's approval; one that ended unseen (an answer missed while
   * the socket was down) leaves the line. A card click has no turn decision: two minutes. */
  recheck(agentId, turn) {
    setTimeout(async () => {
      if (this.turns.get(agentId) !== turn) return;
      const decision = turn.messageId && (await this.decisions()).find((d) => d.messageId === turn.messageId);
      if (decision && !decision.finishedAt && decision.queue[decision.position]?.agentId === agentId) {
        this.recheck(agentId, turn);
        return;
      }
      if (this.turns.get(agentId) === turn) this.turns.delete(agentId);
      this.render();
      this.follow(decision);
    }, 120000);
  }

  /** On load: turns still open from the last hour (an approval may keep one open that long). */
  async resume() {
    const recent = Date.now() - 3600000;
    for (const decision of (await this.decisions()).reverse()) {
      if (Date.parse(decision.createdAt) > recent) this.follow(decision);
    }
  }

  /** An agent posted: its turn is over; the queue may hand the turn to the next agent. */
  async spoke(agentId) {
    const turn = this.turns.get(agentId);
    if (!turn) return;
    this.turns.delete(agentId);
    this.render();
    await sleep(400);
    const decision = (await this.decisions()).find((d) => d.messageId === turn.messageId);
    if (decision && decision.queue[decision.position]?.agentId !== agentId) this.follow(decision);
  }

  /** A card button sent work to the card's agent: WORK is the click and the agent's item on it. */
  clicked(agentId, name, work) {
    const turn = { name, messageId: work.id, work: work.delivery };
    this.turns.set(agentId, turn);
    this.recheck(agentId, turn);
    this.render();
  }

  task(event) {
    const task = event.task;
    if (event.type === "task.created" && task.conversationId === this.conversationId) {
      this.tasks.set(task.id, { name: this.agentNames.get(task.agentId) || "An agent", text: "" });
    } else if (event.type === "task.progress" && this.tasks.has(event.taskId)) {
      const data = event.data || {};
      this.tasks.get(event.taskId).text = data.message || (data.kind === "text_delta" ? "" : data.kind) || "";
    } else if (event.type === "task.finished") {
      this.tasks.delete(task.id);
    } else {
      return;
    }
    this.render();
  }

  render() {
    // An agent whose reply is being written shows in its "writing…" bubble instead.
    const drafting = (agentId) => $(`.msg.is-draft[data-draft-agent="${CSS.escape(agentId)}"]`);
    // A call of the turn waiting for a person's approval (its card under the message): then the
    // person, not the agent, is the one to act.
    const approving = (turn) => turn.messageId && $(`li[data-message-id="${turn.messageId}"] [data-call-state="waiting"]`);
    const lines = [...this.turns].filter(([agentId]) => !drafting(agentId)).map(([agentId, turn]) => {
      if (!isOnline(agentId)) return [`${turn.name} will answer when its bridge is online.`];
      if (turn.said === "stopping…") return [`${turn.name} is stopping…`];
      const words = approving(turn) ? `${turn.name} is waiting for approval…` : `${turn.name} is working…`;
      // Stop from the start of the turn, not only once text streams (its bubble has one too).
      const say = (said) => {
        turn.said = said;
        this.render();
      };
      const stop = turn.work ? [" ", stopButton(this.conversationId, turn.work, say)] : [];
      return [words, ...stop, ...(turn.said ? [` ${turn.said}`] : [])];
    });
    for (const task of this.tasks.values()) lines.push([`${task.name} is on a task${task.text ? `: ${task.text}` : "…"}`]);
    this.el.replaceChildren();
    if (!lines.length) return;
    const dots = document.createElement("span");
    dots.className = "working__dots";
    dots.setAttribute("aria-hidden", "true");
    dots.append(...[1, 2, 3].map(() => document.createElement("i")));
    const text = document.createElement("span");
    text.append(...lines.flatMap((line, i) => (i ? [" · ", ...line] : line)));
    this.el.append(dots, text);
  }
}

/** The keyboard of a suggestion listbox under the composer (the @mention and "/" ones): the
 * arrows walk the options of BOX (box.matches; box.active), Enter or Tab picks the active
 * one, Escape closes. Returns the composer's keydown hook: true when it took the key. */
function listboxKeys(listbox, box, { render, choose, close }) {
  return (event) => {
    const count = box.matches.length;
    if (listbox.hidden || !count) return false;
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      box.active = (box.active + (event.key === "ArrowDown" ? 1 : count - 1)) % count;
      render();
    } else if (event.key === "Enter" || event.key === "Tab") {
      choose(box.active);
    } else if (event.key === "Escape") {
      close();
    } else {
      return false;
    }
    event.preventDefault();
    return true;
  };
}

/** @mention suggestions under the composer (an ARIA combobox with a listbox). */
function mentionBox(input, listbox, targets) {
  const box = { matches: [], active: 0 }; // the options shown, and which one is active
  let start = -1;
  const close = () => {
    listbox.hidden = true;
    box.matches = [];
    input.setAttribute("aria-expanded", "false");
    input.removeAttribute("aria-activedescendant");
  };
  const render = () => {
    listbox.replaceChildren(
      ...box.matches.map((target, i) => {
        const option = document.createElement("li");
        option.id = `mention-${i}`;
        option.className = "mention-option";
        option.setAttribute("role", "option");
        option.setAttribute("aria-selected", String(i === box.active));
        const avatar = document.createElement("span");
        avatar.className = `avatar avatar--tiny avatar--${target.kind}`;
        avatar.setAttribute("aria-hidden", "true");
        avatar.textContent = initialsOf(target.name);
        const name = document.createElement("strong");
        name.textContent = target.name;
        const handle = document.createElement("span");
        handle.className = "muted";
        handle.textContent = `@${target.handle}`;
        option.append(avatar, name, handle);
        if (target.kind === "agent") {
          const tag = document.createElement("span");
          tag.className = "tag tag--agent";
          tag.textContent = "Agent";
          option.append(tag);
        }
        option.addEventListener("mousedown", (event) => {
          event.preventDefault();
          choose(i);
        });
        return option;
      }),
    );
    listbox.hidden = false;
    input.setAttribute("aria-expanded", "true");
    input.setAttribute("aria-activedescendant", `mention-${box.active}`);
  };
  const update = () => {
    const before = input.value.slice(0, input.selectionStart);
    const found = /(^|\s)@([\w.-]*)$/.exec(before);
    if (!found) return close();
    const query = found[2].toLowerCase();
    start = before.length - found[2].length - 1;
    box.matches = targets
      .filter((t) => t.handle.toLowerCase().startsWith(query) || t.name.toLowerCase().split(/\s+/).some((w) => w.startsWith(query)))
      .slice(0, 8);
    box.active = 0;
    box.matches.length ? render() : close();
  };
  const choose = (i) => {
    const target = box.matches[i];
    const end = input.selectionStart;
    input.value = `${input.value.slice(0, start)}@${target.handle} ${input.value.slice(end)}`;
    const caret = start + target.handle.length + 2;
    input.setSelectionRange(caret, caret);
    close();
    input.focus();
  };
  input.addEventListener("input", update);
  input.addEventListener("click", update);
  input.addEventListener("blur", () => setTimeout(close, 150));
  return listboxKeys(listbox, box, { render, choose, close });
}

// Who a message names, as the server reads it (conversations/turns.py, MENTION): not after a
// letter, digit, @ or slash (an address, a link).
const MENTION = /(?<![\p{L}\p{N}_@/])@([A-Za-z0-9][\p{L}\p{N}_.-]*)/gu;
// "/task @x …" and "@x please …" hand work to @x wherever it is (turns.py, DELEGATION).
const DELEGATION = /^\s*(\/|@[\w.-]+[,:]?\s+please\b)/i;

/** The agents of the workspace TEXT names (a handle before a name, as the server matches). */
function mentionedAgents(text, targets) {
  const agents = targets.filter((t) => t.kind === "agent");
  const found = [];
  for (const [, token] of text.matchAll(MENTION)) {
    const key = token.toLowerCase().replace(/[.-]+$/, "");
    const byHandle = agents.filter((a) => a.handle.toLowerCase() === key);
    for (const agent of byHandle.length ? byHandle : agents.filter((a) => a.name.toLowerCase() === key)) {
      if (!found.includes(agent)) found.push(agent);
    }
  }
  return found;
}

/** After a message names agents that do not take part here (they will not answer), tell the
 * writer only, under the composer, as Slack does for a person not in a channel: with a button
 * that adds them where the person may add agents (channels). Who takes part is read from the
 * page's head (its agent pills), which the live socket keeps fresh. */
function mentionHint(form, input, targets, conversationId) {
  const hint = $("[data-mention-hint]", form);
  const text = $("[data-mention-hint-text]", hint);
  const add = $("[data-mention-hint-add]", hint);
  const where = form.dataset.where;
  const scroller = $("[data-scroller]");
  let absent = [];
  // Laid over the messages: room under the last one while shown, so it hides none of them.
  const makeRoom = (px) => {
    const atBottom = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 120;
    scroller.style.paddingBottom = px ? `${px}px` : "";
    if (atBottom) scroller.scrollTop = scroller.scrollHeight;
  };
  const close = (refocus) => {
    hint.hidden = true;
    absent = [];
    makeRoom(0);
    if (refocus) input.focus();
  };
  const names = (agents) => agents.map((a) => a.name).join(" and ");
  const check = (body) => {
    const taking = new Set($$(".conv-head__agents [data-agent-id]").map((a) => a.dataset.agentId));
    absent = DELEGATION.test(body) ? [] : mentionedAgents(body, targets).filter((a) => !taking.has(a.id));
    if (!absent.length) return close(false);
    const one = absent.length === 1;
    const mayAdd = "mayAddAgents" in form.dataset;
    text.textContent =
      `${names(absent)} ${one ? "is" : "are"} not in ${where}, so ${one ? "it" : "they"} will not answer.` +
      (mayAdd ? "" : where.startsWith("#") ? ` Ask an admin of ${where} to add ${one ? "it" : "them"}.` : " Agents are added to channels only.");
    text.classList.remove("is-failed");
    add.hidden = !mayAdd;
    add.disabled = false;
    add.textContent = `Add ${names(absent)}`;
    hint.hidden = false;
    makeRoom(hint.offsetHeight + 12);
  };
  add.addEventListener("click", async () => {
    add.disabled = true;
    try {
      for (const agent of absent) await api("POST", `/api/v1/conversations/${conversationId}/agents/`, { agent: agent.id });
    } catch (error) {
      text.textContent = error.message;
      text.classList.add("is-failed");
      add.disabled = false;
      return;
    }
    close(true);
    refreshRegions("conv-head", "conv-actions").catch(() => {});
  });
  $("[data-mention-hint-close]", hint).addEventListener("click", () => close(true));
  hint.addEventListener("keydown", (event) => event.key === "Escape" && close(true));
  return { check };
}

/** A file as a chip: its name and size (a file not sent yet, or one in a message being sent). */
function fileChip(file, tag = "div") {
  const chip = document.createElement(tag);
  chip.className = "file-chip";
  chip.innerHTML = `<span class="file-chip__icon" aria-hidden="true"><svg viewBox="0 0 16 16" width="16" height="16" fill="none" stroke="currentColor" stroke-width="1.5"><path d="M4 1.75h5.5L13 5.25v9H4z"/><path d="M9.25 1.75v3.75H13"/></svg></span><span class="file-chip__name"></span><span class="file-chip__size"></span>`;
  $(".file-chip__name", chip).textContent = file.name;
  $(".file-chip__size", chip).textContent = fileSize(file.size);
  return chip;
}

const fileSize = (bytes) =>
  bytes < 1024 ? `${bytes} bytes` : bytes < 1024 * 1024 ? `${(bytes / 1024).toFixed(1)} KB` : `${(bytes / 1024 / 1024).toFixed(1)} MB`;

/** The composer's files waiting to be sent: uploaded at once (POST …/files/), each shown with
 * its state; a refused one says why (too large, a type not allowed) and can be removed. */
function fileTray(root, conversationId) {
  const items = new Set(); // {file, li, upload: null | {id, name, size, contentType}, error}
  const pending = new Set(); // uploads under way
  const sync = () => (root.hidden = items.size === 0);
  const add = async (file) => {
    const li = fileChip(file, "li");
    const state = document.createElement("span");
    state.className = "file-chip__state";
    state.setAttribute("role", "status");
    state.textContent = "Uploading…";
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "file-chip__remove";
    remove.setAttribute("aria-label", `Remove ${file.name}`);
    remove.textContent = "×";
    li.append(state, remove);
    const item = { file, li, upload: null, error: null };
    remove.addEventListener("click", () => {
      items.delete(item);
      li.remove();
      sync();
    });
    items.add(item);
    root.append(li);
    sync();
    const done = upload(item, state);
    pending.add(done);
    await done;
    pending.delete(done);
  };
  const upload = async (item, state) => {
    const form = new FormData();
    form.append("file", item.file);
    try {
      const response = await fetch(`/api/v1/conversations/${conversationId}/files/`, {
        method: "POST",
        credentials: "same-origin",
        headers: { Accept: "application/json", "X-CSRFToken": csrfToken() },
        body: form,
      });
      const payload = await response.json().catch(() => null);
      if (!response.ok) throw new ApiError(payload?.error?.message || statusSentence(response.status));
      item.upload = payload;
      state.textContent = "";
      item.li.classList.add("is-ready");
    } catch (error) {
      item.error = error.message || "The upload failed.";
      state.textContent = item.error;
      item.li.classList.add("is-failed");
    }
  };
  return {
    add,
    idle: () => Promise.all([...pending]),
    /** The uploaded files, left in the tray (a post that fails keeps them for the next try). */
    ready: () => [...items].filter((i) => i.upload).map(({ upload }) => ({ id: upload.id, name: upload.name, size: upload.size })),
    /** The uploaded files, out of the tray (refused ones stay, saying why). */
    take() {
      const ready = this.ready();
      for (const item of [...items].filter((i) => i.upload)) {
        items.delete(item);
        item.li.remove();
      }
      sync();
      return ready;
    },
  };
}

/** The file tray of a composer FORM (the conversation's, a reply thread's): files chosen with
 * its attach button, dropped on it or pasted into INPUT (a screenshot from the clipboard) are
 * uploaded to the conversation at once and wait in its [data-attachments] list. */
function acceptFiles(form, input, conversationId) {
  const tray = fileTray($("[data-attachments]", form), conversationId);
  const picker = $("[data-attach-input]", form);
  $("[data-attach]", form).addEventListener("click", () => picker.click());
  picker.addEventListener("change", () => {
    for (const file of picker.files) tray.add(file);
    picker.value = "";
    input.focus();
  });
  const carriesFiles = (event) => [...(event.dataTransfer?.types || [])].includes("Files");
  form.addEventListener("dragover", (event) => {
    if (!carriesFiles(event)) return;
    event.preventDefault();
    form.classList.add("is-dropping");
  });
  form.addEventListener("dragleave", () => form.classList.remove("is-dropping"));
  form.addEventListener("drop", (event) => {
    form.classList.remove("is-dropping");
    if (!event.dataTransfer?.files.length) return;
    event.preventDefault();
    for (const file of event.dataTransfer.files) tray.add(file);
    input.focus();
  });
  input.addEventListener("paste", (event) => {
    const files = [...(event.clipboardData?.files || [])];
    if (!files.length) return; // text pastes as text
    event.preventDefault();
    for (const file of files) tray.add(file);
  });
  return tray;
}

// ---- streaming replies (issue 28): drafts, Stop, Regenerate -----------------------------------

/** An agent's reply as it is written: a "writing…" bubble per turn whose text grows with each
 * message.draft event (set as text, never as HTML), with Stop; replaced by the real message
 * when it is posted. Regenerate on an agent's reply asks for a new answer to the same message. */
function streamingReplies(list, conversationId, nearBottom, toBottom) {
  const bubbles = new Map(); // work id → { li, text, agentId, replyTo, timer }
  const ended = new Set(); // turns just posted: a draft that comes late opens no new bubble
  const drop = (workId) => {
    const bubble = bubbles.get(workId);
    if (!bubble) return;
    clearTimeout(bubble.timer);
    bubble.li.remove();
    bubbles.delete(workId);
    ended.add(workId);
    setTimeout(() => ended.delete(workId), 2000);
  };
  const bubbleFor = (event) => {
    const li = document.createElement("li");
    li.className = "msg msg--agent is-draft";
    li.dataset.draftWork = event.workId;
    li.dataset.draftAgent = event.agent.id;
    const avatar = document.createElement("div");
    const shown = $(`li[data-author-id="${CSS.escape(event.agent.id)}"] .msg__avatar`, list);
    avatar.className = shown ? shown.className : "msg__avatar avatar avatar--agent hue-0";
    avatar.setAttribute("aria-hidden", "true");
    avatar.textContent = (event.agent.name || "?").slice(0, 2).toUpperCase();
    const main = document.createElement("div");
    main.className = "msg__main";
    const meta = document.createElement("div");
    meta.className = "msg__meta";
    const author = document.createElement("span");
    author.className = "msg__author";
    author.textContent = event.agent.name;
    const tag = document.createElement("span");
    tag.className = "tag tag--agent";
    tag.textContent = "Agent";
    const state = document.createElement("span");
    state.className = "msg__state";
    state.dataset.draftState = "";
    state.textContent = "writing…";
    meta.append(author, tag, state);
    const text = document.createElement("div");
    text.className = "msg__text prose";
    text.dataset.draftText = "";
    text.setAttribute("aria-live", "off");
    const actions = document.createElement("div");
    actions.className = "msg__draft-actions";
    actions.append(stopButton(conversationId, event.workId, (words) => (state.textContent = words)));
    main.append(meta, text, actions);
    li.append(avatar, main);
    list.append(li);
    return { li, text, agentId: event.agent.id, replyTo: event.replyTo };
  };

  const draft = (event) => {
    if (event.conversationId !== conversationId || ended.has(event.workId)) return;
    const stick = nearBottom();
    const bubble = bubbles.get(event.workId) || bubbleFor(event);
    bubbles.set(event.workId, bubble);
    bubble.text.textContent = event.text;
    // A turn that ended without a post we heard of (a lost event) does not stay for ever.
    clearTimeout(bubble.timer);
    bubble.timer = setTimeout(() => drop(event.workId), 60000);
    if (stick) toBottom();
  };

  /** A message was posted: the bubble of the turn it ends gives way to it. */
  const arrived = (message) => {
    for (const [workId, bubble] of bubbles) {
      if (bubble.agentId === message.author?.id && bubble.replyTo === message.replyTo) drop(workId);
    }
  };

  list.addEventListener("click", async (event) => {
    const button = event.target.closest("[data-regenerate]");
    if (!button) return;
    const li = button.closest("li[data-message-id]");
    button.disabled = true;
    try {
      await api("POST", `/api/v1/messages/${li.dataset.messageId}/regenerate/`);
      button.textContent = "↻ Regenerating…";
    } catch (error) {
      button.textContent = error.message;
    }
  });

  return { draft, arrived };
}

// ---- message actions: edit, delete, reactions, reply threads, "/" commands (issue 28) ---------

/** "/" at the start of the composer: the commands the server understands, filtered as typed
 * (an ARIA listbox like the @mention one). Returns the composer's keydown hook. */
function slashBox(input, listbox, commands) {
  const box = { matches: [], active: 0 }; // the options shown, and which one is active
  const close = () => {
    listbox.hidden = true;
    box.matches = [];
    input.removeAttribute("aria-activedescendant");
  };
  const render = () => {
    listbox.replaceChildren(
      ...box.matches.map((command, i) => {
        const option = document.createElement("li");
        option.id = `slash-${i}`;
        option.className = "mention-option slash-option";
        option.setAttribute("role", "option");
        option.setAttribute("aria-selected", String(i === box.active));
        const name = document.createElement("strong");
        name.textContent = command.command;
        const description = document.createElement("span");
        description.className = "muted";
        description.textContent = command.description;
        option.append(name, description);
        option.addEventListener("mousedown", (event) => {
          event.preventDefault();
          choose(i);
        });
        return option;
      }),
    );
    listbox.hidden = false;
    input.setAttribute("aria-activedescendant", `slash-${box.active}`);
    // "/task @n" would also suggest @mentions: the commands' list speaks for both.
    const mentions = $("#mention-list");
    if (mentions) mentions.hidden = true;
  };
  const update = () => {
    const typed = input.value.slice(0, input.selectionStart);
    if (!/^\/[\w-]*(\s+@[\w.-]*)?$/.test(typed)) return close();
    const query = typed.toLowerCase().replace(/\s+/g, " ");
    box.matches = commands.filter((c) => c.command.toLowerCase().startsWith(query) && c.insert !== input.value).slice(0, 8);
    box.active = 0;
    box.matches.length ? render() : close();
  };
  const choose = (i) => {
    input.value = box.matches[i].insert;
    input.setSelectionRange(input.value.length, input.value.length);
    close();
    input.focus();
    update(); // "/task " goes on to offer "/task @agent"
  };
  input.addEventListener("input", update);
  input.addEventListener("blur", () => setTimeout(close, 150));
  return listboxKeys(listbox, box, { render, choose, close });
}

/** A composer's unsent text, kept in localStorage per person and conversation (as chat apps keep
 * a draft per channel): put back when the composer is used again, saved as typed. The page calls
 * save() after it empties the box itself (a message sent). */
function composerDraft(input) {
  let key = null;
  const save = () => {
    try {
      input.value.trim() ? localStorage.setItem(key, input.value) : localStorage.removeItem(key);
    } catch {
      /* private mode: the text is simply not kept */
    }
  };
  input.addEventListener("input", () => key && save());
  return {
    /** The box holds the draft of WHERE (a conversation id, or a reply thread's) from now on. */
    use(where) {
      key = `agntchat.draft.${me}.${where}`;
      try {
        input.value = localStorage.getItem(key) || "";
      } catch {
        input.value = "";
      }
    },
    save,
  };
}

/** Edit, delete, react and reply in thread on the conversation's messages, and the thread panel.
 * PLACE(li, root) puts a rendered message in a list; INPUT is the composer, focused after. */
function messageActions({ list, input, place, nearBottom, toBottom }) {
  const panel = $("[data-thread-panel]");
  const origin = $("[data-thread-origin]", panel);
  const replies = $("[data-replies]", panel);
  const replyInput = $("[data-reply-input]", panel);
  const replyError = $("[data-reply-error]", panel);
  const replyDraft = composerDraft(replyInput);
  const roots = [list, origin, replies];
  const idOf = (li) => li.dataset.messageId;

  /** Fetch a message again and put it wherever it shows (the list, the panel). */
  const refreshAll = async (id) => {
    const showing = roots.filter((root) => $(`:scope > [data-message-id="${id}"]`, root));
    if (!showing.length) return;
    const [li] = await renderMessages([id]).catch(() => []);
    if (!li) return;
    showing.forEach((root, i) => place(i ? li.cloneNode(true) : li, root));
    if (showing.includes(origin)) showCount(li);
  };
  const showCount = (li) => {
    const count = $("[data-open-replies]", li)?.textContent || "";
    $("[data-thread-count]", panel).textContent = count || "No replies yet";
  };

  // Inline edit: the message's own text in a box; Enter saves, Shift+Enter a new line, Esc cancels.
  const startEdit = async (li) => {
    if (!li || $("[data-edit-box]", li)) return;
    const root = li.parentElement;
    const message = await api("GET", `/api/v1/messages/${idOf(li)}/`).catch(() => null);
    if (!message) return;
    // Rendered again meanwhile (its own arrival, a reaction): the edit goes into what shows now.
    li = $(`:scope > [data-message-id="${message.id}"]`, root) || li;
    if ($("[data-edit-box]", li)) return;
    const box = document.createElement("div");
    box.className = "msg__edit";
    box.dataset.editBox = "";
    box.innerHTML = `<textarea class="msg__edit-input" rows="2" maxlength="20000" aria-label="Edit message"></textarea>
      <p class="msg__edit-hint"><kbd>Enter</kbd> to save · <kbd>Esc</kbd> to cancel</p><p class="form-error" data-edit-error role="alert" hidden></p>`;
    const area = $("textarea", box);
    area.value = message.body;
    const text = $(".msg__text", li);
    if (text) text.hidden = true;
    (text || $(".msg__meta", li)).after(box);
    li.classList.add("is-editing");
    const finish = () => {
      const host = box.closest("li") || li; // the message may have been rendered again since
      box.remove();
      const shown = $(".msg__text", host);
      if (shown) shown.hidden = false;
      host.classList.remove("is-editing");
      (li.closest("[data-thread-panel]") ? replyInput : input).focus();
    };
    area.addEventListener("keydown", async (event) => {
      if (event.key === "Escape") {
        event.preventDefault();
        finish();
      } else if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        try {
          await api("PATCH", `/api/v1/messages/${idOf(li)}/`, { body: area.value });
          finish();
          await refreshAll(idOf(li));
        } catch (error) {
          $("[data-edit-error]", box).textContent = error.message;
          $("[data-edit-error]", box).hidden = false;
        }
      }
    });
    area.focus();
    area.setSelectionRange(area.value.length, area.value.length);
    area.style.height = `${Math.min(area.scrollHeight + 2, 240)}px`;
  };

  /** My last message still there, in ROOT: what the Up arrow edits. */
  const lastMine = (root) => $$(':scope > li.msg--mine[data-kind="text"]:not(.is-deleted):not(.is-local)', root).at(-1);

  const react = async (button, li) => {
    const emoji = button.dataset.react;
    const mine = button.getAttribute("aria-pressed") === "true";
    button.closest("details")?.removeAttribute("open");
    const url = `/api/v1/messages/${idOf(li)}/reactions/`;
    await (mine ? api("DELETE", `${url}?emoji=${encodeURIComponent(emoji)}`) : api("POST", url, { emoji })).catch(() => null);
    await refreshAll(idOf(li));
  };

  // The thread panel: the message, its replies, a box to reply. Live replies land in the list
  // marked data-thread-of (initConversation places them), the count comes with message.updated.
  let openId = null;
  /** Show or hide the panel (OPEN): on a laptop it narrows the channel's list, which would leave
   * the channel scrolled elsewhere; it stays at the bottom if it was, else on the same message. */
  const showPanel = (open) => {
    const scroller = list.closest("[data-scroller]");
    const stick = nearBottom();
    const top = scroller.getBoundingClientRect().top;
    const anchor = $$(":scope > li", list).find((item) => item.getBoundingClientRect().bottom > top);
    const offset = anchor?.getBoundingClientRect().top;
    panel.hidden = !open;
    document.body.classList.toggle("thread-open", open);
    if (stick) toBottom();
    else if (anchor) scroller.scrollTop += anchor.getBoundingClientRect().top - offset;
  };
  const openThread = async (li) => {
    openId = idOf(li);
    showPanel(true);
    replyDraft.use(`${page.conversationId}.replies.${openId}`);
    origin.replaceChildren();
    replies.replaceChildren();
    delete replies.dataset.threadOf;
    delete replies.dataset.loaded;
    const [copy] = await renderMessages([openId]).catch(() => []);
    if (copy) {
      place(copy, origin);
      showCount(copy);
    }
    const found = await api("GET", `/api/v1/messages/${openId}/replies/?limit=200`).catch(() => null);
    if (found?.thread) {
      replies.dataset.threadOf = found.thread;
      for (const reply of await renderMessages(found.results.map((m) => m.id))) place(reply, replies);
    }
    replies.dataset.loaded = "1";
    replyInput.focus();
  };
  const closeThread = () => {
    showPanel(false);
    openId = null;
    input.focus();
  };
  // Files go to the message's conversation: the server moves a reply's into its thread.
  const replyTray = acceptFiles($("[data-reply-composer]", panel), replyInput, page.conversationId);
  const sendReply = async () => {
    await replyTray.idle(); // files still uploading go with this reply, once stored
    const body = replyInput.value.trim();
    const attachments = replyTray.ready().map((f) => f.id);
    if ((!body && !attachments.length) || !openId) return;
    replyError.hidden = true;
    try {
      const reply = await api("POST", `/api/v1/messages/${openId}/replies/`, { body, ref: newRef(), attachments });
      replyInput.value = "";
      replyDraft.save();
      replyTray.take();
      replies.dataset.threadOf = reply.conversationId;
      const [li] = await renderMessages([reply.id]).catch(() => []);
      if (li) place(li, replies);
    } catch (error) {
      replyError.textContent = error.message;
      replyError.hidden = false;
    }
  };
  $("[data-thread-close]", panel).addEventListener("click", closeThread);
  $("[data-reply-composer]", panel).addEventListener("submit", (event) => {
    event.preventDefault();
    sendReply();
  });
  replyInput.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      sendReply();
    } else if (event.key === "ArrowUp" && !replyInput.value) {
      const mine = lastMine(replies);
      if (mine) {
        event.preventDefault();
        startEdit(mine);
      }
    } else if (event.key === "Escape") {
      closeThread();
    }
  });

  const onClick = async (event) => {
    const li = event.target.closest("li[data-message-id]");
    if (!li || li.classList.contains("is-local")) return;
    const button = event.target.closest("[data-react], [data-edit], [data-delete], [data-reply-thread], [data-open-replies]");
    if (!button) return;
    if (button.matches("[data-react]")) react(button, li);
    else if (button.matches("[data-edit]")) startEdit(li);
    else if (button.matches("[data-reply-thread], [data-open-replies]")) openThread(li);
    else if (button.matches("[data-delete]") && confirm("Delete this message? Everyone will see “message deleted” instead.")) {
      await api("DELETE", `/api/v1/messages/${idOf(li)}/`).catch(() => null);
      await refreshAll(idOf(li));
    }
  };
  list.addEventListener("click", onClick);
  panel.addEventListener("click", onClick);

  return {
    refreshAll,
    /** The composer's Up arrow in an empty box: edit my last message. */
    upArrow(event) {
      if (event.key !== "ArrowUp" || input.value) return false;
      const mine = lastMine(list);
      if (!mine) return false;
      event.preventDefault();
      startEdit(mine);
      return true;
    },
  };
}

const REMIND_FORMAT = "Write it as: /remind @agent in 30 minutes, at 15:30, tomorrow at 9 or tomorrow, then what to remind.";
const UNIT_MS = { m: 60e3, h: 3600e3, d: 86400e3 }; // by the unit's first letter

/** When a "/remind" is due, read from the words after its @agent in the browser's own time:
 * { at, what }, or { error } in words. "at" a time already past today means tomorrow;
 * "tomorrow" with no time means 9:00. */
function remindWhen(words, now = new Date()) {
  const after = words.match(/^in\s+(\d+)\s*(m|min|mins?|minutes?|h|hours?|d|days?)\s+(\S.*)$/is);
  if (after) return { at: new Date(now.getTime() + Number(after[1]) * UNIT_MS[after[2][0].toLowerCase()]), what: after[3] };
  const clock = words.match(/^(tomorrow\s+)?(?:at\s+(\d{1,2})(?::(\d{2}))?\s*(am|pm)?\s+)?(\S.*)$/is);
  if (!clock || !(clock[1] || clock[2])) return { error: REMIND_FORMAT };
  const [, tomorrow, hours = "9", minutes = "00", half, what] = clock;
  if (Number(hours) > (half ? 12 : 23) || (half && Number(hours) < 1) || Number(minutes) > 59) {
    return { error: `${hours}:${minutes}${half || ""} is not a time of day: write it as 15:30, 9 or 9:30pm.` };
  }
  const hour = half ? (Number(hours) % 12) + (/pm/i.test(half) ? 12 : 0) : Number(hours);
  const at = new Date(now);
  at.setHours(hour, Number(minutes), 0, 0);
  if (tomorrow || at <= now) at.setDate(at.getDate() + 1);
  return { at, what };
}

function initConversation() {
  if (page.page !== "conversation") return;
  const conversationId = page.conversationId;
  const list = $("[data-messages]");
  const scroller = $("[data-scroller]");
  const jump = $("[data-jump]");
  const input = $("#composer-input");
  const earlier = $("[data-load-earlier]");
  const capped = $("[data-capped]");
  const targets = JSON.parse($("#mention-data").textContent);
  const working = new Working(
    $("[data-working]"),
    conversationId,
    new Map(targets.filter((t) => t.kind === "agent").map((t) => [t.id, t.name])),
  );

  const nearBottom = () => scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 120;
  const toBottom = () => {
    scroller.scrollTop = scroller.scrollHeight;
    jump.hidden = true;
  };
  const stored = (id, root = list) => $(`:scope > [data-message-id="${id}"]`, root);

  /** Mark runs of messages by one author within five minutes, shown without repeating the name. */
  const group = (root = list) => {
    let previous = null;
    for (const li of $$(":scope > li", root)) {
      const same =
        previous &&
        li.dataset.kind === "text" &&
        previous.dataset.kind === "text" &&
        previous.dataset.authorId === li.dataset.authorId &&
        !li.classList.contains("is-failed") &&
        Date.parse(li.dataset.created) - Date.parse(previous.dataset.created) < 5 * 60 * 1000;
      li.classList.toggle("is-cont", Boolean(same));
      previous = li;
    }
  };

  /** Put a rendered message in its place: replace the same message, or my pending copy of it,
   * or insert it by time (before my messages still being sent). */
  const place = (li, root = list) => {
    const existing = stored(li.dataset.messageId, root);
    const pending = li.dataset.ref && $$(":scope > .is-local", root).find((p) => p.dataset.ref === li.dataset.ref);
    if (existing) {
      const open = $$('[data-thread-toggle][aria-expanded="true"]', existing).map((b) => b.closest("[data-thread-id]").dataset.threadId);
      const openCalls = $$("details[data-call-details][open]", existing).map((d) => d.dataset.callDetails);
      // Issue 28: an edit under way moves into the fresh rendering, focus and all.
      const editing = $("[data-edit-box]", existing);
      const typing = editing?.contains(document.activeElement);
      existing.replaceWith(li);
      if (editing) {
        const text = $(".msg__text", li);
        if (text) text.hidden = true;
        (text || $(".msg__meta", li)).after(editing);
        li.classList.add("is-editing");
        if (typing) $("textarea", editing).focus();
      }
      for (const id of open) toggleThread($(`[data-thread-id="${id}"]`, li), true);
      for (const id of openCalls) $(`details[data-call-details="${id}"]`, li)?.setAttribute("open", "");
    } else if (pending) {
      pending.replaceWith(li);
    } else {
      const when = Date.parse(li.dataset.created);
      let after = null;
      for (const other of $$(":scope > li:not(.is-local)", root).reverse()) {
        if (Date.parse(other.dataset.created) <= when) {
          after = other;
          break;
        }
      }
      if (after) after.after(li);
      else if (root.firstElementChild && !root.firstElementChild.classList.contains("is-local")) root.prepend(li);
      else {
        const firstLocal = $(":scope > .is-local", root);
        firstLocal ? firstLocal.before(li) : root.append(li);
      }
    }
    decorate(li);
    group(root);
    // A call announced before the message it shows under was on the page: fetched again now.
    for (const id of [li.dataset.messageId, li.dataset.replyTo]) {
      if (id && callsAwaiting.delete(id)) refreshCalls(li);
    }
  };

  const refresh = async (id) => {
    const [li] = await renderMessages([id]).catch(() => []);
    if (li) place(li);
  };

  // Tool calls show under the agent's reply to the message they were made for, or under that
  // message until the reply comes (agntchat/ui/tool_calls.py): its rendering is fetched again.
  const callsAwaiting = new Set(); // ids of messages answered, whose calls have no home yet
  const callsHome = (call) =>
    $(`li[data-reply-to="${call.messageId}"][data-author-id="${call.agentId}"]`, list) ||
    $(`li[data-message-id="${call.messageId}"]`, list);
  const refreshCalls = (li) =>
    soon(`calls:${li.dataset.messageId}`, async () => {
      const [fresh] = await renderMessages([li.dataset.messageId]).catch(() => []);
      const now = $(`li[data-message-id="${li.dataset.messageId}"]`, list);
      if (!fresh || !now) return;
      const stick = nearBottom();
      place(fresh, now.parentElement);
      if (stick) toBottom();
      working.render(); // a call waiting for approval, or no longer: the working line says so
    }, 100);

  // After the socket was away: the conversation's calls as REST lists them (its newest 200),
  // against what the page shows of each (its status and its request's); a call missing or
  // changed has its message fetched again, so a call that started meanwhile (an approval
  // waiting) shows too. Shown calls still under way that the list leaves out are fetched again.
  const syncCalls = async () => {
    const known = await api("GET", `/api/v1/conversations/${conversationId}/tool-calls/`).catch(() => null);
    const listed = new Set(known?.results.map((call) => call.id));
    for (const call of $$('[data-call-state="running"], [data-call-state="waiting"]', list)) {
      if (!listed.has(call.dataset.callId)) refreshCalls(call.closest("li[data-message-id]"));
    }
    for (const call of known?.results || []) {
      if (!call.messageId) continue; // a task's: shown on the task's page
      const shown = $(`[data-call-id="${call.id}"]`, list);
      if (shown && shown.dataset.callStatus === call.status && shown.dataset.requestStatus === (call.request?.status || "")) continue;
      const home = callsHome(call);
      if (home) refreshCalls(home);
      else callsAwaiting.add(call.messageId);
    }
  };

  const markRead = (id = conversationId) =>
    soon(`read:${id}`, () => {
      if (document.hidden) return;
      const badge = $(`#sidebar [data-conversation-id="${id}"] [data-unread]`);
      if (badge) {
        badge.hidden = true;
        $("[data-unread-count]", badge).textContent = "0";
        badge.parentElement.classList.remove("has-unread");
      }
      fetch(`/app/conversations/${id}/read/`, {
        method: "POST",
        credentials: "same-origin",
        headers: { "X-CSRFToken": csrfToken() },
      }).catch(() => {});
    }, 400);

  const streaming = streamingReplies(list, conversationId, nearBottom, toBottom);
  const arrive = async (message) => {
    const stick = nearBottom() || message.author?.id === me;
    const [li] = await renderMessages([message.id]).catch(() => []);
    if (!li) return;
    streaming.arrived(message);
    place(li);
    if (stick) toBottom();
    else jump.hidden = false;
    markRead();
    // An agent's reply takes over the tool calls shown under the message it answers.
    const answered = message.replyTo && stored(message.replyTo);
    if (message.author?.type === "agent" && answered && $("[data-tool-calls]", answered)) refreshCalls(answered);
  };

  // History: the REST API pages back with `before`; the server renders the rows.
  let loading = false;
  const loadEarlier = async () => {
    const first = $(":scope > li[data-message-id]", list);
    if (loading || !first || earlier.hidden) return;
    loading = true;
    busy(earlier, true, "Loading earlier messages…");
    try {
      const pageOf = await api("GET", `/api/v1/conversations/${conversationId}/messages/?before=${first.dataset.messageId}&limit=30`);
      const items = await renderMessages(pageOf.results.map((m) => m.id));
      const height = scroller.scrollHeight;
      list.prepend(...items);
      decorate(list);
      group();
      scroller.scrollTop += scroller.scrollHeight - height;
      if (!pageOf.hasMore) {
        earlier.hidden = true;
        $("[data-history-start]").hidden = false;
      }
    } catch (error) {
      earlier.dataset.label = `Could not load earlier messages (${error.message}) — try again`;
    } finally {
      busy(earlier, false);
      loading = false;
    }
  };
  earlier.addEventListener("click", loadEarlier);
  new IntersectionObserver((entries) => entries.some((e) => e.isIntersecting) && loadEarlier(), {
    root: scroller,
    rootMargin: "200px 0px 0px 0px",
  }).observe(earlier);

  // Sending: shown at once, confirmed by the server, retried with the same ref (never doubled),
  // kept in localStorage until confirmed (never silently lost, even across a reload).
  const outboxKey = `agntchat.outbox.${conversationId}`;
  const outbox = {
    all: () => {
      try {
        return JSON.parse(localStorage.getItem(outboxKey)) || [];
      } catch {
        return [];
      }
    },
    save(items) {
      try {
        items.length ? localStorage.setItem(outboxKey, JSON.stringify(items)) : localStorage.removeItem(outboxKey);
      } catch {
        /* private mode: the message stays on screen with its Retry button */
      }
    },
    put(ref, text, files = []) {
      this.save([...this.all().filter((i) => i.ref !== ref), { ref, text, files }]);
    },
    drop(ref) {
      this.save(this.all().filter((i) => i.ref !== ref));
    },
  };

  const localItem = (ref, text, files = []) => {
    const li = document.createElement("li");
    li.className = "msg msg--person msg--mine is-local";
    Object.assign(li.dataset, { ref, text, files: JSON.stringify(files), authorId: me, authorType: "person", kind: "text", created: new Date().toISOString() });
    li.innerHTML = `<div class="msg__avatar avatar avatar--person hue-2" aria-hidden="true"></div>
      <div class="msg__main"><div class="msg__meta"><span class="msg__author"></span>
      <span class="msg__state" data-state role="status"></span></div>
      <div class="msg__text prose"><p class="pre-wrap" data-text></p></div>
      <div class="msg__failure" data-failure hidden><span class="form-error" data-failure-text></span>
      <button type="button" class="button button--small" data-retry>Retry</button>
      <button type="button" class="button button--small button--ghost" data-discard>Discard</button></div></div>`;
    $(".msg__avatar", li).textContent = initialsOf(page.userName);
    $(".msg__author", li).textContent = page.userName;
    $("[data-text]", li).textContent = text;
    for (const file of files) $("[data-failure]", li).before(fileChip(file));
    // Above the replies still being written: they are stored after it, once posted.
    const writing = $(":scope > .is-draft", list);
    writing ? writing.before(li) : list.append(li);
    group();
    return li;
  };

  const setLocalState = (li, state, message = "") => {
    li.classList.toggle("is-pending", state === "pending");
    li.classList.toggle("is-failed", state === "failed");
    $("[data-state]", li).textContent = state === "pending" ? "Sending…" : state === "failed" ? "Not sent" : "";
    $("[data-failure]", li).hidden = state !== "failed";
    $("[data-failure-text]", li).textContent = message;
  };

  // A person's messages are stored in the order typed: each shows at once ("Sending…"), but
  // they are posted one at a time, the next once the server has answered the one before.
  let posting = Promise.resolve();
  const send = (text, ref = newRef(), files = []) => {
    const li = $$(":scope > .is-local", list).find((p) => p.dataset.ref === ref) || localItem(ref, text, files);
    setLocalState(li, "pending");
    toBottom();
    outbox.put(ref, text, files);
    const posted = posting.then(() => post(li, text, ref, files));
    posting = posted.catch(() => {});
    return posted;
  };

  const post = async (li, text, ref, files) => {
    let message;
    try {
      const attachments = files.map((f) => f.id);
      message = await api("POST", `/api/v1/conversations/${conversationId}/messages/`, { body: text, ref, attachments });
    } catch (error) {
      if (error.status && error.status < 500 && error.status !== 429) outbox.drop(ref);
      setLocalState(li, "failed", error.message);
      return;
    }
    outbox.drop(ref);
    capped.hidden = true;
    // Shown while the next message is already on its way.
    refresh(message.id).then(() => working.expect(message));
  };

  list.addEventListener("click", async (event) => {
    const local = event.target.closest(".is-local");
    if (local && event.target.closest("[data-retry]")) send(local.dataset.text, local.dataset.ref, JSON.parse(local.dataset.files || "[]"));
    if (local && event.target.closest("[data-discard]")) {
      outbox.drop(local.dataset.ref);
      local.remove();
      input.focus();
    }
    const toggle = event.target.closest("[data-thread-toggle]");
    if (toggle) toggleThread(toggle.closest("[data-thread-id]"));
    const button = event.target.closest("[data-card-action]");
    if (button && !button.disabled) cardAction(button);
    const decision = event.target.closest("[data-decide]");
    if (decision && !decision.disabled) decide(decision, () => refreshCalls(decision.closest("li[data-message-id]")));
  });
  list.addEventListener("message:refresh", (event) => refresh(event.target.dataset.messageId));
  list.addEventListener("keydown", (event) => {
    const card = event.key === "Escape" && event.target.closest("[data-thread-id]");
    if (!card || $("[data-thread-toggle]", card).getAttribute("aria-expanded") !== "true") return;
    event.preventDefault();
    toggleThread(card, false);
    $("[data-thread-toggle]", card).focus();
  });

  const cardAction = async (button) => {
    const li = button.closest("li[data-message-id]");
    const error = $("[data-card-error]", li);
    error.hidden = true;
    busy(button, true, `${button.textContent}…`);
    try {
      const result = await api("POST", `/api/v1/messages/${li.dataset.messageId}/card-actions/`, {
        itemIndex: Number(button.dataset.itemIndex),
        actionId: button.dataset.cardAction,
      });
      // A mailbox button (Send, Save draft) is done here and now: no agent is at work on it.
      if (result?.work) working.clicked(li.dataset.authorId, $(".msg__author", li)?.textContent || "The agent", result.work);
      await refresh(li.dataset.messageId);
    } catch (err) {
      busy(button, false);
      error.textContent = err.message;
      error.hidden = false;
      error.scrollIntoView({ block: "nearest" });
    }
  };

  // Side threads open inline: their messages come from the same API and the same fragments.
  const toggleThread = async (card, open) => {
    const toggle = $("[data-thread-toggle]", card);
    const body = $(".thread-card__body", card);
    const expand = open ?? toggle.getAttribute("aria-expanded") !== "true";
    toggle.setAttribute("aria-expanded", String(expand));
    body.hidden = !expand;
    // Opened by a click (not restored after a refresh): its body comes into view, the last
    // card's included, and Esc closes it again.
    const reveal = () => open === undefined && expand && card.scrollIntoView({ block: "nearest" });
    reveal();
    const target = $("[data-thread-messages]", card);
    if (!expand || !target || target.dataset.loaded) return;
    target.dataset.loaded = "1";
    const note = $("[data-thread-loading]", card);
    try {
      const history = await api("GET", `/api/v1/conversations/${card.dataset.threadId}/messages/?limit=100`);
      for (const li of await renderMessages(history.results.map((m) => m.id))) place(li, target);
      note.hidden = true;
      markRead(card.dataset.threadId);
      reveal();
    } catch (error) {
      delete target.dataset.loaded;
      note.textContent = error.status === 404 ? "Only the thread's participants can read it." : error.message;
    }
  };

  // Files: each uploaded as soon as it is chosen, waiting in the tray under the box; the next
  // message sent carries them (by id). Pictures then show in the conversation.
  const tray = acceptFiles($("[data-composer]"), input, conversationId);

  // The composer: Enter sends, Shift+Enter is a new line, @ suggests people and agents.
  const mentionKeys = mentionBox(input, $("#mention-list"), targets);
  const hint = mentionHint($("[data-composer]"), input, targets, conversationId);
  // Issue 28: "/" commands, and edit/delete/react/reply on the messages.
  const slashKeys = slashBox(input, $("[data-slash-list]"), JSON.parse($("#slash-data").textContent));
  const actions = messageActions({ list, input, place, nearBottom, toBottom });
  const autosize = () => {
    input.style.height = "auto";
    input.style.height = `${Math.min(input.scrollHeight, 220)}px`;
  };
  const draft = composerDraft(input);
  draft.use(conversationId);
  autosize();
  // "/remind @agent in 30 minutes|at 15:30|tomorrow at 9|tomorrow what": a reminder for one's own
  // agent (routines' REST), said under the box; not a message.
  const composerStatus = $("[data-composer-status]");
  const remind = async (text) => {
    const say = (sentence, failed) => {
      composerStatus.textContent = sentence;
      composerStatus.classList.toggle("is-failed", failed);
      composerStatus.hidden = false;
    };
    const parts = text.match(/^\/remind\s+@(\S+)\s+(.*)$/is);
    const when = parts ? remindWhen(parts[2]) : { error: REMIND_FORMAT };
    if (when.error) {
      say(when.error, true);
      return false;
    }
    const agent = targets.find((t) => t.kind === "agent" && t.handle === parts[1].toLowerCase());
    if (!agent) {
      say(`No agent @${parts[1]} here.`, true);
      return false;
    }
    const { at, what } = when;
    try {
      await api("POST", "/api/v1/reminders/", { agent: agent.id, workspace: $(".app").dataset.workspaceId, text: what.trim(), at: at.toISOString() });
    } catch (error) {
      say(error.message, true);
      return false;
    }
    const day = at.toDateString() === new Date().toDateString() ? "" : ` ${at.toLocaleDateString([], { weekday: "long" })}`;
    say(`Reminder set: ${agent.name} will remind you${day} at ${at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })}.`, false);
    return true;
  };

  const submit = async () => {
    await tray.idle(); // files still uploading go with this message, once stored
    const text = input.value.trim();
    const searched = text.match(/^\/search\s+(.+)$/s);
    if (searched) {
      // Not a message: the workspace's search page, for the words after it.
      const workspaceId = $(".app").dataset.workspaceId;
      input.value = "";
      draft.save();
      location.assign(`/w/${workspaceId}/search/?q=${encodeURIComponent(searched[1])}`);
      return;
    }
    if (/^\/remind(\s|$)/i.test(text)) {
      if (await remind(text)) {
        input.value = "";
        draft.save();
        autosize();
      }
      return;
    }
    const files = tray.take();
    if (!text && !files.length) return;
    input.value = "";
    draft.save();
    autosize();
    send(text, newRef(), files);
    hint.check(text);
  };
  input.addEventListener("input", autosize);
  input.addEventListener("keydown", (event) => {
    if (slashKeys(event)) return; // issue 28: before @mentions, whose list it hides
    if (mentionKeys(event)) return;
    if (actions.upArrow(event)) return; // issue 28
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      submit();
    }
  });
  $("[data-composer]").addEventListener("submit", (event) => {
    event.preventDefault();
    submit();
  });

  // Typing: announced at most once every 3 s while typing; someone else's shows for 5 s after
  // their last frame, and goes as soon as their message arrives.
  let typingSent = 0;
  input.addEventListener("input", () => {
    if (!input.value.trim() || Date.now() - typingSent < 3000) return;
    if (sendLive({ type: "typing", conversationId })) typingSent = Date.now();
  });
  const typists = new Map();
  const typingLine = $("[data-typing]");
  const typing = (user, on) => {
    clearTimeout(typists.get(user.id)?.timer);
    if (on) typists.set(user.id, { name: user.name, timer: setTimeout(() => typing(user, false), 5000) });
    else typists.delete(user.id);
    const names = [...typists.values()].map((t) => t.name);
    typingLine.textContent =
      names.length > 2 ? "Several people are typing…" : names.length ? `${names.join(" and ")} ${names.length > 1 ? "are" : "is"} typing…` : "";
  };

  // A person publishes an artifact: the dialog posts it; its chip is placed like any message.
  const dialog = $("#new-artifact");
  const artifactForm = $("form", dialog);
  const syncLanguage = () => {
    const code = $("[data-artifact-kind]", dialog).value === "code";
    $("[data-artifact-language]", dialog).hidden = !code;
    $("#artifact-language").disabled = !code; // disabled fields are not sent
  };
  $("[data-artifact-kind]", dialog).addEventListener("change", syncLanguage);
  $("[data-open-artifact]").addEventListener("click", () => {
    clearFormErrors(artifactForm);
    dialog.showModal();
  });
  for (const button of $$("[data-dialog-close]", dialog)) button.addEventListener("click", () => dialog.close());
  afterSubmit["artifact-published"] = async (form, result) => {
    form.reset();
    syncLanguage();
    dialog.close();
    await refresh(result.messageId);
    toBottom();
  };

  // Keyboard: arrows walk the messages once the list has focus.
  list.addEventListener("keydown", (event) => {
    const items = $$(":scope > li", list);
    if (!items.length || !["ArrowUp", "ArrowDown", "Home", "End"].includes(event.key)) return;
    if (event.target.closest("input, textarea, select")) return;
    const current = items.indexOf(event.target.closest(":scope > li"));
    let next = { Home: 0, End: items.length - 1 }[event.key];
    if (next === undefined) {
      next = current === -1 ? items.length - 1 : current + (event.key === "ArrowDown" ? 1 : -1);
    }
    if (items[next]) {
      event.preventDefault();
      items[next].focus();
    }
  });
  scroller.addEventListener("scroll", () => nearBottom() && (jump.hidden = true));
  jump.addEventListener("click", () => {
    toBottom();
    input.focus();
  });

  const catchUp = async () => {
    const last = $$(":scope > li[data-message-id]", list).at(-1);
    if (!last) return;
    const newer = await api("GET", `/api/v1/conversations/${conversationId}/messages/?after=${last.dataset.messageId}&limit=200`).catch(() => null);
    for (const li of await renderMessages(newer?.results.map((m) => m.id) || [])) place(li);
  };

  onLive(async (event) => {
    switch (event.type) {
      case "message.created": {
        const { message } = event;
        if (message.conversationId === conversationId) {
          if (message.author?.type === "person") typing(message.author, false);
          await arrive(message);
          if (message.author?.type === "agent") working.spoke(message.author.id);
          if (message.author?.type === "person" && message.kind === "text") {
            capped.hidden = true;
            if (message.author.id !== me) working.expect(message);
          }
        } else {
          const thread = $(`[data-thread-of="${message.conversationId}"][data-loaded]`);
          if (thread) {
            const [li] = await renderMessages([message.id]).catch(() => []);
            if (li) place(li, thread);
            markRead(message.conversationId);
          }
        }
        break;
      }
      case "message.updated":
        actions.refreshAll(event.message.id); // the list and the thread panel (issue 28)
        break;
      case "conversation.capped":
        if (event.conversationId === conversationId) {
          $("[data-capped-text]").textContent = `${event.streak} agent messages in a row reached this conversation's limit of ${event.cap}.`;
          capped.hidden = false;
        }
        break;
      case "conversation.updated":
        if (event.conversation?.id === conversationId) {
          capped.hidden = !event.conversation.capped;
          // Agents may have joined: the header lists them and what can still be added.
          soon("conv-head", () => refreshRegions("conv-head", "conv-actions").catch(() => {}), 300);
        }
        break;
      case "typing":
        if (event.conversationId === conversationId && event.user?.id !== me) typing(event.user, true);
        break;
      case "message.draft":
        streaming.draft(event);
        working.render();
        break;
      case "task.created":
      case "task.progress":
      case "task.finished":
        working.task(event);
        break;
      case "tool.updated": {
        const home = callsHome(event.call);
        if (home) refreshCalls(home);
        else if (event.call.conversationId === conversationId && event.call.messageId) callsAwaiting.add(event.call.messageId);
        break;
      }
      case "live.connected":
        // Messages first: a call that started meanwhile may show under one of them.
        await catchUp().catch(() => {});
        await syncCalls();
        break;
    }
  });

  // Messages still in the outbox from an earlier visit: show them, unsent, with Retry.
  for (const item of outbox.all()) {
    if ($$(":scope > li", list).some((li) => li.dataset.ref === item.ref)) {
      outbox.drop(item.ref);
      continue;
    }
    setLocalState(localItem(item.ref, item.text, item.files || []), "failed", "This message was not confirmed before you left the page.");
  }
  // Turns under way when the page was rendered: a late joiner sees each reply so far at once.
  for (const event of JSON.parse($("#draft-data").textContent)) streaming.draft(event);
  group();
  toBottom();
  markRead();
  document.addEventListener("visibilitychange", () => markRead());
  working.resume();
  if (!matchMedia("(pointer: coarse)").matches) input.focus();
}

// ---- tasks, agents, artifacts: live regions ---------------------------------------------------

/** One progress event in words (as templates/agents/_event_text.html says it). */
function eventText(data) {
  if (data.message) return data.message;
  if (data.kind === "session") return "Session started";
  if (data.kind === "text_delta") return `Writing: ${data.text || ""}`;
  if (data.tool || data.name) return `Using tool ${data.tool || data.name}`;
  if (data.text) return `${data.kind || "text"}: ${data.text}`;
  return data.kind || JSON.stringify(data);
}

// The regions of each live page, fetched again when its socket (re)connects.
const LIVE_REGIONS = { tasks: ["tasks"], task: ["task"], agents: ["agents"], artifact: ["artifact", "comments"] };

function initLivePages() {
  if (page.page === "task") {
    // The approval prompt of a call waiting on this task: decided through the REST API, then
    // the page's task region shows the call as it now stands.
    document.addEventListener("click", (event) => {
      const decision = event.target.closest("[data-region=task] [data-decide]");
      if (decision && !decision.disabled) decide(decision, () => soon("task", () => refreshRegions("task"), 0));
    });
  }
  onLive((event) => {
    if (event.type === "live.connected") {
      if (LIVE_REGIONS[page.page]) refreshRegions(...LIVE_REGIONS[page.page]);
      return;
    }
    const task = event.task;
    // A tool call made for a task (tool.updated) changes that task's page too.
    const taskId = task?.id || event.taskId || event.call?.taskId;
    if (page.page === "tasks" && event.type.startsWith("task.")) {
      const row = $(`[data-task-id="${taskId}"] [data-task-progress]`);
      if (event.type === "task.progress" && row) {
        row.textContent = eventText(event.data || {});
      } else {
        soon("tasks", () => refreshRegions("tasks"));
      }
    }
    if (page.page === "task" && taskId === page.taskId) {
      if (event.type === "task.progress") {
        const item = document.createElement("li");
        const seq = document.createElement("span");
        seq.className = "timeline__seq";
        seq.textContent = `#${event.seq}`;
        const text = document.createElement("span");
        text.className = "timeline__text";
        text.textContent = eventText(event.data || {});
        item.append(seq, " ", text);
        $("[data-no-events]")?.remove();
        $("[data-events]")?.prepend(item);
      } else {
        soon("task", () => refreshRegions("task"), 150);
      }
    }
    if (page.page === "agents" && event.type.startsWith("task.")) soon("agents", () => refreshRegions("agents"), 1000);
    if (page.page === "artifact" && event.artifact?.id === page.artifactId) {
      if (event.type === "artifact.commented") refreshRegions("comments");
      if (event.type === "artifact.updated") refreshRegions("artifact");
    }
  });
}

initFurniture();
initForms();
initShell();
initConversation();
initLivePages();
connectLive();
