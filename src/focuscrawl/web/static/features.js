// The reviser's feature space: exclude a term from the critic's next training, or include it again.
"use strict";
(function () {
  ["features", "excluded"].forEach((id) => {
    const list = document.getElementById(id);
    if (!list) return;
    window.portalOnButton(list, "button.term", async (button, item) => {
      const excluded = button.dataset.excluded === "true";
      const response = await window.portalPost("/api/terms", list.dataset.csrf, {
        crawl: list.dataset.crawl, term: item.dataset.term, excluded: excluded,
      });
      item.querySelector(".marked").textContent = response.ok ? (excluded ? "excluded" : "included again") : "not saved";
    });
  });
})();
