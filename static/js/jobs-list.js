// Live status badges in a jobs table: tenant status frames over the socket, else a periodic refresh.
import { LiveSocket, setBadge } from "./live.js";

const holder = document.querySelector("[data-tenant]");
const tenant = holder ? holder.dataset.tenant : "";
const POLL_MS = 10000;

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

function update(jobId, status, message, position, borrowed) {
  const row = document.querySelector(`tr[data-job-id="${CSS.escape(jobId)}"]`);
  if (!row) return;
  setBadge(row.querySelector("[data-status]"), status);
  setBorrowed(row.querySelector("[data-borrowed]"), borrowed);
  const reason = row.querySelector("[data-reason]");
  if (reason && message !== undefined) {
    const waiting = status === "queued" || status === "requeued";
    reason.textContent = (waiting && position ? `#${position} · ` : "") + (message || "");
  }
}

async function refresh() {
  if (document.hidden) return;
  const ids = [...document.querySelectorAll("tr[data-job-id]")].map((row) => row.dataset.jobId);
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
      if (frame.type === "status") {
        update(frame.job, frame.status, frame.message, frame.queue_position, frame.borrowed);
      }
    },
  });
  socket.subscribe("tenant", () => ({ action: "subscribe_tenant", tenant }));
  socket.connect();
  window.setInterval(() => {
    if (!socket.live) refresh();
  }, POLL_MS);
}

// Ticking jobs to compare: the button is live for 2 to 10 of them.
const compareButton = document.getElementById("compare-button");
const compareHint = document.getElementById("compare-hint");
const MAX_COMPARE = 10;

function updateCompare() {
  if (!compareButton) return;
  const ticked = document.querySelectorAll("input[data-compare]:checked").length;
  compareButton.disabled = ticked < 2 || ticked > MAX_COMPARE;
  compareButton.textContent = ticked ? `Compare ${ticked}` : "Compare";
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
updateCompare();
