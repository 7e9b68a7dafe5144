// The driftless console: sign-in, routing (History API), the scope/session picker and
// the exit triggers of R27. No build step: plain ES modules served from /console/static/.

import { ApiError, api, auth, scopeQuery, sendExitTrigger, seg } from "./api.js";
import { formatTime, h, plural, replace, shortId } from "./dom.js";
import { reevaluationsCard } from "./reevaluations.js";
import { searchBox } from "./search.js";
import { SessionView } from "./session.js";

const view = document.getElementById("view");
const signIn = document.getElementById("signin");
const signInForm = document.getElementById("signin-form");
const signInError = document.getElementById("signin-error");
const signOut = document.getElementById("sign-out");
const alertBox = document.getElementById("alert");

let sessionView = null; // the open SessionView, if the route is a session

// --- messages ------------------------------------------------------------------------

let alertTimer = null;

function showError(error) {
  const message = error instanceof Error ? error.message : String(error);
  replace(
    alertBox,
    h("span", {}, message),
    h("button", { type: "button", class: "link", onclick: hideError, "aria-label": "Dismiss" }, "×"),
  );
  alertBox.hidden = false;
  clearTimeout(alertTimer);
  alertTimer = setTimeout(hideError, 12_000);
}

function hideError() {
  alertBox.hidden = true;
}

// --- routing ---------------------------------------------------------------------------

function parseRoute() {
  const path = location.pathname.replace(/\/+$/, "");
  const match = path.match(/^\/console\/sessions\/([^/]+)$/);
  const query = new URLSearchParams(location.search);
  if (match) {
    // ?topic=<id>&message=<id>: reveal that topic (and message), e.g. a search result's.
    const reveal = query.get("topic")
      ? { topicId: query.get("topic"), messageId: query.get("message") }
      : null;
    return { name: "session", sessionId: decodeURIComponent(match[1]), reveal };
  }
  return { name: "home", agentId: query.get("agentId"), userId: query.get("userId") };
}

export function navigate(url, { replaceState = false } = {}) {
  if (replaceState) history.replaceState(null, "", url);
  else history.pushState(null, "", url);
  route();
}

/** Leave the open session view (R27: navigation, or the page going away). */
function leaveSession(trigger) {
  if (!sessionView) return;
  const { sessionId } = sessionView;
  sessionView.close();
  sessionView = null;
  if (trigger) sendExitTrigger(sessionId, trigger);
}

function route() {
  const next = parseRoute();
  if (sessionView && (next.name !== "session" || next.sessionId !== sessionView.sessionId)) {
    leaveSession("navigation");
  }
  if (!auth.key) {
    showSignIn();
    return;
  }
  signIn.hidden = true;
  signOut.hidden = false;
  if (next.name === "session") {
    if (sessionView) {
      if (next.reveal) sessionView.reveal(next.reveal); // already showing it
      return;
    }
    sessionView = new SessionView({
      sessionId: next.sessionId,
      reveal: next.reveal,
      onError: showError,
      onUnauthorized: unauthorized,
      onExitTrigger: (trigger) => sendExitTrigger(next.sessionId, trigger),
    });
    replace(view, sessionView.element);
    sessionView.mount();
    window.scrollTo(0, 0);
  } else {
    renderHome(next);
  }
}

// In-app links: <a data-link href="/console/...">.
document.addEventListener("click", (event) => {
  const link = event.target.closest("a[data-link]");
  if (!link || event.defaultPrevented || event.button !== 0) return;
  if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  event.preventDefault();
  // A link to the page on screen opens it again, as the browser would (a search result
  // clicked twice reveals its topic again), without a second history entry.
  navigate(link.href, { replaceState: link.href === location.href });
});

window.addEventListener("popstate", route);

// --- exit triggers (R27) ----------------------------------------------------------------

window.addEventListener("pagehide", () => leaveSession("navigation"));

window.addEventListener("pageshow", (event) => {
  if (event.persisted) route(); // back from the bfcache: reopen the session view
});

document.addEventListener("visibilitychange", () => {
  if (!sessionView) return;
  if (document.visibilityState === "hidden") sendExitTrigger(sessionView.sessionId, "visibility");
  else sessionView.scheduleRefresh();
});

// --- sign-in -------------------------------------------------------------------------------

function showSignIn(message) {
  replace(view);
  signOut.hidden = true;
  signIn.hidden = false;
  signInError.textContent = message ?? "";
  signInError.hidden = !message;
  document.title = "Sign in · driftless console";
  signInForm.elements["api-key"].focus();
}

function unauthorized() {
  leaveSession(null);
  auth.clear();
  showSignIn("The API key was not accepted (unknown or revoked). Sign in again.");
}

signInForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  const input = signInForm.elements["api-key"];
  const key = input.value.trim();
  if (!key) return;
  const button = signInForm.querySelector("button");
  button.disabled = true;
  auth.set(key);
  try {
    await api("GET", "/scopes"); // proves the key
    input.value = "";
    hideError();
    route();
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      auth.clear();
      showSignIn(`Sign-in failed: ${error.message}`);
    } else {
      route(); // the key may be fine; the page shows what went wrong
      showError(error);
    }
  } finally {
    button.disabled = false;
  }
});

