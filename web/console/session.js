// The session view: topics with the memory toggle, the thread, the selected topic's
// summary/notes/evaluations, the context preview, the scope's durable facts and a
// search over the scope (search.js) whose results reveal their topic here.
// Everything shown is re-read from the API; live events only say "something changed".

import { api, auth, scopeQuery, seg } from "./api.js";
import { brainIcon, formatTime, h, plural, pretty, replace, shortId } from "./dom.js";
import { openLiveStream } from "./live.js";
import { searchBox } from "./search.js";

const STATE_NAMES = { none: "none", promoted: "promoted", deprecated: "deprecated" };
const MESSAGE_PAGE = 1000;
const MAX_MESSAGE_PAGES = 20;

export function toggleLabel(topic) {
  const state = STATE_NAMES[topic.memoryState] ?? topic.memoryState;
  const by = topic.memoryStateSetBy ? ` (set by ${topic.memoryStateSetBy})` : "";
  return `Memory: ${state}${by}. Activate to change.`;
}

export class SessionView {
  constructor({ sessionId, reveal = null, onError, onUnauthorized, onExitTrigger }) {
    this.sessionId = sessionId;
    this.onError = onError;
    this.onUnauthorized = onUnauthorized;
    this.onExitTrigger = onExitTrigger;
    this.session = null;
    this.selectedTopicId = null;
    this.followActive = true; // the selection follows the active topic (e.g. after a fork)
    this.pendingReveal = reveal; // {topicId, messageId}: to select once the session is read
    this.found = null; // the revealed topic (and message), highlighted until another is picked
    this.generation = 0;
    this.cycling = new Set();
    this.refreshTimer = null;
    this.stream = null;
    this.closed = false;
    this.element = this.build();
  }

  // --- skeleton -------------------------------------------------------------------

  build() {
    this.backLink = h("a", { href: "/console", "data-link": "", class: "back" }, "← All sessions");
    this.title = h("h1", {}, `Session ${shortId(this.sessionId)}`);
    this.meta = h("p", { class: "muted meta" }, "Loading…");
    this.search = searchBox({
      scope: () => this.session && { agentId: this.session.agentId, userId: this.session.userId },
      sessionId: this.sessionId,
      onUnauthorized: () => this.onUnauthorized(),
    });
    this.liveBadge = h("span", { class: "live", "data-live": "connecting", role: "status" }, "connecting…");

    this.topicList = h("ul", { class: "topic-list", "aria-label": "Topics of this session" });
    this.threadTitle = h("h2", { id: "thread-heading" }, "Thread");
    this.threadList = h("ol", { class: "messages", tabindex: "0", "aria-label": "Messages" });
    this.threadNote = h("p", { class: "muted small" });
    this.composer = this.buildComposer();
    this.detail = h("div", { class: "detail" }, h("p", { class: "muted" }, "Loading…"));
    this.detailTitle = h("h2", { id: "topic-heading" }, "Topic");
    this.context = h("div", { class: "context" }, h("p", { class: "muted" }, "Loading…"));
    this.facts = h("div", { class: "facts" }, h("p", { class: "muted" }, "Loading…"));

    return h(
      "div",
      { class: "session-view" },
      h(
        "section",
        { class: "card head" },
        h("div", { class: "head-row" }, this.backLink, this.liveBadge),
        this.title,
        this.meta,
        this.search,
      ),
      h(
        "div",
        { class: "session-grid" },
        h(
          "section",
          { class: "card card-topics", "aria-labelledby": "topics-heading" },
          h("h2", { id: "topics-heading" }, "Topics"),
          this.topicList,
        ),
        h(
          "section",
          { class: "card card-thread", "aria-labelledby": "thread-heading" },
          this.threadTitle,
          this.threadNote,
          this.threadList,
          this.composer,
        ),
        h(
          "section",
          { class: "card card-detail", "aria-labelledby": "topic-heading" },
          this.detailTitle,
          this.detail,
        ),
        h(
          "section",
          { class: "card card-context", "aria-labelledby": "context-heading" },
          h("h2", { id: "context-heading" }, "Context preview"),
          this.context,
        ),
        h(
          "section",
          { class: "card card-facts", "aria-labelledby": "facts-heading" },
          h("h2", { id: "facts-heading" }, "Durable facts"),
          this.facts,
        ),
      ),
    );
  }

