// What the audit says about the signed-in person: the trace tree of a session of theirs
// (GetTrace: the decisions of the traces they started in it, whoever they were about) and
// their own profile's records (ListAuditRecords). The server decides whose, from the sign-in.
// Uses app.js's `app`, `$`, `el`, `show` and `call`; textContent only, like app.js.
"use strict";

function recordLine(r) {
  const code = r.decisionCode && r.decisionCode !== "ALLOW" ? ` ${r.decisionCode}` : "";
  const why = r.failureReason ? ` (${r.failureReason})` : "";
  return `${r.requester || "?"} → ${r.target || "?"}  ${r.task}  ${r.status}${code}  hop ${r.hopCount}${why}`;
}

function treeList(nodes) {
  const list = el("ul", "tree");
  for (const node of nodes) {
    const item = el("li");
    item.append(el("div", `node ${node.status}`, recordLine(node)));
    if (node.children.length) item.append(treeList(node.children));
    list.append(item);
  }
  return list;
}

async function showTrace() {
  if (!app.view) return;
  const box = $("trace");
  box.replaceChildren(el("div", "muted", "reading the audit…"));
  show("trace", true);
  try {
    const answer = await call("GetTrace", { sessionId: app.view.sessionId });
    box.replaceChildren(el("h3", null, "Trace"));
    if (!answer.tree.length) box.append(el("div", "muted", "Nothing audited yet for this session."));
    else box.append(treeList(answer.tree));
  } catch (error) {
    box.replaceChildren(el("div", "error", error.message));
  }
}

async function openAudit() {
  app.view = null;
  showContent("audit-view");
  const rows = $("audit-records");
  rows.replaceChildren();
  $("audit-error").textContent = "";
  try {
    const answer = await call("ListAuditRecords");
    $("audit-profile").textContent = answer.profile;
    for (const r of answer.records) {
      const row = el("tr");
      row.append(el("td", null, r.createdAt.replace("T", " ").slice(0, 19)), el("td", null, r.fact),
        el("td", null, recordLine(r)), el("td", "muted", r.sessionId || ""));
      rows.append(row);
    }
    show("no-audit", answer.records.length === 0);
  } catch (error) {
    $("audit-error").textContent = error.message;
  }
  refreshList();
}
