// Streams an A2A task through @a2a-js/sdk's client and lets the SDK's own ResultManager put the streamed
// answer together: node stream.mjs BASE_URL TOKEN; prints one JSON line.
import { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory } from "@a2a-js/sdk/client";
import { InMemoryTaskStore, ResultManager, ServerCallContext } from "@a2a-js/sdk/server";

const [base, token] = process.argv.slice(2);
const authed = (input, init = {}) =>
  fetch(input, { ...init, headers: { ...(init.headers ?? {}), Authorization: `Bearer ${token}` } });
const factory = new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl: authed })],
  }),
);
const client = await factory.createFromUrl(base);
let sequence = 0;
const message = (parts, taskId = "") => {
  sequence += 1;
  return { messageId: `js-s${sequence}`, contextId: "", taskId, role: 1, parts, metadata: undefined, extensions: [], referenceTaskIds: [] };
};
const text = (value) => ({ content: { $case: "text", value } });
const data = (value) => ({ content: { $case: "data", value } });

// Every stream result, wrapped as the SDK's server-side event kinds, into one ResultManager per task.
async function follow(stream) {
  const manager = new ResultManager(new InMemoryTaskStore(), new ServerCallContext());
  const chunks = [];
  for await (const event of stream) {
    const kind = event.payload?.$case ?? event.kind;
    const value = event.payload?.value ?? event;
    if (kind === "artifactUpdate") chunks.push({ append: value.append, lastChunk: value.lastChunk });
    if (kind === "task" || kind === "statusUpdate" || kind === "artifactUpdate") {
      await manager.processEvent({ kind, data: value });
    }
  }
  const task = manager.getCurrentTask();
  const parts = task?.artifacts?.[0]?.parts ?? [];
  return { id: task?.id, state: task?.status?.state, chunks, answer: parts.map((p) => p.content.value).join("") };
}

const send = (parts, taskId = "") =>
  client.sendMessageStream({ message: message(parts, taskId), configuration: { returnImmediately: false, acceptedOutputModes: [] } });
const report = {};
const asked = await follow(send([text("please deploy")]));
report.asked = asked.state;
report.approved = await follow(send([data({ approved: true })], asked.id));
console.log(JSON.stringify(report));
