// Drives the A2A cycles through @a2a-js/sdk's client: node cycles.mjs BASE_URL TOKEN; prints one JSON line.
import { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory } from "@a2a-js/sdk/client";

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

function message(parts, taskId = "") {
  sequence += 1;
  return { messageId: `js-${sequence}`, contextId: "", taskId, role: 1, parts, metadata: undefined, extensions: [], referenceTaskIds: [] };
}
const text = (value) => ({ content: { $case: "text", value } });
const data = (value) => ({ content: { $case: "data", value } });
const send = (parts, taskId = "", returnImmediately = false) =>
  client.sendMessage({ message: message(parts, taskId), configuration: { returnImmediately, acceptedOutputModes: [] } });
const answerOf = (task) => task.artifacts?.[0]?.parts?.[0]?.content?.value ?? null;
const asked = (task) => task.status.message.parts.find((p) => p.content.$case === "data").content.value;

const report = {};
let task = await send([text("please deploy")]);
report.approveAsked = [task.status.state, asked(task).kind];
task = await send([data({ approved: true })], task.id);
report.approved = [task.status.state, answerOf(task)];
task = await send([text("deploy it again")]);
task = await send([data({ approved: false, reason: "not today" })], task.id);
report.declined = [task.status.state, answerOf(task)];
task = await send([text("ask me")]);
report.cancelAsked = [task.status.state, asked(task).options];
task = await client.cancelTask({ id: task.id, tenant: "", metadata: undefined });
report.cancelled = task.status.state;
try {
  await send([data({ approved: "yes" })], task.id);
} catch (error) {
  report.refused = String(error.message ?? error);
}
task = await send([text("go slow")], "", true);
task = await send([text("moon instead")], task.id);
report.steered = [task.status.state, answerOf(task)];
console.log(JSON.stringify(report));
