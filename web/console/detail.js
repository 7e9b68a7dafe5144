// The Topic card of the session view: the selected topic's summary, its notes (active and
// archived), its evaluations and the history of its memory state.

import { api, seg } from "./api.js";
import { formatTime, h, plural, replace } from "./dom.js";

/** What the card shows of a topic beyond the topic itself: {notes, evaluations, changes}. */
export async function readDetail(topicId) {
  const tid = seg(topicId);
  const [notes, evaluations, history] = await Promise.all([
    api("GET", `/topics/${tid}/notes`),
    api("GET", `/topics/${tid}/evaluations`),
    api("GET", `/topics/${tid}/history`),
  ]);
  return { notes, evaluations: evaluations.evaluations, changes: history.changes };
}

export class DetailPane {
  constructor() {
    this.title = h("h2", { id: "topic-heading" }, "Topic");
    this.body = h("div", { class: "detail" }, h("p", { class: "muted" }, "Loading…"));
    this.element = h(
      "section",
      { class: "card card-detail", "aria-labelledby": "topic-heading" },
      this.title,
      this.body,
    );
  }

  empty() {
    replace(this.body, h("p", { class: "muted" }, "No topic selected."));
  }

  render(topic, { notes, evaluations, changes }) {
    this.title.textContent = `Topic · ${topic.title || "Untitled topic"}`;
    const summary = topic.summary
      ? h("p", { class: "summary" }, topic.summary)
      : h("p", { class: "muted" }, "Not summarized yet.");
    const summaryMeta = topic.summarizedAt
      ? `${topic.summarySource ?? "?"} summary · ${formatTime(topic.summarizedAt)}`
      : topic.status === "active"
        ? "Summarized when the topic closes or is evaluated."
        : "Summary pending.";
    replace(
      this.body,
      h("h3", {}, "Summary"),
      summary,
      h("p", { class: "muted small" }, summaryMeta),
      h("h3", {}, "Notes"),
      notesBlock(notes),
      h("h3", {}, "Evaluations"),
      evaluationsBlock(evaluations),
      changesBlock(changes),
    );
  }
}

function notesBlock(notes) {
  const archived = notes.archived ?? [];
  return h(
    "div",
    {},
    notes.active
      ? [
          h("pre", { class: "notes" }, notes.active.content),
          h("p", { class: "muted small" }, `updated ${formatTime(notes.active.updatedAt)}`),
        ]
      : h("p", { class: "muted" }, "No active notes."),
    archived.length
      ? h(
          "details",
          {},
          h("summary", {}, `${plural(archived.length, "archived version")}`),
          h(
            "ol",
            { class: "plain" },
            archived.map((a) =>
              h(
                "li",
                {},
                h("pre", { class: "notes archived" }, a.content),
                h("p", { class: "muted small" }, `archived ${formatTime(a.archivedAt)}`),
              ),
            ),
          ),
        )
      : null,
  );
}

function evaluationsBlock(evaluations) {
  const sorted = [...evaluations].sort((a, b) => (a.startedAt < b.startedAt ? 1 : -1));
  if (!sorted.length) return h("p", { class: "muted" }, "No evaluations yet.");
  return h(
    "ol",
    { class: "plain evals" },
    sorted.map((e) =>
      h(
        "li",
        { class: `eval outcome-${e.outcome}` },
        h("span", { class: "pill" }, e.outcome),
        h("span", {}, ` ${e.trigger} · ${formatTime(e.finishedAt ?? e.startedAt, true)}`),
        h(
          "span",
          { class: "muted small" },
          ` · ${plural(e.llmCalls, "LLM call")}`,
          e.llmCalls ? ` · ${e.promptTokens}+${e.completionTokens} tokens` : "",
          e.model ? ` · ${e.model}` : "",
        ),
        e.error ? h("div", { class: "error small" }, e.error) : null,
      ),
    ),
  );
}

function changesBlock(changes) {
  if (!changes.length) return null;
  return h(
    "details",
    {},
    h("summary", {}, `Memory changes (${changes.length})`),
    h(
      "ol",
      { class: "plain small" },
      changes.map((c) =>
        h(
          "li",
          {},
          `${c.actor}: ${c.fromState} → ${c.toState} (${c.action}) · ${formatTime(c.createdAt, true)}`,
        ),
      ),
    ),
  );
}
