// The orchestrator console: start runs, watch their events and machine, answer questions, steer.
// Plain JavaScript served by the app itself: no build step, nothing from the network.
"use strict";

const $ = (id) => document.getElementById(id);
const TERMINAL = new Set(["run_completed", "run_failed", "run_cancelled"]);
const TOOL_ENDS = { tool_completed: "succeeded", tool_failed: "failed", tool_skipped: "skipped", tool_cancelled: "cancelled" };

// The server's token comes once in the address (?access_token=, as serve prints it): kept in this tab's
// sessionStorage, dropped from the address bar (and so from history and bookmarks), sent as a Bearer header.
const params = new URLSearchParams(location.search);
if (params.has("access_token")) {
  sessionStorage.setItem("token", params.get("access_token"));
  params.delete("access_token");
  const query = params.toString();
  history.replaceState(null, "", location.pathname + (query ? "?" + query : "") + location.hash);
}
const token = sessionStorage.getItem("token");

function headers(extra = {}) {
  const h = { ...extra };
  if (token) h["Authorization"] = "Bearer " + token;
  return h;
}

async function api(method, path, body, extra = {}) {
  const init = { method, headers: headers(body === undefined ? extra : { "Content-Type": "application/json", ...extra }) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  if (response.status === 401) tokenNeeded();
  let data = null;
  try { data = await response.json(); } catch (_) { data = null; }
  return { status: response.status, ok: response.ok, data };
}

function tokenNeeded() {
  $("start-error").textContent = "This server needs its token: open the console address it printed at start (…/?access_token=…).";
  $("start-error").hidden = false;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child);
  return node;
}

function short(value, limit = 80) {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text.length > limit ? text.slice(0, limit - 1) + "…" : text;
}

// ---- the diagram ------------------------------------------------------------

const diagram = { regions: {}, stateRegion: {}, nodes: {}, ready: null };

diagram.ready = (async () => {
  const [svg, definition] = await Promise.all([
    fetch("static/request.svg", { headers: headers() }).then((r) => r.text()),
    api("GET", "machines/request.json").then((r) => r.data),
  ]);
  $("diagram").innerHTML = svg;
  for (const region of definition.regions) {
    diagram.regions[region.name] = region;
    for (const state of region.states) diagram.stateRegion[state.name] = region.name;
  }
  for (const node of $("diagram").querySelectorAll("g.node")) {
    const title = node.querySelector("title");
    if (!title) continue;
    node.dataset.state = title.textContent;
    diagram.nodes[title.textContent] = node;
  }
  resetDiagram();
})();

function resetDiagram() {
  for (const node of Object.values(diagram.nodes)) node.classList.remove("current", "visited");
  for (const region of Object.values(diagram.regions)) markCurrent(region.name, region.initial);
}

function markCurrent(regionName, state) {
  for (const [name, node] of Object.entries(diagram.nodes)) {
    if (diagram.stateRegion[name] === regionName && node.classList.contains("current")) {
      node.classList.remove("current");
      node.classList.add("visited");
    }
  }
  const node = diagram.nodes[state];
  if (node) {
    node.classList.add("current");
    if (regionName === "phase") {
      const panel = $("diagram-panel");
      const box = node.getBoundingClientRect();
      const frame = panel.getBoundingClientRect();
      panel.scrollLeft += box.left + box.width / 2 - (frame.left + frame.width / 2);
    }
  }
}

// ---- the run being watched --------------------------------------------------

const run = { id: null, session: null, lastSeq: 0, events: [], controller: null, ended: false, assistant: null, tools: {}, retry: null };

function storageKey(requestId) { return "events:" + requestId; }

function remember() {
  sessionStorage.setItem("run", JSON.stringify({ id: run.id, session: run.session }));
  sessionStorage.setItem(storageKey(run.id), JSON.stringify(run.events));
}

function setConnection(text, live) {
  $("connection").textContent = text;
  $("connection").classList.toggle("live", !!live);
}

function setState(text) { $("run-state").textContent = text || ""; }

function resetView() {
  $("transcript").replaceChildren();
  $("questions").replaceChildren();
  $("event-log").replaceChildren();
  $("event-count").textContent = "0";
  run.assistant = null;
  run.tools = {};
  $("run-mode").textContent = "";
  resetDiagram();
}

