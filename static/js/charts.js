// Metric charts people can read, shared by the job page and the comparison page (uPlot, vendored).
//
// A board is a set of charts, one per metric, with one toolbar for all of them: log scale, smoothing (an
// exponential moving average, debiased as TensorBoard does), x as step or time, and reset. Each chart zooms
// on a drag, pans on a shift-drag (or a middle-button drag), resets on a double click, and can be widened to
// the full width. Axis labels are SI-formatted (900000 → "900k") and each axis is sized to its longest label,
// so none is clipped. Train and validation variants of one metric are series of one chart (the caller groups
// them: `metricFamily`), validation dashed. A downsampled series (the metrics API's `?buckets=N`: each step
// bucket's mean, min and max) is drawn as its mean with a faint band from min to max behind it, so a spike
// that the mean smooths away still shows.

const PALETTE = ["#2458d6", "#d9480f", "#2b8a3e", "#9c36b5", "#c2255c", "#0b7285", "#e67700", "#5c7cfa", "#495057", "#a61e4d"];
const HEIGHT = 240;
const WIDE_HEIGHT = 380;
const VARIANT = /^(?:(train|training|val|valid|validation|eval|test)[_/.](.+)|(.+?)[_/.](train|training|val|valid|validation|eval|test))$/;
const VARIANT_NAMES = { train: "train", training: "train", val: "val", valid: "val", validation: "val", eval: "val", test: "test" };

export function colour(index) {
  return PALETTE[index % PALETTE.length];
}

/** The dash pattern of a variant: validation dashed, test dotted, training and plain metrics solid. */
export function dashFor(variant) {
  if (variant === "val") return [6, 4];
  if (variant === "test") return [2, 3];
  return undefined;
}

/** [base, variant] of a metric name, as the server's jobs.core.compare.metric_family: val_loss → [loss, val]. */
export function metricFamily(name) {
  const match = VARIANT.exec(name);
  if (!match) return [name, ""];
  return match[1] ? [match[2], VARIANT_NAMES[match[1]]] : [match[3], VARIANT_NAMES[match[4]]];
}

function trim(value, digits = 3) {
  return String(Number(value.toPrecision(digits)));
}

/** A number as an axis or legend shows it: SI prefixes from a thousand up (900000 → 900k, 1.5e9 → 1.5G),
 * plain below, exponent notation for the very small (1e-5). */
export function siFormat(value) {
  if (value === null || value === undefined || !Number.isFinite(value)) return "";
  const abs = Math.abs(value);
  if (abs === 0) return "0";
  for (const [factor, prefix] of [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]]) {
    if (abs >= factor) return trim(value / factor) + prefix;
  }
  if (abs < 1e-3) return value.toExponential(1).replace(".0e", "e");
  return trim(value, 4);
}

/** Seconds as a short duration for an elapsed-time axis: 45s, 12.5m, 3h, 2d. */
export function durationFormat(seconds) {
  if (!Number.isFinite(seconds)) return "";
  const abs = Math.abs(seconds);
  if (abs < 120) return `${trim(seconds)}s`;
  if (abs < 7200) return `${trim(seconds / 60)}m`;
  if (abs < 172800) return `${trim(seconds / 3600)}h`;
  return `${trim(seconds / 86400)}d`;
}

/** Debiased exponential moving average (weight 0: the values themselves). */
export function smooth(values, weight) {
  if (!weight) return values;
  const out = new Array(values.length);
  let last = 0;
  let count = 0;
  for (let i = 0; i < values.length; i += 1) {
    const value = values[i];
    if (value === null || !Number.isFinite(value)) {
      out[i] = value;
      continue;
    }
    last = last * weight + (1 - weight) * value;
    count += 1;
    out[i] = last / (1 - weight ** count);
  }
  return out;
}

// uPlot's own recipe for an axis as wide as its longest label (its "axis-autosize" demo).
function axisSize(self, values, axisIdx, cycleNum) {
  const axis = self.axes[axisIdx];
  if (cycleNum > 1) return axis._size;
  let size = axis.ticks.size + axis.gap;
  const longest = (values || []).reduce((acc, value) => (String(value).length > acc.length ? String(value) : acc), "");
  if (longest !== "") {
    self.ctx.font = axis.font[0];
    size += self.ctx.measureText(longest).width / (window.devicePixelRatio || 1);
  }
  return Math.ceil(size) + 2;
}

function xValues(series, mode) {
  if (mode === "time") return series.time;
  return series.step.map((step, i) => (step === null || step === undefined ? i : step));
}

function hasBand(series) {
  return Array.isArray(series.min) && Array.isArray(series.max) && series.min.length === series.value.length;
}

/** One x array (the union of every series' x) and a y column per series, null where it has no point; a
 * series with a band is followed by its max and min columns. */
