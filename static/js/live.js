// The live channel to the server's /ws/ endpoint: reconnects with exponential backoff (1 s doubling to 30 s)
// after any close but 4401, and on every (re)connect re-sends each subscription built fresh (so a job
// subscription resumes from the last seq). A 4503 (the stream behind the socket failed: the database or the
// channel layer, docs/streaming.md) is retried like a dropped connection; the backoff only starts over once
// a subscription was answered, so a server that accepts sockets but cannot serve them is not hammered.

export class LiveSocket {
  constructor({ onFrame, onState } = {}) {
    this.onFrame = onFrame || (() => {});
    this.onState = onState || (() => {});
    this.subscriptions = new Map();
    this.backoff = 1000;
    this.socket = null;
    this.timer = null;
    this.closed = false;
    this.state = "connecting";
  }

  // `build` is called on each connect and returns the message to send, e.g. {action: "subscribe", ...}.
  subscribe(key, build) {
    this.subscriptions.set(key, build);
    if (this.socket && this.socket.readyState === WebSocket.OPEN) this.socket.send(JSON.stringify(build()));
  }

  connect() {
    if (this.closed || typeof WebSocket === "undefined") return;
    const scheme = window.location.protocol === "https:" ? "wss" : "ws";
    let socket;
    try {
      socket = new WebSocket(`${scheme}://${window.location.host}/ws/`);
    } catch (error) {
      this.retry();
      return;
    }
    this.socket = socket;
    socket.addEventListener("open", () => {
      this.setState("open");
      for (const build of this.subscriptions.values()) socket.send(JSON.stringify(build()));
    });
    socket.addEventListener("message", (event) => {
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch (error) {
        return;
      }
      if (frame.type === "subscribed" || frame.type === "subscribed_tenant") {
        this.backoff = 1000;
        this.setState("live");
      }
      this.onFrame(frame);
    });
    socket.addEventListener("close", (event) => {
      this.socket = null;
      if (event.code === 4401) {
        // Not (or no longer) signed in: the session ended or the token was revoked. Reconnecting cannot help.
        this.closed = true;
        this.setState("signed-out");
        return;
      }
      this.setState("closed");
      this.retry();
    });
  }

  retry() {
    if (this.closed || this.timer !== null) return;
    const delay = this.backoff * (0.75 + Math.random() * 0.5);
    this.backoff = Math.min(this.backoff * 2, 30000);
    this.timer = window.setTimeout(() => {
      this.timer = null;
      this.connect();
    }, delay);
  }

  setState(state) {
    this.state = state;
    this.onState(state);
  }

  get live() {
    return this.state === "live";
  }

  close() {
    this.closed = true;
    if (this.timer !== null) window.clearTimeout(this.timer);
    if (this.socket) this.socket.close();
  }
}

// A status badge's HTML-free update: class and label from the status name.
export function setBadge(badge, status) {
  if (!badge || !status) return;
  badge.className = `badge badge-${status}`;
  badge.textContent = status.charAt(0).toUpperCase() + status.slice(1);
}

export function csrfToken() {
  const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  return match ? decodeURIComponent(match[1]) : "";
}
