// The comparison page: a chart per metric with a series per run (the run's colour; validation dashed),
// drawn from the comparison the server embedded (the API's shape: GET /api/v1/jobs/compare/).
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
    }));
    const cut = chart.series.filter((s) => s.total > s.value.length);
    const note = cut.length
      ? `Showing at most ${data.max_points} evenly spaced points of each curve (${cut.map((s) => `${names.get(s.job)}: ${s.total}`).join(", ")} in all).`
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
