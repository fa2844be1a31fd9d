// mma2a console: served as a file under a strict CSP (script-src 'self'); every value shown goes through
// textContent or a DOM attribute, never parsed as HTML.
"use strict";

const COLOURS = ["#2f5fd0", "#e07b24", "#1f8a4c", "#c0392b", "#8e44ad", "#16a5a5", "#b8860b", "#6b7585"];
const OUTCOMES = ["completed", "failed", "rejected", "canceled", "input-required", "auth-required", "working",
  "submitted", "message", "refused", "unknown"];
const TOKEN_KEY = "mma2a-token";
const $ = (id) => document.getElementById(id);

// h("td", {className: "ok"}, "text", child): an element whose text children become text nodes
function h(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "className") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  return node;
}

const tag = (text) => h("span", {className: "tag"}, text);
const token = () => sessionStorage.getItem(TOKEN_KEY) || "";

class ApiError extends Error {
  constructor(status, message, data) { super(message); this.status = status; this.data = data; }
}

async function api(path, options = {}) {
  const headers = Object.assign({"Authorization": "Bearer " + token()}, options.headers || {});
  const resp = await fetch(path, Object.assign({}, options, {headers, cache: "no-store"}));
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) {
    const err = body.error || {};
    if (resp.status === 401 || resp.status === 403) showBanner(err.message || `admin API: ${resp.status} ${resp.statusText}`);
    throw new ApiError(resp.status, err.message || resp.statusText, err.data);
  }
  return body;
}

function showBanner(text) { $("banner").textContent = text; $("banner").hidden = !text; }

// --- sign in ------------------------------------------------------------------------------------
function signIn(value) {
  sessionStorage.setItem(TOKEN_KEY, value);
  $("token").value = "";
  $("token").placeholder = value ? "signed in (token kept for this tab)" : "admin token (MMA2A_ADMIN_TOKEN)";
  showBanner("");
  loadTab(current);
}

// --- tabs ---------------------------------------------------------------------------------------
let current = "overview";
function showTab(name) {
  current = name;
  for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b.dataset.tab === name);
  for (const s of document.querySelectorAll("section.tab")) s.hidden = s.id !== "tab-" + name;
  loadTab(name);
}
function loadTab(name) {
  if (!token()) { showBanner("Sign in with the admin token to see history, agents and rules."); return; }
  ({overview: loadOverview, history: () => searchHistory(false), agents: loadAgents, rules: loadRules, live: poll})[name]();
}

// --- health -------------------------------------------------------------------------------------
async function loadHealth() {
  try {
    const health = await (await fetch("/healthz", {cache: "no-store"})).json();
    $("health").textContent = `${health.healthy}/${health.agents} agents healthy · mode ${health.mode} · rules v${health.rulesVersion}`;
  } catch (e) { $("health").textContent = "gateway unreachable"; }
}

// --- overview charts --------------------------------------------------------------------------------
function chart(container, series, valueIndex, span, unit) {
  container.replaceChildren();
  if (!series.length) { container.append(h("p", {className: "empty"}, "no decisions in this span")); return; }
  const W = 600, H = 180, L = 44, B = 20, T = 8, R = 8;
  const now = Date.now() / 1000, start = now - span;
  let peak = 0;
  for (const s of series) for (const p of s.points) peak = Math.max(peak, p[valueIndex]);
  peak = peak || 1;
  const x = (t) => L + (W - L - R) * Math.min(1, Math.max(0, (t - start) / span));
  const y = (v) => H - B - (H - B - T) * (v / peak);
  const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img"});
  root.append(svg("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis"}),
              svg("line", {x1: L, y1: T, x2: L, y2: H - B, class: "axis"}));
  const label = (text, attrs) => { const t = svg("text", attrs); t.textContent = text; return t; };
  root.append(label(`${+peak.toFixed(2)} ${unit}`, {x: 2, y: T + 8}), label(`0`, {x: L - 12, y: H - B}),
              label(new Date(start * 1000).toLocaleTimeString(), {x: L, y: H - 4}),
              label("now", {x: W - R - 20, y: H - 4}));
  const legend = h("div", {className: "legend"});
  series.forEach((s, i) => {
    const colour = COLOURS[i % COLOURS.length];
    const pts = s.points.map((p) => [Date.parse(p[0]) / 1000, p[valueIndex]]);
    if (pts.length === 1) root.append(svg("circle", {cx: x(pts[0][0]), cy: y(pts[0][1]), r: 3, fill: colour}));
    else root.append(svg("polyline", {points: pts.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" "),
                                      fill: "none", stroke: colour, "stroke-width": 2}));
    const total = s.points.reduce((a, p) => a + p[1], 0);
    legend.append(h("span", {}, h("span", {className: `swatch c${i % COLOURS.length}`}), `${s.key} (${total})`));
  });
  container.append(root, legend);
}

