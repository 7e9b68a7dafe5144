// The Durable facts card of the session view: the scope's facts document (an agent and a
// user share it across sessions), each key edited or deleted in place, new keys added.

import { api, downloadExport, scopeQuery, seg } from "./api.js";
import { h, replace } from "./dom.js";

function parse(text) {
  try {
    return JSON.parse(text);
  } catch {
    return text; // plain text is stored as a string
  }
}

export class FactsPane {
  /**
   * scope() is the session on screen ({agentId, userId}), or null before it is read;
   * onChanged() runs after a write; fail(error) reports; isClosed() says the view is gone.
   */
  constructor({ scope, onChanged, fail, isClosed }) {
    this.scope = scope;
    this.onChanged = onChanged;
    this.fail = fail;
    this.isClosed = isClosed;
    this.body = h("div", { class: "facts" }, h("p", { class: "muted" }, "Loading…"));
    this.element = h(
      "section",
      { class: "card card-facts", "aria-labelledby": "facts-heading" },
      h("h2", { id: "facts-heading" }, "Durable facts"),
      this.body,
    );
  }

  /** True while the reader is in the card (a refresh must not redraw under their typing). */
  hasFocus() {
    return this.body.contains(document.activeElement);
  }

  path(key) {
    const { agentId, userId } = this.scope();
    const query = scopeQuery(agentId, userId);
    return key === undefined ? `/facts?${query}` : `/facts/${seg(key)}?${query}`;
  }

  async load() {
    if (!this.scope()) return;
    try {
      const body = await api("GET", this.path());
      if (!this.isClosed()) this.render(body.facts ?? {});
    } catch (error) {
      this.fail(error);
    }
  }

  async save(key, text) {
    try {
      const body = await api("PUT", this.path(), { [key]: parse(text) });
      this.render(body.facts ?? {}, key);
      this.onChanged();
    } catch (error) {
      this.fail(error);
    }
  }

  async remove(key) {
    try {
      await api("DELETE", this.path(key));
      await this.load();
      this.onChanged();
    } catch (error) {
      this.fail(error);
    }
  }

  async export() {
    const { agentId, userId } = this.scope();
    try {
      await downloadExport(agentId, userId);
    } catch (error) {
      this.fail(error);
    }
  }

  /** Values typed into rows and not saved yet, by key: a refresh (a write here, a live
   * event) must not wipe what the user is typing. */
  typedValues() {
    const typed = new Map();
    for (const row of this.body.querySelectorAll("li.fact")) {
      const input = row.querySelector("input");
      if (input && input.value !== input.defaultValue) typed.set(row.dataset.factKey, input.value);
    }
    return typed;
  }

  render(facts, saved = undefined) {
    const typed = this.typedValues();
    typed.delete(saved); // the key just saved shows what the server stored
    const focused = this.body.contains(document.activeElement)
      ? document.activeElement.closest("li.fact")?.dataset.factKey
      : undefined;
    const rows = Object.entries(facts).map(([key, value]) => this.row(key, value));
    for (const row of rows) {
      const input = row.querySelector("input");
      const key = row.dataset.factKey;
      if (typed.has(key)) input.value = typed.get(key);
      if (key === focused && key !== saved) queueMicrotask(() => input.focus());
    }
    const { agentId, userId } = this.scope();
    replace(
      this.body,
      h(
        "p",
        { class: "muted small row" },
        `Scope ${agentId} / ${userId}`,
        h(
          "button",
          {
            type: "button",
            class: "export",
            title: "Download everything this scope holds (the export format, NDJSON)",
            onclick: () => this.export(),
          },
          "Export",
        ),
      ),
      rows.length
        ? h("ul", { class: "plain fact-list" }, rows)
        : h("p", { class: "muted" }, "No facts yet."),
      this.addForm(),
    );
  }

  row(key, value) {
    const input = h("input", {
      type: "text",
      value: JSON.stringify(value),
      "aria-label": `Value of ${key} (JSON)`,
    });
    return h(
      "li",
      { class: "fact", "data-fact-key": key },
      h("code", { class: "fact-key" }, key),
      h(
        "form",
        {
          class: "row",
          onsubmit: (event) => {
            event.preventDefault();
            this.save(key, input.value);
          },
        },
        input,
        h("button", { type: "submit" }, "Save"),
        h(
          "button",
          {
            type: "button",
            class: "danger",
            "aria-label": `Delete ${key}`,
            onclick: () => this.remove(key),
          },
          "Delete",
        ),
      ),
    );
  }

  addForm() {
    const newKey = h("input", {
      type: "text",
      name: "fact-key",
      placeholder: "key",
      required: true,
      "aria-label": "New fact key",
    });
    const newValue = h("input", {
      type: "text",
      name: "fact-value",
      placeholder: "value (JSON or text)",
      required: true,
      "aria-label": "New fact value",
    });
    return h(
      "form",
      {
        class: "row add-fact",
        onsubmit: (event) => {
          event.preventDefault();
          if (newKey.value.trim()) this.save(newKey.value.trim(), newValue.value);
        },
      },
      newKey,
      newValue,
      h("button", { type: "submit" }, "Add"),
    );
  }
}
