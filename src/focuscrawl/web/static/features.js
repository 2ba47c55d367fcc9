// The reviser's feature space: exclude a term from the critic's next training (or include it
// again), make a term an indicator of the topic (or no longer).
"use strict";
(function () {
  ["features", "excluded", "indicators"].forEach((id) => {
    const list = document.getElementById(id);
    if (!list) return;
    window.portalOnButton(list, "button.term", async (button, item) => {
      const excluded = button.dataset.excluded === "true";
      const response = await window.portalPost("/api/terms", list.dataset.csrf, {
        crawl: list.dataset.crawl, term: item.dataset.term, excluded: excluded,
      });
      item.querySelector(".marked").textContent = response.ok ? (excluded ? "excluded" : "included again") : "not saved";
    });
    window.portalOnButton(list, "button.indicator", async (button, item) => {
      const indicator = button.dataset.indicator === "true";
      const response = await window.portalPost("/api/indicators", list.dataset.csrf, {
        crawl: list.dataset.crawl, topic: list.dataset.topic || "", term: item.dataset.term, indicator: indicator,
      });
      item.querySelector(".marked").textContent = response.ok ? (indicator ? "indicator" : "no longer an indicator") : "not saved";
    });
  });
})();
