// The job page: log viewer (tabs per learner, ANSI colours, search, follow), metric charts, live status,
// timeline and learners. History comes from the REST API; live frames from /ws/ (see live.js). Lines are deduplicated by
// (learner, seq), so a reconnect, a gap backfill or a poll never shows a line twice.
import { AnsiUp } from "../vendor/ansi_up-6.0.6/ansi_up.js";
import { ChartBoard, colour, dashFor, metricFamily } from "./charts.js";
import { LiveSocket, setBadge } from "./live.js";

const config = JSON.parse(document.getElementById("job-live").textContent);
const API = `/api/v1/jobs/${encodeURIComponent(config.job)}`;
const PAGE = 5000;
const MAX_HISTORY_PAGES = 20;
const POLL_MS = 4000;

const ansi = new AnsiUp();
ansi.escape_html = true;
ansi.url_allowlist = {}; // a job's output never becomes a link (see plainLinks)

const logBox = document.getElementById("log");
const logStatus = document.getElementById("log-status");
const searchBox = document.getElementById("log-search");
const followBox = document.getElementById("log-follow");
const tabs = [...document.querySelectorAll(".tab[data-learner]")];

// learner -> sorted array of seqs shown; (learner:seq) -> line record
const seqs = new Map();
const lines = new Map();
let activeLearner = "all";
let query = "";
let terminal = config.terminal;

function key(learner, seq) {
  return `${learner}:${seq}`;
}

function lastSeq(learner) {
  const list = seqs.get(learner);
  return list && list.length ? list[list.length - 1] : 0;
}

function stripAnsi(text) {
  // eslint-disable-next-line no-control-regex
  return text.replace(/\x1b\[[0-9;?]*[ -/]*[@-~]/g, "");
}

// OSC-8 hyperlinks (ESC ] 8 ; params ; URL ST label ESC ] 8 ; ; ST) are shown as text, the target beside
// the label: a job's output must not put clickable links, perhaps disguised, in front of its readers.
// eslint-disable-next-line no-control-regex
const OSC8 = /\x1b\]8;[^;\x07\x1b]*;([^\x07\x1b]*)(?:\x07|\x1b\\)([\s\S]*?)\x1b\]8;;(?:\x07|\x1b\\)/g;

function plainLinks(text) {
  return text.replace(OSC8, (_, url, label) => (url && url !== label ? `${label} [${url}]` : label));
}

function escapeHtml(text) {
  return text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

// A line's HTML: its learner, then its text with ANSI colours (or, while filtering, plain with the matches marked).
function lineHtml(record) {
  const prefix = `<span class="lr">[${record.learner}]</span>`;
  if (!query) return prefix + ansi.ansi_to_html(plainLinks(record.text));
  const plain = stripAnsi(plainLinks(record.text));
  const lower = plain.toLowerCase();
  let html = "";
  let at = 0;
  for (let hit = lower.indexOf(query); hit !== -1; hit = lower.indexOf(query, at)) {
    html += escapeHtml(plain.slice(at, hit)) + "<mark>" + escapeHtml(plain.slice(hit, hit + query.length)) + "</mark>";
    at = hit + query.length;
  }
  return prefix + html + escapeHtml(plain.slice(at));
}

function renderLine(record) {
  record.el.innerHTML = lineHtml(record) + "\n";
}

function visible(record) {
  if (activeLearner !== "all" && String(record.learner) !== activeLearner) return false;
  return !query || record.lower.includes(query);
}

// Insert lines of one learner, skipping any already shown; returns how many were new. A batch is parsed as
// one piece of HTML and lines after the learner's last go in as one fragment: a 30,000-line history costs a
// few DOM insertions, not one per line.
function addLines(learner, batch) {
  let list = seqs.get(learner);
  if (!list) seqs.set(learner, (list = []));
  const fresh = [];
  for (const [seq, text, ts] of batch) {
    const id = key(learner, seq);
    if (lines.has(id)) continue;
    const record = { learner, seq, text, ts: ts || "", lower: stripAnsi(text).toLowerCase(), el: null };
    lines.set(id, record);
    fresh.push(record);
  }
  if (!fresh.length) return 0;
  const template = document.createElement("template");
  template.innerHTML = fresh.map((r) => `<span class="ln" data-learner="${learner}">${lineHtml(r)}\n</span>`).join("");
  const elements = [...template.content.children];
  const tail = document.createDocumentFragment();
  fresh.forEach((record, i) => {
    record.el = elements[i];
    record.el.hidden = !visible(record);
    const seq = record.seq;
    if (!list.length || seq > list[list.length - 1]) {
      list.push(seq);
      if (!loadingHistory) tail.appendChild(record.el); // the history goes in once, in order, at its end
      return;
    }
    // An older line (a backfilled gap): before the first later line of its learner.
    logBox.appendChild(tail);
    let lo = 0;
    let hi = list.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (list[mid] < seq) lo = mid + 1;
      else hi = mid;
    }
    const next = lines.get(key(learner, list[lo])).el;
    list.splice(lo, 0, seq);
    logBox.insertBefore(record.el, next);
  });
  logBox.appendChild(tail);
  afterAppend();
  return fresh.length;
}

