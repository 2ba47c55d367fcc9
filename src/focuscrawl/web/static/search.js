// Feedback on results (BINGO! thesis §4.1.1): "relevant" and "not relevant" marks go to the
// portal under the profile name kept in a cookie; the next page of results, or a refinement,
// is ranked with weights learnt from them.
"use strict";
(function () {
  const profile = document.getElementById("profile");
  if (profile) {
    profile.addEventListener("change", () => {
      document.cookie = `focuscrawl_user=${encodeURIComponent(profile.value.trim())}; path=/; SameSite=Strict`;
    });
  }
  const results = document.querySelector("ol.results");
  if (!results) return;
  window.portalOnButton(results, "button.mark", async (button, item) => {
    const relevant = button.dataset.relevant === "true";
    const response = await window.portalPost("/api/feedback", results.dataset.csrf, {
      crawl: results.dataset.crawl, query: results.dataset.query, url_id: Number(item.dataset.urlId), relevant: relevant,
    });
    const note = item.querySelector(".marked");
    note.textContent = response.ok ? (relevant ? "marked relevant" : "marked not relevant") : "not saved";
    item.dataset.marked = response.ok ? String(relevant) : "";
  });
})();
