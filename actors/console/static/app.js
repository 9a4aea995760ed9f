// The Parley console page: JSON-RPC 2.0 over one WebSocket, and SessionEvent notifications.
// Every text from the server is put in the DOM with textContent, never as HTML: agents'
// messages are attacker-controlled, so a <script> in one is shown as text.
"use strict";

const TOKEN_KEY = "parley.signInToken";
const ENDED = new Set(["completed", "failed", "canceled", "refused"]);
const $ = (id) => document.getElementById(id);

const app = {
  token: sessionStorage.getItem(TOKEN_KEY),
  person: null,
  ws: null,
  nextId: 1,
  pending: new Map(),
  view: null, // { sessionId, summary, seen: Set, pending: Map (orchestrated.js), deciding }
};

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function show(id, visible) {
  $(id).hidden = !visible;
}

// ---- sign-in -------------------------------------------------------------------------

async function signIn(token) {
  const response = await fetch("/signin", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ token }),
  });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error ? body.error.message : "sign-in failed");
  return body.signInToken;
}

function signedOut(message) {
  app.token = null;
  app.person = null;
  sessionStorage.removeItem(TOKEN_KEY);
  show("app-view", false);
  show("sign-out", false);
  $("who").textContent = "";
  $("link-state").textContent = "";
  show("sign-in-view", true);
  $("sign-in-error").textContent = message || "";
}

// ---- JSON-RPC over the WebSocket --------------------------------------------------------

function connect() {
  return new Promise((resolve, reject) => {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(`${scheme}://${location.host}/ws`);
    let opened = false;
    ws.onopen = () => {
      ws.send(JSON.stringify({ jsonrpc: "2.0", id: 0, method: "SignIn", params: { token: app.token } }));
    };
    ws.onmessage = (frame) => {
      const message = JSON.parse(frame.data);
      if (!opened && message.id === 0) {
        if (message.error) {
          reject(new Error(message.error.message));
          return;
        }
        opened = true;
        app.person = message.result.person;
        resolve(ws);
        return;
      }
      onMessage(message);
    };
    ws.onclose = () => {
      for (const waiter of app.pending.values()) waiter.reject(new Error("connection closed"));
      app.pending.clear();
      if (!opened) reject(new Error("connection refused"));
      else if (app.token) $("link-state").textContent = "disconnected: reload to reconnect";
    };
  });
}

function call(method, params) {
  return new Promise((resolve, reject) => {
    const id = app.nextId++;
    app.pending.set(id, { resolve, reject });
    app.ws.send(JSON.stringify({ jsonrpc: "2.0", id, method, params: params || {} }));
  });
}

function onMessage(message) {
  if (message.id !== undefined && app.pending.has(message.id)) {
    const waiter = app.pending.get(message.id);
    app.pending.delete(message.id);
    if (message.error) {
      const error = new Error(message.error.message);
      error.rpc = message.error;
      waiter.reject(error);
    } else {
      waiter.resolve(message.result);
    }
    return;
  }
  if (message.method === "SessionEvent") onEvent(message.params);
  else if (message.method === "SessionRefused") onRefused(message.params);
  else if (message.method === "SessionError") onSessionError(message.params);
  else if (message.method === "DelegationResult") onDelegationResult(message.params);
  else if (message.method === "SessionTyping") onTyping(message.params);
}

// ---- sessions list ------------------------------------------------------------------------

let listing = null;
function refreshList() {
  if (listing) return;
  listing = setTimeout(async () => {
    listing = null;
    const { sessions } = await call("ListSessions");
    const list = $("sessions");
    list.replaceChildren();
    for (const s of sessions) {
      const item = el("li");
      item.dataset.sessionId = s.sessionId;
      if (app.view && app.view.sessionId === s.sessionId) item.classList.add("current");
      const link = el("a", null, s.goal || "(no goal yet)");
      link.href = "#/session/" + encodeURIComponent(s.sessionId);
      item.append(link, el("span", "state", s.state));
      list.append(item);
    }
    show("no-sessions", sessions.length === 0);
  }, 50);
}

// ---- one session ------------------------------------------------------------------------------

function chipText(summary) {
  if (summary.mode === "single") return "Single call";
  if (summary.mode === "task") return "Task";
  if (summary.mode === "delegate") return "Delegation";
  if (summary.mode === "orchestrate") {
    const mode = summary.orchestration ? ` · ${summary.orchestration.mode}` : "";
    return `Turn ${summary.round}/${summary.maxRounds}${mode}`;
  }
  return `Collab ${summary.round}/${summary.maxRounds}`;
}

function renderStatus() {
  const summary = app.view.summary;
  $("goal").textContent = summary.goal;
  $("chip").textContent = chipText(summary);
  $("state").textContent = summary.phase && !ENDED.has(summary.state) ? `${summary.state} · ${summary.phase}` : summary.state;
  if (summary.mode === "task" && summary.taskState) $("state").textContent = summary.taskState;
  show("stop", !ENDED.has(summary.state) && summary.state !== "created");
  if (ENDED.has(summary.state)) $("waiting").textContent = "";
  renderSteering(summary);
}