function align(seriesList, state) {
  const columns = seriesList.map((series) => xValues(series, state.x));
  const all = new Set();
  for (const xs of columns) for (const x of xs) if (Number.isFinite(x)) all.add(x);
  const xs = [...all].sort((a, b) => a - b);
  const position = new Map(xs.map((x, i) => [x, i]));
  const column = (k, values) => {
    const out = new Array(xs.length).fill(null);
    columns[k].forEach((x, i) => {
      let value = values[i];
      if (state.log && !(value > 0)) value = null;
      if (position.has(x)) out[position.get(x)] = value;
    });
    return out;
  };
  const ys = [];
  seriesList.forEach((series, k) => {
    ys.push(column(k, smooth(series.value, state.smoothing)));
    if (hasBand(series)) ys.push(column(k, series.max), column(k, series.min));
  });
  return [xs, ...ys];
}

// A band's series draw nothing themselves and stay out of the legend: uPlot fills between them.
function bandSeries(series, which) {
  return { label: `${series.label} ${which}`, stroke: "transparent", width: 0, spanGaps: true, points: { show: false } };
}

function hideBandLegend(bandIndexes) {
  return {
    hooks: {
      init(u) {
        const rows = u.root.querySelectorAll(".u-legend .u-series");
        for (const index of bandIndexes) if (rows[index]) rows[index].style.display = "none";
      },
    },
  };
}

function panPlugin(chart) {
  return {
    hooks: {
      init(u) {
        u.root.addEventListener(
          "mousedown",
          (event) => {
            if (!(event.shiftKey || event.button === 1) || !u.over.contains(event.target)) return;
            event.stopPropagation(); // before uPlot's own drag-to-zoom sees it
            event.preventDefault();
            const start = event.clientX;
            const { min, max } = u.scales.x;
            const width = u.over.getBoundingClientRect().width || 1;
            const move = (ev) => {
              const shift = ((ev.clientX - start) / width) * (max - min);
              chart.zoomed = true;
              u.setScale("x", { min: min - shift, max: max - shift });
            };
            const up = () => {
              window.removeEventListener("mousemove", move);
              window.removeEventListener("mouseup", up);
            };
            window.addEventListener("mousemove", move);
            window.addEventListener("mouseup", up);
          },
          true,
        );
        u.over.addEventListener("dblclick", () => {
          chart.zoomed = false;
        });
      },
      setSelect(u) {
        if (u.select.width > 4) chart.zoomed = true;
      },
    },
  };
}

const TOOLS = `
  <label class="check"><input type="checkbox" data-tool="log"> Log scale</label>
  <label class="smoothing">Smoothing <input type="range" min="0" max="0.99" step="0.01" value="0" data-tool="smoothing" aria-label="Smoothing"> <output data-tool="smoothing-value">0</output></label>
  <label>X axis <select data-tool="x"><option value="step">step</option><option value="time"></option></select></label>
  <button type="button" class="btn btn-small" data-tool="reset">Reset zoom</button>
  <span class="muted small">drag to zoom · shift-drag to pan · double-click to reset</span>`;

/** A board of charts in `container`, its toolbar in `tools` (made above the charts when not given).
 * `timeMode` is "wall" (x = clock time: the job page) or "elapsed" (x = seconds since each run's start:
 * the comparison page, where runs of different days overlay). */
export class ChartBoard {
  constructor(container, { tools = null, timeMode = "wall" } = {}) {
    this.container = container;
    this.timeMode = timeMode;
    this.state = { log: false, smoothing: 0, x: "step" };
    this.charts = new Map(); // key -> {el, plot, series, zoomed, wide, signature}
    this.tools = tools || this._makeTools();
    this.tools.innerHTML = TOOLS;
    this.tools.querySelector("[data-tool=x] option[value=time]").textContent = timeMode === "wall" ? "wall time" : "time since start";
    this._bindTools();
    let timer = 0;
    window.addEventListener("resize", () => {
      window.clearTimeout(timer);
      timer = window.setTimeout(() => this._resizeAll(), 150);
    });
  }

  _makeTools() {
    const tools = document.createElement("div");
    tools.className = "chart-tools";
    this.container.parentElement.insertBefore(tools, this.container);
    return tools;
  }

  _bindTools() {
    const log = this.tools.querySelector("[data-tool=log]");
    const smoothing = this.tools.querySelector("[data-tool=smoothing]");
    const shown = this.tools.querySelector("[data-tool=smoothing-value]");
    const x = this.tools.querySelector("[data-tool=x]");
    log.addEventListener("change", () => {
      this.state.log = log.checked;
      this._rebuildAll();
    });
    smoothing.addEventListener("input", () => {
      this.state.smoothing = Number(smoothing.value);
      shown.textContent = smoothing.value;
      for (const chart of this.charts.values()) this._setData(chart);
    });
    x.addEventListener("change", () => {
      this.state.x = x.value;
      this._rebuildAll();
    });
    this.tools.querySelector("[data-tool=reset]").addEventListener("click", () => {
      for (const chart of this.charts.values()) {
        chart.zoomed = false;
        this._setData(chart);
      }
    });
  }

