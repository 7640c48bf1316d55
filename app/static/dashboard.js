// banditgate admin dashboard: plain JavaScript over the admin REST API, charts by the vendored uPlot.
// The admin key lives in sessionStorage and is sent as a Bearer token. What each chart plots is kept on
// window.__charts ({x: [epoch seconds], series: {label: [values]}}) and the stats query behind it on
// window.__statsQuery, so a test (or a curious person) can compare them with the API; the cost-target and
// incumbent panel's figures are on window.__trusted (stats.trusted; its conflict block, when the floor
// holds the spend over the cost target, is also said in words), the warm-start panel's on
// window.__warmStart (stats.warm_start), the shadow-evaluation panel's on window.__shadow (stats.shadow). Every summary figure keeps its stats field in data-field and its
// raw value in data-value.
"use strict";

const KEY_STORE = "banditgate.adminKey";
const PALETTE = ["#2f6fdf", "#e8710a", "#1a9850", "#c0362c", "#8e44ad", "#00838f", "#b58900", "#6d4c41"];
const $ = (id) => document.getElementById(id);
// bucket "auto": the narrowest of these widths (seconds, the API's spelling) with at most AUTO_BUCKETS buckets
const BUCKETS = [[5, "5s"], [15, "15s"], [60, "1m"], [300, "5m"], [900, "15m"], [3600, "1h"], [86400, "1d"]];
const AUTO_BUCKETS = 120;
const LIVE_MS = 5000;
const plots = {};
window.__charts = {};
window.__uplot = plots;
window.__dashboard = { state: "signed-out", generation: 0 };

function esc(value) {
  return String(value).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function fmt(value, digits = 3) {
  if (value === null || value === undefined) return "–";
  return typeof value === "number" ? Number(value.toPrecision(digits)).toString() : String(value);
}

// A 422's detail is a list of {loc, msg}; other errors' detail is a string.
function errorText(detail) {
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) return detail.map((e) => (e.loc && e.loc.length ? `${e.loc.join(".")}: ` : "") + e.msg).join("; ");
  return JSON.stringify(detail);
}

async function api(path, options = {}) {
  const key = sessionStorage.getItem(KEY_STORE);
  const headers = { Authorization: `Bearer ${key}`, ...(options.body ? { "Content-Type": "application/json" } : {}) };
  const response = await fetch(path, { ...options, headers });
  const body = response.status === 204 ? null : await response.json().catch(() => null);
  if (!response.ok) {
    const detail = body && body.detail ? errorText(body.detail) : response.statusText;
    const error = new Error(`${response.status}: ${detail}`);
    error.status = response.status;
    throw error;
  }
  return body;
}

function setState(state, message = "") {
  window.__dashboard.state = state;
  $("status").textContent = message;
  $("status").className = state === "error" ? "error" : "status";
}

// --- sign in ----------------------------------------------------------------------------------------

async function signIn(key) {
  sessionStorage.setItem(KEY_STORE, key);
  try {
    const tenants = await api("/admin/tenants");
    $("signin").hidden = true;
    $("board").hidden = false;
    $("picker").hidden = false;
    $("tenant").innerHTML = tenants.map((t) => `<option>${esc(t.name)}</option>`).join("");
    await loadRouters();
  } catch (error) {
    sessionStorage.removeItem(KEY_STORE);
    $("signin-error").textContent = error.status === 401 || error.status === 403 ? "That key is not the admin key." : error.message;
    window.__dashboard.state = "signed-out";
  }
}

function signOut() {
  sessionStorage.removeItem(KEY_STORE);
  location.reload();
}

async function loadRouters() {
  const tenant = $("tenant").value;
  const routers = tenant ? await api(`/admin/tenants/${encodeURIComponent(tenant)}/routers`) : [];
  window.__routers = routers;
  $("router").innerHTML = routers.map((r) => `<option>${esc(r.name)}</option>`).join("");
  await refresh();
}

// --- charts -----------------------------------------------------------------------------------------

