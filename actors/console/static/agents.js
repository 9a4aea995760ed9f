// The start form's agents, chosen from those registered on this deployment (ListAgents), not
// typed. Every agent host registers its agents' names when it starts, and the relay each
// shared agent it hosts, so every agent that can answer is listed; a name that is not could
// only be a typo or an agent that never ran here, which could not answer either. So there is
// no free-text box. Uses app.js's `app`, `$`, `el`, `show` and `call`; textContent only.
"use strict";

function agentChoice(name, checked) {
  const label = el("label", "agent-choice");
  const box = el("input");
  box.type = "checkbox";
  box.name = "agent";
  box.value = name;
  box.checked = checked;
  box.addEventListener("change", () => {
    if (box.checked && selectedMode() === "single") keepOneAgent(name);
    renderFirstSpeaker();
  });
  label.append(box, el("span", null, name));
  return label;
}

function chosenAgents() {
  return [...document.querySelectorAll("#agent-choices input[name=agent]:checked")].map((box) => box.value);
}

// A single call goes to one agent: choosing one unchooses the others.
function keepOneAgent(name) {
  const boxes = [...document.querySelectorAll("#agent-choices input[name=agent]")];
  const kept = name || (boxes.find((box) => box.checked) || {}).value;
  for (const box of boxes) box.checked = box.value === kept;
}

function fillSelect(select, names, preferred) {
  const keep = select.value;
  select.replaceChildren(...names.map((name) => {
    const option = el("option", null, name);
    option.value = name;
    return option;
  }));
  if (names.includes(keep)) select.value = keep;
  else if (names.includes(preferred)) select.value = preferred;
}

function renderFirstSpeaker() {
  const first = $("first");
  const keep = first.value;
  const anyone = el("option", null, "the first agent chosen");
  anyone.value = "";
  const chosen = chosenAgents();
  first.replaceChildren(anyone, ...chosen.map((name) => {
    const option = el("option", null, name);
    option.value = name;
    return option;
  }));
  first.value = chosen.includes(keep) ? keep : "";
}

async function loadAgents() {
  let names = [];
  try {
    names = (await call("ListAgents")).agents;
  } catch (error) {
    $("start-error").textContent = `The agents cannot be listed now: ${error.message}`;
  }
  const fresh = !$("agent-choices").children.length;
  // A first form ticks one pair, the demo's if it is there: ticking every registered agent
  // opened a collaboration among all of them, where the README's has two.
  const pair = names.includes("gpt") && names.includes("claude") ? ["gpt", "claude"] : names.slice(0, 2);
  const ticked = new Set(fresh ? pair : chosenAgents());
  $("agent-choices").replaceChildren(...names.map((name) => agentChoice(name, ticked.has(name))));
  if (selectedMode() === "single") keepOneAgent("");
  // Orchestration as the README shows it: the local agent drafts, claude is the shared one.
  const local = names.includes("local");
  fillSelect($("local-agent"), names, local ? "local" : "claude");
  fillSelect($("shared-agent"), names, local ? "claude" : "gpt");
  show("no-agents", names.length === 0);
  $("start").disabled = names.length === 0;
  renderFirstSpeaker();
}