let overviewSeq = 0;
async function loadOverview() {
  const seq = ++overviewSeq;  // a slower, older answer must not overwrite a newer one
  const span = Number($("span").value);
  const bucket = 60 * Math.max(1, Math.ceil(span / 3600));  // whole minutes, about 60 points
  try {
    const [mod, agent] = await Promise.all(["modality", "agent"].map((by) =>
      api(`/admin/history/counts?by=${by}&since=${span}s&bucket=${bucket}`)));
    if (seq !== overviewSeq) return;
    chart($("chart-traffic-modality"), mod.series, 1, span, "/bucket");
    chart($("chart-traffic-agent"), agent.series, 1, span, "/bucket");
    chart($("chart-latency-modality"), mod.series, 2, span, "ms");
    chart($("chart-latency-agent"), agent.series, 2, span, "ms");
    $("overview-status").textContent = `buckets of ${bucket / 60} min over ${$("span").selectedOptions[0].textContent}`;
  } catch (e) { $("overview-status").textContent = "error: " + e.message; }
}

// --- history ------------------------------------------------------------------------------------
let historyCursor = null;
function routeCell(parts) {
  return parts.map((p) => h("div", {}, `${p.index}: `, h("code", {}, p.modality), " → ",
    p.dropped ? h("span", {className: "bad"}, `dropped (${p.dropped})`) : (p.targets.join(", ") || "—"), " ",
    p.matched.length ? p.matched.map(tag) : (p.targets.length ? tag("capability") : null),
    (p.transforms || []).length ? tag("via " + p.transforms.map((c) => c.map((s) => s.agent).join("→")).join(", ")) : null));
}
function outcomeCell(d) {
  const good = d.outcome === "completed" || d.outcome === "message";
  return h("td", {className: good ? "ok" : "bad", title: d.error || ""}, d.outcome, d.error ? h("div", {className: "status"}, d.error) : null);
}
async function searchHistory(more) {
  const form = new FormData($("history-filters"));
  const params = new URLSearchParams();
  for (const [k, v] of form.entries()) if (v) params.set(k, v);
  params.set("limit", "50");
  if (more && historyCursor) params.set("cursor", historyCursor);
  $("history-error").hidden = true;
  try {
    const page = await api("/admin/history?" + params.toString());
    const rows = page.decisions.map((d) => h("tr", {dataset: {messageId: d.messageId}},
      h("td", {}, new Date(d.time).toLocaleString()), h("td", {}, h("code", {}, d.messageId)), h("td", {}, d.sender || "—"),
      h("td", {}, routeCell(d.parts)), outcomeCell(d), h("td", {}, `${d.latencyMs.toFixed(1)} ms`)));
    if (more) $("history").append(...rows); else $("history").replaceChildren(...rows);
    historyCursor = page.cursor;
    $("history-more").hidden = !page.cursor;
    const shown = $("history").children.length;
    $("history-status").textContent = shown ? `${shown} decisions shown${page.cursor ? " (more available)" : ""}` : "no decisions match";
  } catch (e) {
    $("history-error").textContent = e.message;
    $("history-error").hidden = false;
  }
}

