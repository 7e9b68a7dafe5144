// The Thread card of the session view: the selected topic's messages, and the composer
// that posts to the session (the server puts a message in the active topic).

import { api, seg } from "./api.js";
import { formatTime, h, replace } from "./dom.js";

const MESSAGE_PAGE = 1000;
const MAX_MESSAGE_PAGES = 20;

/** A topic's messages, oldest first, read page by page (at most 20 pages). */
export async function readThread(sessionId, topicId) {
  const messages = [];
  let afterId = null;
  for (let page = 0; page < MAX_MESSAGE_PAGES; page += 1) {
    const query = new URLSearchParams({ topicId, limit: String(MESSAGE_PAGE) });
    if (afterId !== null) query.set("afterId", String(afterId));
    const body = await api("GET", `/sessions/${seg(sessionId)}/messages?${query}`);
    messages.push(...body.messages);
    afterId = body.nextAfterId ?? null;
    if (afterId === null) break;
  }
  return messages;
}

export class ThreadPane {
  /** onSent() runs after a post was accepted; fail(error) reports what went wrong. */
  constructor({ sessionId, onSent, fail }) {
    this.sessionId = sessionId;
    this.onSent = onSent;
    this.fail = fail;
    this.topicId = null; // the topic drawn last: another one starts at its newest message
    this.title = h("h2", { id: "thread-heading" }, "Thread");
    this.note = h("p", { class: "muted small" });
    this.list = h("ol", { class: "messages", tabindex: "0", "aria-label": "Messages" });
    this.element = h(
      "section",
      { class: "card card-thread", "aria-labelledby": "thread-heading" },
      this.title,
      this.note,
      this.list,
      this.composer(),
    );
  }

  composer() {
    const role = h(
      "select",
      { name: "role", "aria-label": "Role" },
      h("option", { value: "user" }, "user"),
      h("option", { value: "assistant" }, "assistant"),
    );
    // Who speaks (optional): OpenAI's rule for a message's name, as the server checks it.
    const name = h("input", {
      name: "name",
      maxlength: "64",
      pattern: "[A-Za-z0-9_\\-]{1,64}",
      placeholder: "Name (optional)",
      title: "Who speaks: letters, digits, _ and -, at most 64",
      "aria-label": "Speaker's name",
    });
    const content = h("textarea", {
      name: "content",
      rows: "3",
      required: true,
      placeholder: "Write a message… (Ctrl+Enter sends)",
      "aria-label": "Message",
    });
    const status = h("span", { class: "muted small", role: "status" });
    const form = h(
      "form",
      { class: "composer" },
      content,
      h("div", { class: "row" }, role, name, h("button", { type: "submit" }, "Send"), status),
    );
    content.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) form.requestSubmit();
    });
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const text = content.value;
      if (!text.trim() || !name.reportValidity()) return;
      status.textContent = "Sending…";
      try {
        const speaker = name.value.trim();
        const posted = await api("POST", `/sessions/${seg(this.sessionId)}/messages`, {
          role: role.value,
          content: text,
          ...(speaker ? { name: speaker } : {}),
        });
        content.value = "";
        status.textContent = posted.driftEvaluationEnqueued
          ? "Sent; a heartbeat drift evaluation was enqueued."
          : "Sent.";
        await this.onSent();
      } catch (error) {
        status.textContent = "";
        this.fail(error);
      }
    });
    return form;
  }

  clear() {
    replace(this.list);
  }

  /**
   * Draw a topic's messages. `found` ({topicId, messageId, scrollPending}, or null) is
   * highlighted, and scrolled to once; otherwise the list follows the newest message
   * unless the reader scrolled up in the same topic.
   */
  render(topic, messages, { active, found }) {
    this.title.textContent = `Thread · ${topic.title || "Untitled topic"}`;
    this.note.textContent = active
      ? "The active topic: new messages go here."
      : "A closed topic. New messages go to the active topic.";
    const list = this.list;
    const sameTopic = this.topicId === topic.id;
    const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
    this.topicId = topic.id;
    replace(
      list,
      messages.length
        ? messages.map((m) => messageItem(m, found))
        : h("li", { class: "muted empty" }, "No messages in this topic yet."),
    );
    const target =
      found?.scrollPending && topic.id === found.topicId
        ? list.querySelector(`[data-message-id="${CSS.escape(found.messageId)}"]`)
        : null;
    if (target) {
      found.scrollPending = false; // once: later refreshes follow the newest again
      list.scrollTop += target.getBoundingClientRect().top - list.getBoundingClientRect().top - 8;
    } else if (atBottom || !sameTopic) {
      list.scrollTop = list.scrollHeight; // follow the newest
    }
  }
}

function messageItem(message, found) {
  const tool = message.role === "tool";
  const label = tool ? `tool${message.toolName ? ` · ${message.toolName}` : ""}` : message.role;
  const isFound = found && String(message.id) === found.messageId;
  return h(
    "li",
    {
      class: `msg msg-${message.role}`,
      "data-message-id": message.id,
      "data-found": isFound ? "true" : null,
    },
    h(
      "div",
      { class: "msg-head" },
      h("span", { class: "role" }, label),
      message.name ? h("span", { class: "speaker" }, message.name) : null,
      tool && message.toolCallId ? h("code", { class: "call-id" }, message.toolCallId) : null,
      h("time", { datetime: message.createdAt }, formatTime(message.createdAt)),
    ),
    h(tool ? "pre" : "div", { class: "msg-body" }, message.content),
  );
}
