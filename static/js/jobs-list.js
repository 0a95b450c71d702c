// A live jobs table (the jobs list, the dashboard): the tenant's status frames over the socket, else a
// periodic refresh. A frame for a job already shown updates its row in place; the holder's `data-refresh`
// says when the whole block is read again from the server (the page's own HTML, so page and update always
// agree): "always" (the dashboard: its meters, free capacity and running-and-queued list follow every
// change), "new" (the first page of the list: a job it does not show yet appears) or "never".
import { LiveSocket, setBadge } from "./live.js";

const holder = document.querySelector("[data-tenant]");
const tenant = holder ? holder.dataset.tenant : "";
const POLL_MS = 10000;
const SETTLE_MS = 150; // a burst of frames (a gang admitted, a cycle's moves) becomes one re-read

const BORROWED_TITLE = "admitted above its tenant's nominal quota, on quota borrowed from its cohort";

function setBorrowed(holder, borrowed) {
  if (!holder || borrowed === undefined) return;
  holder.replaceChildren();
  if (!borrowed) return;
  const chip = document.createElement("span");
  chip.className = "chip chip-borrowed";
  chip.title = BORROWED_TITLE;
  chip.textContent = "borrowed";
  holder.append(chip);
}

function rowOf(jobId) {
  return holder.querySelector(`tr[data-job-id="${CSS.escape(jobId)}"]`);
}

function update(jobId, status, message, position, borrowed) {
  const row = rowOf(jobId);
  if (!row) return false;
  setBadge(row.querySelector("[data-status]"), status);
  setBorrowed(row.querySelector("[data-borrowed]"), borrowed);
  const reason = row.querySelector("[data-reason]");
  if (reason && message !== undefined) {
    const waiting = status === "queued" || status === "requeued";
    reason.textContent = (waiting && position ? `#${position} · ` : "") + (message || "");
  }
  return true;
}

// --- re-reading the block ---------------------------------------------------------------------------

let timer = null;
let reading = false;
let again = false;

function scheduleReload() {
  if (timer !== null) return;
  timer = window.setTimeout(() => {
    timer = null;
    reload();
  }, SETTLE_MS);
}

async function reload() {
  if (reading) {
    again = true; // one more read once this one is done: it may have been answered before the change
    return;
  }
  reading = true;
  try {
    const response = await fetch(window.location.href, {
      credentials: "same-origin",
      headers: { Accept: "text/html" },
    });
    if (!response.ok) return;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html").getElementById(holder.id);
    if (!fresh) return;
    // Keep what the user ticked (e.g. jobs chosen for a comparison) across the swap.
    const ticked = new Set(
      [...holder.querySelectorAll("input[type=checkbox]:checked")].map((input) => `${input.name}=${input.value}`),
    );
    holder.replaceChildren(...[...fresh.childNodes].map((node) => document.importNode(node, true)));
    for (const input of holder.querySelectorAll("input[type=checkbox]")) {
      if (ticked.has(`${input.name}=${input.value}`)) input.checked = true;
    }
    holder.dataset.reloads = String(Number(holder.dataset.reloads || 0) + 1); // tests wait on it
    holder.dispatchEvent(new CustomEvent("jobs:reloaded", { bubbles: true }));
  } catch (error) {
    /* offline for a moment: the next frame or tick tries again */
  } finally {
    reading = false;
    if (again) {
      again = false;
      scheduleReload();
    }
  }
}

// --- without a live socket -------------------------------------------------------------------------

async function refresh() {
  if (document.hidden) return;
  if (holder.dataset.refresh === "always") {
    reload();
    return;
  }
  const ids = [...holder.querySelectorAll("tr[data-job-id]")].map((row) => row.dataset.jobId);
  if (!ids.length) return;
  try {
    const response = await fetch(`/api/v1/jobs/?tenant=${encodeURIComponent(tenant)}&page_size=200`, {
      credentials: "same-origin",
      headers: { Accept: "application/json" },
    });
    if (!response.ok) return;
    const body = await response.json();
    for (const job of body.results || []) {
      update(job.id, job.status, job.message, job.queue_position, job.borrowed);
    }
  } catch (error) {
    /* offline for a moment: the next tick tries again */
  }
}

if (tenant) {
  const socket = new LiveSocket({
    onState(state) {
      holder.dataset.live = state; // "live" once the tenant's status frames flow (tests wait on it)
    },
    onFrame(frame) {
      if (frame.type !== "status") return;
      const shown = update(frame.job, frame.status, frame.message, frame.queue_position, frame.borrowed);
      const mode = holder.dataset.refresh;
      if (mode === "always" || (mode === "new" && !shown)) scheduleReload();
    },
  });
  socket.subscribe("tenant", () => ({ action: "subscribe_tenant", tenant }));
  socket.connect();
  window.setInterval(() => {
    if (!socket.live) refresh();
  }, POLL_MS);
}

// Ticking jobs to compare: the button is live for 2 to 10 of them. Its elements are looked up each time:
// a re-read of the list (above) replaces them, keeping what was ticked.
const MAX_COMPARE = 10;

function updateCompare() {
  const compareButton = document.getElementById("compare-button");
  const compareHint = document.getElementById("compare-hint");
  if (!compareButton) return;
  const ticked = document.querySelectorAll("input[data-compare]:checked").length;
  compareButton.disabled = ticked < 2 || ticked > MAX_COMPARE;
  compareButton.textContent = ticked ? `Compare ${ticked}` : "Compare";
  if (!compareHint) return;
  compareHint.textContent =
    ticked > MAX_COMPARE
      ? `${ticked} ticked: compare at most ${MAX_COMPARE} at a time.`
      : ticked < 2
        ? "Tick 2 to 10 jobs to compare their curves, hyperparameters and metrics."
        : `${ticked} jobs ticked.`;
}

document.addEventListener("change", (event) => {
  if (event.target.matches && event.target.matches("input[data-compare]")) updateCompare();
});
document.addEventListener("jobs:reloaded", updateCompare);
updateCompare();
