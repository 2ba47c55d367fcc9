// The crawl dashboard: figures and a chart of the harvest rate (overall and per topic) over
// pages fetched, redrawn from the server's events. Every crawled string goes in as text.
"use strict";
(function () {
  const root = document.getElementById("dashboard");
  const svgNS = "http://www.w3.org/2000/svg";
  const colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"];

  function setText(field, value) {
    const element = root.querySelector(`[data-field="${field}"]`);
    if (element) element.textContent = value;
  }

  function list(id, items, describe) {
    const element = document.getElementById(id);
    const texts = items.length ? items.map(describe) : ["none"];
    element.replaceChildren(...texts.map((text) => {
      const li = document.createElement("li");
      li.textContent = text;
      return li;
    }));
  }

  function lines(series) {
    // overall harvest rate, and each topic's share of the pages fetched so far
    const overall = series.filter((e) => e.harvest_rate !== null).map((e) => [e.pages, e.harvest_rate]);
    const topics = new Set();
    series.forEach((e) => Object.keys(e.topics || {}).forEach((t) => topics.add(t)));
    const result = [["harvest rate", overall]];
    [...topics].sort().forEach((topic) => {
      result.push([topic, series.filter((e) => e.pages > 0).map((e) => [e.pages, ((e.topics || {})[topic] || 0) / e.pages])]);
    });
    return result;
  }

  function draw(series) {
    const svg = document.getElementById("harvest-chart");
    const legend = document.getElementById("chart-legend");
    const width = 600, height = 220, left = 40, bottom = 20;
    const maxPages = Math.max(1, ...series.map((e) => e.pages || 0));
    const x = (pages) => left + (pages / maxPages) * (width - left - 10);
    const y = (rate) => height - bottom - rate * (height - bottom - 10);
    const children = [];
    [0, 0.5, 1].forEach((tick) => {
      const label = document.createElementNS(svgNS, "text");
      label.setAttribute("x", 4); label.setAttribute("y", y(tick) + 4);
      label.textContent = tick.toFixed(1);
      children.push(label);
    });
    const axis = document.createElementNS(svgNS, "text");
    axis.setAttribute("x", width - 120); axis.setAttribute("y", height - 4);
    axis.textContent = `${maxPages} pages`;
    children.push(axis);
    const legendItems = [];
    lines(series).forEach(([name, points], i) => {
      if (!points.length) return;
      const path = document.createElementNS(svgNS, "polyline");
      path.setAttribute("fill", "none");
      path.setAttribute("stroke", colours[i % colours.length]);
      path.setAttribute("stroke-width", i === 0 ? "2.5" : "1.2");
      path.setAttribute("points", points.map(([p, r]) => `${x(p).toFixed(1)},${y(r).toFixed(1)}`).join(" "));
      path.dataset.series = name;
      children.push(path);
      const item = document.createElement("span");
      item.style.color = colours[i % colours.length];
      item.textContent = `■ ${name}  `;
      legendItems.push(item);
    });
    svg.replaceChildren(...children);
    legend.replaceChildren(...legendItems);
  }

  let previous = null;
  function show(state) {
    ["state", "pages_fetched", "relevant_pages", "frontier_size", "errors", "refused", "bad_hosts", "pages_indexed",
      "index_links_behind"].forEach((f) => setText(f, state[f] === null ? "–" : state[f]));
    setText("stop_reason", ["running", "paused"].includes(state.state) ? "" : state.stop_reason || "");
    setText("harvest_rate", state.harvest_rate === null ? "–" : state.harvest_rate.toFixed(3));
    const last = state.series.length ? state.series[state.series.length - 1] : null;
    if (previous && last && last.time > previous.time) {
      setText("pages_per_second", ((last.pages - previous.pages) / (last.time - previous.time)).toFixed(1));
    }
    if (last) previous = last;
    list("errors", state.failures_by_reason, (e) => `${e.count} × ${e.reason}`);
    list("hosts", state.hosts, (h) => `${h.host}: ${h.fetched} fetched, ${h.queued} queued (${h.status})`);
    draw(state.series);
    root.dataset.updates = String(Number(root.dataset.updates || 0) + 1);
  }

  show(JSON.parse(document.getElementById("initial-state").textContent));
  const events = new EventSource(root.dataset.events);
  events.onmessage = (message) => show(JSON.parse(message.data));
})();