function drawChart(name, x, series, yLabel) {
  window.__charts[name] = { x, series };
  const element = $(`chart-${name}`);
  const labels = Object.keys(series);
  const options = {
    width: Math.max(320, element.clientWidth),
    height: 220,
    scales: { x: { time: true } },
    series: [{}, ...labels.map((label, i) => ({
      label,
      stroke: PALETTE[i % PALETTE.length],
      width: 2,
      points: { show: x.length < 60 },
      spanGaps: false,
      dash: label === "budget" || label.startsWith("allowed") ? [6, 4] : undefined,
    }))],
    axes: [{}, { label: yLabel, size: 60 }],
  };
  if (plots[name]) plots[name].destroy();
  element.innerHTML = "";
  plots[name] = new uPlot(options, [x, ...labels.map((label) => series[label])], element);
}

function drawStats(stats) {
  const x = stats.buckets.map((b) => Date.parse(b.start) / 1000);
  const models = [...new Set(stats.buckets.flatMap((b) => Object.keys(b.models)))];
  const traffic = {};
  for (const model of models) traffic[model] = stats.buckets.map((b) => (b.models[model] ? b.models[model].share : null));
  drawChart("traffic", x, traffic, "share");
  drawChart("reward", x, {
    "mean reward": stats.buckets.map((b) => b.reward_mean),
    "running regret": stats.buckets.map((b) => b.regret_running),
  }, "reward");
  drawChart("cost", x, {
    "total per bucket": stats.buckets.map((b) => b.cost_total),
    "mean per call": stats.buckets.map((b) => b.cost_mean),
  }, "USD");
  const queries = { "query rounds (cumulative)": stats.buckets.map((b) => b.queries_cumulative) };
  if (stats.query_budget !== null) {
    queries.budget = stats.buckets.map(() => stats.query_budget);
  } else if (stats.query_budget_ratio !== null) {
    queries["allowed by the ratio"] = stats.buckets.map((b) => stats.query_budget_ratio * b.decisions_cumulative);
  }
  drawChart("queries", x, queries, "rounds");
  let budget = `${stats.queries_total} query rounds so far; this router's policy has no query budget.`;
  if (stats.query_budget !== null) {
    budget = `${stats.queries_total} of ${stats.query_budget} query rounds used (from ${stats.query_budget_key}).`;
  } else if (stats.query_budget_ratio !== null) {
    budget = `${stats.queries_total} query rounds; the policy may query ${fmt(100 * stats.query_budget_ratio)} % of decisions.`;
  }
  $("budget").textContent = budget;
  drawSummary(stats);
}

// [label, field path in stats, formatter, note]; the savings and floor figures only for a router with an incumbent
function drawSummary(stats) {
  const kinds = stats.feedback_by_kind;
  const feedbackKinds = Object.entries(kinds).filter(([kind]) => kind !== "cost").map(([kind, n]) => `${kind} ${n}`);
  const cards = [
    ["policy", "policy", String],
    ["decisions", "decisions", String],
    ["feedback", "feedback", String, feedbackKinds.join(" · ") || "none yet"],
    ["calls costed", "feedback_by_kind.cost", (v) => String(v ?? 0), "the gateway's cost records"],
    ["mean reward", "reward_mean", fmt],
    ["cost (USD)", "cost_total", (v) => fmt(v, 4)],
    ["regret on query rounds", "regret_mean", fmt],
  ];
  if (stats.trusted && stats.trusted.safety) {
    const safety = stats.trusted.safety;
    cards.push(
      ["saved vs incumbent", "trusted.safety.cost_saved_share", percent, `${fmt(safety.cost_saved, 4)} USD against always ${safety.incumbent}`],
      ["off the incumbent", "trusted.safety.off_share", percent, `${safety.off_incumbent} of ${safety.checked} decisions`],
      ["floor margin", "trusted.safety.floor_margin", fmt, `reward to spare above ${fmt(100 * (1 - safety.max_loss))} % of the incumbent's`],
    );
  }
  $("summary").innerHTML = cards.map(([label, path, format, note]) => {
    const value = path.split(".").reduce((o, k) => (o === null || o === undefined ? o : o[k]), stats);
    const raw = value === undefined ? null : value;
    return `<div data-field="${esc(path)}" data-value="${esc(JSON.stringify(raw))}">${esc(label)}<b>${esc(format(raw))}</b>${
      note ? `<small>${esc(note)}</small>` : ""}</div>`;
  }).join("");
}

// --- cost target and incumbent (stats.trusted) ------------------------------------------------------

function percent(value) {
  return value === null || value === undefined ? "–" : `${fmt(100 * value)} %`;
}

