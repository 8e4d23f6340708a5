// Drives Rein's /a2a with the official JavaScript SDK (@a2a-js/sdk, pinned
// in package.json): the Go test TestNodeSDK starts a server and runs this
// with REIN_URL and REIN_TOKEN set. Every scenario runs through both
// bindings the agent card advertises.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Role, TaskState } from "@a2a-js/sdk";
import {
  ClientFactory,
  JsonRpcTransportFactory,
  RestTransportFactory,
  createAuthenticatingFetchWithRetry,
} from "@a2a-js/sdk/client";
import { TaskNotCancelableError } from "@a2a-js/sdk/errors";

const auth = {
  headers: async () => ({ Authorization: `Bearer ${process.env.REIN_TOKEN}` }),
  shouldRetryWithHeaders: async () => undefined,
};
const fetchImpl = createAuthenticatingFetchWithRetry(fetch, auth);

// client builds a client of the default agent from its card, preferring
// one binding.
async function client(binding) {
  const factory = new ClientFactory({
    transports: [new JsonRpcTransportFactory({ fetchImpl }), new RestTransportFactory({ fetchImpl })],
    preferredTransports: [binding],
  });
  return factory.createFromUrl(`${process.env.REIN_URL}/a2a/default/`);
}

function message(text, contextId = "") {
  return {
    messageId: crypto.randomUUID(),
    contextId,
    taskId: "",
    role: Role.ROLE_USER,
    parts: [{ content: { $case: "text", value: text }, metadata: undefined, filename: "", mediaType: "" }],
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  };
}

function request(msg, returnImmediately = false) {
  return {
    tenant: "",
    message: msg,
    configuration: { acceptedOutputModes: [], taskPushNotificationConfig: undefined, returnImmediately },
    metadata: undefined,
  };
}

const text = (parts) => parts.map((p) => (p.content?.$case === "text" ? p.content.value : "")).join("");

for (const binding of ["JSONRPC", "HTTP+JSON"]) {
  test(`${binding}: sendMessage waits for the reply`, async () => {
    const c = await client(binding);
    const task = await c.sendMessage(request(message("hello from node")));
    assert.equal(task.status.state, TaskState.TASK_STATE_COMPLETED);
    assert.equal(text(task.artifacts[0].parts), "echo: hello from node");
    const got = await c.getTask({ tenant: "", id: task.id });
    assert.equal(got.contextId, task.contextId);
    assert.equal(text(got.artifacts[0].parts), "echo: hello from node");
  });

  test(`${binding}: sendMessageStream streams the deltas and the reply`, async () => {
    const c = await client(binding);
    const items = [];
    for await (const item of c.sendMessageStream(request(message("stream it")))) items.push(item.payload);
    assert.equal(items[0].$case, "task");
    assert.equal(items[0].value.status.state, TaskState.TASK_STATE_SUBMITTED);
    const deltas = items
      .filter((i) => i.$case === "statusUpdate" && i.value.status.message)
      .map((i) => text(i.value.status.message.parts))
      .join("");
    assert.equal(deltas, "0123456789abcdefghijklmnopqrstuvwxyz");
    const reply = items.find((i) => i.$case === "artifactUpdate");
    assert.equal(text(reply.value.artifact.parts), "0123456789abcdefghijklmnopqrstuvwxyz");
    assert.equal(items.at(-1).value.status.state, TaskState.TASK_STATE_COMPLETED);
  });

  test(`${binding}: cancelTask stops exactly the task named`, async () => {
    const c = await client(binding);
    const first = await c.sendMessage(request(message("long one"), true));
    const queued = await c.sendMessage(request(message("long two", first.contextId), true));
    assert.equal(queued.status.state, TaskState.TASK_STATE_SUBMITTED);
    const cancelled = await c.cancelTask({ tenant: "", id: queued.id, metadata: undefined });
    assert.equal(cancelled.status.state, TaskState.TASK_STATE_CANCELED);
    const still = await c.getTask({ tenant: "", id: first.id });
    assert.notEqual(still.status.state, TaskState.TASK_STATE_CANCELED);
    const stopped = await c.cancelTask({ tenant: "", id: first.id, metadata: undefined });
    assert.equal(stopped.status.state, TaskState.TASK_STATE_CANCELED);
    await assert.rejects(c.cancelTask({ tenant: "", id: first.id, metadata: undefined }), TaskNotCancelableError);
  });
}
