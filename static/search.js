// Search (templates/ui/search.html): a result links to its message as #msg-<id>. On the
// conversation page, bring that message into view and mark it: once the page has scrolled to
// its newest messages, and, for a message older than those shown, after paging back with the
// page's own "Load earlier messages" until it is there (or the history's start).
const wanted = location.hash.startsWith("#msg-") ? location.hash.slice(1) : "";
const earlier = document.querySelector("[data-load-earlier]");
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const oldest = () => document.querySelector("li[data-message-id]")?.dataset.messageId;

async function pageBackTo(id) {
  for (let pages = 0; pages < 100 && !document.getElementById(id); pages++) {
    if (!earlier || earlier.hidden) return;
    const before = oldest();
    earlier.click();
    // Until the page's history loader prepended a page (or gave up).
    for (let waited = 0; waited < 100 && oldest() === before && !earlier.hidden; waited++) await sleep(100);
    if (oldest() === before) return;
  }
}

async function reveal(id) {
  await new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve)));
  await pageBackTo(id);
  const found = document.getElementById(id);
  if (!found) return;
  found.classList.add("msg--found");
  found.scrollIntoView({ block: "center" });
}

if (wanted) reveal(wanted);
