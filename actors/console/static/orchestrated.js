// Seed 000's orchestrated sessions in the console page: the timeline in three voices (Local
// Agent drafts, Remote Agent answers, You), each message sent labelled auto-sent, approved,
// edited by you or typed by you; the approval prompt for a draft awaiting its owner; the
// sticky Pause / Resume / Take over; a banner when a limit ends the run. Uses app.js's `app`,
// `$`, `el`, `show` and `call`. Like app.js, every text goes in with textContent only.
"use strict";

const LIMIT_BANNERS = {
  max_turns: "TURN LIMIT REACHED",
  max_duration: "TIME LIMIT REACHED",
  max_failures: "FAILURE LIMIT REACHED",
  max_tokens: "TOKEN BUDGET REACHED",
};
const SENT_LABELS = { auto: "auto-sent", approved: "approved", edited: "edited by you", you: "typed by you" };
const ORCHESTRATED_ENDINGS = { session_completed: "completed", session_failed: "failed", session_canceled: "canceled" };

function turnChip(round) {
  return `Turn ${round}/${app.view.summary.maxRounds}`;
}

function voice(event, name, voiceClass, message) {
  const p = event.payload;
  const turn = el("li", `turn ${voiceClass}`);
  turn.dataset.eventId = event.eventId;
  const bubble = el("div", "bubble");
  const head = el("div", "head");
  const agent = voiceClass === "you" ? null : p.speaker;
  head.append(el("span", "speaker", name), el("span", "chip", turnChip(p.round)));
  if (agent) head.append(el("span", "muted", agent));
  bubble.append(head, el("div", "message", message));
  turn.append(el("div", "avatar", name.slice(0, 1)), bubble);
  return turn;
}

function sentLine(p) {
  const line = el("li", "sent", `→ ${p.speaker} `);
  const sentBy = String(p.sent_by || "");
  line.append(el("span", `label ${sentBy}`, SENT_LABELS[sentBy] || sentBy));
  return line;
}

// The decision on a draft, with what it carried: the edit sent, or the reason for a
// rejection (told to the local agent, and shown here so the timeline says why it redrafted).
function decisionText(p) {
  const words = { approved: "approved the draft", edited: "edited the draft", rejected: "rejected the draft", taken_over: "took over" };
  const text = `${whoDid(p.resolved_by)} ${words[p.decision] || p.decision}`;
  const carried = p.decision === "edited" || p.decision === "rejected" ? String(p.text || "").trim() : "";
  return carried ? `${text}: ${carried}` : `${text}.`;
}

// A send the gate refused never reached the shared agent: its line says so instead of how it
// was sent (auto-sent, approved, ...), with the gate's words.
function refusedSend(p) {
  let line = app.view.lastSent;
  if (!line) { // the send itself was not seen (a page opened mid-session): say it anyway
    line = el("li", "sent", `→ ${p.speaker} `);
    line.append(el("span", "label"));
    $("timeline").append(line);
  }
  const label = line.querySelector(".label");
  label.className = "label refused";
  label.textContent = "refused by the gate";
  line.append(el("span", "refusal", ` ${p.code}: ${p.message}`));
  app.view.lastSent = null;
}

