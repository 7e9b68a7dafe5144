// The API client: the key lives in sessionStorage (this tab only) and goes out as a
// bearer token; errors carry the server's `{"error": {"code", "message"}}` message.

const KEY_STORAGE = "driftless.apiKey";

export const auth = {
  get key() {
    return sessionStorage.getItem(KEY_STORAGE);
  },
  set(key) {
    sessionStorage.setItem(KEY_STORAGE, key);
  },
  clear() {
    sessionStorage.removeItem(KEY_STORAGE);
  },
  headers() {
    return { Authorization: `Bearer ${this.key ?? ""}` };
  },
};

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
  }
}

export const seg = (value) => encodeURIComponent(String(value));

export function scopeQuery(agentId, userId) {
  return new URLSearchParams({ agentId, userId }).toString();
}

export async function api(method, path, body, { signal } = {}) {
  const headers = auth.headers();
  const init = { method, headers, signal, cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(`/agents-api${path}`, init);
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(0, "network", "The server could not be reached.");
  }
  if (response.status === 204) return null;
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    const error = data && data.error;
    throw new ApiError(
      response.status,
      error?.code ?? `http_${response.status}`,
      error?.message ?? `${method} ${path} failed (HTTP ${response.status}).`,
    );
  }
  return data;
}

/**
 * Download the scope's export (GET /export, NDJSON) as a file. A plain link cannot
 * carry the bearer key, so the body is fetched with it and saved from a blob.
 */
export async function downloadExport(agentId, userId) {
  const query = scopeQuery(agentId, userId);
  let response;
  try {
    response = await fetch(`/agents-api/export?${query}`, {
      headers: auth.headers(),
      cache: "no-store",
    });
  } catch {
    throw new ApiError(0, "network", "The server could not be reached.");
  }
  if (!response.ok) {
    let error = null;
    try {
      error = (await response.json()).error;
    } catch {
      error = null;
    }
    throw new ApiError(
      response.status,
      error?.code ?? `http_${response.status}`,
      error?.message ?? `The export failed (HTTP ${response.status}).`,
    );
  }
  const url = URL.createObjectURL(await response.blob());
  const link = document.createElement("a");
  link.href = url;
  link.download = `driftless-${agentId}-${userId}.ndjson`.replace(/[^\w.-]+/g, "_");
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 0);
}

/** R27/R29: an exit trigger, fire-and-forget; `keepalive` lets it outlive the page. */
export function sendExitTrigger(sessionId, trigger) {
  if (!auth.key || !sessionId) return;
  try {
    fetch(`/agents-api/sessions/${seg(sessionId)}/evaluate`, {
      method: "POST",
      keepalive: true,
      headers: { ...auth.headers(), "Content-Type": "application/json" },
      body: JSON.stringify({ trigger }),
    }).catch(() => {});
  } catch {
    // never let an exit trigger break leaving the page
  }
}
