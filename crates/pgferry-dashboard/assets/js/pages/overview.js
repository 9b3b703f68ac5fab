// Overview: throughput (enqueued/completed/failed per second) and queue depth, live.

import { h, clear, num, rate } from "../dom.js";
import * as live from "../live.js";
import { lineChart } from "../chart.js";
import { ashPanel } from "./ash.js";

// Per-second rates between consecutive snapshots.
function rateSeries(name) {
  const pts = [];
  const hs = live.history;
  for (let i = 1; i < hs.length; i++) {
    const dt = (hs[i].at - hs[i - 1].at) / 1000;
    if (dt > 0) pts.push([hs[i].at, Math.max(0, (live.total(hs[i], name) - live.total(hs[i - 1], name)) / dt)]);
  }
  return pts;
}

function depthSeries(name) {
  return live.history.map((s) => [s.at, live.total(s, name)]);
}

export function render(root) {
  const stats = h("div", { class: "stats", id: "overview-stats" });
  const thr = h("canvas", { id: "chart-throughput", role: "img" });
  const dep = h("canvas", { id: "chart-depth", role: "img" });
  const table = h("div", { class: "scroll" });
  root.append(
    h("h1", {}, "Overview"),
    stats,
    h("div", { class: "grid2" },
      h("section", { class: "card", "aria-labelledby": "thr-h" },
        h("h2", { id: "thr-h" }, "Throughput (jobs/s)"),
        h("div", { class: "legend" }, h("span", { class: "l1" }, "enqueued"), h("span", { class: "l2" }, "completed"), h("span", { class: "l3" }, "failed")),
        thr),
      h("section", { class: "card", "aria-labelledby": "dep-h" },
        h("h2", { id: "dep-h" }, "Queue depth"),
        h("div", { class: "legend" }, h("span", { class: "l1" }, "pending"), h("span", { class: "l4" }, "scheduled"), h("span", { class: "l2" }, "running"), h("span", { class: "l3" }, "dead")),
        dep)),
    h("section", { class: "card" }, h("h2", {}, "Queues"), table),
  );
  // Database load from ASH (admin keys only: the data is database-wide).
  const ash = ashPanel();
  if (ash) root.append(ash.section);
  const draw = () => {
    lineChart(thr, [
      { color: "--c1", points: rateSeries("enqueued") },
      { color: "--c2", points: rateSeries("completed") },
      { color: "--c3", points: rateSeries("failed") },
    ], { label: "Jobs enqueued, completed and failed per second" });
    lineChart(dep, [
      { color: "--c1", points: depthSeries("pending") },
      { color: "--c4", points: depthSeries("scheduled") },
      { color: "--c2", points: depthSeries("running") },
      { color: "--c3", points: depthSeries("dead") },
    ], { label: "Jobs pending, scheduled, running and dead" });
  };
  const onResize = () => { draw(); if (ash) ash.redraw(); };
  window.addEventListener("resize", onResize);
  return {
    onLive(snap) {
      clear(stats).append(
        stat("Pending", num(live.total(snap, "pending"))),
        stat("Running", num(live.total(snap, "running"))),
        stat("Scheduled", num(live.total(snap, "scheduled"))),
        stat("Dead", num(live.total(snap, "dead"))),
        stat("Enqueued/s", rate(live.rateOf("enqueued"))),
        stat("Completed/s", rate(live.rateOf("completed"))),
        stat("Failed/s", rate(live.rateOf("failed"))),
      );
      clear(table).append(h("table", {},
        h("thead", {}, h("tr", {}, ...["Queue", "Pending", "Running", "Scheduled", "Dead", "Completed/s"].map((t, i) => h("th", { scope: "col", class: i ? "num" : null }, t)))),
        h("tbody", {}, ...snap.queues.map((q) => h("tr", {},
          h("td", {}, h("a", { href: `#/jobs?queue=${encodeURIComponent(q.name)}` }, q.name)),
          h("td", { class: "num" }, num(q.counts.pending)),
          h("td", { class: "num" }, num(q.counts.running)),
          h("td", { class: "num" }, num(q.counts.scheduled)),
          h("td", { class: "num" }, num(q.counts.dead)),
          h("td", { class: "num" }, rate(live.rateOf("completed", q.name))),
        )))));
      draw();
    },
    dispose() { window.removeEventListener("resize", onResize); if (ash) ash.dispose(); },
  };
}

function stat(label, value) {
  return h("div", { class: "stat" }, h("span", { class: "muted" }, label), h("b", {}, value));
}
