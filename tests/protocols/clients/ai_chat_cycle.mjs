// Drives one chat with the `ai` package's own chat and its UI message stream reader (useChat's machinery without
// React): a message whose tool call waits, then the answer (approve, deny, or an ask_user output) sent on
// automatically. Prints the chat's messages and status as JSON.
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
} from "ai";

class MemoryState {
  constructor() { this.status = "ready"; this.error = undefined; this.messages = []; }
  pushMessage(message) { this.messages = [...this.messages, message]; }
  popMessage() { this.messages = this.messages.slice(0, -1); }
  replaceMessage(index, message) { this.messages = this.messages.map((m, i) => (i === index ? message : m)); }
  snapshot(thing) { return structuredClone(thing); }
}

class Chat extends AbstractChat {
  constructor(init) { super({ ...init, state: new MemoryState() }); }
}

const [base, scenario, chatId, reply = "blue"] = process.argv.slice(2);
const errors = [];
const chat = new Chat({
  id: chatId,
  transport: new DefaultChatTransport({ api: `${base}/ai-sdk/chat` }),
  onError: (error) => errors.push(String(error)),
  sendAutomaticallyWhen: (options) =>
    lastAssistantMessageIsCompleteWithApprovalResponses(options) || lastAssistantMessageIsCompleteWithToolCalls(options),
});

const settled = async () => {
  for (let i = 0; i < 400 && chat.status !== "ready" && chat.status !== "error"; i++) {
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
};
await chat.sendMessage({ text: "go" });
await settled();
const toolParts = () => chat.lastMessage.parts.filter((p) => p.type === "dynamic-tool" || p.type.startsWith("tool-"));
const asked = toolParts().map((p) => ({ ...p }));
for (const part of toolParts()) {
  if (part.state === "approval-requested") {
    await chat.addToolApprovalResponse({ id: part.approval.id, approved: scenario === "approve", reason: scenario === "approve" ? undefined : "not now" });
  } else if (part.state === "input-available" && part.toolName === "ask_user") {
    await chat.addToolOutput({ tool: "ask_user", toolCallId: part.toolCallId, output: reply });
  }
}
await new Promise((resolve) => setTimeout(resolve, 50));
await settled();
console.log(JSON.stringify({ asked, status: chat.status, errors, messages: chat.messages }));
