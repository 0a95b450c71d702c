// The comparison page: a chart per metric with a series per run (the run's colour; validation dashed),
// drawn from the comparison the server embedded (the API's shape: GET /api/v1/jobs/compare/): each curve in
// step buckets, drawn as their mean with a min-max band.
import { ChartBoard, colour, dashFor } from "./charts.js";

const data = JSON.parse(document.getElementById("compare-data").textContent);
const order = new Map(data.jobs.map((job, index) => [job.id, index]));
const names = new Map(data.jobs.map((job) => [job.id, job.name]));

for (const swatch of document.querySelectorAll(".swatch[data-index]")) {
  swatch.style.background = colour(Number(swatch.dataset.index));
}

function draw() {
  const box = document.getElementById("charts");
  const board = new ChartBoard(box, { tools: document.getElementById("chart-tools"), timeMode: "elapsed" });
  for (const chart of data.charts) {
    const series = chart.series.map((s) => ({
      label: `${names.get(s.job)} · ${s.name}`,
      colour: colour(order.get(s.job)),
      dash: dashFor(s.variant),
      step: s.step,
      time: s.time,
      value: s.value,
      min: s.min,
      max: s.max,
    }));
    const cut = chart.series.filter((s) => s.total > s.value.length);
    const note = cut.length
      ? `Each curve in at most ${data.max_points} step buckets: the line is each bucket's mean, the band its min and max (${cut.map((s) => `${names.get(s.job)}: ${s.total.toLocaleString()} points`).join(", ")}).`
      : "";
    board.show(chart.metric, chart.metric, series, note);
  }
}

// uPlot is a deferred classic script; this module may run first.
if (typeof window.uPlot === "undefined") {
  window.addEventListener("DOMContentLoaded", draw);
} else {
  draw();
}