function renderEnding(text, completed) {
  const ending = $("ending");
  ending.textContent = text;
  ending.className = completed ? "ending completed" : "ending";
  ending.hidden = false;
}

function seconds(ms) {
  return `${Math.round(ms / 100) / 10}s`;
}

// A call between agents, told by the gate as it happens (seed 004's CLI words), folded in
// the timeline under the turn that made it.
function callLine(eventType, p) {
  const line = el("li", "call");
  line.dataset.callId = p.call_id;
  const status = String(p.status || "").toUpperCase();
  if (eventType === "tool_requested") {
    line.append(el("div", "calling", `${p.caller} calling ${p.target} with task: ${p.task || ""}`));
    if (status === "REFUSED") line.append(el("div", "returned refused", `${p.target} returned: REFUSED (${p.reason || ""})`));
    return line;
  }
  const figures = [];
  if (typeof p.tokens === "number") figures.push(`${p.tokens} tokens`);
  if (typeof p.duration_ms === "number") figures.push(seconds(p.duration_ms));
  let detail = figures.join(", ");
  const ok = status === "SUCCESS" || status === "SUCCEEDED"; // an agent's answer, a tool's result
  if (!ok && p.reason) detail = detail ? `${detail}; ${p.reason}` : p.reason;
  const returned = el("div", ok ? "returned" : "returned failed",
    `${p.agent} returned: ${status}` + (detail ? ` (${detail})` : ""));
  line.append(returned);
  if (Array.isArray(p.tools_used) && p.tools_used.length) line.append(el("div", "tools", `Tools used: ${p.tools_used.join(", ")}`));
  return line;
}

function renderEvent(event) {
  const summary = app.view.summary;
  const p = event.payload || {};
  if (p.orchestrated) {
    renderOrchestrated(event);
    renderStatus();
    return;
  }
  const timeline = $("timeline");
  if (typeof p.round === "number") summary.round = Math.max(summary.round, p.round);
  switch (event.eventType) {
    case "session_created": {
      summary.goal = p.goal || summary.goal;
      summary.mode = summary.mode === "task" ? "task" : p.mode || summary.mode;
      summary.maxRounds = p.max_rounds || summary.maxRounds;
      const who = (p.participants || []).join(", ");
      let opened = summary.mode === "single" ? `Single call to ${who}.` : `Session opened with ${who}, up to ${summary.maxRounds} rounds.`;
      if (summary.mode === "task") opened = `Task for ${who}.`;
      timeline.append(el("li", "system", opened));
      break;
    }
    case "step_started":
      if (summary.state === "created" || summary.state === "submitted") summary.state = "running";
      $("waiting").textContent = `${p.speaker} is answering (round ${p.round})…`;
      break;
    case "step_completed": {
      clearTyping(); // the durable turn takes the live one's place (typing.js)
      $("waiting").textContent = "";
      const turn = el("li", "turn");
      turn.dataset.eventId = event.eventId;
      const avatar = el("div", "avatar", (p.speaker || "?").slice(0, 1));
      const bubble = el("div", "bubble");
      const head = el("div", "head");
      const chip = { single: "Single call", task: "Task" }[summary.mode] || `Collab ${p.round}/${summary.maxRounds}`;
      head.append(el("span", "speaker", p.speaker), el("span", "chip", chip));
      bubble.append(head, el("div", "message", p.message));
      if (p.handoff && p.handoff.to) bubble.append(el("div", "handoff", `→ ${p.handoff.to}: ${p.handoff.task}`));
      turn.append(avatar, bubble);
      timeline.append(turn);
      break;
    }
    case "tool_requested":
    case "tool_completed":
      if (p.call_id) timeline.append(callLine(event.eventType, p));
      break;
    case "session_completed":
    case "session_failed":
    case "session_canceled": {
      clearTyping();
      summary.state = { session_completed: "completed", session_failed: "failed", session_canceled: "canceled" }[event.eventType];
      summary.stopReason = p.stopReason;
      renderEnding(collabEnding(p, summary), event.eventType === "session_completed");
      break;
    }
    default:
      break;
  }
  renderStatus();
}

function onEvent(event) {
  refreshList();
  if (!app.view || app.view.sessionId !== event.sessionId) return;
  // While ResumeSession is on its way, its answer holds every event notified before it.
  if (!app.view.summary) return;
  if (app.view.seen.has(event.eventId)) return;
  app.view.seen.add(event.eventId);
  renderEvent(event);
  refreshTask();
}

function onRefused(summary) {
  refreshList();
  if (!app.view || app.view.sessionId !== summary.sessionId) return;
  app.view.summary.state = "refused";
  const error = summary.error || {};
  renderEnding(`Refused by the gate: ${error.code}: ${error.message}`, false);
  renderStatus();
}

