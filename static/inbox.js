// The inbox in every workspace page: the unread count on the sidebar's Inbox badge and in the
// tab's title, kept live from the page's socket (app.js passes its events on as "agntchat:live");
// desktop notifications while the tab is hidden, once the person allowed them; and on the inbox
// page, its list: new items arrive live, and new text when the message they quote is edited or
// deleted or the approval they ask for is decided; Approve and Deny on an approval waiting; a
// click marks read and goes there, "Mark all read".

const $ = (selector, root = document) => root.querySelector(selector);
const $$ = (selector, root = document) => [...root.querySelectorAll(selector)];
const csrfToken = () => $('meta[name="csrf-token"]')?.content || "";
const KIND_LABELS = { mention: "Mention", direct: "Direct", approval: "Approval", reminder: "Reminder" };
const KIND_ICONS = { mention: "@", direct: "✉", approval: "⚑", reminder: "⏰" };

let unread = parseInt($("[data-inbox-count]")?.textContent, 10) || 0;

function post(url, body) {
  return fetch(url, {
    method: "POST",
    credentials: "same-origin",
    keepalive: true, // a mark read still reaches the server as the page moves on
    headers: {
      Accept: "application/json",
      "X-CSRFToken": csrfToken(),
      ...(body === undefined ? {} : { "Content-Type": "application/json" }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

/** The count everywhere it shows: the badge, and "(3) " before the tab's title. */
function showCount(count) {
  unread = Math.max(0, count);
  const label = unread > 99 ? "99+" : String(unread);
  for (const el of $$("[data-inbox-count]")) el.textContent = label;
  for (const el of $$("[data-inbox-badge]")) el.hidden = unread === 0;
  const title = document.title.replace(/^\(\d+\+?\) /, "");
  document.title = unread ? `(${label}) ${title}` : title;
}

/** The conversation this page shows, when the person is looking at it (app.js marks what arrives
 * there read as it comes), or "". */
function conversationInView() {
  const { page, conversationId } = document.body.dataset;
  return page === "conversation" && !document.hidden ? conversationId || "" : "";
}

function markShownRead(ids) {
  for (const id of ids) {
    const item = $(`[data-notification-id="${id}"]`);
    if (!item) continue;
    item.classList.remove("is-unread");
    $(".inbox-item__dot", item)?.remove();
  }
}

/** Approve and Deny for the approval request REQUEST_ID, as the inbox page draws them. */
function decisionButtons(requestId) {
  const decision = document.createElement("div");
  decision.className = "inbox-item__decision";
  decision.dataset.approval = requestId;
  decision.setAttribute("role", "group");
  decision.setAttribute("aria-label", "Approve or deny");
  const actions = document.createElement("div");
  actions.className = "approval__actions";
  for (const [choice, label, style] of [["approve", "Approve", "primary"], ["deny", "Deny", "danger"]]) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = `button button--small button--${style}`;
    button.dataset.inboxDecide = choice;
    button.textContent = label;
    actions.append(button);
  }
  const error = document.createElement("p");
  error.className = "form-error";
  error.dataset.approvalError = "";
  error.setAttribute("role", "alert");
  error.hidden = true;
  decision.append(actions, error);
  return decision;
}

/** A new item at the top of the inbox page's list (all of it text, never HTML). An approval's
 * has Approve and Deny: the server sends it only to those who may decide, while it waits. */
function showItem(n) {
  const list = $("[data-inbox-list]");
  if (!list || $(`[data-notification-id="${n.id}"]`, list)) return;
  const item = document.createElement("li");
  item.className = "inbox-item is-unread";
  item.dataset.notificationId = n.id;
  item.dataset.kind = n.kind;
  const icon = document.createElement("span");
  icon.className = "inbox-item__icon";
  icon.setAttribute("aria-hidden", "true");
  icon.textContent = KIND_ICONS[n.kind] || "•";
  const link = document.createElement("a");
  link.className = "inbox-item__link";
  link.href = n.link;
  link.dataset.notificationLink = "";
  const text = document.createElement("span");
  text.className = "inbox-item__text";
  text.textContent = n.text;
  const meta = document.createElement("span");
  meta.className = "inbox-item__meta small muted";
  meta.textContent = `${KIND_LABELS[n.kind] || n.kind} · ${new Date(n.createdAt).toLocaleString([], { day: "numeric", month: "short", hour: "2-digit", minute: "2-digit" })}`;
  link.append(text, meta);
  const dot = document.createElement("span");
  dot.className = "inbox-item__dot";
  dot.title = "Unread";
  if (n.kind === "approval" && n.targetId) {
    const body = document.createElement("div");
    body.className = "inbox-item__body stack";
    body.append(link, decisionButtons(n.targetId));
    item.append(icon, body, dot);
  } else {
    item.append(icon, link, dot);
  }
  list.prepend(item);
  $("[data-inbox-empty]")?.setAttribute("hidden", "");
}

/** New text for items the inbox shows: the message they quote was edited or deleted, or the
 * approval they ask for was decided or expired (its only change: its buttons go). */
function showTexts(notifications) {
  for (const n of notifications) {
    const item = $(`[data-notification-id="${n.id}"]`);
    if (!item) continue;
    $(".inbox-item__text", item).textContent = n.text;
    if (n.kind === "approval") $("[data-approval]", item)?.remove();
  }
}

/** Approve or Deny on an approval's item, through the REST call the conversation's approval
 * prompt makes. The server says who may decide and until when: a refusal shows in its words.
 * Once decided, the item's new text arrives live (notification.updated). */
async function decide(button) {
  const decision = button.closest("[data-approval]");
  const error = $("[data-approval-error]", decision);
  const buttons = $$("[data-inbox-decide]", decision);
  for (const other of buttons) other.disabled = true;
  error.hidden = true;
  let response = null;
  try {
    response = await post(`/api/v1/permission-requests/${decision.dataset.approval}/decision/`, {
      decision: button.dataset.inboxDecide,
    });
  } catch {
    /* said below */
  }
  if (response?.ok) {
    decision.remove();
    return;
  }
  const body = response ? await response.json().catch(() => null) : null;
  error.textContent =
    body?.error?.message ||
    (response ? `The request failed (${response.status}).` : "The server could not be reached. Check your connection and try again.");
  error.hidden = false;
  for (const other of buttons) other.disabled = false;
}

function desktopNotify(n) {
  if (!document.hidden || !("Notification" in window) || Notification.permission !== "granted") return;
  const notice = new Notification("agntchat", { body: n.text, tag: n.id });
  notice.addEventListener("click", () => {
    window.focus();
    post(`/api/v1/notifications/${n.id}/read/`);
    location.assign(n.link);
  });
}

// Live counts seen so far: a count fetched meanwhile may have been read before the newest of
// them, and must not undo it (each live event carries the count as it stood then).
let liveCounts = 0;

async function refreshCount() {
  const before = liveCounts;
  try {
    const response = await fetch("/api/v1/notifications/?unread=true&limit=1", {
      credentials: "same-origin",
      headers: { Accept: "application/json" },
    });
    const body = response.ok ? await response.json() : null;
    if (body && liveCounts === before) showCount(body.unreadCount);
  } catch {
    /* the next event or reconnect tries again */
  }
}

/** The "Enable desktop notifications" controls: offered until the browser has an answer. */
function showDesktopState() {
  const supported = "Notification" in window;
  const permission = supported ? Notification.permission : "unsupported";
  const words = {
    granted: "Desktop notifications are on for this browser.",
    denied: "Desktop notifications are blocked in this browser's settings for this site.",
    unsupported: "This browser cannot show desktop notifications.",
    default: "",
  };
  for (const button of $$("[data-desktop-notify]")) button.hidden = permission !== "default";
  for (const el of $$("[data-desktop-state]")) el.textContent = words[permission];
}

document.addEventListener("agntchat:live", ({ detail: event }) => {
  if (event.type === "notification.created") {
    liveCounts += 1;
    const inView = event.notification.conversationId && event.notification.conversationId === conversationInView();
    if (inView) {
      // What arrives in the conversation the person is looking at is read as it comes: not
      // counted, not even for a moment.
      showCount(event.unreadCount - 1);
      post(`/api/v1/notifications/${event.notification.id}/read/`).catch(() => null);
      return;
    }
    showCount(event.unreadCount);
    showItem(event.notification);
    desktopNotify(event.notification);
  } else if (event.type === "notification.read") {
    liveCounts += 1;
    showCount(event.unreadCount);
    markShownRead(event.notificationIds);
  } else if (event.type === "notification.updated") {
    showTexts(event.notifications);
  } else if (event.type === "live.connected") {
    refreshCount(); // what happened while the socket was away reached nobody here
  }
});

document.addEventListener("click", async (event) => {
  const choice = event.target.closest("[data-inbox-decide]");
  if (choice) {
    if (!choice.disabled) decide(choice);
    return;
  }
  const link = event.target.closest("[data-notification-link]");
  if (link) {
    const item = link.closest("[data-notification-id]");
    if (!item.classList.contains("is-unread")) return;
    const sameTab = !(event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0);
    if (sameTab) event.preventDefault();
    const marked = post(`/api/v1/notifications/${item.dataset.notificationId}/read/`).catch(() => null);
    markShownRead([item.dataset.notificationId]);
    showCount(unread - 1);
    if (sameTab) {
      await marked;
      location.assign(link.href);
    }
    return;
  }
  if (event.target.closest("[data-inbox-read-all]")) {
    const response = await post("/api/v1/notifications/read-all/").catch(() => null);
    if (response?.ok) {
      markShownRead($$(".inbox-item.is-unread").map((item) => item.dataset.notificationId));
      showCount(0);
    }
    return;
  }
  if (event.target.closest("[data-desktop-notify]") && "Notification" in window) {
    await Notification.requestPermission();
    showDesktopState();
  }
});

// The sidebar is drawn again now and then (app.js): its new badge shows the count as it stands.
const sidebar = $("#sidebar");
if (sidebar) new MutationObserver(() => showCount(unread)).observe(sidebar, { childList: true });

showCount(unread);
showDesktopState();
