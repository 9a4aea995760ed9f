// An agent's answer as it is written: `SessionTyping` notifications (the LLM gateway streams
// the agent's message to the person whose session it is) drawn as one live turn at the end of
// the session's timeline, which the durable turn replaces when it comes (app.js calls
// clearTyping on `step_completed` and on the session's end). Best effort: a piece lost only
// leaves the live turn short; the turn itself comes from the timeline. Uses app.js's `app`,
// `$` and `el`; every text goes in with textContent.
"use strict";

const writing = { requestId: null, text: "", finished: new Set() };

function onTyping(p) {
  if (!app.view || app.view.sessionId !== p.sessionId) return;
  if (writing.finished.has(p.requestId)) return; // a call already shown whole: never again
  if (p.requestId !== writing.requestId) {
    writing.requestId = p.requestId;
    writing.text = "";
  }
  writing.text += p.text || "";
  if (p.done) writing.finished.add(p.requestId);
  if (!writing.text.trim()) return;
  let turn = $("writing");
  if (!turn) {
    turn = el("li", "turn writing");
    turn.id = "writing";
    const bubble = el("div", "bubble");
    const head = el("div", "head");
    head.append(el("span", "speaker"), el("span", "chip", "writing…"));
    bubble.append(head, el("div", "message"));
    turn.append(el("div", "avatar"), bubble);
  }
  const agent = p.agent || "agent";
  turn.querySelector(".avatar").textContent = agent.slice(0, 1);
  turn.querySelector(".speaker").textContent = agent;
  turn.querySelector(".message").textContent = writing.text;
  $("timeline").append(turn); // stays last: what is being written is the newest
}

function clearTyping() {
  const turn = $("writing");
  if (turn) turn.remove();
  writing.requestId = null;
  writing.text = "";
}
