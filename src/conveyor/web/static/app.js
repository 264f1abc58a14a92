// Conveyor dashboard: live overview (polls the JSON feed every 2 s and draws SVG charts), confirmations
// and bulk selection. No inline script anywhere (the CSP forbids it); all text goes in via textContent.
"use strict";
(function () {
  const body = document.body;
  const base = body.dataset.base || "";
  const SVG = "http://www.w3.org/2000/svg";

  function el(tag, attrs, text) {
    const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function age(seconds) {
    const s = Math.max(0, Math.floor(seconds));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
    return Math.floor(s / 86400) + "d" + String(Math.floor((s % 86400) / 3600)).padStart(2, "0") + "h";
  }

  // -- confirmations and bulk selection (every page) --------------------------------------------
  document.addEventListener("submit", function (event) {
    const form = event.target;
    let question = form.dataset.confirm;
    if (form.id === "bulk") {
      const action = event.submitter ? event.submitter.value : "";
      if (!form.querySelector("input[name=ids]:checked")) { event.preventDefault(); return; }
      if (action === "delete") question = form.dataset.confirmDelete;
    }
    if (question && !window.confirm(question)) event.preventDefault();
  });
  const all = document.getElementById("select-all");
  if (all) {
    all.addEventListener("change", function () {
      for (const box of document.querySelectorAll("input[name=ids]")) box.checked = all.checked;
    });
  }

  // -- failed view: a bulk job's progress, polled until it ends -----------------------------------
  const job = document.getElementById("job");
  if (job && job.dataset.state === "running") {
    const poll = async function () {
      try {
        const response = await fetch(base + "/api/jobs/" + encodeURIComponent(job.dataset.job), { credentials: "same-origin" });
        if (response.ok) {
          const data = await response.json();
          job.textContent = data.text;
          job.dataset.state = data.state;
          if (data.state !== "running") return;
        }
      } catch (e) { /* try again */ }
      window.setTimeout(poll, 500);
    };
    window.setTimeout(poll, 200);
  }

  // -- overview: live tables and charts ----------------------------------------------------------
  if (body.dataset.page !== "overview") return;

  // x: bucket start times (epoch s); the axis is labelled in local time below the SVG (an HTML row, so
  // the stretched viewBox does not distort the text; positions are set through the CSSOM, which the CSP allows).
  function chart(svg, axis, times, values, span, maxHint, format) {
    const W = 600, H = 140, top = 14, bottom = 4;
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const max = Math.max(maxHint, ...values) || 1;
    const t0 = times.length ? times[0] : 0, t1 = times.length ? times[times.length - 1] : 1;
    const x = (t) => (t1 > t0 ? ((t - t0) / (t1 - t0)) * W : 0);
    const y = (v) => H - bottom - (v / max) * (H - top - bottom);
    svg.appendChild(el("svg:line", { x1: 0, x2: W, y1: H - bottom, y2: H - bottom, class: "axis" }));
    svg.appendChild(el("svg:line", { x1: 0, x2: W, y1: top, y2: top, class: "axis" }));
    const points = values.map((v, i) => x(times[i]).toFixed(1) + "," + y(v).toFixed(1));
    svg.appendChild(el("svg:polygon", { points: "0," + (H - bottom) + " " + points.join(" ") + " " + W + "," + (H - bottom), class: "area" }));
    svg.appendChild(el("svg:polyline", { points: points.join(" "), class: "line" }));
    svg.appendChild(el("svg:text", { x: 4, y: 11, class: "label" }, "max " + format(max)));
    axis.replaceChildren();
    if (t1 <= t0) return;
    const tick = span > 3600 ? 3 * 3600 : 10 * 60;
    for (let t = Math.ceil(t0 / tick) * tick; t <= t1; t += tick) {
      const d = new Date(t * 1000);
      const label = el("span", { class: "tick" }, String(d.getHours()).padStart(2, "0") + ":" + String(d.getMinutes()).padStart(2, "0"));
      label.style.left = ((100 * x(t)) / W).toFixed(2) + "%";
      axis.appendChild(label);
      svg.appendChild(el("svg:line", { x1: x(t), x2: x(t), y1: top, y2: H - bottom, class: "grid-line" }));
    }
  }

  // Finished buckets only (the server leaves out the one under way, which would dip); the headline
  // figures cover the last finished minute and the one under way.
  function drawCharts(series) {
    if (!series) {
      for (const id of ["rate-now", "fail-now"]) document.getElementById(id).textContent = "no history on this broker";
      return;
    }
    const per = series.bucket, span = series.range === "24h" ? 86400 : 3600;
    const rates = series.processed.map((n) => n / per);
    const failures = series.processed.map((n, i) => (n ? (100 * series.failed[i]) / n : 0));
    chart(document.getElementById("chart-throughput"), document.getElementById("axis-throughput"), series.t, rates, span, 1, (v) => v.toFixed(1) + "/s");
    chart(document.getElementById("chart-failures"), document.getElementById("axis-failures"), series.t, failures, span, 10, (v) => v.toFixed(0) + "%");
    const cur = series.current;
    document.getElementById("rate-now").textContent = (cur.processed / cur.seconds).toFixed(1) + "/s";
    document.getElementById("fail-now").textContent = cur.processed ? ((100 * cur.failed) / cur.processed).toFixed(1) + "%" : "–";
  }

  function cell(text, cls) { return el("td", cls ? { class: cls } : {}, String(text)); }

  function link(href, text) { const a = el("a", { href: href }, String(text)); return a; }

  function queueForm(q) {
    const verb = q.paused ? "resume" : "pause";
    const form = el("form", { method: "post", class: "inline", action: base + "/queues/" + encodeURIComponent(q.name) + "/" + verb });
    form.appendChild(el("input", { type: "hidden", name: "csrf", value: body.dataset.csrf || "" }));
    form.appendChild(el("input", { type: "hidden", name: "next", value: location.pathname }));
    form.appendChild(el("button", { type: "submit", class: "btn" }, q.paused ? "Resume" : "Pause"));
    return form;
  }

  function drawQueues(data) {
    const tbody = document.querySelector("#queues tbody");
    if (!data.queues.length) return;
    const rows = data.queues.map(function (q) {
      const tr = el("tr", { "data-queue": q.name });
      const href = base + "/queues/" + encodeURIComponent(q.name);
      const name = el("td");
      name.appendChild(link(href, q.name));
      if (q.paused) { name.appendChild(document.createTextNode(" ")); name.appendChild(el("span", { class: "badge paused" }, "paused")); }
      tr.appendChild(name);
      for (const s of data.states) {
        const td = el("td", { class: "num state-" + s });
        td.appendChild(link(href + "?state=" + s, q.counts[s] || 0));
        tr.appendChild(td);
      }
      tr.appendChild(cell(q.counts.total || 0, "num"));
      tr.appendChild(cell(q.oldest_pending_age == null ? "-" : age(q.oldest_pending_age)));
      const actions = el("td", { class: "actions" });
      if (body.dataset.readOnly !== "true") actions.appendChild(queueForm(q));
      tr.appendChild(actions);
      return tr;
    });
    tbody.replaceChildren(...rows);
  }

  function drawWorkers(data) {
    const tbody = document.querySelector("#workers tbody");
    if (!data.workers.length) {
      tbody.replaceChildren(el("tr", { class: "empty" }));
      tbody.firstChild.appendChild(el("td", { colspan: 9 }, "No live worker."));
      return;
    }
    tbody.replaceChildren(...data.workers.map(function (w) {
      const tr = el("tr");
      for (const v of [w.id, w.host]) tr.appendChild(cell(v));
      tr.appendChild(cell(w.pid, "num"));
      tr.appendChild(cell(w.queues.join(", ")));
      tr.appendChild(cell(w.concurrency, "num"));
      tr.appendChild(cell(age(w.heartbeat_age) + " ago"));
      const running = el("td");
      if (!w.running.length) running.textContent = "idle";
      for (const id of w.running) { running.appendChild(link(base + "/tasks/" + encodeURIComponent(id), id)); running.appendChild(document.createTextNode(" ")); }
      tr.appendChild(running);
      tr.appendChild(cell(w.processed, "num"));
      tr.appendChild(cell(w.failed, "num"));
      return tr;
    }));
  }

  // numbers left on the page while refreshes fail say so, and since when (they try again each tick)
  let lastGood = Date.now();
  function stale(why) {
    const banner = document.getElementById("stale");
    if (!banner) return;
    if (why === null) { banner.hidden = true; return; }
    banner.textContent = "Not refreshed since " + new Date(lastGood).toLocaleTimeString() + ": " + why;
    banner.hidden = false;
  }

  async function refresh() {
    try {
      const range = document.querySelector(".charts").dataset.range || "1h";
      const response = await fetch(base + "/api/overview?range=" + encodeURIComponent(range), { headers: { Accept: "application/json" }, credentials: "same-origin" });
      if (!response.ok) {
        let why = "HTTP " + response.status;
        try { why = (await response.json()).error || why; } catch (e) { /* not JSON */ }
        stale(why);
        return;
      }
      const data = await response.json();
      drawCharts(data.series);
      drawQueues(data);
      drawWorkers(data);
      lastGood = Date.now();
      stale(null);
      body.dataset.refreshed = String(lastGood);
    } catch (e) {
      stale("the dashboard did not answer");
    }
  }

  refresh();
  window.setInterval(refresh, 2000);
})();
