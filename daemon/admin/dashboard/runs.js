// leasehold dashboard: run history — filters (job, state, instance, time
// range) applied by the API, cursor paging, and a run's detail (timings,
// attempts with their errors, output head and tail). Uses el, api, fill,
// short and ms from app.js.
"use strict";

const runs = { query: new URLSearchParams({ limit: "50" }), cursors: [""], page: 0, next: "" };

// utc turns a datetime-local value (read as UTC) into RFC 3339.
function utc(v) {
  if (!v) return "";
  return (v.length === 16 ? v + ":00" : v) + "Z";
}

function filterQuery() {
  const q = new URLSearchParams();
  const v = id => document.getElementById(id).value;
  if (v("f-job")) q.set("job", v("f-job"));
  if (v("f-state")) q.set("state", v("f-state"));
  if (v("f-instance")) q.set("instance", v("f-instance"));
  if (v("f-since")) q.set("since", utc(v("f-since")));
  if (v("f-before")) q.set("before", utc(v("f-before")));
  q.set("limit", v("f-limit"));
  return q;
}

// fillChoices keeps the job and instance choices in step with the status,
// keeping the selection.
function fillChoices(st) {
  const set = (id, names) => {
    const s = document.getElementById(id);
    const have = [...s.options].slice(1).map(o => o.value);
    if (have.join("\n") === names.join("\n")) return;
    const cur = s.value;
    s.replaceChildren(el("option", { value: "" }, "any"), ...names.map(n => el("option", { value: n }, n)));
    s.value = names.includes(cur) ? cur : "";
  };
  set("f-job", st.jobs.map(j => j.name));
  set("f-instance", st.instances.map(i => i.instance));
}

function filterMessage(text) {
  let m = document.getElementById("filter-msg");
  if (!m) {
    m = el("span", { id: "filter-msg", class: "bad" });
    document.getElementById("filters").append(m);
  }
  m.textContent = text || "";
}

// refreshRuns reads the current page (its cursor) with the filters.
async function refreshRuns() {
  const q = new URLSearchParams(runs.query);
  if (runs.cursors[runs.page]) q.set("cursor", runs.cursors[runs.page]);
  let page;
  try {
    page = await api("GET", "/api/v1/runs?" + q.toString());
  } catch (e) {
    filterMessage(e.message);
    return;
  }
  filterMessage("");
  runs.next = page.next_cursor || "";
  document.getElementById("page-newer").disabled = runs.page === 0;
  document.getElementById("page-older").disabled = !runs.next;
  document.getElementById("page-info").textContent = "page " + (runs.page + 1) + " · " + page.runs.length + " runs" + (runs.next ? "" : " · oldest");
  const open = document.getElementById("detail").dataset;
  fill("runs", page.runs.map(r => el("tr", {
    "data-job": r.job, "data-instance": r.instance, "data-at": r.scheduled_at,
    class: "clickable" + (open.job === r.job && open.at === r.scheduled_at ? " selected" : ""),
    title: "show this run's detail",
    onclick: () => showDetail(r.job, r.scheduled_at),
  },
    el("td", {}, short(r.scheduled_at)),
    el("td", {}, r.job + (r.trigger ? " (run now: " + r.trigger + ")" : "")),
    el("td", { class: stateClass(r.state) }, r.state + (r.expired ? " (runner gone)" : "")),
    el("td", {}, r.instance),
    el("td", {}, r.token),
    el("td", {}, r.attempt),
    el("td", {}, r.state === "running" ? "…" : ms(r.duration_ms)),
    el("td", { class: "err", title: r.error || "" }, (r.error || "").split("\n")[0].slice(0, 120)))));
}

function stateClass(s) {
  return { succeeded: "ok", failed: "bad", running: "run", abandoned: "warn", missed: "bad", unrecorded: "muted" }[s] || "";
}

