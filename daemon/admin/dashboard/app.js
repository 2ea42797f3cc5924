// leasehold dashboard: reads /api/v1/status and renders it; runs.js shows
// run history (filters, paging, a run's detail), axis.js the jobs' time
// axes. No build step, no dependencies. Data is inserted with textContent
// only.
"use strict";

const state = { token: sessionStorage.getItem("leasehold-token") || "", timer: null, colors: new Map() };

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "style") Object.assign(e.style, v); // CSSOM: the CSP refuses style attributes
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

// ask shows the confirmation dialog; it resolves true when confirmed.
function ask(text, note) {
  const d = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-note").textContent = note || "";
  d.returnValue = "";
  return new Promise(resolve => {
    d.addEventListener("close", () => resolve(d.returnValue === "ok"), { once: true });
    d.showModal();
    document.getElementById("confirm-cancel").focus();
  });
}

// showResult says what an action did (kind: ok, bad or muted).
function showResult(text, kind) {
  const r = document.getElementById("result");
  r.className = "result " + kind;
  r.dataset.kind = kind;
  document.getElementById("result-text").textContent = text;
  r.hidden = false;
}

// act asks for confirmation of what, calls the API and shows the result
// (done turns the answer into a sentence) or the error.
async function act(what, note, method, path, done) {
  if (!await ask(what + "?", note)) {
    showResult("Cancelled: " + what + " — nothing was done.", "muted");
    return;
  }
  try {
    const body = await api(method, path);
    showResult(done(body), "ok");
  } catch (e) {
    showResult(what + " failed: " + e.message, "bad");
  }
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
    el("td", {}, l.self ? el("button", { onclick: () => act("Resign role " + l.role + " on " + l.instance,
      "The instance gives up the role; another instance is elected and takes over the leader-mode jobs.",
      "POST", "/api/v1/leaders/" + encodeURIComponent(l.role) + "/resign",
      b => b.instance + " resigned " + b.role + "; another instance takes it over.") }, "resign") : ""))));

  fill("locks", st.locks.map(k => el("tr", {},
    el("td", {}, k.key), el("td", {}, k.instance), el("td", {}, k.token), el("td", {}, ms(k.remaining_ms)))));

  // A job's state: this daemon's part (active, paused, pending, superseded,
  // refused) and, when the job runs on no daemon, that — the same on every
  // daemon, read from the ledger. The notes say why and what to do.
  const jobState = j => {
    const state = j.state || (j.version_refused ? "refused" : j.paused ? "paused" : "active");
    const nowhere = j.cluster && !j.cluster.running && !j.paused;
    const label = (state === "refused" ? "REFUSED (old config)" : state) + (nowhere ? " — NOT RUNNING ANYWHERE" : "");
    const note = [j.state_note, j.cluster && j.cluster.note].filter(Boolean).join("\n\n");
    return el("td", { class: state === "active" && !nowhere ? "ok" : nowhere ? "bad" : "warn", title: note, "data-state": state },
      label, note && state !== "paused" ? el("div", { class: "note" }, note) : "");
  };
  // The job's state across the namespace (the same on every daemon):
  // which version applies since when, one ahead, and whether any instance
  // runs it.
  const cluster = j => {
    const c = j.cluster || {};
    const since = !c.since ? "" : Date.parse(c.since) < 86400000 ? " (its first)" : " since " + short(c.since);
    const parts = [c.version ? "version " + c.version.slice(0, 12) + since : "no version recorded yet"];
    if (c.next_version) parts.push("→ " + c.next_version.slice(0, 12) + " from " + short(c.next_from));
    if (c.refused_on && c.refused_on.length) parts.push("refused on " + c.refused_on.map(r => r.instance + " (" + r.schedule + ")").join(", "));
    return el("td", { class: c.running === false ? "bad" : "ok", "data-running": String(c.running !== false), title: c.note || c.schedule || "" },
      c.running === false ? "NOT RUNNING ANYWHERE" : "running", el("div", { class: "note muted" }, parts.join(" ")));
  };
  fill("jobs", st.jobs.map(j => {
    const p = "/api/v1/jobs/" + encodeURIComponent(j.name);
    return el("tr", { "data-job": j.name },
      el("td", {}, j.name),
      el("td", {}, j.schedule + (j.zone && j.zone !== "UTC" ? " (" + j.zone + ")" : "")),
      el("td", {}, j.mode),
      el("td", {}, short(j.next[0])),
      el("td", {}, short(j.last_claimed)),
      jobState(j),
      cluster(j),
      el("td", {},
        el("button", { class: "trigger", onclick: () => act("Run " + j.name + " now", "One run, claimed once across the namespace, starts at once.",
          "POST", p + "/trigger", b => "Triggered " + b.job + ": a run at " + short(b.scheduled_at) + " UTC, token " + b.token + ", key " + b.key + ".") }, "run now"),
        j.paused ? el("button", { class: "resume", onclick: () => act("Resume " + j.name, "Every instance of the namespace claims its occurrences again.",
                     "POST", p + "/resume", b => "Resumed " + b.job + " on every instance.") }, "resume")
                 : el("button", { class: "pause", onclick: () => act("Pause " + j.name, "No instance of the namespace claims its occurrences until it is resumed; running ones finish.",
                     "POST", p + "/pause", b => "Paused " + b.job + " on every instance.") }, "pause")));
  }));
  fillChoices(st);
  refreshAxes(st);
}

async function refresh() {
  try {
    const st = await api("GET", "/api/v1/status?runs=0");
    document.getElementById("login").hidden = true;
    banner("");
    render(st);
    await refreshRuns(false);
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
  document.getElementById("result-close").addEventListener("click", () => { document.getElementById("result").hidden = true; });
  setupRuns();
  setupAxes();
  document.getElementById("login-form").addEventListener("submit", ev => {
    ev.preventDefault();
    state.token = document.getElementById("token").value.trim();
    sessionStorage.setItem("leasehold-token", state.token);
    refresh();
  });
  refresh();
  schedule();
});