// [label, field path in stats.trusted, formatter]; each row keeps its raw value in data-value.
const TRUSTED_ROWS = [
  ["lambda_t (reward per USD)", "pacing.cost_multiplier", fmt],
  ["cost_weight (floor of lambda_t)", "pacing.cost_weight", fmt],
  ["cost target (USD per request)", "pacing.cost_target", (v) => fmt(v, 4)],
  ["spend per request (USD)", "pacing.spend_per_request", (v) => fmt(v, 4)],
  ["spend / target", "pacing.spend_vs_target", percent],
  ["requests paced", "pacing.requests", fmt],
  ["incumbent", "safety.incumbent", fmt],
  ["max loss (alpha)", "safety.max_loss", fmt],
  ["margin to leave the incumbent now", "safety.margin", (v) => (v === null ? "unbounded: incumbent only" : fmt(v))],
  ["floor margin so far", "safety.floor_margin", fmt],
  ["forced onto the incumbent", "safety.forced_share", percent],
  ["incumbent by the policy's choice", "safety.chosen_share", percent],
  ["off the incumbent", "safety.off_share", percent],
  ["cost saved vs always-incumbent (USD)", "safety.cost_saved", (v) => fmt(v, 4)],
  ["cost saved (share)", "safety.cost_saved_share", percent],
  ["floor holds the spend over the target", "conflict.floor_over_target", (v) => (v ? "yes: the floor wins" : "no")],
  ["held on the incumbent over the target", "conflict.held_share", percent],
];

function drawTrusted(trusted) {
  window.__trusted = trusted;
  $("trusted").hidden = !trusted;
  if (!trusted) return;
  const rows = TRUSTED_ROWS.filter(([, path]) => trusted[path.split(".")[0]]).map(([label, path, format]) => {
    const [group, field] = path.split(".");
    const value = trusted[group][field];
    return `<tr data-field="${esc(path)}" data-value="${esc(JSON.stringify(value))}"><td>${esc(label)}</td><td>${esc(format(value))}</td></tr>`;
  });
  $("trusted-figures").querySelector("tbody").innerHTML = rows.join("");
  // a cost target the floor does not let the router meet: said in words above the figures
  const conflict = trusted.conflict && trusted.conflict.floor_over_target ? trusted.conflict.message : null;
  $("trusted-conflict").hidden = !conflict;
  $("trusted-conflict").textContent = conflict || "";
  const checked = trusted.safety ? ` · ${trusted.safety.checked} decisions checked in this range` : "";
  $("trusted-note").textContent = `folded up to event ${trusted.last_event_id} (${trusted.events_folded} events)${checked}`;
}

// --- warm start from logs (stats.warm_start) ---------------------------------------------------------

function drawWarmStart(warm) {
  window.__warmStart = warm;
  $("warm-start").hidden = !warm;
  if (!warm) return;
  const rows = Object.entries(warm.models).map(([model, m]) => `<tr data-model="${esc(model)}"><td>${esc(model)}</td>
    <td>${esc(m.stored)}</td><td>${esc(m.folded)}</td><td>${esc(m.pending)}</td><td>${esc(fmt(m.reward_mean))}</td></tr>`);
  $("warm-start-models").querySelector("tbody").innerHTML = rows.join("");
  const reset = warm.learned_after ? ` · learned after the reset/import at event ${warm.learned_after}` : "";
  $("warm-start-note").textContent =
    `${warm.stored} offline observations logged, ${warm.folded} learned, ${warm.pending} pending (folded up to event ${warm.last_event_id})${reset}`;
}

// --- shadow evaluation (stats.shadow) -----------------------------------------------------------------

function drawShadow(shadow) {
  window.__shadow = shadow;
  $("shadow").hidden = !shadow;
  if (!shadow) return;
  const rows = Object.entries(shadow.models).map(([model, m]) => `<tr data-model="${esc(model)}"><td>${esc(model)}</td>
    <td>${esc(m.calls)}</td><td>${esc(m.graded)}</td><td>${esc(fmt(m.spend, 4))}</td>
    <td>${esc(m.evidence_n === null ? "–" : m.evidence_n)}</td><td>${esc(fmt(m.evidence_mean))}</td><td>${esc(fmt(m.evidence_lcb))}</td></tr>`);
  $("shadow-models").querySelector("tbody").innerHTML = rows.join("");
  const refused = Object.entries(shadow.refused).map(([reason, n]) => `${n} (${reason})`).join(", ") || "none";
  const budget = shadow.budget_usd_per_day === null ? "no daily budget"
    : `${fmt(shadow.spent_last_day, 4)} of ${fmt(shadow.budget_usd_per_day, 4)} USD spent over the last 24 h`;
  $("shadow-note").textContent =
    `${shadow.calls} shadow calls (${percent(shadow.share)} of ${shadow.served} served decisions), ${fmt(shadow.spend, 4)} USD in this range; refused: ${refused}; ${budget}`;
}