let loadingHistory = false;

function afterAppend() {
  const placeholder = logBox.querySelector(":scope > .muted");
  if (placeholder) placeholder.remove();
  if (followBox.checked && !loadingHistory) logBox.scrollTop = logBox.scrollHeight;
}

function applyFilter() {
  for (const record of lines.values()) {
    renderLine(record);
    record.el.hidden = !visible(record);
  }
  const shown = [...lines.values()].filter((r) => !r.el.hidden).length;
  logStatus.textContent = query ? `${shown} matching line${shown === 1 ? "" : "s"}` : "";
  if (followBox.checked) logBox.scrollTop = logBox.scrollHeight;
}

async function getJson(url) {
  const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (!response.ok) throw new Error(`${response.status} ${url}`);
  return response.json();
}

// Fetch a learner's lines after `after` (up to `until`, when backfilling a gap), page by page.
async function fetchLines(learner, after, until = Infinity, maxPages = MAX_HISTORY_PAGES) {
  for (let page = 0; page < maxPages; page += 1) {
    const body = await getJson(`${API}/logs/?learner=${learner}&after=${after}&limit=${PAGE}`);
    const batch = body.lines.filter((l) => l.seq <= until).map((l) => [l.seq, l.text, l.ts]);
    addLines(learner, batch);
    if (body.lines.length < PAGE || !body.lines.length || body.lines[body.lines.length - 1].seq >= until) return true;
    after = body.lines[body.lines.length - 1].seq;
  }
  return false;
}

async function loadHistory() {
  loadingHistory = true; // no scrolling (a layout of the whole log) after every page: once at the end
  const loaded = await Promise.all(
    config.learners.map((learner) =>
      fetchLines(learner, 0).catch(() => {
        logStatus.textContent = "Could not load the log history; retrying on the next refresh.";
        return true;
      }),
    ),
  );
  loadingHistory = false;
  const complete = loaded.every(Boolean);
  // The history in one insertion: learners interleaved by time, so "All" reads in order (ISO times sort as
  // text), else by sequence. The socket is subscribed only after this, so no live line is on the page yet.
  const pending = [...lines.values()].filter((r) => !r.el.isConnected);
  const byTime = config.learners.length > 1;
  pending.sort((a, b) => (byTime ? (a.ts < b.ts ? -1 : a.ts > b.ts ? 1 : 0) : 0) || a.learner - b.learner || a.seq - b.seq);
  const fragment = document.createDocumentFragment();
  for (const record of pending) fragment.appendChild(record.el);
  logBox.insertBefore(fragment, logBox.querySelector(":scope > .ln"));
  if (!lines.size) {
    logBox.innerHTML = `<span class="muted">${terminal ? "This job printed nothing." : "No log lines yet."}</span>`;
  }
  if (!complete) logStatus.textContent = "Showing the first part of a long log; download it for the rest.";
  logBox.dataset.loaded = String(lines.size); // the history is in (tests and the page benchmark wait on it)
  if (followBox.checked) logBox.scrollTop = logBox.scrollHeight;
}

tabs.forEach((tab) =>
  tab.addEventListener("click", () => {
    activeLearner = tab.dataset.learner;
    tabs.forEach((t) => t.setAttribute("aria-selected", String(t === tab)));
    applyFilter();
  }),
);

let searchTimer = 0;
searchBox.addEventListener("input", () => {
  window.clearTimeout(searchTimer);
  searchTimer = window.setTimeout(() => {
    query = searchBox.value.trim().toLowerCase();
    applyFilter();
  }, 150);
});

// Follow pauses when the reader scrolls up and resumes when they scroll back to the bottom.
logBox.addEventListener("scroll", () => {
  const atBottom = logBox.scrollTop + logBox.clientHeight >= logBox.scrollHeight - 24;
  if (followBox.checked !== atBottom) followBox.checked = atBottom;
});
followBox.addEventListener("change", () => {
  if (followBox.checked) logBox.scrollTop = logBox.scrollHeight;
});

// --- metrics -----------------------------------------------------------------------------------------

