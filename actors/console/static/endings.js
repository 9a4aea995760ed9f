// How a session ended, in words a person reads: what happened and at which round or turn.
// The state (COMPLETED, CANCELED, ...) already stands beside the goal, and a stop reason's
// identifier (`stopped`, `cap_reached`) is no sentence, so neither is repeated here. Uses
// app.js's `app`; returns text, which app.js puts in with textContent.
"use strict";

// "You" for the signed-in person's own principal, else the principal's name.
function whoDid(principal) {
  if (!principal) return "Someone";
  return app.person && principal === `person-${app.person}` ? "You" : principal;
}

function sentence(text) {
  const words = String(text || "").trim();
  return words && !/[.!?]$/.test(words) ? `${words}.` : words;
}

const COLLAB_ENDINGS = {
  final: (p) => `Finished in round ${p.round}: the answer was marked final.`,
  answered: (p, summary) => `${(summary.participants || [])[0] || "The agent"} answered.`,
  no_handoff: (p) => `Finished in round ${p.round}: no agent handed the task on.`,
  cap_reached: (p, summary) => `Ended at the round limit: ${p.round} of ${summary.maxRounds} rounds.`,
  malformed: (p) => `Ended in round ${p.round}: an agent's answer could not be read.`,
  unknown_peer: (p) => `Ended in round ${p.round}: an agent handed the task to one that is not its peer.`,
  canceled: (p) => `${String(p.message || "Collaboration canceled by user.").replace(/\.$/, "")} in round ${p.round}` +
    (p.reason ? `: ${sentence(p.reason)}` : "."),
  error: (p) => `Failed in round ${p.round}: ${sentence(`${p.code}: ${p.message || ""}`)}`,
  stalled: (p) => `Failed in round ${p.round}: no answer came (${p.code}: ${p.message || ""}).`,
};

function collabEnding(p, summary) {
  const single = summary.mode === "single" && (p.stopReason === "final" || p.stopReason === "answered");
  const words = single ? COLLAB_ENDINGS.answered : COLLAB_ENDINGS[p.stopReason];
  let text = words ? words(p, summary) : `Ended in round ${p.round}.`;
  if (!words && p.code) text += ` ${sentence(`${p.code}: ${p.message || ""}`)}`;
  if (p.warning) text += ` Warning: ${sentence(p.warning)}`;
  return text;
}

function orchestratedEnding(p) {
  const at = `turn ${p.round}`;
  switch (p.stopReason) {
    case "stopped":
      return `${whoDid(p.by)} stopped the session at ${at}` + (p.note ? `: ${sentence(p.note)}` : ".");
    case "objective_met":
      return `Finished at ${at}: the objective was met.`;
    case "local_failed":
    case "remote_failed":
    case "max_failures":
      return `Failed at ${at}: ${sentence(p.reason)}`;
    default:
      return p.reason ? `Ended at ${at}: ${sentence(p.reason)}` : `Ended at ${at}.`;
  }
}

function pauseLine(p) {
  const who = whoDid(p.by);
  return `${who} paused the session: nothing is sent until ${who === "You" ? "you resume" : "it is resumed"}.`;
}

function resumeLine(p) {
  return `${whoDid(p.by)} resumed the session.`;
}