// --- agents -------------------------------------------------------------------------------------
async function loadAgents() {
  try {
    const {agents} = await api("/admin/agents");
    $("agents").replaceChildren(...agents.map((a) => {
      const modes = [...new Set([...(a.inputModes || []), ...a.skills.flatMap((s) => s.inputModes || [])])];
      const card = h("pre", {}, "…");
      const details = h("details", {}, h("summary", {}, "card"), card);
      details.addEventListener("toggle", async () => {
        if (!details.open) return;
        try {
          const resp = await fetch(`/agents/${encodeURIComponent(a.name)}/.well-known/agent-card.json`, {cache: "no-store"});
          card.textContent = JSON.stringify(await resp.json(), null, 2);
        } catch (e) { card.textContent = "error: " + e.message; }
      });
      const health = a.draining ? "draining" : a.healthy ? "healthy" : "ejected";
      return h("tr", {dataset: {agent: a.name}},
        h("td", {}, h("b", {}, a.name), a.transformer ? [" ", tag("transformer")] : null, " ", (a.groups || []).map(tag)),
        h("td", {className: health === "healthy" ? "ok" : "bad", title: a.lastError || ""}, health),
        h("td", {}, modes.map((m) => h("div", {}, m))), h("td", {}, (a.outputModes || []).map((m) => h("div", {}, m))),
        h("td", {}, a.inflight), h("td", {}, a.sent), h("td", {}, details));
    }));
  } catch (e) {
    $("agents").replaceChildren(h("tr", {}, h("td", {colspan: 7, className: "error"}, e.message)));
  }
}

// --- rules: edit, validate, dry-run, apply ------------------------------------------------------
async function loadRules() {
  try {
    const rules = await api("/admin/rules");
    $("rules-version").textContent = `v${rules.version} · ${rules.mode}`;
    $("rules-editor").value = JSON.stringify(rules.rules, null, 2);
  } catch (e) { ruleResult([h("p", {className: "error"}, e.message)]); }
}
function ruleResult(nodes) { $("rules-result").replaceChildren(...nodes); }
function ruleErrors(e) {
  const errors = (e.data && e.data.errors) || [e.message];
  return [h("p", {className: "error"}, "rules rejected:"), h("ul", {className: "errors"}, errors.map((m) => h("li", {}, m)))];
}
async function validateRules() {
  try {
    const res = await api("/admin/rules/validate", {method: "POST", body: $("rules-editor").value});
    ruleResult([h("p", {className: "result-ok", id: "rules-valid"}, `valid: ${res.rules} rules`)]);
  } catch (e) { ruleResult(ruleErrors(e)); }
}
const describe = (r) => r.error ? "error: " + r.error : r.dropped ? `dropped (${r.dropped})` : (r.targets.join(", ") || "—") +
  (r.matched.length ? ` [${r.matched.join(", ")}]` : " [capability]");
async function dryRun() {
  try {
    const res = await api("/admin/history/replay", {method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify({rules: $("rules-editor").value, since: "24h"})});
    const rows = res.decisions.flatMap((d) => d.parts.map((p) => h("tr", {},
      h("td", {}, h("code", {}, d.messageId)), h("td", {}, `${p.index}: `, h("code", {}, p.modality)),
      h("td", {}, describe(p.current)), h("td", {}, describe(p.candidate)))));
    ruleResult([
      h("p", {id: "dryrun-summary"}, `dry-run: ${res.examined} recent decisions re-decided, ${res.changed} would change`),
      rows.length ? h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "message"), h("th", {}, "part"),
        h("th", {}, "now"), h("th", {}, "with these rules"))), h("tbody", {id: "dryrun-rows"}, rows)) : null]);
  } catch (e) { ruleResult(ruleErrors(e)); }
}
async function applyRules() {
  try {
    const res = await api("/admin/rules", {method: "PUT", body: $("rules-editor").value});
    ruleResult([h("p", {className: "result-ok", id: "rules-applied"}, `applied: version ${res.version}, ${res.rules} rules`)]);
    $("rules-version").textContent = `v${res.version}`;
    loadHealth();
  } catch (e) { ruleResult(ruleErrors(e)); }
}