const chartsBox = document.getElementById("charts");
const tensorboardLink = document.getElementById("tensorboard-link");
const board = new ChartBoard(chartsBox, { tools: document.getElementById("chart-tools"), timeMode: "wall" });
// Each series (a metric of a learner) is what the metrics API's step buckets gave (`?buckets=`: the whole run,
// however long, in at most BUCKETS buckets of mean, min and max) up to their last step, then the points
// that came live after it. Once many have come live, the buckets are read again.
const BUCKETS = 1000;
const RELOAD_AFTER = 5000;
const metrics = new Map(); // name -> Map(learner -> {base, upTo, live: Map(step -> {step, time, value})})
let liveSinceLoad = 0;
let reload = null;
let redrawQueued = false;
let downsampled = new Map(); // name -> points the buckets hold, where a bucket holds more than one

function seriesOf(name, learner) {
  if (!metrics.has(name)) metrics.set(name, new Map());
  const byLearner = metrics.get(name);
  if (!byLearner.has(learner)) byLearner.set(learner, { base: null, upTo: -Infinity, live: new Map() });
  return byLearner.get(learner);
}

// A live point from a log line has its line's sequence, one from a TensorBoard event file (logSeq 0) its
// step only; a point without a step is drawn at its line's sequence, as the API places it.
function addPoint(name, learner, step, value, logSeq, ts) {
  if (typeof value !== "number") return;
  if (!logSeq && tensorboardLink) tensorboardLink.hidden = false; // the job has sent event files now
  const x = step ?? logSeq;
  const series = seriesOf(name, learner);
  if (x <= series.upTo) return; // its bucket holds it already
  // Live frames carry no time: a point is placed at its arrival, close enough for a wall-time axis.
  const time = ts ? Date.parse(ts) / 1000 : Date.now() / 1000;
  series.live.set(x, { step: x, time, value });
  liveSinceLoad += 1;
  if (liveSinceLoad > RELOAD_AFTER && !reload) reload = loadMetrics().finally(() => (reload = null));
  queueRedraw();
}

function queueRedraw() {
  if (redrawQueued) return;
  redrawQueued = true;
  window.setTimeout(() => {
    redrawQueued = false;
    drawCharts();
  }, 250);
}

function chartSeries(series) {
  const base = series.base || { step: [], time: [], value: [], min: [], max: [] };
  const live = [...series.live.values()].sort((a, b) => a.step - b.step);
  return {
    step: base.step.concat(live.map((p) => p.step)),
    time: base.time.concat(live.map((p) => p.time)),
    value: base.value.concat(live.map((p) => p.value)),
    min: base.min.concat(live.map((p) => p.value)),
    max: base.max.concat(live.map((p) => p.value)),
  };
}

// One chart per metric, its train and validation variants together (validation dashed), a series per
// learner that reported it (coloured by learner).
function drawCharts() {
  if (!metrics.size || typeof window.uPlot === "undefined") return;
  const placeholder = chartsBox.querySelector(":scope > p");
  if (placeholder) placeholder.remove();
  const families = new Map();
  for (const name of [...metrics.keys()].sort()) {
    const [base, variant] = metricFamily(name);
    if (!families.has(base)) families.set(base, []);
    families.get(base).push({ name, variant });
  }
  for (const base of [...families.keys()].sort()) {
    const names = families.get(base);
    const learnerSet = new Set(names.flatMap(({ name }) => [...metrics.get(name).keys()]));
    const learners = [...learnerSet].sort((a, b) => a - b);
    const series = [];
    for (const { name, variant } of names) {
      for (const learner of learners) {
        const found = metrics.get(name).get(learner);
        if (!found) continue;
        const label = learners.length > 1 ? `${name} · learner ${learner}` : name;
        series.push({ label, colour: colour(learners.indexOf(learner)), dash: dashFor(variant), ...chartSeries(found) });
      }
    }
    const total = names.reduce((sum, { name }) => sum + (downsampled.get(name) || 0), 0);
    const note = total ? `${total.toLocaleString()} points in step buckets: the line is each bucket's mean, the band its min and max.` : "";
    board.show(base, base, series, note);
  }
}

// The whole run, downsampled by the server (buckets of every metric and learner in one request).
async function loadMetrics() {
  try {
    const body = await getJson(`${API}/metrics/?buckets=${BUCKETS}`);
    liveSinceLoad = 0;
    const counts = new Map();
    for (const s of body.series) {
      const series = seriesOf(s.name, s.learner);
      series.base = { step: s.step, time: s.time, value: s.mean, min: s.min, max: s.max };
      series.upTo = s.step.length ? s.step[s.step.length - 1] : -Infinity;
      for (const x of [...series.live.keys()]) if (x <= series.upTo) series.live.delete(x);
      if (s.count.some((n) => n > 1)) counts.set(s.name, (counts.get(s.name) || 0) + s.points);
    }
    downsampled = counts;
    queueRedraw();
  } catch (error) {
    /* charts keep what they have; the next refresh tries again */
  }
}

