// The home page's Re-evaluations card: the org's campaigns with their progress, read
// again while one runs.

import { api } from "./api.js";
import { formatTime, h, plural, replace, shortId } from "./dom.js";

// While a campaign runs, its progress is read again this often (while the list is shown).
const REEVALUATIONS_REFRESH_MS = 3000;

export function reevaluationsCard({ onUnauthorized }) {
  const list = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  const card = h(
    "section",
    { class: "card", "aria-labelledby": "reevaluations-heading" },
    h("h2", { id: "reevaluations-heading" }, "Re-evaluations"),
    list,
  );
  loadReevaluations(list, onUnauthorized);
  return card;
}

async function loadReevaluations(container, onUnauthorized) {
  try {
    const body = await api("GET", "/reevaluations");
    const campaigns = body.reevaluations ?? [];
    replace(
      container,
      campaigns.length
        ? h("ul", { class: "plain reevaluation-list" }, campaigns.map(reevaluationRow))
        : h("p", { class: "muted" }, "No re-evaluations yet: POST /agents-api/reevaluations starts one."),
    );
    if (campaigns.some((c) => c.state === "running")) {
      const again = () => container.isConnected && loadReevaluations(container, onUnauthorized);
      setTimeout(again, REEVALUATIONS_REFRESH_MS);
    }
  } catch (error) {
    if (error.status === 401) return onUnauthorized();
    replace(container, h("p", { class: "error" }, error.message));
  }
}

function reevaluationRow(campaign) {
  const settled = campaign.done + campaign.failed;
  const scope = [campaign.agentId, campaign.userId].filter(Boolean).join(" / ");
  return h(
    "li",
    { "data-reevaluation-id": campaign.id, "data-state": campaign.state },
    h(
      "div",
      { class: "head-row" },
      h("span", { class: `pill reevaluation-${campaign.state}` }, campaign.state),
      h(
        "span",
        { class: "small" },
        `${settled} / ${plural(campaign.total, "topic")}`,
        campaign.failed ? h("span", { class: "error" }, ` · ${campaign.failed} failed`) : null,
      ),
    ),
    h("progress", {
      max: Math.max(campaign.total, 1),
      value: campaign.total ? settled : 1,
      "aria-label": `Re-evaluation ${shortId(campaign.id)}: ${settled} of ${campaign.total}`,
    }),
    h(
      "span",
      { class: "muted small" },
      `${scope || "every agent and user"} · started ${formatTime(campaign.createdAt)}`,
    ),
  );
}