const SAMPLE = {messageId: "dry-run-1", role: "ROLE_USER", parts: [{text: "The hinge cracked"},
  {url: "https://example.org/lid.jpg", mediaType: "image/jpeg",
   metadata: {"https://mma2a.dev/ext/multimodal/v1": {features: {objects: ["hinge"]}}}}]};
async function explain() {
  try {
    const message = JSON.parse($("sample").value);
    $("explanation").textContent = JSON.stringify(await api("/admin/explain", {method: "POST",
      headers: {"Content-Type": "application/json"}, body: JSON.stringify({message})}), null, 2);
  } catch (e) { $("explanation").textContent = "error: " + e.message; }
}

// --- live feed ----------------------------------------------------------------------------------
let lastSeq = 0;
async function poll() {
  if (!token()) return;
  try {
    const {decisions} = await api("/admin/decisions?after=" + lastSeq);
    for (const d of decisions) {
      lastSeq = Math.max(lastSeq, d.seq);
      const thumbs = d.thumbnails.filter((t) => /^image\/(png|jpeg|gif|webp)$/.test(t.mediaType || ""))
        .map((t) => h("img", {className: "thumb", alt: `part ${t.index}`, src: `data:${t.mediaType};base64,${t.data}`}));
      const parts = d.route.map((r) => Object.assign({transforms: []}, r));
      const ok = /COMPLETED|message/.test(d.outcome);
      $("decisions").prepend(h("tr", {}, h("td", {}, d.seq), h("td", {}, new Date(d.ts * 1000).toLocaleTimeString()),
        h("td", {}, h("code", {}, d.messageId)), h("td", {}, thumbs), h("td", {}, routeCell(parts)),
        h("td", {className: ok ? "ok" : "bad"}, d.outcome.replace("TASK_STATE_", "").toLowerCase())));
    }
  } catch (e) { /* the banner says what is wrong */ }
}

// --- start ----------------------------------------------------------------------------------------
function start() {
  if (location.hash.startsWith("#token=")) {  // a fragment never leaves the browser; drop it from the address bar
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(location.hash.slice(7)));
    history.replaceState(null, "", location.pathname);
  }
  if (token()) $("token").placeholder = "signed in (token kept for this tab)";
  const outcome = document.querySelector("#history-filters select[name=outcome]");
  for (const o of OUTCOMES) outcome.append(h("option", {value: o}, o));
  $("login").addEventListener("submit", (ev) => { ev.preventDefault(); signIn($("token").value.trim()); });
  $("sign-out").addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); $("token").placeholder = "admin token (MMA2A_ADMIN_TOKEN)"; showBanner("signed out"); });
  for (const b of document.querySelectorAll("#tabs button")) b.addEventListener("click", () => showTab(b.dataset.tab));
  $("history-filters").addEventListener("submit", (ev) => { ev.preventDefault(); searchHistory(false); });
  $("history-more").addEventListener("click", () => searchHistory(true));
  $("span").addEventListener("change", loadOverview);
  $("overview-refresh").addEventListener("click", loadOverview);
  $("rules-reload").addEventListener("click", loadRules);
  $("rules-validate").addEventListener("click", validateRules);
  $("rules-dryrun").addEventListener("click", dryRun);
  $("rules-apply").addEventListener("click", applyRules);
  $("explain").addEventListener("click", explain);
  $("sample").value = JSON.stringify(SAMPLE, null, 2);
  loadHealth();
  showTab("overview");
  setInterval(loadHealth, 5000);
  setInterval(() => { if (current === "live") poll(); }, 1500);
}
document.addEventListener("DOMContentLoaded", start);