// --- status ------------------------------------------------------------------------------------------

const badge = document.querySelector("#job-status [data-status]");
const reasonBox = document.getElementById("job-reason");
// Halted is not final (a resume may follow from anywhere), so the page goes on listening to a halted job.
const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
let shownStatus = badge ? badge.textContent.trim().toLowerCase() : "";

function showStatus(status, reason, message) {
  if (!status) return;
  const changed = status !== shownStatus;
  shownStatus = status;
  setBadge(badge, status);
  reasonBox.textContent = "";
  if (reason) {
    const strong = document.createElement("strong");
    strong.textContent = reason;
    reasonBox.appendChild(strong);
  }
  if (message) reasonBox.appendChild(document.createTextNode((reason ? " — " : "") + message));
  terminal = TERMINAL.has(status);
  if (changed) refreshParts();
}

// The timeline, learner rows, times and results, re-rendered by the server (the page's own templates) after
// each state change and swapped in by htmx out of band. The request's source, #job-status, carries
// `hx-sync="this:queue last"`: one request in flight, and changes that arrive meanwhile queue one more.
const partsSource = document.getElementById("job-status");

function refreshParts() {
  window.htmx.ajax("GET", config.parts, { source: partsSource, swap: "none" }).catch(() => {
    /* the next state change or poll tries again */
  });
}

// --- live --------------------------------------------------------------------------------------------

const socket = new LiveSocket({
  onState(state) {
    partsSource.dataset.live = state; // "live" once subscribed to the job (tests wait on it)
  },
  onFrame(frame) {
    if (frame.job && frame.job !== config.job) return;
    if (frame.type === "logs") {
      const learner = Number(frame.learner);
      const batch = frame.lines || [];
      const first = batch.length ? batch[0][0] : 0;
      const last = lastSeq(learner);
      if (last && first > last + 1) fetchLines(learner, last, first - 1).catch(() => {});
      addLines(learner, batch);
      if (!tabs.some((t) => t.dataset.learner === String(learner))) addTab(learner);
    } else if (frame.type === "metrics") {
      const learner = frame.learner ?? 0;
      for (const [name, step, value, logSeq] of frame.points || []) addPoint(name, learner, step, value, logSeq);
    } else if (frame.type === "status") {
      showStatus(frame.status, frame.reason, frame.message);
    } else if (frame.type === "parts") {
      refreshParts(); // something on the page changed without a state change (idle GPUs flagged or cleared)
    } else if (frame.type === "subscribed") {
      // The status now: it may have changed between the page's render and this subscription, and the
      // server sends no `status` frame for a change made before the socket joined the job's group.
      if (frame.status !== shownStatus) showStatus(frame.status, frame.reason, frame.message);
      // Points from event files have no sequence to backfill by: read them again once subscribed, so
      // those stored before the socket joined are shown too (the rest come live).
      if (config.tensorboard) loadMetrics();
    } else if (frame.type === "gap") {
      fetchLines(Number(frame.learner), Math.max(0, frame.from_seq - 1), frame.to_seq).catch(() => {});
    }
  },
});

function addTab(learner) {
  const tab = document.createElement("button");
  tab.className = "tab";
  tab.setAttribute("role", "tab");
  tab.setAttribute("aria-selected", "false");
  tab.dataset.learner = String(learner);
  tab.textContent = `Learner ${learner}`;
  tab.addEventListener("click", () => {
    activeLearner = tab.dataset.learner;
    tabs.forEach((t) => t.setAttribute("aria-selected", String(t === tab)));
    applyFilter();
  });
  tabs.push(tab);
  document.querySelector(".tabs").appendChild(tab);
}

function subscription() {
  const after = {};
  for (const [learner] of seqs) after[String(learner)] = lastSeq(learner);
  for (const learner of config.learners) if (!(String(learner) in after)) after[String(learner)] = 0;
  return { action: "subscribe", job: config.job, after };
}

// Without a live socket: poll for new lines, metrics and status until the job is finished.
async function poll() {
  if (socket.live || document.hidden) return;
  try {
    const job = await getJson(`${API}/`);
    showStatus(job.status, job.reason, job.message);
    for (const learner of config.learners) await fetchLines(learner, lastSeq(learner), Infinity, 5);
    await loadMetrics();
  } catch (error) {
    /* try again on the next tick */
  }
}

async function start() {
  await loadHistory();
  await loadMetrics();
  drawCharts();
  socket.subscribe("job", subscription);
  socket.connect();
  const timer = window.setInterval(() => {
    if (terminal && !socket.live) {
      poll().finally(() => window.clearInterval(timer));
    } else {
      poll();
    }
  }, POLL_MS);
}

start();
