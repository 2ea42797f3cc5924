// leasehold dashboard: a time axis per job over a window ending now —
// every run at its instant, coloured by the instance that ran it, the late
// ones ringed, and the schedule's instants that no instance ran (missed,
// from GET /api/v1/jobs/{job}/instants). A run's mark opens its detail
// (runs.js). Uses el, api, short, ms and color from app.js.
"use strict";

function windowSeconds() {
  return Number(document.getElementById("axis-window").value) || 600;
}

// axisRow draws one job's instants between since and before.
function axisRow(job, ans, since, before) {
  const span = before - since;
  const pos = iso => ((Date.parse(iso) - since) / span * 100).toFixed(3) + "%";
  const axis = el("div", { class: "axis" });
  if (ans.judged_from && ans.judged_until) {
    const from = Math.max(Date.parse(ans.judged_from), since), until = Math.min(Date.parse(ans.judged_until), before);
    if (until > from) {
      axis.append(el("div", { class: "judged", style: { left: pos(new Date(from).toISOString()), width: ((until - from) / span * 100).toFixed(3) + "%" },
        title: "judged for missed instants: " + short(ans.judged_from) + " to " + short(ans.judged_until) + " UTC" }));
    }
  }
  let missed = 0, late = 0;
  for (const i of ans.instants) {
    const at = short(i.at) + " UTC";
    if (i.state === "missed") {
      missed++;
      axis.append(el("span", { class: "mark missed", style: { left: pos(i.at) }, "data-state": "missed", "data-at": i.at,
        title: at + " · MISSED: the schedule had this instant and no instance ran it" }, "✕"));
      continue;
    }
    if (i.late) late++;
    axis.append(el("span", {
      class: "cell mark " + color(i.instance) + " " + i.state + (i.late ? " late" : ""),
      style: { left: pos(i.at) },
      "data-instance": i.instance, "data-state": i.state, "data-at": i.at, "data-late": String(!!i.late),
      title: at + " · " + i.instance + " · " + i.state + " · token " + i.token + (i.attempt > 1 ? " · attempt " + i.attempt : "") +
        (i.late ? " · LATE: claimed " + ms(i.late_ms) + " after its instant" : "") + (i.trigger ? " · run now " + i.trigger : ""),
      onclick: () => showDetail(job, i.at),
    }));
  }
  const summary = [ans.instants.length - missed + " runs"];
  if (late) summary.push(late + " late");
  if (missed) summary.push(missed + " missed");
  return el("div", { class: "tl-row", "data-job": job, "data-missed": String(missed), "data-late": String(late) },
    el("span", { class: "tl-name", title: ans.schedule + (ans.zone && ans.zone !== "UTC" ? " (" + ans.zone + ")" : "") }, job),
    axis,
    el("span", { class: "tl-sum " + (missed ? "bad" : late ? "warn" : "muted") }, summary.join(" · ")));
}

function axisScale(since, before) {
  const ticks = [];
  for (let k = 0; k <= 4; k++) {
    const t = new Date(since + (before - since) * k / 4).toISOString();
    ticks.push(el("span", { class: "tick", style: { left: (k * 25) + "%" } }, t.slice(11, 19)));
  }
  return el("div", { class: "tl-row scale" }, el("span", { class: "tl-name muted" }, "UTC"),
    el("div", { class: "axis bare" }, ...ticks), el("span", { class: "tl-sum" }));
}

// refreshAxes reads every job's instants over the window ending at the
// status's time and redraws the axes.
async function refreshAxes(st) {
  const before = Date.parse(st.now), since = before - windowSeconds() * 1000;
  const q = "?since=" + encodeURIComponent(new Date(since).toISOString()) + "&before=" + encodeURIComponent(new Date(before).toISOString());
  const rows = await Promise.all(st.jobs.map(async j => {
    try {
      return axisRow(j.name, await api("GET", "/api/v1/jobs/" + encodeURIComponent(j.name) + "/instants" + q), since, before);
    } catch (e) {
      return el("div", { class: "tl-row", "data-job": j.name }, el("span", { class: "tl-name" }, j.name),
        el("span", { class: "bad" }, e.message));
    }
  }));
  document.getElementById("timeline").replaceChildren(axisScale(since, before), ...rows);
  document.getElementById("legend").replaceChildren(...[...state.colors.entries()].map(([name, c]) =>
    el("span", {}, el("span", { class: "cell " + c }), name)),
    el("span", {}, el("span", { class: "cell c7 late" }), "late"),
    el("span", {}, el("span", { class: "cell c7 failed" }), "failed"),
    el("span", {}, el("span", { class: "mark-key bad" }, "✕"), "missed"));
}

function setupAxes() {
  document.getElementById("axis-window").addEventListener("change", () => refresh());
}
