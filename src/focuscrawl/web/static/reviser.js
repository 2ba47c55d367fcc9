// The reviser: a page's true topic (or "not relevant") goes to the portal, which keeps it in the crawl.
"use strict";
(function () {
  const list = document.getElementById("review");
  if (!list) return;
  list.addEventListener("click", async (event) => {
    const button = event.target.closest("button.label");
    if (!button) return;
    const item = button.closest("li");
    const select = item.querySelector("select.relabel");
    const label = select ? select.value : button.dataset.label;
    const response = await fetch("/api/labels", {
      method: "POST",
      headers: {"Content-Type": "application/json", "X-CSRF-Token": list.dataset.csrf},
      body: JSON.stringify({crawl: list.dataset.crawl, url_id: Number(item.dataset.urlId), label: label}),
    });
    item.querySelector(".marked").textContent = response.ok ? `reviewed: ${label || "not relevant"}` : "not saved";
  });
})();
