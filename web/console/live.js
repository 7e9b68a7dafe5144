// Server-Sent Events over fetch (EventSource cannot send an Authorization header).

/** A line parser for text/event-stream; calls onEvent({event, data}) per dispatched event. */
export function sseParser(onEvent, onComment = () => {}) {
  let buffer = "";
  let event = "";
  let data = [];

  function line(text) {
    if (text === "") {
      if (data.length > 0 || event) onEvent({ event: event || "message", data: data.join("\n") });
      event = "";
      data = [];
      return;
    }
    if (text.startsWith(":")) {
      onComment(text.slice(1).trim());
      return;
    }
    const colon = text.indexOf(":");
    const field = colon === -1 ? text : text.slice(0, colon);
    let value = colon === -1 ? "" : text.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
    // `id` and `retry` are not used by this stream.
  }

  return function feed(chunk) {
    buffer += chunk;
    // A "\r" at the very end may be half of a "\r\n" that the next chunk completes.
    const hold = buffer.endsWith("\r") ? 1 : 0;
    const ready = buffer.slice(0, buffer.length - hold);
    const lines = ready.split(/\r\n|\r|\n/);
    buffer = lines.pop() + buffer.slice(buffer.length - hold);
    for (const text of lines) line(text);
  };
}

const MAX_BACKOFF_MS = 30_000;

/**
 * Keep a live connection open: reconnect with exponential backoff when it ends.
 * onReady(reconnected) — the `ready` event arrived; onEvent(event) — any other event;
 * onLost() — an established connection ended without close() being called, and without
 *   the server's `end` event (it ends idle or old streams: we just reconnect, soon);
 * onFatal(status) — the server refused the stream (401/403/404): no retry.
 */
export function openLiveStream({ url, headers, onReady, onEvent, onLost, onFatal }) {
  const controller = new AbortController();
  let closed = false;
  let failures = 0;
  let connectedOnce = false;
  let timer = null;

  async function connect() {
    let established = false;
    let ended = false;
    try {
      const response = await fetch(url, {
        headers: { ...headers(), Accept: "text/event-stream" },
        signal: controller.signal,
        cache: "no-store",
      });
      if ([401, 403, 404].includes(response.status)) {
        if (!closed) onFatal(response.status);
        return;
      }
      if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
      const feed = sseParser((event) => {
        if (event.event === "ready") {
          established = true;
          failures = 0;
          onReady(connectedOnce);
          connectedOnce = true;
        } else if (event.event === "end") {
          ended = true;
        } else {
          onEvent(event);
        }
      });
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        feed(value);
      }
    } catch {
      // a network error or our own abort; handled below
    }
    if (closed) return;
    if (ended) {
      // An orderly end, not a lost connection: no disconnect trigger, no backoff. The
      // jitter spreads the reconnects of streams that all reached their age at once.
      timer = setTimeout(connect, 250 + Math.random() * 1000);
      return;
    }
    if (established) onLost();
    failures += 1;
    const base = Math.min(MAX_BACKOFF_MS, 500 * 2 ** Math.min(failures, 6));
    timer = setTimeout(connect, base * (0.75 + Math.random() * 0.5));
  }

  connect();
  return {
    close() {
      closed = true;
      clearTimeout(timer);
      controller.abort();
    },
  };
}