async function watch(requestId, sessionId) {
  if (run.controller) run.controller.abort();
  clearTimeout(run.retry);
  Object.assign(run, { id: requestId, session: sessionId, lastSeq: 0, events: [], ended: false });
  await diagram.ready;
  resetView();
  const stored = sessionStorage.getItem(storageKey(requestId));
  if (stored) for (const event of JSON.parse(stored)) apply(event);
  $("run-title").textContent = `${sessionId} · ${requestId}`;
  $("session-input").value = sessionId;
  remember();
  connect();
}

async function connect() {
  if (run.ended) return;
  const controller = new AbortController();
  run.controller = controller;
  const requestId = run.id;
  setConnection("connecting", false);
  try {
    const response = await fetch(`runs/${encodeURIComponent(requestId)}/events`, {
      headers: headers({ "Last-Event-ID": String(run.lastSeq), Accept: "text/event-stream" }),
      signal: controller.signal,
    });
    if (response.status === 204) { run.ended = true; setConnection("ended", false); return; } // nothing after lastSeq: the run has ended
    if (!response.ok) {
      const body = await response.json().catch(() => null);
      setConnection(body && body.error ? body.error.message : `HTTP ${response.status}`, false);
      if (response.status === 404 || response.status === 410) { run.ended = true; return; }
      throw new Error(`HTTP ${response.status}`);
    }
    setConnection("live", true);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const data = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
        if (!data || requestId !== run.id) continue;
        const event = JSON.parse(data);
        if (event.seq === undefined) { // a stream's last word, not a run's event
          if (event.type === "error") streamError(event.error);
          else if (event.type === "closing") streamClosing(event.reason);
        } else apply(event, true);
      }
    }
  } catch (error) {
    if (controller.signal.aborted) return;
  }
  if (requestId !== run.id || controller.signal.aborted) return;
  if (!run.ended) {
    setConnection("reconnecting", false);
    run.retry = setTimeout(connect, 1000);
  } else {
    setConnection("ended", false);
  }
}

// The server ends a stream it cannot carry on (e.g. this reader fell behind the retained events).
function streamError(error) {
  const why = error ? `${error.type}: ${error.message}` : "unknown error";
  $("transcript").append(el("div", { class: "notice error stream-error" }, `event stream ended early: ${why}`));
}

// The server ends its streams as it shuts down; the run may go on, and the reconnect resumes after lastSeq.
function streamClosing(reason) {
  $("transcript").append(el("div", { class: "notice stream-closing" }, `event stream closed by the server: ${reason || "no reason given"}`));
}

// ---- applying events (each seq exactly once) --------------------------------

function apply(event, fresh = false) {
  if (event.seq <= run.lastSeq) return;
  run.lastSeq = event.seq;
  run.events.push(event);
  if (fresh) remember();
  $("event-log").append(el("li", { "data-seq": String(event.seq), "data-type": event.type }, `${event.seq} ${event.type}`));
  $("event-count").textContent = String(run.events.length);
  render(event);
}