  /** Draw (or update in place) the chart `key` titled `title` with `series`: a list of
   * {label, colour, dash, step: [...], time: [...seconds], value: [...]}, optionally with `min` and `max`
   * lists as long as `value` (drawn as a band); `note` is shown under the title. */
  show(key, title, series, note = "") {
    let chart = this.charts.get(key);
    if (!chart) {
      const el = document.createElement("div");
      el.className = "chart";
      el.dataset.metric = key;
      el.innerHTML = `<div class="chart-head"><h3></h3><button type="button" class="btn btn-small btn-ghost" data-tool="wide" aria-pressed="false">Full width</button></div><p class="muted small chart-note"></p><p class="muted small chart-note chart-log-note"></p>`;
      el.querySelector("h3").textContent = title;
      el.querySelector("[data-tool=wide]").addEventListener("click", () => this._toggleWide(chart));
      this.container.appendChild(el);
      chart = { el, plot: null, series: [], zoomed: false, wide: false, signature: "" };
      this.charts.set(key, chart);
    }
    chart.el.querySelector(".chart-note").textContent = note;
    chart.series = series;
    const signature = series.map((s) => `${s.label}|${s.colour}|${s.dash}|${hasBand(s)}`).join(";");
    if (chart.plot && signature === chart.signature) {
      this._setData(chart);
    } else {
      chart.signature = signature;
      this._build(chart);
    }
  }

  _width(chart) {
    return Math.max(260, chart.el.clientWidth - 2 || 420);
  }

  _options(chart, log) {
    const time = this.state.x === "time";
    const wall = time && this.timeMode === "wall";
    const xLabel = time ? (wall ? "time" : "time since start") : "step";
    const xAxis = { label: xLabel, size: axisSize, labelSize: 18 };
    if (!wall) xAxis.values = (u, ticks) => ticks.map(time ? durationFormat : siFormat);
    const series = [];
    const bands = [];
    const bandIndexes = [];
    for (const s of chart.series) {
      series.push({
        label: s.label,
        stroke: s.colour,
        width: 1.5,
        dash: s.dash,
        spanGaps: true,
        points: { show: false },
        value: (u, v) => (v === null || v === undefined ? "—" : siFormat(v)),
      });
      if (hasBand(s)) {
        const high = series.length + 1; // uPlot's index: 0 is x
        series.push(bandSeries(s, "max"), bandSeries(s, "min"));
        bands.push({ series: [high, high + 1], fill: `${s.colour}26` });
        bandIndexes.push(high, high + 1);
      }
    }
    return {
      width: this._width(chart),
      height: chart.wide ? WIDE_HEIGHT : HEIGHT,
      padding: [12, 20, 0, 4],
      scales: { x: { time: wall }, y: log ? { distr: 3, log: 10 } : { auto: true } },
      axes: [xAxis, { size: axisSize, values: (u, ticks) => ticks.map(siFormat) }],
      series: [
        { label: xLabel, value: (u, v) => (v === null || v === undefined ? "—" : wall ? new Date(v * 1000).toLocaleTimeString() : time ? durationFormat(v) : siFormat(v)) },
        ...series,
      ],
      bands,
      legend: { show: chart.series.length > 1, live: true },
      cursor: { drag: { x: true, y: false, setScale: true } },
      plugins: [panPlugin(chart), hideBandLegend(bandIndexes)],
    };
  }

  // A log scale needs a positive value; a chart with none stays linear and says so.
  _state(chart) {
    if (!this.state.log) return this.state;
    const positive = chart.series.some((s) => s.value.some((v) => v > 0));
    return positive ? this.state : { ...this.state, log: false };
  }

  _build(chart) {
    if (chart.plot) chart.plot.destroy();
    chart.zoomed = false;
    const state = this._state(chart);
    chart.el.querySelector(".chart-log-note").textContent =
      this.state.log && !state.log ? "No positive values: a log scale cannot show them." : "";
    const plot = new window.uPlot(this._options(chart, state.log), align(chart.series, state), chart.el);
    chart.plot = plot;
    chart.log = state.log;
    chart.el.dataset.series = String(chart.series.length);
    chart.el.dataset.scale = plot.scales.y.distr === 3 ? "log" : "linear";
    chart.el.dataset.x = this.state.x;
  }

  _setData(chart) {
    if (!chart.plot) return;
    const state = this._state(chart);
    if (state.log !== chart.log) {
      this._build(chart);
      return;
    }
    chart.plot.setData(align(chart.series, state), !chart.zoomed);
  }

  _rebuildAll() {
    for (const chart of this.charts.values()) this._build(chart);
  }

  _resizeAll() {
    for (const chart of this.charts.values()) {
      if (chart.plot) chart.plot.setSize({ width: this._width(chart), height: chart.wide ? WIDE_HEIGHT : HEIGHT });
    }
  }

  _toggleWide(chart) {
    chart.wide = !chart.wide;
    chart.el.classList.toggle("chart-wide", chart.wide);
    const button = chart.el.querySelector("[data-tool=wide]");
    button.setAttribute("aria-pressed", String(chart.wide));
    button.textContent = chart.wide ? "Normal width" : "Full width";
    if (chart.plot) chart.plot.setSize({ width: this._width(chart), height: chart.wide ? WIDE_HEIGHT : HEIGHT });
  }
}
