// mma2a console: served as a file under a strict CSP (script-src 'self'); every value shown goes through
// textContent or a DOM attribute, never parsed as HTML.
"use strict";

const COLOURS = ["#2f5fd0", "#e07b24", "#1f8a4c", "#c0392b", "#8e44ad", "#16a5a5", "#b8860b", "#6b7585"];
const OUTCOMES = ["completed", "failed", "rejected", "canceled", "input-required", "auth-required", "working",
  "submitted", "message", "refused", "shed", "unknown"];
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
function showSignedIn() {  // the form says which state the tab is in: a token field, or "signed in" and Sign out
  const on = Boolean(token());
  $("token").hidden = on; $("sign-in").hidden = on;
  $("signed-in").hidden = !on; $("sign-out").hidden = !on;
}
async function signIn(value) {  // signed in once the gateway takes the token; a wrong one leaves the form as it was
  sessionStorage.setItem(TOKEN_KEY, value);
  $("token").value = "";
  try {
    await api("/admin/agents");
  } catch (e) {
    sessionStorage.removeItem(TOKEN_KEY);
    if (!(e instanceof ApiError) || (e.status !== 401 && e.status !== 403)) showBanner("sign in failed: " + e.message);
    return;
  }
  showSignedIn();
  showBanner("");
  loadTab(current);
}
function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  showSignedIn();
  showBanner("signed out");
}

// --- tabs: each has an address (#history), so a tab can be linked to and the back button works -----
const TABS = ["overview", "history", "agents", "rules", "live"];
let current = "overview";
const tabOf = (hash) => TABS.includes(hash.slice(1)) ? hash.slice(1) : "overview";
function showTab(name) {
  current = name;
  for (const b of document.querySelectorAll("#tabs [data-tab]")) b.classList.toggle("active", b.dataset.tab === name);
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

// --- overview charts ---------------------------------------------------------------------------------
// a value as it reads: latency in ms below a second, in s above; counts as whole numbers
function formatValue(v, unit) {
  if (unit !== "ms") return `${Math.round(v)}`;
  if (v >= 1000) return `${+(v / 1000).toFixed(v >= 10000 ? 0 : 1)} s`;
  return `${+v.toFixed(v >= 10 ? 0 : 1)} ms`;
}
const clock = (t) => new Date(t * 1000).toLocaleTimeString([], {hour: "2-digit", minute: "2-digit"});

// the time axis spans the data (from its first bucket to its last, or to now when recent), not the whole
// selected span: five minutes of traffic in a one-hour span fill the chart instead of its last 15 px
function chart(container, series, valueIndex, bucket, unit) {
  container.replaceChildren();
  if (!series.length) { container.append(h("p", {className: "empty"}, "no decisions in this span")); return; }
  const W = 600, H = 180, L = 54, B = 20, T = 8, R = 10;
  const now = Date.now() / 1000;
  let peak = 0, first = Infinity, last = -Infinity;
  for (const s of series) for (const p of s.points) {
    const t = Date.parse(p[0]) / 1000;
    peak = Math.max(peak, p[valueIndex]); first = Math.min(first, t); last = Math.max(last, t + bucket);
  }
  peak = peak || 1;
  const end = now - last < bucket * 2 ? Math.max(now, last) : last;
  const start = Math.min(first, end - bucket * 2);
  const x = (t) => L + (W - L - R) * Math.min(1, Math.max(0, (t - start) / (end - start)));
  const y = (v) => H - B - (H - B - T) * (v / peak);
  const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img"});
  root.append(svg("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis"}),
              svg("line", {x1: L, y1: T, x2: L, y2: H - B, class: "axis"}));
  const label = (text, attrs) => { const t = svg("text", attrs); t.textContent = text; return t; };
  root.append(label(formatValue(peak, unit), {x: L - 4, y: T + 8, "text-anchor": "end", class: "peak"}),
              label(formatValue(0, unit), {x: L - 4, y: H - B, "text-anchor": "end"}),
              label(clock(start), {x: L, y: H - 4}), label(clock((start + end) / 2), {x: (L + W - R) / 2, y: H - 4,
                "text-anchor": "middle"}),
              label(end >= now - 1 ? "now" : clock(end), {x: W - R, y: H - 4, "text-anchor": "end"}));
  const legend = h("div", {className: "legend"});
  series.forEach((s, i) => {
    const colour = COLOURS[i % COLOURS.length];
    const pts = s.points.map((p) => [Date.parse(p[0]) / 1000 + bucket / 2, p[valueIndex]]);
    if (pts.length === 1) root.append(svg("circle", {cx: x(pts[0][0]), cy: y(pts[0][1]), r: 3, fill: colour}));
    else root.append(svg("polyline", {points: pts.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" "),
                                      fill: "none", stroke: colour, "stroke-width": 2}));
    const total = s.points.reduce((a, p) => a + p[1], 0);
    legend.append(h("span", {}, h("span", {className: `swatch c${i % COLOURS.length}`}), `${s.key} (${total})`));
  });
  container.append(root, legend);
}

