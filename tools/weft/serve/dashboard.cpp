// weft serve: the embedded dashboard page.
#include "serve/dashboard.hpp"

namespace weft_cli::serve {

namespace {

constexpr const char *kPage = R"WEFTHTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>weft serve</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px system-ui,sans-serif;margin:1.2em;background:#fafafa;color:#222}
h1{font-size:1.3em;margin:0 0 .4em}
#summary span{display:inline-block;margin-right:1.4em}
table{border-collapse:collapse;margin-top:.8em;min-width:60%}
th,td{padding:.2em .7em;border-bottom:1px solid #ddd;text-align:right}
th:first-child,td:first-child,td.kind,td.res{text-align:left}
tr.generating td:first-child{font-weight:bold}
.res-resident{color:#1a7f37}.res-ram{color:#9a6700}.res-disk{color:#bc4c00}.res-recompute{color:#cf222e}
canvas{background:#fff;border:1px solid #ddd;margin-top:1em}
#error{color:#cf222e}
.legend span{margin-right:1em}
</style></head><body>
<h1>weft serve <small id="model"></small></h1>
<div id="summary"></div><div id="error"></div>
<table id="conversations"><thead><tr><th>conversation</th><th>kind</th><th>residency</th><th>tokens</th>
<th>KV cells</th><th>queued</th><th>tokens/s</th><th>generating</th></tr></thead><tbody></tbody></table>
<p id="empty">no conversations</p>
<canvas id="plot" width="720" height="200"></canvas>
<div class="legend"><span style="color:#0969da">&#9632; mean step ms</span><span style="color:#cf222e">&#9632; max step ms</span>
<span>per second, last 60 s</span></div>
<p><small>polls <code>/v1/status</code>; updates: <span id="updates">0</span></small></p>
<script>
"use strict";
let updates = 0;
const $ = (id) => document.getElementById(id);
function cell(tr, text, cls) { const td = document.createElement("td"); td.textContent = text; if (cls) td.className = cls; tr.appendChild(td); }
function render(s) {
  $("model").textContent = s.model;
  const r = s.residency;
  $("summary").innerHTML = "";
  const items = [["KV cells", s.cells_used + " / " + s.n_ctx], ["slots", s.slots_used + " / " + s.slots],
    ["queued tokens", s.queued_tokens], ["steps", s.steps], ["step p50/p99 ms", s.step_ms_p50.toFixed(2) + " / " + s.step_ms_p99.toFixed(2)],
    ["resident/ram/disk/recompute", [r.resident, r.ram, r.disk, r.recompute].join("/")]];
  for (const [k, v] of items) { const sp = document.createElement("span"); sp.textContent = k + ": " + v; $("summary").appendChild(sp); }
  const body = document.querySelector("#conversations tbody");
  body.innerHTML = "";
  for (const c of s.conversations) {
    const tr = document.createElement("tr");
    tr.dataset.id = c.id; tr.dataset.tokens = c.n_tokens;
    if (c.generating) tr.className = "generating";
    cell(tr, c.id); cell(tr, c.kind, "kind"); cell(tr, c.residency, "res res-" + c.residency);
    cell(tr, c.n_tokens, "tokens"); cell(tr, c.n_cells, "cells"); cell(tr, c.n_queued, "queued");
    cell(tr, c.tokens_per_second.toFixed(1), "tps"); cell(tr, c.generating ? "yes" : "", "gen");
    body.appendChild(tr);
  }
  $("empty").style.display = s.conversations.length ? "none" : "";
  plot(s.step_seconds);
}
function plot(pts) {
  const cv = $("plot"), g = cv.getContext("2d"), W = cv.width, H = cv.height, L = 40, B = 18;
  g.clearRect(0, 0, W, H);
  const top = Math.max(1, ...pts.map((p) => p.max_ms)) * 1.1;
  g.strokeStyle = "#ccc"; g.fillStyle = "#666"; g.font = "11px sans-serif";
  for (let i = 0; i <= 4; i++) {
    const y = H - B - (H - B - 5) * i / 4;
    g.beginPath(); g.moveTo(L, y); g.lineTo(W, y); g.stroke();
    g.fillText((top * i / 4).toFixed(1), 2, y + 4);
  }
  g.fillText("-60 s", L, H - 4); g.fillText("now", W - 24, H - 4);
  const x = (t) => L + (W - L) * (60 + t) / 60, y = (v) => H - B - (H - B - 5) * v / top;
  for (const [key, color] of [["mean_ms", "#0969da"], ["max_ms", "#cf222e"]]) {
    g.strokeStyle = color; g.lineWidth = 2; g.beginPath();
    pts.forEach((p, i) => (i ? g.lineTo(x(p.t), y(p[key])) : g.moveTo(x(p.t), y(p[key]))));
    g.stroke();
    g.fillStyle = color;  // dots, so a lone second shows too
    for (const p of pts) { g.beginPath(); g.arc(x(p.t), y(p[key]), 2.5, 0, 2 * Math.PI); g.fill(); }
  }
}
// With API keys: open /#key=KEY once; the key stays in this tab's sessionStorage, out of the address bar.
if (location.hash.startsWith("#key=")) {
  sessionStorage.setItem("weftKey", decodeURIComponent(location.hash.slice(5)));
  history.replaceState(null, "", location.pathname);
}
async function tick() {
  try {
    const key = sessionStorage.getItem("weftKey");
    const r = await fetch("/v1/status", {cache: "no-store", headers: key ? {authorization: "Bearer " + key} : {}});
    if (r.status === 401) throw new Error("HTTP 401: this server needs an API key; open /#key=YOUR_KEY");
    if (!r.ok) throw new Error("HTTP " + r.status);
    render(await r.json());
    $("error").textContent = "";
    $("updates").textContent = ++updates;
  } catch (e) {
    $("error").textContent = "server unreachable: " + e.message;
  }
  setTimeout(tick, 500);
}
tick();
</script></body></html>
)WEFTHTML";

}  // namespace

void add_dashboard_routes(httplib::Server &svr) {
  svr.Get("/", [](const httplib::Request &, httplib::Response &res) { res.set_content(kPage, "text/html; charset=utf-8"); });
  // Browsers ask for it; nothing to show.
  svr.Get("/favicon.ico", [](const httplib::Request &, httplib::Response &res) { res.status = 204; });
}

}  // namespace weft_cli::serve
