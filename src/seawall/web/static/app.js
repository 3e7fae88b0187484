// The demo page: fetches seawall's numbers from /api/* and draws them. No math of its own
// beyond scaling for the drawing.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f"];

function $(id) { return document.getElementById(id); }

function el(name, attrs, text) {
  const node = name.startsWith("svg:")
    ? document.createElementNS(SVG, name.slice(4))
    : document.createElement(name);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

function seconds(v) {
  if (v === null || v === undefined) return "\u2013";
  if (v === 0) return "0 s";
  if (Math.abs(v) < 1) return (v * 1000).toFixed(1) + " ms";
  return v.toFixed(3) + " s";
}

function number(v) {
  if (v === null || v === undefined) return "\u2013";
  if (typeof v !== "number") return String(v);
  if (Number.isInteger(v)) return String(v);
  return v.toFixed(3);
}

function query(form) {
  const params = new URLSearchParams();
  for (const [k, v] of new FormData(form).entries()) params.set(k, String(v));
  return params;
}

async function getJSON(url) {
  const response = await fetch(url, { headers: { Accept: "application/json" } });
  const data = await response.json();
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

function showError(id, err) {
  const node = $(id);
  if (err) { node.textContent = String(err.message || err); node.hidden = false; }
  else { node.textContent = ""; node.hidden = true; }
}

function debounce(fn, ms) {
  let timer = null;
  return () => { clearTimeout(timer); timer = setTimeout(fn, ms); };
}

// -- backoff view ---------------------------------------------------------------------------

const REASONS = {
  not_retryable: "the error is not retried (a permanent error, or not matched by retry_on)",
  exhausted_below: "an inner policy already retried this error (retry at one layer)",
  attempts_exhausted: "attempts exhausted",
  deadline: "the next wait would cross the deadline",
  budget: "the retry budget refused the retry",
  retry_after: "the server asked for a wait longer than allowed",
  disabled: "retries are switched off",
  delegated: "a layer above owns the retries",
};

const backoff = { trace: null, index: 0, generation: 0, query: null };

async function loadBackoff() {
  const form = $("backoff-form");
  if (!form.checkValidity()) { showError("backoff-error", "check the highlighted fields"); return; }
  const q = query(form).toString();
  if (q === backoff.query) return; // the same trace: keep the step the reader is on
  backoff.query = q;
  const generation = ++backoff.generation;
  try {
    const trace = await getJSON("/api/backoff?" + q);
    if (generation !== backoff.generation) return; // a newer request is on its way
    showError("backoff-error", null);
    backoff.trace = trace;
    backoff.index = 0;
    renderBackoff();
  } catch (err) {
    if (generation === backoff.generation) { showError("backoff-error", err); backoff.query = null; }
  }
}

function renderBackoff() {
  const trace = backoff.trace;
  if (!trace) return;
  const steps = trace.steps;
  const i = backoff.index;
  const step = steps[i];
  const last = i === steps.length - 1;
  $("backoff-position").textContent = `attempt ${step.attempt} / ${steps.length}`;
  $("backoff-prev").disabled = i === 0;
  $("backoff-next").disabled = last;
  $("step-outcome").textContent = step.outcome === "succeeded" ? "succeeded" : `failed: ${step.error}`;
  $("step-started").textContent = seconds(step.started);
  $("step-raw").textContent = step.wait === null ? "\u2013" : seconds(step.raw);
  $("step-cap").textContent = seconds(step.cap);
  $("step-wait").textContent = step.wait === null ? "none (no retry followed)" : seconds(step.wait);
  $("step-wait").dataset.wait = step.wait === null ? "" : String(step.wait);
  let why = "\u2013";
  if (last) why = trace.succeeded ? "it succeeded" : (REASONS[trace.reason] || trace.reason);
  $("step-reason").textContent = why;
  let sentence;
  if (step.outcome === "succeeded") sentence = `Attempt ${step.attempt} succeeded.`;
  else if (step.wait !== null) {
    const p = trace.params;
    const grown = step.attempt === 1 ? "the base" : `${number(p.multiplier)}\u00d7 the previous`;
    const how = p.jitter === "decorrelated"
      ? "decorrelated jitter: between the base and 3\u00d7 the previous wait"
      : `${p.jitter} jitter of raw ${seconds(step.raw)} (${grown})`;
    sentence = `Attempt ${step.attempt} failed; wait ${seconds(step.wait)} ` +
      `(${how}; cap ${seconds(step.cap)}).`;
  } else sentence = `Attempt ${step.attempt} failed; no retry: ${why}.`;
  $("backoff-sentence").textContent = sentence;
  drawTimeline(trace, i);
}

function drawTimeline(trace, current) {
  const svg = $("backoff-timeline");
  svg.replaceChildren();
  const steps = trace.steps;
  const lastStep = steps[steps.length - 1];
  const end = Math.max(lastStep.started + trace.params.attempt_time, 1e-9);
  const scale = 580 / end;
  steps.forEach((s, i) => {
    const x = 10 + s.started * scale;
    const w = Math.max(3, trace.params.attempt_time * scale);
    const rect = el("svg:rect", {
      x, y: 25, width: w, height: 30,
      class: (s.outcome === "succeeded" ? "ok" : "fail") + (i === current ? " current" : ""),
    });
    rect.appendChild(el("svg:title", {}, `attempt ${s.attempt}: ${s.outcome}, wait ${seconds(s.wait)}`));
    svg.appendChild(rect);
    svg.appendChild(el("svg:text", { x: x + w / 2, y: 75, "text-anchor": "middle" }, String(s.attempt)));
  });
  svg.appendChild(el("svg:text", { x: 10, y: 15 }, "0"));
  svg.appendChild(el("svg:text", { x: 590, y: 15, "text-anchor": "end" }, seconds(end)));
}

function step(delta) {
  if (!backoff.trace) return;
  const n = backoff.trace.steps.length;
  backoff.index = Math.min(n - 1, Math.max(0, backoff.index + delta));
  renderBackoff();
}

// -- storm view -----------------------------------------------------------------------------

const storm = { generation: 0, query: null };

async function loadStorm() {
  const form = $("storm-form");
  if (!form.checkValidity()) { showError("storm-error", "check the highlighted fields"); return; }
  const q = query(form).toString();
  if (q === storm.query) return;
  storm.query = q;
  const generation = ++storm.generation;
  try {
    const data = await getJSON("/api/storm?" + q);
    if (generation !== storm.generation) return;
    showError("storm-error", null);
    renderStorm(data);
  } catch (err) {
    if (generation === storm.generation) { showError("storm-error", err); storm.query = null; }
  }
}

// Every kind is drawn in the same bins and on the same scale (the server's bins end at the last
// retry without jitter); retries later than that are not drawn as a bar, but counted beside it.
function renderStorm(data) {
  const box = $("storm-charts");
  box.replaceChildren();
  const top = Math.max(1, ...data.series.map((s) => s.peak));
  const parts = [];
  data.series.forEach((s, k) => {
    const later = s.overflow ? `, ${s.overflow} after ${seconds(data.end)}` : "";
    parts.push(`${s.jitter}: peak ${s.peak}${later}`);
    const figure = el("figure", { class: "histogram", "data-jitter": s.jitter });
    const svg = el("svg:svg", {
      viewBox: "0 0 600 160", preserveAspectRatio: "none", role: "img",
      "aria-label": `${s.jitter} jitter: ${s.retries} retries, at most ${s.peak} in one bin${later}`,
    });
    const w = 580 / s.counts.length;
    s.counts.forEach((c, i) => {
      const h = (c / top) * 130;
      const rect = el("svg:rect", {
        x: 10 + i * w, y: 140 - h, width: Math.max(1, w - 1), height: h,
        fill: COLOURS[k % COLOURS.length], "data-count": c,
      });
      rect.appendChild(el("svg:title", {}, `${seconds(i * data.bin_width)}\u2013${seconds((i + 1) * data.bin_width)}: ${c}`));
      svg.appendChild(rect);
    });
    svg.appendChild(el("svg:line", { x1: 10, y1: 140, x2: 590, y2: 140, class: "axis" }));
    svg.appendChild(el("svg:text", { x: 10, y: 155 }, "0"));
    svg.appendChild(el("svg:text", { x: 590, y: 155, "text-anchor": "end" }, seconds(data.end)));
    svg.appendChild(el("svg:text", { x: 14, y: 14 }, `peak ${s.peak}`));
    if (s.overflow) {
      svg.appendChild(el("svg:text", { x: 590, y: 14, "text-anchor": "end", class: "overflow", "data-count": s.overflow },
        `+${s.overflow} later, until ${seconds(s.last)} \u2192`));
    }
    figure.appendChild(svg);
    const name = `${s.jitter === "none" ? "no" : s.jitter} jitter`;
    figure.appendChild(el("figcaption", {}, s.overflow
      ? `${name}: ${s.retries} retries, ${s.overflow} of them after ${seconds(data.end)} (not drawn)`
      : `${name}: ${s.retries} retries`));
    box.appendChild(figure);
  });
  $("storm-summary").textContent = `${data.params.clients} clients; the same bins of ` +
    `${seconds(data.bin_width)} for every kind, up to the last retry without jitter. ` +
    parts.join("; ") + ".";
}

// -- experiments ----------------------------------------------------------------------------

function lineChart(chart) {
  const figure = el("figure", { class: "chart" });
  const svg = el("svg:svg", { viewBox: "0 0 600 300", role: "img", "aria-label": chart.title });
  const L = 50, R = 590, T = 10, B = 260;
  const xs = chart.series.flatMap((s) => s.x);
  const ys = chart.series.flatMap((s) => s.y).filter((v) => v !== null);
  const x0 = Math.min(...xs), x1 = Math.max(...xs);
  const y1 = Math.max(1e-9, ...ys);
  const X = (v) => L + ((v - x0) / (x1 - x0 || 1)) * (R - L);
  const Y = (v) => B - (v / y1) * (B - T);
  for (const [a, b] of chart.marks || []) {
    svg.appendChild(el("svg:rect", { x: X(a), y: T, width: X(b) - X(a), height: B - T, class: "mark" }));
  }
  svg.appendChild(el("svg:line", { x1: L, y1: B, x2: R, y2: B, class: "axis" }));
  svg.appendChild(el("svg:line", { x1: L, y1: T, x2: L, y2: B, class: "axis" }));
  svg.appendChild(el("svg:text", { x: L - 4, y: T + 10, "text-anchor": "end" }, number(y1)));
  svg.appendChild(el("svg:text", { x: L - 4, y: B, "text-anchor": "end" }, "0"));
  svg.appendChild(el("svg:text", { x: L, y: B + 16 }, number(x0)));
  svg.appendChild(el("svg:text", { x: R, y: B + 16, "text-anchor": "end" }, number(x1)));
  svg.appendChild(el("svg:text", { x: (L + R) / 2, y: B + 32, "text-anchor": "middle" }, chart.x));
  chart.series.forEach((s, k) => {
    const points = s.x.map((x, i) => [x, s.y[i]]).filter(([, y]) => y !== null)
      .map(([x, y]) => `${X(x).toFixed(1)},${Y(y).toFixed(1)}`).join(" ");
    svg.appendChild(el("svg:polyline", { points, fill: "none", stroke: COLOURS[k % COLOURS.length], "stroke-width": 2 }));
  });
  figure.appendChild(svg);
  figure.appendChild(legend(chart));
  return figure;
}

function barChart(chart) {
  const figure = el("figure", { class: "chart" });
  const svg = el("svg:svg", { viewBox: "0 0 600 300", role: "img", "aria-label": chart.title });
  const L = 50, R = 590, T = 10, B = 260;
  const values = chart.series.flatMap((s) => s.y);
  const top = Math.max(1e-9, ...values);
  // A log scale for values that span orders of magnitude (latency percentiles).
  const low = Math.min(...values.filter((v) => v > 0)) / 2;
  const height = chart.scale === "log"
    ? (v) => (v > low ? (Math.log(v / low) / Math.log(top / low)) * (B - T) : 0)
    : (v) => (v / top) * (B - T);
  const groups = chart.categories.length, per = chart.series.length;
  const gw = (R - L) / groups, bw = (gw - 10) / per;
  chart.categories.forEach((c, g) => {
    chart.series.forEach((s, k) => {
      const h = height(s.y[g]);
      const rect = el("svg:rect", { x: L + g * gw + 5 + k * bw, y: B - h, width: bw - 2, height: h, fill: COLOURS[k % COLOURS.length] });
      rect.appendChild(el("svg:title", {}, `${s.name} ${c}: ${number(s.y[g])}`));
      svg.appendChild(rect);
    });
    svg.appendChild(el("svg:text", { x: L + g * gw + gw / 2, y: B + 16, "text-anchor": "middle" }, c));
  });
  svg.appendChild(el("svg:line", { x1: L, y1: B, x2: R, y2: B, class: "axis" }));
  svg.appendChild(el("svg:text", { x: L - 4, y: T + 10, "text-anchor": "end" }, number(top)));
  if (chart.scale === "log") svg.appendChild(el("svg:text", { x: L - 4, y: B, "text-anchor": "end" }, number(low)));
  figure.appendChild(svg);
  figure.appendChild(legend(chart));
  return figure;
}

function legend(chart) {
  const caption = el("figcaption");
  caption.appendChild(el("strong", {}, chart.title));
  const list = el("ul", { class: "legend" });
  chart.series.forEach((s, k) => {
    const item = el("li");
    item.appendChild(el("span", { class: "swatch", style: `background:${COLOURS[k % COLOURS.length]}`, "aria-hidden": "true" }));
    item.appendChild(document.createTextNode(s.name));
    list.appendChild(item);
  });
  caption.appendChild(list);
  return caption;
}

function table(data, className) {
  const wrap = el("div", { class: "table-wrap", tabindex: 0, role: "region", "aria-label": "results table" });
  const t = el("table", className ? { class: className } : {});
  const head = el("tr");
  for (const c of data.columns) head.appendChild(el("th", { scope: "col" }, c));
  t.appendChild(el("thead")).appendChild(head);
  const body = el("tbody");
  for (const row of data.rows) {
    const tr = el("tr");
    row.forEach((v) => tr.appendChild(el("td", {}, number(v))));
    body.appendChild(tr);
  }
  t.appendChild(body);
  wrap.appendChild(t);
  return wrap;
}

let experimentList = [];

async function loadExperimentList() {
  try {
    experimentList = await getJSON("/api/experiments");
    const select = $("experiment-name");
    for (const e of experimentList) select.appendChild(el("option", { value: e.name }, e.title));
    describeExperiment();
  } catch (err) {
    showError("experiment-error", err);
  }
}

function describeExperiment() {
  const name = $("experiment-name").value;
  const e = experimentList.find((x) => x.name === name);
  $("experiment-summary").textContent = e ? e.summary : "";
}

async function runExperiment(event) {
  event.preventDefault();
  const form = $("experiment-form");
  const params = query(form);
  const name = params.get("name");
  params.delete("name");
  const button = $("experiment-run");
  button.disabled = true;
  $("experiment-status").textContent = "running\u2026";
  try {
    const data = await getJSON(`/api/experiments/${encodeURIComponent(name)}?${params}`);
    showError("experiment-error", null);
    const out = $("experiment-output");
    out.replaceChildren();
    out.appendChild(el("h3", {}, data.title));
    const charts = el("div", { class: "charts" });
    for (const chart of data.charts) charts.appendChild(chart.kind === "bars" ? barChart(chart) : lineChart(chart));
    out.appendChild(charts);
    out.appendChild(table(data.table));
    out.appendChild(el("p", { class: "note" }, data.note));
    $("experiment-status").textContent = `${data.title}: done.`;
  } catch (err) {
    showError("experiment-error", err);
    $("experiment-status").textContent = "";
  } finally {
    button.disabled = false;
  }
}

// -- saga -----------------------------------------------------------------------------------

async function runSaga() {
  const button = $("saga-run");
  button.disabled = true;
  try {
    const data = await getJSON("/api/saga");
    showError("saga-error", null);
    const out = $("saga-output");
    out.replaceChildren();
    for (const t of data.tables) {
      out.appendChild(el("h3", {}, t.title));
      const pre = el("pre", { tabindex: 0 });
      pre.textContent = t.text;
      out.appendChild(pre);
    }
    // The history is the widest: a table whose error and detail cells wrap, so that it fits.
    out.appendChild(el("h3", {}, data.history.title));
    out.appendChild(table(data.history, "history"));
  } catch (err) {
    showError("saga-error", err);
  } finally {
    button.disabled = false;
  }
}

// -- wiring ---------------------------------------------------------------------------------

function init() {
  $("backoff-prev").addEventListener("click", () => step(-1));
  $("backoff-next").addEventListener("click", () => step(1));
  for (const id of ["backoff-prev", "backoff-next"]) {
    $(id).addEventListener("keydown", (e) => {
      if (e.key === "ArrowLeft") { step(-1); e.preventDefault(); }
      if (e.key === "ArrowRight") { step(1); e.preventDefault(); }
    });
  }
  const backoffForm = $("backoff-form");
  const reloadBackoff = debounce(loadBackoff, 150);
  backoffForm.addEventListener("input", reloadBackoff);
  backoffForm.addEventListener("change", reloadBackoff);
  backoffForm.addEventListener("submit", (e) => { e.preventDefault(); loadBackoff(); });
  const stormForm = $("storm-form");
  const reloadStorm = debounce(loadStorm, 200);
  stormForm.addEventListener("input", reloadStorm);
  stormForm.addEventListener("change", reloadStorm);
  stormForm.addEventListener("submit", (e) => { e.preventDefault(); loadStorm(); });
  $("experiment-form").addEventListener("submit", runExperiment);
  $("experiment-name").addEventListener("change", describeExperiment);
  $("saga-run").addEventListener("click", runSaga);
  loadBackoff();
  loadStorm();
  loadExperimentList();
}

document.addEventListener("DOMContentLoaded", init);
