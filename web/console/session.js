// The session view: its head (scope, live badge, a search over the scope whose results
// reveal their topic here) and five cards, each drawn by its own module: topics.js (the
// list and the memory toggle), thread.js (messages and composer), detail.js (summary,
// notes, evaluations), context.js (the context preview), facts.js (durable facts).
// This module holds the state they share: the session read last, the selection, the
// revealed topic. Everything shown is re-read from the API; live events only say
// "something changed".

import { api, auth, scopeQuery, seg } from "./api.js";
import { ContextPane } from "./context.js";
import { DetailPane, readDetail } from "./detail.js";
import { formatTime, h, plural, replace, shortId } from "./dom.js";
import { FactsPane } from "./facts.js";
import { openLiveStream } from "./live.js";
import { searchBox } from "./search.js";
import { ThreadPane, readThread } from "./thread.js";
import { TopicsPane } from "./topics.js";

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
    const fail = (error) => this.fail(error);
    this.backLink = h("a", { href: "/console", "data-link": "", class: "back" }, "← All sessions");
    this.title = h("h1", {}, `Session ${shortId(this.sessionId)}`);
    this.meta = h("p", { class: "muted meta" }, "Loading…");
    this.search = searchBox({
      scope: () => this.session && { agentId: this.session.agentId, userId: this.session.userId },
      sessionId: this.sessionId,
      onUnauthorized: () => this.onUnauthorized(),
    });
    this.liveBadge = h("span", { class: "live", "data-live": "connecting", role: "status" }, "connecting…");

    this.topics = new TopicsPane({
      onOpen: (topicId) => this.select(topicId),
      onCycle: (topicId) => this.cycle(topicId),
    });
    this.thread = new ThreadPane({
      sessionId: this.sessionId,
      onSent: () => {
        this.followActive = true;
        return this.refresh();
      },
      fail,
    });
    this.detail = new DetailPane();
    this.context = new ContextPane();
    this.facts = new FactsPane({
      scope: () => this.session,
      onChanged: () => this.scheduleRefresh(),
      fail,
      isClosed: () => this.closed,
    });

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
        this.topics.element,
        this.thread.element,
        this.detail.element,
        this.context.element,
        this.facts.element,
      ),
    );
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
    if (revealed) this.topics.scrollTo(this.found.topicId);
    const jobs = [this.loadThread(current), this.loadDetail(current), this.loadContext(current)];
    if (firstLoad || !this.facts.hasFocus()) jobs.push(this.facts.load());
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

  // --- topics: selection, reveal, memory toggle ----------------------------------------

  renderTopics() {
    this.topics.render(this.session.topics, {
      activeTopicId: this.session.activeTopicId,
      selectedTopicId: this.selectedTopicId,
      foundTopicId: this.found?.topicId,
      cycling: this.cycling,
    });
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
    this.topics.scrollTo(this.found.topicId);
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

  // --- the cards that follow the selection ----------------------------------------------

  async loadThread(current) {
    const topic = this.selectedTopic;
    if (!topic) {
      this.thread.clear();
      return;
    }
    try {
      const messages = await readThread(this.sessionId, topic.id);
      if (!current() || topic.id !== this.selectedTopicId) return;
      const active = topic.id === this.session.activeTopicId;
      this.thread.render(topic, messages, { active, found: this.found });
    } catch (error) {
      if (current()) this.fail(error);
    }
  }

  async loadDetail(current) {
    const topic = this.selectedTopic;
    if (!topic) {
      this.detail.empty();
      return;
    }
    try {
      const detail = await readDetail(topic.id);
      if (!current() || topic.id !== this.selectedTopicId) return;
      this.detail.render(this.selectedTopic, detail);
    } catch (error) {
      if (current()) this.fail(error);
    }
  }

  async loadContext(current) {
    try {
      const context = await api("GET", `/sessions/${seg(this.sessionId)}/context`);
      if (current()) this.context.render(context);
    } catch (error) {
      if (current()) this.fail(error);
    }
  }
}