signOut.addEventListener("click", () => {
  leaveSession("navigation");
  auth.clear();
  navigate("/console");
});

// --- home: scopes and their sessions ------------------------------------------------------

async function renderHome({ agentId, userId }) {
  document.title = "driftless console";
  const scopeSelected = Boolean(agentId && userId);
  const scopes = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  const sessions = h("div", {});
  const grid = h(
    "div",
    { class: "grid home" },
    h(
      "section",
      { class: "card", "aria-labelledby": "scopes-heading" },
      h("h1", { id: "scopes-heading" }, "Agents and users"),
      scopes,
    ),
    h(
      "section",
      { class: "card", "aria-labelledby": "sessions-heading" },
      h(
        "h2",
        { id: "sessions-heading" },
        scopeSelected ? `Sessions of ${agentId} / ${userId}` : "Sessions",
      ),
      sessions,
    ),
    scopeSelected ? searchCard(agentId, userId) : null,
    newSessionCard(agentId, userId),
    reevaluationsCard({ onUnauthorized: unauthorized }),
  );
  replace(view, grid);

  if (scopeSelected) loadSessions(sessions, agentId, userId);
  else replace(sessions, h("p", { class: "muted" }, "Pick an agent and user to list their sessions."));

  try {
    const body = await api("GET", "/scopes");
    if (!grid.isConnected) return;
    const list = body.scopes ?? [];
    replace(
      scopes,
      list.length
        ? h(
            "ul",
            { class: "plain scope-list" },
            list.map((s) => {
              const current = s.agentId === agentId && s.userId === userId;
              return h(
                "li",
                {},
                h(
                  "a",
                  {
                    href: `/console?${scopeQuery(s.agentId, s.userId)}`,
                    "data-link": "",
                    class: `scope${current ? " selected" : ""}`,
                    "aria-current": current ? "true" : null,
                  },
                  h("strong", {}, s.agentId),
                  " / ",
                  h("strong", {}, s.userId),
                  h(
                    "span",
                    { class: "muted small" },
                    ` ${plural(s.sessions, "session")} · last active ${formatTime(s.lastActivityAt)}`,
                  ),
                ),
              );
            }),
          )
        : h("p", { class: "muted" }, "No sessions in this org yet. Start one below."),
    );
  } catch (error) {
    if (error.status === 401) return unauthorized();
    replace(scopes, h("p", { class: "error" }, error.message));
  }
}

async function loadSessions(container, agentId, userId) {
  replace(container, h("p", { class: "muted" }, "Loading…"));
  try {
    const body = await api("GET", `/sessions?${scopeQuery(agentId, userId)}`);
    const list = body.sessions ?? [];
    replace(
      container,
      list.length
        ? h(
            "ul",
            { class: "plain session-list" },
            list.map((s) =>
              h(
                "li",
                {},
                h(
                  "a",
                  { href: `/console/sessions/${seg(s.id)}`, "data-link": "", "data-session-id": s.id },
                  `Session ${shortId(s.id)}`,
                ),
                h("span", { class: "muted small" }, ` started ${formatTime(s.createdAt)}`),
              ),
            ),
          )
        : h("p", { class: "muted" }, "No sessions for this agent and user."),
    );
  } catch (error) {
    if (error.status === 401) return unauthorized();
    replace(container, h("p", { class: "error" }, error.message));
  }
}

function searchCard(agentId, userId) {
  return h(
    "section",
    { class: "card", "aria-labelledby": "search-heading" },
    h("h2", { id: "search-heading" }, `Search ${agentId} / ${userId}`),
    searchBox({ scope: () => ({ agentId, userId }), onUnauthorized: unauthorized }),
  );
}

function newSessionCard(agentId, userId) {
  const agent = h("input", { name: "agentId", required: true, value: agentId ?? "", autocomplete: "off" });
  const user = h("input", { name: "userId", required: true, value: userId ?? "", autocomplete: "off" });
  const open = h("input", { name: "sessionId", required: true, autocomplete: "off", placeholder: "session id" });
  return h(
    "section",
    { class: "card", "aria-labelledby": "new-session-heading" },
    h("h2", { id: "new-session-heading" }, "Start or open a session"),
    h(
      "form",
      {
        class: "stack",
        onsubmit: async (event) => {
          event.preventDefault();
          try {
            const session = await api("POST", "/sessions", {
              agentId: agent.value.trim(),
              userId: user.value.trim(),
            });
            navigate(`/console/sessions/${seg(session.id)}`);
          } catch (error) {
            if (error.status === 401) unauthorized();
            else showError(error);
          }
        },
      },
      h("label", {}, "Agent id", agent),
      h("label", {}, "User id", user),
      h("button", { type: "submit" }, "New session"),
    ),
    h(
      "form",
      {
        class: "stack",
        onsubmit: (event) => {
          event.preventDefault();
          if (open.value.trim()) navigate(`/console/sessions/${seg(open.value.trim())}`);
        },
      },
      h("label", {}, "Session id", open),
      h("button", { type: "submit" }, "Open"),
    ),
  );
}

route();
