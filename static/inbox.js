// The inbox in every workspace page: the unread count on the sidebar's Inbox badge and in the
// tab's title, kept live from the page's socket (app.js passes its events on as "agntchat:live");
// desktop notifications while the tab is hidden, once the person allowed them; and on the inbox
// page, its list: new items arrive live, and new text when the message they quote is edited or
// deleted; a click marks read and goes there, "Mark all read".

const $ = (selector, root = document) => root.querySelector(selector);
const $$ = (selector, root = document) => [...root.querySelectorAll(selector)];
const csrfToken = () => $('meta[name="csrf-token"]')?.content || "";
const KIND_LABELS = { mention: "Mention", direct: "Direct", approval: "Approval", reminder: "Reminder" };
const KIND_ICONS = { mention: "@", direct: "✉", approval: "⚑", reminder: "⏰" };

let unread = parseInt($("[data-inbox-count]")?.textContent, 10) || 0;

function post(url) {
  return fetch(url, {
    method: "POST",
    credentials: "same-origin",
    keepalive: true, // a mark read still reaches the server as the page moves on
    headers: { Accept: "application/json", "X-CSRFToken": csrfToken() },
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

function markShownRead(ids) {
  for (const id of ids) {
    const item = $(`[data-notification-id="${id}"]`);
    if (!item) continue;
    item.classList.remove("is-unread");
    $(".inbox-item__dot", item)?.remove();
  }
}

/** A new item at the top of the inbox page's list (all of it text, never HTML). */
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
  item.append(icon, link, dot);
  list.prepend(item);
  $("[data-inbox-empty]")?.setAttribute("hidden", "");
}

/** New text for items the inbox shows (the message they quote was edited or deleted). */
function showTexts(notifications) {
  for (const n of notifications) {
    const text = $(`[data-notification-id="${n.id}"] .inbox-item__text`);
    if (text) text.textContent = n.text;
  }
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
