// Search (templates/ui/search.html): a result links to its message as #msg-<id>. The
// conversation page scrolls to its newest messages once loaded; bring the one searched for
// into view after that, and mark it.
const target = location.hash.startsWith("#msg-") ? document.getElementById(location.hash.slice(1)) : null;
if (target) {
  const reveal = () => {
    target.classList.add("msg--found");
    target.scrollIntoView({ block: "center" });
  };
  requestAnimationFrame(() => requestAnimationFrame(reveal));
}
