// Drives one AG-UI cycle with @ag-ui/client's HttpAgent: a run that ends in interrupts, then a run that
// answers them (approve, decline or answer an ask_user question). Prints what the client ended with as JSON.
import { HttpAgent } from "@ag-ui/client";

const [base, scenario, threadId, reply = "blue"] = process.argv.slice(2);
const agent = new HttpAgent({ url: `${base}/ag-ui`, threadId });
agent.messages = [{ id: `${threadId}-u1`, role: "user", content: "go" }];
const types = [];
const subscriber = { onEvent: ({ event }) => { types.push(event.type); } };

const first = await agent.runAgent({}, subscriber);
const interrupts = agent.pendingInterrupts.map((i) => ({ ...i }));
const answer = (interrupt) => {
  if (scenario === "decline") return { interruptId: interrupt.id, status: "cancelled" };
  const payload = scenario === "ask" ? { answer: reply } : { approved: true };
  return { interruptId: interrupt.id, status: "resolved", payload };
};
const second = await agent.runAgent({ resume: interrupts.map(answer) }, subscriber);
console.log(JSON.stringify({
  firstResult: first.result ?? null,
  interrupts,
  result: second.result ?? null,
  pending: agent.pendingInterrupts,
  messages: agent.messages,
  types,
}));