// --- decisions --------------------------------------------------------------------------------------

async function loadDecisions(tenant, router) {
  const params = new URLSearchParams({ tenant, router, limit: "15" });
  const page = await api(`/admin/decisions?${params}`);
  window.__decisions = page.items;
  const rows = page.items.map((d) => `<tr data-id="${esc(d.id)}" data-reward="${esc(JSON.stringify(d.reward))}" data-cost="${esc(JSON.stringify(d.cost))}">
    <td>${esc(new Date(d.created_at).toLocaleTimeString())}</td><td>${esc(d.model ?? "declined")}</td>
    <td>${esc(fmt(d.reward))}</td><td>${esc(fmt(d.cost, 3))}</td><td>${esc(d.query.join(", ") || "–")}</td></tr>`);
  $("decisions").querySelector("tbody").innerHTML = rows.join("") || `<tr><td colspan="5" class="muted">no decisions yet</td></tr>`;
  $("decision-detail").innerHTML = "";
  for (const row of $("decisions").querySelectorAll("tbody tr[data-id]")) row.addEventListener("click", () => showDecision(row));
}

async function showDecision(row) {
  for (const other of row.parentElement.children) other.classList.remove("selected");
  row.classList.add("selected");
  const d = await api(`/admin/decisions/${encodeURIComponent(row.dataset.id)}`);
  const fields = [...new Set(Object.values(d.scores).flatMap((s) => Object.keys(s || {})))];
  const scoreRows = Object.entries(d.scores).map(([model, s]) => `<tr><td>${model === d.model ? "<b>" + esc(model) + "</b>" : esc(model)}</td>${
    fields.map((f) => `<td>${s && s[f] === null ? "∞" : esc(fmt(s ? s[f] : null))}</td>`).join("")}</tr>`);
  const feedback = d.feedback.map((f) => `<li>${esc(f.kind)} · ${esc(f.model)}: reward ${esc(fmt(f.reward))}, cost ${esc(fmt(f.cost))}</li>`);
  $("decision-detail").innerHTML = `<p class="muted">decision ${esc(d.id)} · policy ${esc(d.policy)} · router version ${esc(d.router_version)} · models ${esc(d.models.join(" → ") || "none")}
    · prompt of ${esc(d.prompt_chars)} characters (the gateway stores its hash, not its text)</p>
    <table><thead><tr><th>model</th>${fields.map((f) => `<th>${esc(f)}</th>`).join("")}</tr></thead><tbody>${scoreRows.join("")}</tbody></table>
    <ul>${feedback.join("") || "<li class='muted'>no feedback yet</li>"}</ul>`;
}

// --- configuration ----------------------------------------------------------------------------------

async function loadConfig(tenant, router) {
  const [config, backends] = await Promise.all([
    api(`/admin/tenants/${encodeURIComponent(tenant)}/routers/${encodeURIComponent(router)}`),
    api("/admin/backends"),
  ]);
  window.__routerConfig = config;
  $("cfg-policy").value = config.policy;
  $("cfg-hyperparameters").value = JSON.stringify(config.hyperparameters, null, 2);
  const names = [...new Set([...config.arms, ...backends.map((b) => b.name)])];
  $("cfg-arms").innerHTML = names.map((name) => `<label><input type="checkbox" value="${esc(name)}"${config.arms.includes(name) ? " checked" : ""}> ${esc(name)}</label>`).join("");
  $("cfg-lo").value = config.reward_range[0];
  $("cfg-hi").value = config.reward_range[1];
  $("cfg-seed").value = config.seed;
  $("cfg-default").checked = config.is_default;
  $("cfg-result").textContent = `version ${config.version}`;
}