function render(event) {
  if (event.session_id && run.session && event.session_id !== run.session) {
    renderChild(event);
    return;
  }
  const transcript = $("transcript");
  switch (event.type) {
    case "subagent_started":
      transcript.append(el("div", { class: "notice subagent" }, `subagent ${event.agent} started (session ${event.child_session_id})`));
      break;
    case "subagent_completed":
      transcript.append(el("div", { class: "notice subagent" }, `subagent ${event.agent} ${event.outcome}`));
      break;
    case "run_started":
      transcript.append(el("div", { class: "msg user" }, textOf(event.input)));
      setRunning(true);
      break;
    case "transition":
      if (event.machine === "request") {
        markCurrent(event.region, event.dest);
        if (event.region === "phase") setState(event.dest);
        if (event.region === "mode") $("run-mode").textContent = event.dest;
      }
      break;
    case "text_delta":
      if (!run.assistant) { run.assistant = el("div", { class: "msg assistant" }); transcript.append(run.assistant); }
      run.assistant.textContent += event.text;
      break;
    case "model_completed": {
      const text = textOf(event.message);
      if (!run.assistant && text) transcript.append(el("div", { class: "msg assistant" }, text));
      run.assistant = null;
      break;
    }
    case "tool_started": {
      const line = el("div", { class: "tool running", "data-call": event.call.id },
        `▸ ${event.call.name}(${short(event.call.arguments)}) `, el("span", { class: "status" }, "running"));
      run.tools[event.call.id] = line;
      transcript.append(line);
      break;
    }
    case "tool_completed": case "tool_failed": case "tool_skipped": case "tool_cancelled": {
      const line = run.tools[event.call.id];
      const status = TOOL_ENDS[event.type];
      if (line) {
        line.className = `tool ${status}`;
        line.querySelector(".status").textContent = `${status}: ${short(describedOf(event.result), 120)}`;
      }
      resolveQuestion(event.call.id);
      break;
    }
    case "steering_accepted":
      transcript.append(el("div", { class: "notice" }, `steering accepted: ${textOf(event.message)}`));
      break;
    case "steering_applied":
      transcript.append(el("div", { class: "notice" }, "steering applied"));
      break;
    case "run_completed":
    case "run_failed":
    case "run_cancelled": {
      const why = event.type === "run_failed" && event.error ? `: ${event.error.type}: ${event.error.message}` : "";
      transcript.append(el("div", { class: "notice end" }, event.type.replace("run_", "run ") + why));
      run.ended = true;
      setRunning(false);
      for (const card of $("questions").children) card.remove();
      refreshSessions();
      break;
    }
    default:
      if (event.tool_call_id && event.response_event) ask(event);
  }
}

function textOf(message) {
  if (!message) return "";
  if (typeof message.content === "string") return message.content;
  if (Array.isArray(message.content)) return message.content.filter((p) => p.type === "text").map((p) => p.text).join("");
  return message.text || "";
}

// A message's text with each image part described as the server's describe_parts does.
function describedOf(message) {
  if (!message || !Array.isArray(message.content)) return textOf(message);
  return message.content.map((part) => (part.type === "text" ? part.text : describeImage(part))).join("");
}

function describeImage(part) {
  if (typeof part.data !== "string") return `[image: ${part.media_type}, ${part.url}]`;
  const padding = part.data.endsWith("==") ? 2 : part.data.endsWith("=") ? 1 : 0;
  return `[image: ${part.media_type}, ${(part.data.length / 4) * 3 - padding} bytes]`;
}

function setRunning(running) {
  $("cancel-button").disabled = !running;
  $("steer-input").disabled = !running;
  $("steer-button").disabled = !running;
}

// A subagent's event, forwarded on this run's stream under the child's session: its questions are
// asked (and answered on the child's session); the rest stays in the event log only.
function renderChild(event) {
  if (event.type in TOOL_ENDS) resolveQuestion(event.call.id, event.session_id);
  else if (event.tool_call_id && event.response_event) ask(event);
}

// ---- questions: approvals and ask_user ------------------------------------------

// The Idempotency-Key of an answer: one per question (its request, its call id, the question's seq when
// known) and payload, so a retried click replays and a later question reusing a call id gets a new key.
function answerKey(requestId, event, payload) {
  const text = [requestId, event.tool_call_id, event.seq ?? "", event.response_event, JSON.stringify(payload)].join("\u0000");
  let a = 0x811c9dc5, b = 0x01000193 ^ text.length;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193) >>> 0;
    b = Math.imul(b ^ c, 0x5bd1e995) >>> 0;
  }
  return `answer-${a.toString(16).padStart(8, "0")}${b.toString(16).padStart(8, "0")}`;
}

