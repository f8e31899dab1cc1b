// A small AG-UI page: start a run, show each interrupt with an Approve button, resume, show the answer.
import { HttpAgent } from "@ag-ui/client";

const params = new URLSearchParams(location.search);
const agent = new HttpAgent({ url: `${params.get("agent")}/ag-ui`, threadId: params.get("thread") || "browser" });
const status = document.getElementById("status");
const questions = document.getElementById("questions");
const result = document.getElementById("result");

function show(interrupts) {
  questions.replaceChildren();
  for (const interrupt of interrupts) {
    const item = document.createElement("li");
    item.className = "interrupt";
    item.dataset.toolCallId = interrupt.toolCallId;
    item.textContent = interrupt.message + " ";
    const approve = document.createElement("button");
    approve.className = "approve";
    approve.textContent = "Approve";
    approve.onclick = () => run({ resume: [{ interruptId: interrupt.id, status: "resolved", payload: { approved: true } }] });
    item.append(approve);
    questions.append(item);
  }
}

async function run(parameters) {
  status.textContent = "running";
  try {
    const done = await agent.runAgent(parameters);
    if (agent.pendingInterrupts.length) {
      status.textContent = "waiting";
      show(agent.pendingInterrupts);
    } else {
      questions.replaceChildren();
      status.textContent = "done";
      result.textContent = String(done.result);
    }
  } catch (error) {
    status.textContent = "error";
    result.textContent = String(error);
  }
}

document.getElementById("start").onclick = () => {
  agent.messages = [{ id: "browser-u1", role: "user", content: document.getElementById("prompt").value }];
  run({});
};