// the route map: modalities on the left, agents (and refusals) on the right, one band per flow, as wide as its parts
function routeMap(container, doc) {
  container.replaceChildren();
  const flows = doc.flows || [];
  if (!flows.length) { container.append(h("p", {className: "empty"}, "no decisions in this span")); return; }
  const sum = (key) => {
    const m = new Map();
    for (const f of flows) m.set(f[key], (m.get(f[key]) || 0) + f.parts);
    return [...m.entries()].sort((a, b) => b[1] - a[1]);
  };
  const lefts = sum("modality"), rights = sum("target");
  const total = flows.reduce((a, f) => a + f.parts, 0);
  const W = 900, GAP = 10, MIN = 16, NODE = 150;
  const scale = Math.max(0.5, Math.min(6, 320 / total));  // px per part, so a few parts still show
  const place = (nodes) => {
    const at = new Map(); let top = 8;
    for (const [name, n] of nodes) { const hgt = Math.max(MIN, n * scale); at.set(name, {y: top, h: hgt, used: 0, n}); top += hgt + GAP; }
    return [at, top];
  };
  const [L, hl] = place(lefts), [Rt, hr] = place(rights);
  const H = Math.max(hl, hr) + 8;
  const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "route map"});
  const x0 = NODE + 10, x1 = W - NODE - 10;
  for (const f of flows) {
    const a = L.get(f.modality), b = Rt.get(f.target);
    const w = Math.max(1.5, f.parts * scale * Math.min(a.h / (a.n * scale), b.h / (b.n * scale)));
    const ya = a.y + a.used + w / 2, yb = b.y + b.used + w / 2;
    a.used += w; b.used += w;
    const path = svg("path", {d: `M${x0},${ya} C${(x0 + x1) / 2},${ya} ${(x0 + x1) / 2},${yb} ${x1},${yb}`,
                              class: `flow ${f.kind}`, "stroke-width": w.toFixed(1), "data-flow": `${f.modality}>${f.target}`});
    const title = svg("title", {});
    title.textContent = `${f.modality} → ${f.target}: ${f.parts} part${f.parts === 1 ? "" : "s"}` +
      (f.via.length ? ` via ${f.via.join(" → ")}` : "") + (f.failed ? `, ${f.failed} not completed` : "");
    path.append(title);
    root.append(path);
  }
  const node = (x, name, info, refusal, anchor) => {
    root.append(svg("rect", {x, y: info.y, width: NODE, height: info.h, rx: 3, class: refusal ? "node refusal" : "node"}));
    const t = svg("text", {x: anchor === "end" ? x + NODE - 6 : x + 6, y: info.y + Math.min(info.h, 22) / 2 + 4,
                           "text-anchor": anchor});
    t.textContent = `${name.length > 18 ? name.slice(0, 17) + "…" : name} (${info.n})`;
    const full = svg("title", {});
    full.textContent = `${name}: ${info.n} part${info.n === 1 ? "" : "s"}`;
    t.append(full);
    root.append(t);
  };
  for (const [name, info] of L) node(0, name, info, false, "start");
  for (const [name, info] of Rt) node(W - NODE, name, info, name.startsWith("("), "start");
  container.append(root, h("p", {className: "status"}, `${total} parts in ${doc.decisions} decisions` +
    (doc.truncated ? " (part of the span: its newest decisions, of its most frequent routes)" : "")));
}

