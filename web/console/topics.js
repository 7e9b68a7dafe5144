// The Topics card of the session view: one row per topic, with the memory toggle (the
// brain, R20's user curation) and the button that opens the topic's thread.

import { brainIcon, h, plural, replace } from "./dom.js";

const STATE_NAMES = { none: "none", promoted: "promoted", deprecated: "deprecated" };

export function toggleLabel(topic) {
  const state = STATE_NAMES[topic.memoryState] ?? topic.memoryState;
  const by = topic.memoryStateSetBy ? ` (set by ${topic.memoryStateSetBy})` : "";
  return `Memory: ${state}${by}. Activate to change.`;
}

export class TopicsPane {
  /** onOpen(topicId) selects a topic; onCycle(topicId) moves its memory state on. */
  constructor({ onOpen, onCycle }) {
    this.onOpen = onOpen;
    this.onCycle = onCycle;
    this.list = h("ul", { class: "topic-list", "aria-label": "Topics of this session" });
    this.element = h(
      "section",
      { class: "card card-topics", "aria-labelledby": "topics-heading" },
      h("h2", { id: "topics-heading" }, "Topics"),
      this.list,
    );
  }

  /**
   * Draw every row again, the keyboard focus kept on the same control of the same topic.
   * `marks` is {activeTopicId, selectedTopicId, foundTopicId, cycling (a Set of ids)}.
   */
  render(topics, marks) {
    const focused = document.activeElement;
    const focusTopic = this.list.contains(focused)
      ? focused.closest("[data-topic-id]")?.dataset.topicId
      : null;
    const focusRole = focused?.dataset?.role;
    const rows = topics.map((topic) => this.row(topic, marks));
    replace(this.list, rows.length ? rows : h("li", { class: "muted" }, "No topics yet."));
    if (focusTopic) {
      this.list
        .querySelector(`[data-topic-id="${CSS.escape(focusTopic)}"] [data-role="${focusRole}"]`)
        ?.focus();
    }
  }

  row(topic, { activeTopicId, selectedTopicId, foundTopicId, cycling }) {
    const active = topic.id === activeTopicId;
    const selected = topic.id === selectedTopicId;
    const toggle = h(
      "button",
      {
        type: "button",
        class: "brain",
        "data-role": "toggle",
        "data-memory-state": topic.memoryState,
        "aria-label": toggleLabel(topic),
        title: toggleLabel(topic),
        "aria-busy": cycling.has(topic.id) ? "true" : null,
        onclick: () => this.onCycle(topic.id),
      },
      brainIcon(),
    );
    const by = topic.memoryStateSetBy ? ` by ${topic.memoryStateSetBy}` : "";
    const open = h(
      "button",
      {
        type: "button",
        class: "topic-open",
        "data-role": "open",
        "aria-current": selected ? "true" : null,
        onclick: () => this.onOpen(topic.id),
      },
      h("span", { class: "topic-title" }, topic.title || "Untitled topic"),
      h(
        "span",
        { class: "topic-meta" },
        h("span", { class: `status status-${topic.status}` }, topic.status),
        ` · ${plural(topic.messageCount, "message")} · `,
        h("span", { class: `state state-${topic.memoryState}` }, `${topic.memoryState}${by}`),
      ),
    );
    return h(
      "li",
      {
        class: `topic${selected ? " selected" : ""}`,
        "data-topic-id": topic.id,
        "data-active": active ? "true" : null,
        "data-found": topic.id === foundTopicId ? "true" : null,
      },
      toggle,
      open,
    );
  }

  /** Bring a topic's row into view and focus its open button (a revealed topic). */
  scrollTo(topicId) {
    const row = this.list.querySelector(`[data-topic-id="${CSS.escape(topicId)}"]`);
    row?.scrollIntoView({ block: "nearest" });
    row?.querySelector('[data-role="open"]')?.focus({ preventScroll: true });
  }
}