// headTail shows a stored text by its first and last lines (a job's last
// lines usually say why it failed), the rest behind a button; where the
// ledger cut a long output when it stored it (it keeps both ends), the
// hidden part says so.
function headTail(label, text, cls) {
  if (!text) return null;
  const box = el("div", { class: "output", "data-output": label }, el("h3", {}, label));
  const lines = text.split("\n");
  if (lines.length <= 30) {
    box.append(el("pre", { class: cls + " whole" }, text));
    return box;
  }
  const cut = text.match(/\n\[… (\d+) bytes cut …\]\n/);
  const middle = el("pre", { class: cls + " middle", hidden: "" }, lines.slice(8, -12).join("\n"));
  const more = el("button", { type: "button", class: "more", onclick: () => { middle.hidden = false; more.remove(); } },
    "show the " + (lines.length - 20) + " lines between" + (cut ? " (and " + cut[1] + " bytes were cut from the middle when the output was stored)" : ""));
  box.append(el("pre", { class: cls + " head" }, lines.slice(0, 8).join("\n")), more, middle,
    el("pre", { class: cls + " tail" }, lines.slice(-12).join("\n")));
  return box;
}

// showDetail opens one run's detail.
async function showDetail(job, at) {
  const sec = document.getElementById("detail");
  let d;
  try {
    d = await api("GET", "/api/v1/runs/" + encodeURIComponent(job) + "/" + encodeURIComponent(at));
  } catch (e) {
    showResult("Cannot read the run " + job + " at " + short(at) + ": " + e.message, "bad");
    return;
  }
  sec.dataset.job = d.job;
  sec.dataset.at = d.scheduled_at;
  document.getElementById("detail-title").textContent = d.job + " @ " + short(d.scheduled_at) + " UTC";
  const facts = [
    ["state", d.state + (d.expired ? " (its runner's lease expired)" : ""), stateClass(d.state)],
    ["instance", d.instance], ["token", d.token], ["attempt", d.attempt],
    ["trigger", d.trigger ? "run now, key " + d.trigger : "scheduled"],
    ["scheduled", short(d.scheduled_at)], ["claimed", short(d.claimed_at)],
    ["late", d.late_ms == null ? "—" : ms(d.late_ms)],
    ["finished", short(d.finished_at)], ["took", d.state === "running" ? "running…" : ms(d.duration_ms)],
  ];
  document.getElementById("detail-facts").replaceChildren(...facts.flatMap(([k, v, c]) =>
    [el("dt", {}, k), el("dd", { "data-k": k, class: c || "" }, v)]));
  fill("attempts", d.attempts.map(a => el("tr", { "data-attempt": a.attempt },
    el("td", {}, a.attempt),
    el("td", { class: stateClass(a.state) }, a.state === "unrecorded" ? "no record (runner died or lost its lease)" : a.state),
    el("td", {}, a.instance || "—"), el("td", {}, a.token || "—"),
    el("td", {}, short(a.finished_at)), el("td", {}, a.state === "unrecorded" ? "—" : ms(a.duration_ms)),
    el("td", { class: "err" }, a.error || ""))));
  const out = [headTail("error", d.error, "err"), headTail("output", d.result, "")].filter(Boolean);
  document.getElementById("detail-output").replaceChildren(...(out.length ? out : [el("p", { class: "muted" }, "no output recorded")]));
  sec.hidden = false;
  for (const tr of document.querySelectorAll("#runs tbody tr")) tr.classList.toggle("selected", tr.dataset.job === d.job && tr.dataset.at === d.scheduled_at);
  sec.scrollIntoView({ block: "nearest" });
}

function setupRuns() {
  document.getElementById("filters").addEventListener("submit", ev => {
    ev.preventDefault();
    runs.query = filterQuery();
    runs.cursors = [""];
    runs.page = 0;
    refreshRuns();
  });
  document.getElementById("f-clear").addEventListener("click", () => {
    document.getElementById("filters").reset();
    runs.query = filterQuery();
    runs.cursors = [""];
    runs.page = 0;
    refreshRuns();
  });
  document.getElementById("page-older").addEventListener("click", () => {
    if (!runs.next) return;
    runs.cursors[runs.page + 1] = runs.next;
    runs.page++;
    refreshRuns();
  });
  document.getElementById("page-newer").addEventListener("click", () => {
    if (runs.page === 0) return;
    runs.page--;
    refreshRuns();
  });
  document.getElementById("detail-close").addEventListener("click", () => {
    const sec = document.getElementById("detail");
    sec.hidden = true;
    delete sec.dataset.job;
    delete sec.dataset.at;
  });
}
