// Search over one scope (an agent and a user): its topics and messages in all its
// sessions, best first (GET /agents-api/search). Each result links to its topic in its
// session's thread; the router opens it (`?topic=<id>&message=<id>` reveals them).

import { api, seg } from "./api.js";
import { formatTime, h, plural, replace, shortId } from "./dom.js";

const LIMIT = 20;

/** The console URL of a result: its session, revealing its topic (and message). */
export function resultUrl(result) {
  const query = new URLSearchParams({ topic: result.topicId });
  if (result.messageId !== null && result.messageId !== undefined) {
    query.set("message", String(result.messageId));
  }
  return `/console/sessions/${seg(result.sessionId)}?${query}`;
}

/**
 * A search form and its result list. scope() is `{agentId, userId}`, or null while
 * unknown; sessionId, if given, is the session on screen (its results say so).
 */
export function searchBox({ scope, sessionId = null, onUnauthorized }) {
  const input = h("input", {
    type: "search",
    name: "search",
    required: true,
    autocomplete: "off",
    placeholder: "Search this agent and user's topics and messages",
    "aria-label": "Search this agent and user's topics and messages",
  });
  const deprecated = h("input", { type: "checkbox", name: "include-deprecated" });
  const results = h("div", { class: "search-results", "aria-live": "polite" });
  let inFlight = null;

  async function run(event) {
    event.preventDefault();
    const current = scope();
    const q = input.value.trim();
    if (!current || !q) return;
    inFlight?.abort(); // only the latest query paints
    const controller = new AbortController();
    inFlight = controller;
    replace(results, h("p", { class: "muted small" }, "Searching…"));
    const query = new URLSearchParams({ ...current, q, limit: String(LIMIT) });
    if (deprecated.checked) query.set("includeDeprecated", "true");
    try {
      const body = await api("GET", `/search?${query}`, undefined, { signal: controller.signal });
      renderResults(results, body.results ?? [], sessionId);
    } catch (error) {
      if (error.name === "AbortError") return;
      if (error.status === 401) {
        onUnauthorized();
        return;
      }
      replace(results, h("p", { class: "error", role: "alert" }, error.message));
    } finally {
      if (inFlight === controller) inFlight = null;
    }
  }

  const form = h(
    "form",
    { class: "row search-form", role: "search", onsubmit: run },
    input,
    h("button", { type: "submit" }, "Search"),
    h("label", { class: "check small" }, deprecated, "include deprecated"),
  );
  deprecated.addEventListener("change", () => {
    if (input.value.trim()) form.requestSubmit();
  });
  return h("div", { class: "search" }, form, results);
}

function renderResults(container, results, sessionId) {
  if (!results.length) {
    replace(container, h("p", { class: "muted" }, "No matches."));
    return;
  }
  replace(
    container,
    h("p", { class: "muted small" }, plural(results.length, "result")),
    h("ol", { class: "plain search-list" }, results.map((r) => resultItem(r, sessionId))),
  );
}

function resultItem(result, sessionId) {
  const where =
    result.sessionId === sessionId ? "this session" : `session ${shortId(result.sessionId)}`;
  return h(
    "li",
    { "data-kind": result.kind },
    h(
      "a",
      { href: resultUrl(result), "data-link": "", class: "search-hit" },
      h(
        "span",
        { class: "search-head" },
        h("span", { class: "pill" }, result.kind),
        h("strong", { class: "search-title" }, result.title || "Untitled topic"),
      ),
      h("span", { class: "snippet" }, result.snippet),
      h(
        "span",
        { class: "muted small" },
        h("span", { class: `state state-${result.memoryState}` }, result.memoryState),
        ` · ${where} · `,
        h("time", { datetime: result.createdAt }, formatTime(result.createdAt)),
      ),
    ),
  );
}