function renderOrchestrated(event) {
  const view = app.view;
  const summary = view.summary;
  const p = event.payload || {};
  const timeline = $("timeline");
  if (p.state) summary.phase = p.state;
  if (typeof p.round === "number") summary.round = Math.max(summary.round, p.round);
  if (summary.state === "created" || summary.state === "submitted") summary.state = "running";
  switch (event.eventType) {
    case "session_created":
      summary.mode = "orchestrate";
      summary.goal = p.objective || summary.goal;
      summary.maxRounds = p.max_turns || summary.maxRounds;
      summary.orchestration = { localAgent: p.local_agent, sharedAgent: p.shared_agent, mode: p.orchestration_mode, maxTurns: p.max_turns };
      timeline.append(el("li", "system",
        `Local Agent: ${p.local_agent} · Remote Agent: ${p.shared_agent} · ${p.orchestration_mode} · up to ${p.max_turns} turns.`));
      break;
    case "step_started":
      if (p.role === "local_agent") $("waiting").textContent = `Local Agent (${p.speaker}) is drafting (turn ${p.round})…`;
      if (p.role === "outbound") {
        if (p.sent_by === "you" && !(p.attempt > 1)) timeline.append(voice(event, "You", "you", p.message));
        view.lastSent = sentLine(p);
        timeline.append(view.lastSent);
        $("waiting").textContent = `Remote Agent (${p.speaker}) is answering…`;
      }
      break;
    case "step_completed":
      $("waiting").textContent = "";
      if (p.role === "local_agent") timeline.append(voice(event, "Local Agent", "local", p.message));
      else if (p.role === "remote_agent") timeline.append(voice(event, "Remote Agent", "remote", p.message));
      else if (p.role === "failure" && p.refused_by === "gate" && p.phase === "remote") refusedSend(p);
      else if (p.role === "failure" && p.refused_by === "gate") {
        timeline.append(el("li", "system refused", `The gate refused the call to ${p.speaker}: ${p.code}: ${p.message}`));
      } else if (p.role === "failure") timeline.append(el("li", "system", `${p.speaker} failed (${p.failures} in a row): ${p.code}: ${p.message}`));
      break;
    case "approval_requested":
      view.pending.set(p.approval_id, { approvalId: p.approval_id, draft: p.draft, reasons: p.reasons || [] });
      $("waiting").textContent = "waiting for your decision";
      break;
    case "approval_resolved":
      view.pending.delete(p.approval_id);
      timeline.append(el("li", `decision ${p.decision}`, decisionText(p)));
      if ($("waiting").textContent === "waiting for your decision") $("waiting").textContent = "";
      break;
    case "session_paused":
      timeline.append(el("li", "system paused", pauseLine(p)));
      $("waiting").textContent = "";
      break;
    case "session_resumed":
      timeline.append(el("li", "system resumed", resumeLine(p)));
      break;
    case "session_completed":
    case "session_failed":
    case "session_canceled": {
      summary.state = ORCHESTRATED_ENDINGS[event.eventType];
      summary.stopReason = p.stopReason;
      view.pending.clear();
      const banner = LIMIT_BANNERS[p.stopReason];
      if (banner) {
        $("banner").textContent = `${banner}: ${p.reason || ""}`;
        show("banner", true);
      }
      renderEnding(orchestratedEnding(p), event.eventType === "session_completed");
      break;
    }
    default:
      break;
  }
}

// ---- the owner's controls -----------------------------------------------------------------

function renderSteering(summary) {
  const orchestrated = summary.mode === "orchestrate";
  const running = orchestrated && !ENDED.has(summary.state) && summary.state !== "created";
  const paused = summary.phase === "paused";
  show("pause", running && !paused);
  show("resume", running && paused);
  show("take-over", running && !paused);
  if (!running) show("take-over-box", false);
  renderApproval(running && !paused); // nothing is sent while paused: decide after Resume
}

function currentApproval() {
  if (!app.view) return null;
  let last = null;
  for (const approval of app.view.pending.values()) last = approval;
  return last && last.approvalId !== app.view.deciding ? last : null;
}

function renderApproval(running) {
  const approval = running ? currentApproval() : null;
  const prompt = $("approval");
  if (!approval) {
    show("approval", false);
    prompt.dataset.approvalId = "";
    return;
  }
  if (prompt.dataset.approvalId !== approval.approvalId) {
    prompt.dataset.approvalId = approval.approvalId;
    $("approval-draft").textContent = approval.draft;
    $("approval-reasons").textContent = approval.reasons.length ? `(${approval.reasons.join("; ")})` : "";
    $("edit-text").value = approval.draft;
    $("reject-reason").value = "";
    show("edit-box", false);
    show("reject-box", false);
  }
  show("approval", true);
}

async function steer(method, params) {
  $("control-error").textContent = "";
  try {
    return await call(method, { sessionId: app.view.sessionId, ...params });
  } catch (error) {
    $("control-error").textContent = error.message;
    return null;
  }
}

async function decide(decision, extra) {
  const approval = currentApproval();
  if (!approval) return;
  app.view.deciding = approval.approvalId;
  renderStatus();
  const answer = await steer("ApproveAction", { approvalId: approval.approvalId, decision, ...extra });
  if (!answer && app.view) {
    app.view.deciding = null;
    renderStatus();
  }
}

function onSessionError(params) {
  if (!app.view || app.view.sessionId !== params.sessionId) return;
  $("control-error").textContent = `Refused: ${params.code}: ${params.message}`;
}

function wireOrchestrated() {
  $("approve").addEventListener("click", () => decide("approved", {}));
  $("edit").addEventListener("click", () => {
    show("reject-box", false);
    show("edit-box", $("edit-box").hidden);
  });
  $("reject").addEventListener("click", () => {
    show("edit-box", false);
    show("reject-box", $("reject-box").hidden);
  });
  $("send-edit").addEventListener("click", () => decide("edited", { text: $("edit-text").value }));
  $("send-reject").addEventListener("click", () => decide("rejected", { reason: $("reject-reason").value }));
  $("pause").addEventListener("click", () => steer("PauseTask", {}));
  $("resume").addEventListener("click", () => steer("ResumeTask", {}));
  $("take-over").addEventListener("click", () => show("take-over-box", $("take-over-box").hidden));
  $("send-take-over").addEventListener("click", async () => {
    if (await steer("TakeOverTask", { text: $("take-over-text").value })) {
      $("take-over-text").value = "";
      show("take-over-box", false);
    }
  });
}