async function saveConfig(event) {
  event.preventDefault();
  const result = $("cfg-result");
  let hyperparameters;
  try {
    hyperparameters = JSON.parse($("cfg-hyperparameters").value || "{}");
  } catch (error) {
    result.textContent = `hyperparameters are not JSON: ${error.message}`;
    result.className = "error";
    return;
  }
  const body = {
    policy: $("cfg-policy").value,
    hyperparameters,
    arms: [...$("cfg-arms").querySelectorAll("input:checked")].map((input) => input.value),
    reward_range: [Number($("cfg-lo").value), Number($("cfg-hi").value)],
    seed: Number($("cfg-seed").value),
    is_default: $("cfg-default").checked,
  };
  const { tenant, router } = window.__statsQuery;
  try {
    const saved = await api(`/admin/tenants/${encodeURIComponent(tenant)}/routers/${encodeURIComponent(router)}`, {
      method: "PATCH",
      body: JSON.stringify(body),
    });
    window.__routerConfig = saved;
    result.textContent = `saved: version ${saved.version}`;
    result.className = "muted";
    window.__dashboard.saved = saved.version;
  } catch (error) {
    result.textContent = error.message;
    result.className = "error";
    window.__dashboard.saveError = error.message;
  }
}

// --- refresh ----------------------------------------------------------------------------------------

function bucketFor(span) {
  const chosen = $("bucket").value;
  if (chosen !== "auto") return chosen;
  const fits = BUCKETS.find(([seconds]) => span / seconds <= AUTO_BUCKETS);
  return (fits || BUCKETS[BUCKETS.length - 1])[1];
}

let liveTimer = null;
function setLive() {
  clearInterval(liveTimer);
  const due = () => !$("board").hidden && window.__dashboard.state !== "loading";
  liveTimer = $("live").checked ? setInterval(() => due() && refresh(), LIVE_MS) : null;
}

async function refresh(event) {
  if (event) event.preventDefault();
  const tenant = $("tenant").value;
  const router = $("router").value;
  if (!tenant || !router) {
    setState("ready", tenant ? "This tenant has no routers yet." : "No tenants yet.");
    return;
  }
  const generation = ++window.__dashboard.generation;
  const current = () => generation === window.__dashboard.generation; // a newer refresh supersedes this one
  setState("loading", "loading…");
  const until = new Date();
  // "router": from the router's creation (a 5-second bucket at least), else the last N seconds
  const created = (window.__routers || []).find((r) => r.name === router);
  const span = $("range").value === "router"
    ? Math.max(5, (until.getTime() - Date.parse(created ? created.created_at : until.toISOString())) / 1000)
    : Number($("range").value);
  const since = new Date(until.getTime() - span * 1000);
  const query = { tenant, router, since: since.toISOString(), until: until.toISOString(), bucket: bucketFor(span) };
  window.__statsQuery = query;
  try {
    const params = new URLSearchParams({ since: query.since, until: query.until, bucket: query.bucket });
    const base = `/admin/tenants/${encodeURIComponent(tenant)}/routers/${encodeURIComponent(router)}`;
    const stats = await api(`${base}/stats?${params}`);
    if (!current()) return;
    window.__stats = stats;
    drawStats(stats);
    drawTrusted(stats.trusted);
    drawWarmStart(stats.warm_start);
    drawShadow(stats.shadow);
    await Promise.all([loadDecisions(tenant, router), loadConfig(tenant, router)]);
    if (!current()) return;
    setState("ready", `${tenant} / ${router}: ${stats.buckets.length} buckets of ${stats.bucket_s} s up to ${until.toLocaleString()}`);
  } catch (error) {
    if (current()) setState("error", error.message);
  }
}

$("signin-form").addEventListener("submit", (event) => {
  event.preventDefault();
  signIn($("admin-key").value);
});
$("signout").addEventListener("click", signOut);
$("picker").addEventListener("submit", refresh);
$("tenant").addEventListener("change", loadRouters);
for (const id of ["router", "range", "bucket"]) $(id).addEventListener("change", () => refresh());
$("live").addEventListener("change", setLive);
// ?range=router (or seconds) and ?live=1 in the page's address preselect those controls
const preset = new URLSearchParams(location.search);
if ([...$("range").options].some((o) => o.value === preset.get("range"))) $("range").value = preset.get("range");
if (preset.get("live") === "1") $("live").checked = true;
setLive();
$("config").addEventListener("submit", saveConfig);
if (sessionStorage.getItem(KEY_STORE)) signIn(sessionStorage.getItem(KEY_STORE));
