// Seed 003's delegations in the console page: the person hands an objective to one agent, or
// to several at once, and each agent's answer (or its timeout) is shown as it comes. The gate
// tells the person's timeline about each call as it happens (app.js's call lines, seed 004's
// "person-alice calling gpt with task: ..."); this adds each answer's own text and status.
// Uses app.js's `app`, `$`, `el` and `renderEnding`; textContent only, like app.js.
"use strict";

function delegationFigures(d) {
  const figures = [];
  if (typeof d.tokens === "number" && d.status !== "timeout" && d.status !== "pending") figures.push(`${d.tokens} tokens`);
  if (typeof d.durationMs === "number") figures.push(`${Math.round(d.durationMs / 100) / 10}s`);
  return figures.length ? ` (${figures.join(", ")})` : "";
}

function renderDelegations() {
  const summary = app.view.summary;
  const timeline = $("timeline");
  for (const old of timeline.querySelectorAll(".delegation")) old.remove();
  const delegations = summary.delegations || [];
  for (const d of delegations) {
    const item = el("li", `turn delegation ${d.status}`);
    item.dataset.requestId = d.requestId;
    const bubble = el("div", "bubble");
    const head = el("div", "head");
    head.append(el("span", "speaker", d.target), el("span", "chip", String(d.status).toUpperCase()));
    head.append(el("span", "muted figures", delegationFigures(d).trim()));
    bubble.append(head, el("div", "message", d.status === "pending" ? "working on it…" : d.result));
    item.append(el("div", "avatar", String(d.target).slice(0, 1)), bubble);
    timeline.append(item);
  }
  if (summary.state === "completed" || summary.state === "failed") {
    const succeeded = delegations.filter((d) => d.status === "success").length;
    renderEnding(`${succeeded} of ${delegations.length} agents answered successfully.`, summary.state === "completed");
  }
}

function onDelegationResult(params) {
  refreshList();
  if (!app.view || app.view.sessionId !== params.sessionId || !app.view.summary) return;
  app.view.summary = { ...app.view.summary, ...params.session };
  renderDelegations();
  renderStatus();
}