async function openSession(sessionId) {
  app.view = { sessionId, summary: null, seen: new Set(), pending: new Map(), deciding: null };
  let answer;
  try {
    answer = await call("ResumeSession", { sessionId });
  } catch (error) {
    app.view = null;
    showContent("not-found-view");
    return;
  }
  if (!app.view || app.view.sessionId !== sessionId) return;
  app.view.summary = { ...answer.session, round: 0 };
  $("timeline").replaceChildren();
  $("ending").hidden = true;
  $("banner").hidden = true;
  $("trace").hidden = true;
  $("control-error").textContent = "";
  $("waiting").textContent = "";
  renderStatus();
  for (const event of answer.events) {
    if (app.view.seen.has(event.eventId)) continue;
    app.view.seen.add(event.eventId);
    renderEvent(event);
  }
  if (answer.session.mode === "delegate") renderDelegations();
  show("task-panel", answer.session.mode === "task");
  show("patch-box", false);
  if (answer.session.mode === "task") renderTask(answer.session);
  if (answer.session.state === "refused") onRefused(answer.session);
  showContent("session-view");
  refreshList();
}

// ---- starting -----------------------------------------------------------------------------------

function selectedMode() {
  return document.querySelector("input[name=mode]:checked").value;
}

function onModeChange() {
  const single = selectedMode() === "single" || selectedMode() === "task";
  const orchestrate = selectedMode() === "orchestrate";
  const delegate = selectedMode() === "delegate";
  show("first-field", !delegate);
  show("call-fields", !orchestrate);
  show("orchestrate-fields", orchestrate);
  $("goal-label").textContent = orchestrate || delegate ? "Objective" : "Goal";
  show("rounds-field", !single && !delegate);
  if (single) keepOneAgent("");
  renderFirstSpeaker();
}

async function start(event) {
  event.preventDefault();
  $("start-error").textContent = "";
  const mode = selectedMode();
  let params;
  if (mode === "orchestrate") {
    params = {
      mode,
      agents: [$("local-agent").value, $("shared-agent").value],
      orchestrationMode: $("orchestration-mode").value,
      maxTurns: Number($("max-turns").value) || 8,
    };
  } else {
    const agents = chosenAgents();
    if (!agents.length) {
      $("start-error").textContent = "Choose at least one agent.";
      return;
    }
    params = { mode, agents };
    if (mode !== "delegate") params.maxRounds = Number($("max-rounds").value) || 6;
    if (mode !== "delegate" && $("first").value) params.firstSpeaker = $("first").value;
  }
  try {
    const created = await call("CreateSession", params);
    await call("StartTask", { sessionId: created.sessionId, prompt: $("goal-input").value });
    $("goal-input").value = "";
    location.hash = "#/session/" + encodeURIComponent(created.sessionId);
  } catch (error) {
    $("start-error").textContent = error.message;
  }
}

async function stop() {
  if (!app.view) return;
  try {
    await call("CancelTask", { sessionId: app.view.sessionId });
    $("waiting").textContent = "stop requested…";
  } catch (error) {
    $("waiting").textContent = error.message;
  }
}

// ---- routing ------------------------------------------------------------------------------------

function showContent(id) {
  for (const view of ["new-view", "session-view", "audit-view", "not-found-view"]) show(view, view === id);
}

function route() {
  if (!app.ws) return;
  const match = location.hash.match(/^#\/session\/([^/]+)$/);
  if (match) {
    openSession(decodeURIComponent(match[1]));
  } else if (location.hash === "#/audit") {
    openAudit();
  } else {
    app.view = null;
    showContent("new-view");
    loadAgents();
    refreshList();
  }
}

async function enter() {
  try {
    app.ws = await connect();
  } catch (error) {
    app.ws = null;
    signedOut(error.message);
    return;
  }
  show("sign-in-view", false);
  show("app-view", true);
  show("sign-out", true);
  $("who").textContent = app.person;
  route();
}

document.addEventListener("DOMContentLoaded", () => {
  $("sign-in-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    $("sign-in-error").textContent = "";
    try {
      app.token = await signIn($("token").value.trim());
      sessionStorage.setItem(TOKEN_KEY, app.token);
      $("token").value = "";
      await enter();
    } catch (error) {
      $("sign-in-error").textContent = error.message;
    }
  });
  $("sign-out").addEventListener("click", async () => {
    try {
      await call("Shutdown");
    } catch (error) {
      // the socket closes after the answer; nothing else to do
    }
    app.ws = null;
    signedOut("Signed out.");
  });
  $("start-form").addEventListener("submit", start);
  $("stop").addEventListener("click", stop);
  wireOrchestrated();
  wireTask();
  $("show-trace").addEventListener("click", showTrace);
  for (const radio of document.querySelectorAll("input[name=mode]")) radio.addEventListener("change", onModeChange);
  window.addEventListener("hashchange", route);
  if (app.token) enter();
  else signedOut("");
});