  buildComposer() {
    const role = h(
      "select",
      { name: "role", "aria-label": "Role" },
      h("option", { value: "user" }, "user"),
      h("option", { value: "assistant" }, "assistant"),
    );
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
      h("div", { class: "row" }, role, h("button", { type: "submit" }, "Send"), status),
    );
    content.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) form.requestSubmit();
    });
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const text = content.value;
      if (!text.trim()) return;
      status.textContent = "Sending…";
      try {
        const posted = await api("POST", `/sessions/${seg(this.sessionId)}/messages`, {
          role: role.value,
          content: text,
        });
        content.value = "";
        status.textContent = posted.driftEvaluationEnqueued
          ? "Sent; a heartbeat drift evaluation was enqueued."
          : "Sent.";
        this.followActive = true;
        await this.refresh();
      } catch (error) {
        status.textContent = "";
        this.fail(error);
      }
    });
    return form;
  }

  // --- life cycle -------------------------------------------------------------------

  mount() {
    this.refresh();
    this.stream = openLiveStream({
      url: `/agents-api/sessions/${seg(this.sessionId)}/events`,
      headers: () => auth.headers(),
      onReady: (reconnected) => {
        this.setLive("live", "live");
        if (reconnected) this.scheduleRefresh(); // events may have been missed meanwhile
      },
      onEvent: (event) => {
        if (event.event === "session") this.scheduleRefresh();
      },
      onLost: () => {
        this.setLive("reconnecting", "reconnecting…");
        this.onExitTrigger("disconnect");
      },
      onFatal: (status) => {
        this.setLive("offline", "offline");
        if (status === 401) this.onUnauthorized();
      },
    });
  }

  /** Stop listening; the caller sends the exit trigger (R27). */
  close() {
    this.closed = true;
    clearTimeout(this.refreshTimer);
    this.stream?.close();
    this.stream = null;
  }

  setLive(state, text) {
    this.liveBadge.dataset.live = state;
    this.liveBadge.textContent = text;
  }

  fail(error) {
    if (error?.name === "AbortError" || this.closed) return;
    if (error?.status === 401) this.onUnauthorized();
    else this.onError(error);
  }

  scheduleRefresh() {
    clearTimeout(this.refreshTimer);
    this.refreshTimer = setTimeout(() => this.refresh(), 100);
  }

  // --- data ---------------------------------------------------------------------------

  get activeTopic() {
    return this.session?.topics.find((t) => t.id === this.session.activeTopicId) ?? null;
  }

  get selectedTopic() {
    return this.session?.topics.find((t) => t.id === this.selectedTopicId) ?? null;
  }

  async refresh() {
    if (this.closed) return;
    const generation = ++this.generation;
    const current = () => generation === this.generation && !this.closed;
    let session;
    try {
      session = await api("GET", `/sessions/${seg(this.sessionId)}`);
    } catch (error) {
      if (!current()) return;
      if (error.status === 404) {
        this.meta.textContent = "This session does not exist (or belongs to another org).";
      }
      this.fail(error);
      return;
    }
    if (!current()) return;
    const firstLoad = this.session === null;
    this.session = session;
    const revealed = this.takeReveal();
    if (!revealed && (this.followActive || !this.selectedTopic)) {
      this.selectedTopicId = session.activeTopicId ?? session.topics.at(-1)?.id ?? null;
      this.followActive = true;
    }
    this.renderHead();
    this.renderTopics();
    if (revealed) this.scrollToFound();
    const jobs = [this.loadThread(current), this.loadDetail(current), this.loadContext(current)];
    if (firstLoad || !this.facts.contains(document.activeElement)) jobs.push(this.loadFacts());
    await Promise.all(jobs);
  }

  renderHead() {
    const s = this.session;
    document.title = `Session ${shortId(s.id)} · driftless console`;
    this.backLink.href = `/console?${scopeQuery(s.agentId, s.userId)}`;
    this.backLink.textContent = `← Sessions of ${s.agentId} / ${s.userId}`;
    replace(
      this.meta,
      h("span", {}, "agent ", h("strong", {}, s.agentId)),
      " · ",
      h("span", {}, "user ", h("strong", {}, s.userId)),
      " · ",
      h("span", {}, `started ${formatTime(s.createdAt)}`),
      " · ",
      h("span", {}, plural(s.topics.length, "topic")),
    );
  }

  // --- topics -------------------------------------------------------------------------

  renderTopics() {
    const focused = document.activeElement;
    const focusTopic = this.topicList.contains(focused)
      ? focused.closest("[data-topic-id]")?.dataset.topicId
      : null;
    const focusRole = focused?.dataset?.role;
    const rows = this.session.topics.map((topic) => this.topicRow(topic));
    replace(
      this.topicList,
      rows.length ? rows : h("li", { class: "muted" }, "No topics yet."),
    );
    if (focusTopic) {
      this.topicList
        .querySelector(`[data-topic-id="${CSS.escape(focusTopic)}"] [data-role="${focusRole}"]`)
        ?.focus();
    }
  }

  topicRow(topic) {
    const active = topic.id === this.session.activeTopicId;
    const selected = topic.id === this.selectedTopicId;
    const toggle = h(
      "button",
      {
        type: "button",
        class: "brain",
        "data-role": "toggle",
        "data-memory-state": topic.memoryState,
        "aria-label": toggleLabel(topic),
        title: toggleLabel(topic),
        "aria-busy": this.cycling.has(topic.id) ? "true" : null,
        onclick: () => this.cycle(topic.id),
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
        onclick: () => this.select(topic.id),
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
        "data-found": topic.id === this.found?.topicId ? "true" : null,
      },
      toggle,
      open,
    );
  }

  select(topicId) {
    this.found = null;
    this.selectedTopicId = topicId;
    this.followActive = topicId === this.session.activeTopicId;
    this.renderTopics();
    const current = () => !this.closed;
    this.loadThread(current);
    this.loadDetail(current);
  }

  /** Select and highlight a topic (and message) found elsewhere, e.g. a search result. */
  reveal({ topicId, messageId = null }) {
    this.pendingReveal = { topicId, messageId };
    if (!this.session) return; // the first read takes it
    if (!this.session.topics.some((t) => t.id === topicId)) {
      this.refresh(); // a topic newer than the list on screen (a fork)
      return;
    }
    this.takeReveal();
    this.renderTopics();
    this.scrollToFound();
    const current = () => !this.closed;
    this.loadThread(current);
    this.loadDetail(current);
  }

  /** Apply the pending reveal to the session just read; false if there is none. */
  takeReveal() {
    const reveal = this.pendingReveal;
    this.pendingReveal = null;
    if (!reveal) return false;
    if (!this.session.topics.some((t) => t.id === reveal.topicId)) {
      this.onError(new Error("That topic is not in this session."));
      return false;
    }
    this.found = { ...reveal, scrollPending: Boolean(reveal.messageId) };
    this.selectedTopicId = reveal.topicId;
    this.followActive = reveal.topicId === this.session.activeTopicId;
    return true;
  }

  scrollToFound() {
    const selector = `[data-topic-id="${CSS.escape(this.found.topicId)}"]`;
    const row = this.topicList.querySelector(selector);
    row?.scrollIntoView({ block: "nearest" });
    row?.querySelector('[data-role="open"]')?.focus({ preventScroll: true });
  }

  async cycle(topicId) {
    if (this.cycling.has(topicId)) return; // one change at a time per topic
    this.cycling.add(topicId);
    this.renderTopics();
    try {
      const topic = await api("POST", `/topics/${seg(topicId)}/memory/cycle`);
      if (this.closed) return;
      this.generation += 1; // a refresh already in flight must not paint the old state
      this.session.topics = this.session.topics.map((t) => (t.id === topic.id ? topic : t));
      this.cycling.delete(topicId);
      this.renderTopics();
      this.scheduleRefresh(); // history, memory block in the context
    } catch (error) {
      this.cycling.delete(topicId);
      this.renderTopics();
      this.fail(error);
    }
  }

  // --- thread -------------------------------------------------------------------------

  async loadThread(current) {
    const topic = this.selectedTopic;
    if (!topic) {
      replace(this.threadList);
      return;
    }
    try {
      const messages = [];
      let afterId = null;
      for (let page = 0; page < MAX_MESSAGE_PAGES; page += 1) {
        const query = new URLSearchParams({ topicId: topic.id, limit: String(MESSAGE_PAGE) });
        if (afterId !== null) query.set("afterId", String(afterId));
        const body = await api("GET", `/sessions/${seg(this.sessionId)}/messages?${query}`);
        messages.push(...body.messages);
        afterId = body.nextAfterId ?? null;
        if (afterId === null) break;
      }
      if (!current() || topic.id !== this.selectedTopicId) return;
      this.renderThread(topic, messages);
    } catch (error) {
      if (current()) this.fail(error);
    }
  }

  renderThread(topic, messages) {
    const active = topic.id === this.session.activeTopicId;
    this.threadTitle.textContent = `Thread · ${topic.title || "Untitled topic"}`;
    this.threadNote.textContent = active
      ? "The active topic: new messages go here."
      : "A closed topic. New messages go to the active topic.";
    const list = this.threadList;
    const sameTopic = this.threadTopicId === topic.id;
    const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
    this.threadTopicId = topic.id;
    replace(
      this.threadList,
      messages.length
        ? messages.map((m) => this.messageItem(m))
        : h("li", { class: "muted empty" }, "No messages in this topic yet."),
    );
    const found =
      this.found?.scrollPending && topic.id === this.found.topicId
        ? list.querySelector(`[data-message-id="${CSS.escape(this.found.messageId)}"]`)
        : null;
    if (found) {
      this.found.scrollPending = false; // once: later refreshes follow the newest again
      list.scrollTop += found.getBoundingClientRect().top - list.getBoundingClientRect().top - 8;
    } else if (atBottom || !sameTopic) {
      list.scrollTop = list.scrollHeight; // follow the newest
    }
  }

  messageItem(message) {
    const tool = message.role === "tool";
    const label = tool
      ? `tool${message.toolName ? ` · ${message.toolName}` : ""}`
      : message.role;
    const found = this.found && String(message.id) === this.found.messageId;
    return h(
      "li",
      {
        class: `msg msg-${message.role}`,
        "data-message-id": message.id,
        "data-found": found ? "true" : null,
      },
      h(
        "div",
        { class: "msg-head" },
        h("span", { class: "role" }, label),
        tool && message.toolCallId ? h("code", { class: "call-id" }, message.toolCallId) : null,
        h("time", { datetime: message.createdAt }, formatTime(message.createdAt)),
      ),
      h(tool ? "pre" : "div", { class: "msg-body" }, message.content),
    );
  }

  // --- the selected topic ---------------------------------------------------------------

  async loadDetail(current) {
    const topic = this.selectedTopic;
    if (!topic) {
      replace(this.detail, h("p", { class: "muted" }, "No topic selected."));
      return;
    }
    const tid = seg(topic.id);
    try {
      const [notes, evaluations, history] = await Promise.all([
        api("GET", `/topics/${tid}/notes`),
        api("GET", `/topics/${tid}/evaluations`),
        api("GET", `/topics/${tid}/history`),
      ]);
      if (!current() || topic.id !== this.selectedTopicId) return;
      this.renderDetail(this.selectedTopic, notes, evaluations.evaluations, history.changes);
    } catch (error) {
      if (current()) this.fail(error);
    }
  }

  renderDetail(topic, notes, evaluations, changes) {
    this.detailTitle.textContent = `Topic · ${topic.title || "Untitled topic"}`;
    const summary = topic.summary
      ? h("p", { class: "summary" }, topic.summary)
      : h("p", { class: "muted" }, "Not summarized yet.");
    const summaryMeta = topic.summarizedAt
      ? `${topic.summarySource ?? "?"} summary · ${formatTime(topic.summarizedAt)}`
      : topic.status === "active"
        ? "Summarized when the topic closes or is evaluated."
        : "Summary pending.";

    const archived = notes.archived ?? [];
    const notesBlock = h(
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

    const sorted = [...evaluations].sort((a, b) => (a.startedAt < b.startedAt ? 1 : -1));
    const evaluationsBlock = sorted.length
      ? h(
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
        )
      : h("p", { class: "muted" }, "No evaluations yet.");

    const changesBlock = changes.length
      ? h(
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
        )
      : null;

    replace(
      this.detail,
      h("h3", {}, "Summary"),
      summary,
      h("p", { class: "muted small" }, summaryMeta),
      h("h3", {}, "Notes"),
      notesBlock,
      h("h3", {}, "Evaluations"),
      evaluationsBlock,
      changesBlock,
    );
  }

  // --- context ----------------------------------------------------------------------

  async loadContext(current) {
    try {
      const context = await api("GET", `/sessions/${seg(this.sessionId)}/context`);
      if (current()) this.renderContext(context);
    } catch (error) {
      if (current()) this.fail(error);
    }
  }

  renderContext(context) {
    const { layers, tokens } = context;
    const stable = layers.stable;
    const layer = (name, key, synopsis, value) =>
      h(
        "details",
        { class: `layer layer-${key}` },
        h(
          "summary",
          {},
          h("strong", {}, name),
          h("span", { class: "tokens" }, `${tokens[key] ?? 0} tokens`),
          synopsis ? h("span", { class: "muted small synopsis" }, synopsis) : null,
        ),
        h("pre", { class: "json" }, pretty(value)),
      );
    replace(
      this.context,
      h(
        "p",
        { class: "context-total" },
        h("strong", {}, `${tokens.total ?? 0} tokens`),
        ` in ${plural(context.messages?.length ?? 0, "message")}`,
      ),
      h(
        "p",
        { class: "small" },
        "Stable prefix hash ",
        h("code", { class: "hash", title: context.stablePrefixHash }, context.stablePrefixHash),
      ),
      layer(
        "Stable",
        "stable",
        `${plural(stable.memory?.entries?.length ?? 0, "memory entry")}, ` +
          `${plural(Object.keys(stable.durableFacts ?? {}).length, "fact")}` +
          (stable.driftResult ? ", a fork" : ""),
        stable,
      ),
      layer(
        "Semi-stable",
        "semiStable",
        `${plural(layers.semiStable.priorTopics?.length ?? 0, "prior topic")}` +
          (layers.semiStable.notes ? ", notes" : ""),
        layers.semiStable,
      ),
      layer(
        "Volatile",
        "volatile",
        plural(layers.volatile.thread?.length ?? 0, "thread message"),
        layers.volatile,
      ),
    );
  }

  // --- durable facts -------------------------------------------------------------------

  factsPath(key) {
    const query = scopeQuery(this.session.agentId, this.session.userId);
    return key === undefined ? `/facts?${query}` : `/facts/${seg(key)}?${query}`;
  }

  async loadFacts() {
    if (!this.session) return;
    try {
      const body = await api("GET", this.factsPath());
      if (!this.closed) this.renderFacts(body.facts ?? {});
    } catch (error) {
      this.fail(error);
    }
  }

  renderFacts(facts) {
    const parse = (text) => {
      try {
        return JSON.parse(text);
      } catch {
        return text; // plain text is stored as a string
      }
    };
    const save = async (key, text) => {
      try {
        const body = await api("PUT", this.factsPath(), { [key]: parse(text) });
        this.renderFacts(body.facts ?? {});
        this.scheduleRefresh();
      } catch (error) {
        this.fail(error);
      }
    };
    const rows = Object.entries(facts).map(([key, value]) => {
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
              save(key, input.value);
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
              onclick: async () => {
                try {
                  await api("DELETE", this.factsPath(key));
                  await this.loadFacts();
                  this.scheduleRefresh();
                } catch (error) {
                  this.fail(error);
                }
              },
            },
            "Delete",
          ),
        ),
      );
    });
    const newKey = h("input", { type: "text", name: "fact-key", placeholder: "key", required: true, "aria-label": "New fact key" });
    const newValue = h("input", { type: "text", name: "fact-value", placeholder: 'value (JSON or text)', required: true, "aria-label": "New fact value" });
    const add = h(
      "form",
      {
        class: "row add-fact",
        onsubmit: (event) => {
          event.preventDefault();
          if (newKey.value.trim()) save(newKey.value.trim(), newValue.value);
        },
      },
      newKey,
      newValue,
      h("button", { type: "submit" }, "Add"),
    );
    replace(
      this.facts,
      h("p", { class: "muted small" }, `Scope ${this.session.agentId} / ${this.session.userId}`),
      rows.length ? h("ul", { class: "plain fact-list" }, rows) : h("p", { class: "muted" }, "No facts yet."),
      add,
    );
  }
}
