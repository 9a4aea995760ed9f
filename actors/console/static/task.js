// A task session in the console page (seed 002 §7): one agent works on the objective with
// its tools. The page shows the task's state, its steps, each tool request held for the
// person's approval (Approve, or Reject with a reason the agent is told: a held request runs
// exactly as shown or not at all, so it has no Edit), and the patch preview: everything the
// task changed in its workspace. The state and steps are the console's own fold of the
// timeline (GetSessionState's taskState, steps, awaitingApproval), read again after each of
// the task's events rather than folded a second time here.
// Uses app.js's `app`, `$`, `el`, `call` and `show`; textContent only, like app.js.
"use strict";

const TASK_ENDED = new Set(["SESSION_COMPLETED", "SESSION_FAILED", "SESSION_CANCELLED"]);
let taskReading = null;

function isTask() {
  return Boolean(app.view && app.view.summary && app.view.summary.mode === "task");
}

function refreshTask() {
  if (taskReading || !isTask()) return;
  const sessionId = app.view.sessionId;
  taskReading = setTimeout(async () => {
    taskReading = null;
    let state;
    try {
      state = await call("GetSessionState", { sessionId });
    } catch (error) {
      $("control-error").textContent = error.message;
      return;
    }
    if (app.view && app.view.sessionId === sessionId) renderTask(state);
  }, 50);
}

function renderTask(state) {
  show("task-panel", true);
  app.view.summary.taskState = state.taskState;
  $("state").textContent = state.taskState;
  const steps = $("task-steps");
  steps.replaceChildren();
  for (const step of state.steps || []) {
    const item = el("li", `step ${step.status}`);
    item.dataset.stepId = step.stepId;
    const head = el("div", "head");
    head.append(el("span", "step-tool", step.toolName || step.stepKind), el("span", "chip", String(step.status).toUpperCase()));
    item.append(head);
    if (step.summary) item.append(el("div", "step-summary", step.summary));
    if (step.reason) item.append(el("div", "step-reason", step.reason));
    steps.append(item);
  }
  show("no-steps", !(state.steps || []).length);
  const awaiting = (state.awaitingApproval || [])[0];
  app.view.toolApproval = awaiting ? awaiting.approvalId : null;
  show("tool-approval", Boolean(awaiting));
  if (awaiting) {
    $("tool-approval-title").textContent = `${awaiting.title} (risk ${awaiting.riskLevel})`;
    $("tool-approval-summary").textContent = awaiting.actionSummary;
  }
  if (TASK_ENDED.has(state.taskState) && !app.view.patchShown) {
    app.view.patchShown = true;
    loadPatch();
  }
}

async function loadPatch() {
  if (!app.view) return;
  show("patch-box", true);
  try {
    const preview = await call("GetPatchPreview", { sessionId: app.view.sessionId });
    $("patch").textContent = preview.patch || "(no changes)";
  } catch (error) {
    $("patch").textContent = error.message;
  }
}

async function decideTool(decision) {
  if (!app.view || !app.view.toolApproval) return;
  const params = { sessionId: app.view.sessionId, approvalId: app.view.toolApproval, decision };
  if (decision === "rejected") params.reason = $("tool-reject-reason").value;
  try {
    await call("ApproveAction", params);
    show("tool-approval", false);
    $("tool-reject-reason").value = "";
    $("control-error").textContent = "";
  } catch (error) {
    $("control-error").textContent = error.message;
  }
  refreshTask();
}

function wireTask() {
  $("tool-approve").addEventListener("click", () => decideTool("approved"));
  $("tool-reject").addEventListener("click", () => decideTool("rejected"));
  $("show-patch").addEventListener("click", loadPatch);
}
