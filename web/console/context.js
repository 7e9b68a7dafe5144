// The Context preview card of the session view: what the agent's next call would get
// (R1's three layers), each with its token count, folded until opened.

import { h, plural, pretty, replace } from "./dom.js";

export class ContextPane {
  constructor() {
    this.body = h("div", { class: "context" }, h("p", { class: "muted" }, "Loading…"));
    this.element = h(
      "section",
      { class: "card card-context", "aria-labelledby": "context-heading" },
      h("h2", { id: "context-heading" }, "Context preview"),
      this.body,
    );
  }

  render(context) {
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
      this.body,
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
}
