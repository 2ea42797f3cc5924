// leasehold dashboard: reads /api/v1/status and renders it. No build step,
// no dependencies. Data is inserted with textContent only.
"use strict";

const state = { token: sessionStorage.getItem("leasehold-token") || "", timer: null, colors: new Map() };

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(k == null ? "" : String(k)));
  return e;
}

async function api(method, path) {
  const headers = {};
  if (state.token) headers["Authorization"] = "Bearer " + state.token;
  const res = await fetch(path, { method, headers, cache: "no-store" });
  let body = null;
  try { body = await res.json(); } catch (_) { /* not JSON */ }
  if (res.status === 401) { showLogin(body && body.error); throw new Error("unauthorized"); }
  if (!res.ok) throw new Error((body && body.error) || res.status + " " + res.statusText);
  return body;
}

function showLogin(msg) {
  document.getElementById("login").hidden = false;
  document.getElementById("login-msg").textContent = state.token ? (msg || "token refused") : "";
}

function ago(iso, now) {
  if (!iso) return "—";
  const s = Math.round((Date.parse(now) - Date.parse(iso)) / 1000);
  if (s < 2) return "now";
  if (s < 120) return s + " s ago";
  if (s < 7200) return Math.round(s / 60) + " min ago";
  return iso.replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function ms(n) { return n < 1000 ? n + " ms" : (n / 1000).toFixed(1) + " s"; }
function short(iso) { return iso ? iso.replace("T", " ").replace("Z", "") : "—"; }

function color(instance) {
  if (!state.colors.has(instance)) state.colors.set(instance, "c" + (state.colors.size % 8));
  return state.colors.get(instance);
}

function fill(id, rows) {
  const tb = document.querySelector("#" + id + " tbody");
  tb.replaceChildren(...rows);
  if (rows.length === 0) {
    const n = document.querySelector("#" + id + " thead tr").children.length;
    tb.append(el("tr", { class: "empty" }, el("td", { colspan: n, class: "muted" }, "none")));
  }
}

async function act(method, path) {
  try { await api(method, path); } catch (e) { banner(e.message); }
  refresh();
}

function banner(msg) {
  const b = document.getElementById("error");
  b.hidden = !msg;
  b.textContent = msg || "";
}

function render(st) {
  document.getElementById("namespace").textContent = st.namespace;
  document.getElementById("serving").textContent = st.instance;
  document.getElementById("updated").textContent = "updated " + short(st.now) + " UTC";
  const now = st.now;

  fill("instances", st.instances.map(i => el("tr", { "data-instance": i.instance },
    el("td", { class: i.self ? "self" : "" }, i.instance),
    el("td", { class: i.alive ? "ok" : "bad" }, i.alive ? "alive" : "gone"),
    el("td", {}, i.alive ? ms(i.lease_remaining_ms) : "—"),
    el("td", {}, ago(i.last_seen, now)))));

  fill("leaders", st.leaders.map(l => el("tr", { "data-role": l.role, "data-leader": l.instance },
    el("td", {}, l.role),
    el("td", { class: l.self ? "self" : "" }, l.instance),
    el("td", {}, l.token),
    el("td", { title: l.since_observed ? "first seen by this server" : "elected" }, (l.since_observed ? "seen " : "") + ago(l.since, now)),
    el("td", {}, l.self ? el("button", { onclick: () => act("POST", "/api/v1/leaders/" + encodeURIComponent(l.role) + "/resign") }, "resign") : ""))));

  fill("locks", st.locks.map(k => el("tr", {},
    el("td", {}, k.key), el("td", {}, k.instance), el("td", {}, k.token), el("td", {}, ms(k.remaining_ms)))));

  fill("jobs", st.jobs.map(j => {
    const p = "/api/v1/jobs/" + encodeURIComponent(j.name);
    return el("tr", { "data-job": j.name },
      el("td", {}, j.name),
      el("td", {}, j.schedule + (j.zone && j.zone !== "UTC" ? " (" + j.zone + ")" : "")),
      el("td", {}, j.mode),
      el("td", {}, short(j.next[0])),
      el("td", {}, short(j.last_claimed)),
      j.version_refused
        ? el("td", { class: "warn", title: "superseded by version " + j.current_version }, "REFUSED (old config)")
        : el("td", { class: j.paused ? "warn" : "ok" }, j.paused ? "paused" : "active"),
      el("td", {},
        el("button", { onclick: () => act("POST", p + "/trigger") }, "run now"),
        j.paused ? el("button", { onclick: () => act("POST", p + "/resume") }, "resume")
                 : el("button", { onclick: () => act("POST", p + "/pause") }, "pause")));
  }));

  fill("runs", st.runs.map(r => el("tr", { "data-job": r.job, "data-instance": r.instance },
    el("td", {}, short(r.scheduled_at)),
    el("td", {}, r.job + (r.trigger ? " (run now: " + r.trigger + ")" : "")),
    el("td", { class: { succeeded: "ok", failed: "bad", running: "run", abandoned: "warn" }[r.state] || "" }, r.state + (r.expired ? " (runner gone)" : "")),
    el("td", {}, r.instance),
    el("td", {}, r.token),
    el("td", {}, r.attempt),
    el("td", {}, r.state === "running" ? "…" : ms(r.duration_ms)),
    el("td", { class: "err", title: r.error || "" }, (r.error || "").split("\n")[0].slice(0, 120)))));

  // Timeline: per job, its occurrences oldest to newest, coloured by the
  // instance that ran them.
  const byJob = new Map();
  for (const r of st.runs.slice().reverse()) {
    if (!byJob.has(r.job)) byJob.set(r.job, []);
    byJob.get(r.job).push(r);
  }
  const rows = [];
  for (const j of st.jobs) {
    const runs = byJob.get(j.name) || [];
    rows.push(el("div", { class: "tl-row", "data-job": j.name },
      el("span", { class: "tl-name" }, j.name),
      el("span", { class: "tl-cells" }, ...runs.map(r => el("span", {
        class: "cell " + color(r.instance) + " " + r.state,
        "data-instance": r.instance,
        title: short(r.scheduled_at) + " · " + r.instance + " · " + r.state + " · token " + r.token,
      })))));
  }
  document.getElementById("timeline").replaceChildren(...rows);
  document.getElementById("legend").replaceChildren(...[...state.colors.entries()].map(([name, c]) =>
    el("span", {}, el("span", { class: "cell " + c }), name)));
}

async function refresh() {
  try {
    const st = await api("GET", "/api/v1/status?runs=100");
    document.getElementById("login").hidden = true;
    banner("");
    render(st);
    document.body.dataset.loaded = "true";
  } catch (e) {
    if (e.message !== "unauthorized") banner("cannot read the API: " + e.message);
  }
}

function schedule() {
  clearInterval(state.timer);
  if (document.getElementById("auto").checked) state.timer = setInterval(refresh, 2000);
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("auto").addEventListener("change", schedule);
  document.getElementById("login-form").addEventListener("submit", ev => {
    ev.preventDefault();
    state.token = document.getElementById("token").value.trim();
    sessionStorage.setItem("leasehold-token", state.token);
    refresh();
  });
  refresh();
  schedule();
});