let overviewSeq = 0;
async function loadOverview() {
  const seq = ++overviewSeq;  // a slower, older answer must not overwrite a newer one
  const span = Number($("span").value);
  const bucket = 60 * Math.max(1, Math.ceil(span / 3600));  // whole minutes, about 60 points
  try {
    const [mod, agent, flows] = await Promise.all([
      ...["modality", "agent"].map((by) => api(`/admin/history/counts?by=${by}&since=${span}s&bucket=${bucket}`)),
      api(`/admin/history/flows?since=${span}s`)]);
    if (seq !== overviewSeq) return;
    routeMap($("route-map"), flows);
    chart($("chart-traffic-modality"), mod.series, 1, bucket, "count");
    chart($("chart-traffic-agent"), agent.series, 1, bucket, "count");
    chart($("chart-latency-modality"), mod.series, 2, bucket, "ms");
    chart($("chart-latency-agent"), agent.series, 2, bucket, "ms");
    $("overview-status").textContent = `decisions per ${bucket / 60} min over ${$("span").selectedOptions[0].textContent}` +
      "; the time axis spans the traffic";
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
// an agent's slots under overload: its limit (fixed or adaptive), legs queued and shed, by priority
function overload(o) {
  if (!o) return "–";
  const byPriority = (m) => Object.entries(m || {}).map(([p, n]) => `p${p}: ${n}`).join(", ") || "0";
  return [h("div", {}, `limit ${o.limit} (${o.kind})`), h("div", {}, `queued ${o.queued}`),
    h("div", {className: Object.keys(o.shedByPriority || {}).length ? "bad" : ""}, `shed ${byPriority(o.shedByPriority)}`)];
}

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
        h("td", {}, a.inflight), h("td", {}, overload(a.overload)), h("td", {}, a.sent), h("td", {}, details));
    }));
  } catch (e) {
    $("agents").replaceChildren(h("tr", {}, h("td", {colspan: 8, className: "error"}, e.message)));
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
// Each capability choice of a decision as a table: every agent considered, its score components and total, ranked,
// or why it was not a candidate (the same rows as `mma2a rules explain`).
function decisionView(result) {
  const fmt = (v) => (typeof v === "number" ? v.toFixed(2) : "");
  const out = [];
  for (const part of ((result.explanation || {}).parts || [])) {
    const rules = (part.candidates || []).map((c) => `${c.matched ? "+" : "-"} ${c.rule}${c.reason ? ": " + c.reason : ""}`);
    out.push(h("h3", {}, `part ${part.index} (${part.modality}): ${(part.actions || []).join(", ") || "-"}`));
    if (rules.length) out.push(h("p", {className: "rule-checks"}, rules.join("; ")));
    else if ((part.notes || []).includes("no rule matched: default action")) out.push(h("p", {}, "no rule matched: default action"));
    for (const choice of (part.capability || [])) {
      const rows = choice.agents.map((a) => h("tr", {className: a.agent === choice.chosen ? "chosen" : (a.accepted ? "" : "refused")},
        h("td", {}, a.agent), h("td", {}, a.accepted ? "yes" : "no"), h("td", {}, fmt(a.specialisation)), h("td", {}, fmt(a.fit)),
        h("td", {}, fmt(a.skills)), h("td", {}, fmt(a.output)), h("td", {}, fmt(a.total)), h("td", {}, a.whyNot || (a.transformer ? "transformer: ranked last" : ""))));
      out.push(h("table", {className: "decision-table", dataset: {modality: choice.modality}},
        h("caption", {}, `capability for ${choice.modality}${choice.group ? " in group " + choice.group : ""}: ${choice.chosen || "nobody accepts it"}`),
        h("thead", {}, h("tr", {}, ...["agent", "accepts", "specialisation", "fit", "skills", "output", "total", "why not"].map((c) => h("th", {}, c)))),
        h("tbody", {}, rows)));
    }
  }
  return out;
}
async function explain() {
  try {
    const message = JSON.parse($("sample").value);
    const result = await api("/admin/explain", {method: "POST",
      headers: {"Content-Type": "application/json"}, body: JSON.stringify({message})});
    $("decision-view").replaceChildren(...decisionView(result));
    $("explanation").textContent = JSON.stringify(result, null, 2);
  } catch (e) { $("decision-view").replaceChildren(); $("explanation").textContent = "error: " + e.message; }
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
  showSignedIn();
  const outcome = document.querySelector("#history-filters select[name=outcome]");
  for (const o of OUTCOMES) outcome.append(h("option", {value: o}, o));
  $("login").addEventListener("submit", (ev) => { ev.preventDefault(); signIn($("token").value.trim()); });
  $("sign-out").addEventListener("click", signOut);
  window.addEventListener("hashchange", () => showTab(tabOf(location.hash)));
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
  showTab(tabOf(location.hash));
  setInterval(loadHealth, 5000);
  setInterval(() => { if (current === "live") poll(); }, 1500);
}
document.addEventListener("DOMContentLoaded", start);