function ask(event) {
  const session = event.session_id || run.session;
  if (findQuestion(event.tool_call_id, session)) return;
  const card = el("div", { class: "question", "data-call": event.tool_call_id, "data-session": session, "data-event": event.type });
  const refusal = el("p", { class: "refusal" });
  const send = async (payload) => {
    for (const b of card.querySelectorAll("button")) b.disabled = true;
    const key = answerKey(event.request_id || run.id, event, payload);
    const result = await api("POST", `sessions/${encodeURIComponent(session)}/events`,
      { name: event.response_event, payload: { tool_call_id: event.tool_call_id, ...payload }, request_id: event.request_id || run.id },
      { "Idempotency-Key": key });
    if (result.ok) { card.classList.add("answered"); refusal.textContent = ""; }
    else {
      refusal.textContent = result.data && result.data.error ? result.data.error.message : `HTTP ${result.status}`;
      for (const b of card.querySelectorAll("button")) b.disabled = false;
    }
  };
  const actions = el("div", { class: "actions" });
  if (event.type === "ask_user") {
    card.append(el("h3", {}, "The agent asks"), el("p", {}, event.question));
    if (event.options && event.options.length) {
      for (const option of event.options) actions.append(el("button", { type: "button", class: "primary", onclick: () => send({ answer: option }) }, option));
    } else {
      const input = el("input", { placeholder: "Your answer" });
      actions.append(input, el("button", { type: "button", class: "primary", onclick: () => send({ answer: input.value }) }, "Answer"));
    }
  } else {
    const titles = { enter_plan_mode: "Enter Plan Mode?", exit_plan_mode: "Approve this plan?", tool_approval: `Allow ${event.tool_name || "this tool"}?` };
    card.append(el("h3", {}, titles[event.type] || event.type));
    const detail = event.plan || event.reason || (event.arguments ? JSON.stringify(event.arguments, null, 2) : "");
    if (detail) card.append(el("pre", {}, detail));
    actions.append(
      el("button", { type: "button", class: "primary approve", onclick: () => send({ approved: true }) }, "Approve"),
      el("button", { type: "button", class: "decline", onclick: () => send({ approved: false }) }, "Decline"),
    );
  }
  card.append(actions, refusal);
  $("questions").append(card);
}

function findQuestion(callId, session) {
  return $("questions").querySelector(`[data-call="${CSS.escape(callId)}"][data-session="${CSS.escape(session)}"]`);
}

function resolveQuestion(callId, session = run.session) {
  const card = findQuestion(callId, session);
  if (card) card.remove();
}

// ---- sessions, starting, steering, cancelling --------------------------------------

async function refreshSessions() {
  const result = await api("GET", "sessions");
  if (!result.ok) return;
  const list = $("sessions");
  list.replaceChildren();
  for (const session of result.data.sessions) {
    const state = session.state || "idle";
    const item = el("li", { "data-session": session.session_id }, el("span", {}, session.session_id), el("span", { class: "state" }, state));
    item.addEventListener("click", () => {
      $("session-input").value = session.session_id;
      if (session.request_id) watch(session.request_id, session.session_id);
    });
    list.append(item);
  }
}

$("start-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const session = $("session-input").value.trim();
  const prompt = $("prompt-input").value;
  $("start-error").hidden = true;
  const result = await api("POST", `sessions/${encodeURIComponent(session)}/runs`, { input: prompt });
  if (!result.ok) {
    if (result.status === 401) return; // tokenNeeded() said what to do
    $("start-error").textContent = result.data && result.data.error ? result.data.error.message : `HTTP ${result.status}`;
    $("start-error").hidden = false;
    return;
  }
  $("prompt-input").value = "";
  await watch(result.data.request_id, session);
  refreshSessions();
});

$("steer-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const text = $("steer-input").value;
  if (!text.trim() || !run.id) return;
  const result = await api("POST", `sessions/${encodeURIComponent(run.session)}/events`, { name: "steering_message", payload: { content: text }, request_id: run.id });
  if (result.ok) {
    $("steer-input").value = "";
    // The run announces it (steering accepted) when it next looks at its inbox, e.g. after the running tool.
    $("transcript").append(el("div", { class: "notice" }, `steering sent: ${text}`));
  }
  else $("transcript").append(el("div", { class: "notice error" }, `steering refused: ${result.data && result.data.error ? result.data.error.message : result.status}`));
});

$("cancel-button").addEventListener("click", () => { if (run.id) api("POST", `runs/${encodeURIComponent(run.id)}/cancel`); });
$("refresh-sessions").addEventListener("click", refreshSessions);

if (!$("session-input").value) $("session-input").value = "web-" + Math.random().toString(36).slice(2, 8);
refreshSessions();
const saved = JSON.parse(sessionStorage.getItem("run") || "null");
if (saved && saved.id) watch(saved.id, saved.session);
