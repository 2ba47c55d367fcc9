// What the portal's pages share: a state-changing request carries the page's CSRF token.
"use strict";
window.portalPost = function (url, csrf, body) {
  return fetch(url, {
    method: "POST",
    headers: {"Content-Type": "application/json", "X-CSRF-Token": csrf},
    body: JSON.stringify(body),
  });
};

// A click on a button of a result list: ``act(button, its list item)``.
window.portalOnButton = function (list, selector, act) {
  list.addEventListener("click", (event) => {
    const button = event.target.closest(selector);
    if (button) act(button, button.closest("li"));
  });
};
