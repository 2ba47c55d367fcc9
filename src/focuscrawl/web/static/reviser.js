// The reviser: a page's true topic (or "not relevant") goes to the portal, which keeps it in the crawl.
"use strict";
(function () {
  const list = document.getElementById("review");
  if (!list) return;
  window.portalOnButton(list, "button.label", async (button, item) => {
    const select = item.querySelector("select.relabel");
    const label = select ? select.value : button.dataset.label;
    const response = await window.portalPost("/api/labels", list.dataset.csrf, {
      crawl: list.dataset.crawl, url_id: Number(item.dataset.urlId), label: label,
    });
    item.querySelector(".marked").textContent = response.ok ? `reviewed: ${label || "not relevant"}` : "not saved";
  });
})();
