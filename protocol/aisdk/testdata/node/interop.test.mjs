// Drives Rein's /ai-sdk with the official `ai` package (pinned in
// package.json, locked in package-lock.json): AbstractChat with a minimal
// ChatState, as @ai-sdk/react's useChat builds it, and DefaultChatTransport,
// against a server started by the Go test (REIN_URL, REIN_TOKEN).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { AbstractChat, DefaultChatTransport } from 'ai';

const base = process.env.REIN_URL;
const token = process.env.REIN_TOKEN;
const auth = { Authorization: `Bearer ${token}` };
let chats = 0;

// State is ChatState as @ai-sdk/react keeps it, plus a way to wait for a
// condition on the messages: every change is checked, no polling.
class State {
  constructor() {
    this.status = 'ready';
    this.error = undefined;
    this.messages = [];
    this.waiters = [];
  }
  changed() {
    this.waiters = this.waiters.filter(({ pred, resolve }) => {
      if (!pred(this)) return true;
      resolve();
      return false;
    });
  }
  until(pred) {
    return new Promise((resolve) => {
      this.waiters.push({ pred, resolve });
      this.changed();
    });
  }
  pushMessage(m) { this.messages = this.messages.concat(m); this.changed(); }
  popMessage() { this.messages = this.messages.slice(0, -1); this.changed(); }
  replaceMessage(i, m) { this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)]; this.changed(); }
  snapshot(v) { return structuredClone(v); }
}

class Chat extends AbstractChat {
  constructor({ id, fetch, ...rest } = {}) {
    const state = new State();
    super({
      id: id ?? `chat-${process.pid}-${++chats}`,
      state,
      transport: new DefaultChatTransport({ api: `${base}/ai-sdk/chat`, headers: auth, fetch }),
      ...rest,
    });
    this.st = state;
  }
  get last() { return this.st.messages.at(-1); }
}

const textOf = (m) => m.parts.filter((p) => p.type === 'text').map((p) => p.text).join('');
const streamedText = (c) => c.last?.role === 'assistant' && textOf(c.last).length > 0;

async function post(path, body) {
  const res = await fetch(`${base}${path}`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, body: await res.json() };
}

async function run(chatId, runId) {
  const res = await fetch(`${base}/api/sessions/${chatId}/runs/${runId}`, { headers: auth });
  assert.equal(res.status, 200);
  return res.json();
}

test('a message sent is answered with the text streamed', async () => {
  const chat = new Chat();
  await chat.sendMessage({ text: 'hello' });
  assert.equal(chat.status, 'ready');
  const [user, reply] = chat.messages;
  assert.equal(user.role, 'user');
  assert.equal(reply.role, 'assistant');
  assert.equal(textOf(reply), 'echo: hello');
  assert.match(reply.id, /^run_/);
  assert.equal(reply.metadata.rein.status, 'COMPLETED');
  assert.equal(reply.metadata.rein.chat_id, chat.id);
  assert.equal((await run(chat.id, reply.id)).status, 'COMPLETED');
});

test('an approval answered by addToolApprovalResponse continues the same run', async () => {
  const chat = new Chat();
  await chat.sendMessage({ text: 'note this' });
  const parked = chat.last;
  const part = parked.parts.find((p) => p.type === 'tool-write_note');
  assert.equal(part.state, 'approval-requested');
  assert.equal(parked.metadata.rein.status, 'RUNNING');
  await chat.addToolApprovalResponse({ id: part.approval.id, approved: true });
  await chat.sendMessage();
  assert.equal(chat.status, 'ready');
  assert.equal(chat.messages.length, 2);
  const reply = chat.last;
  assert.equal(reply.id, parked.id);
  const done = reply.parts.find((p) => p.type === 'tool-write_note');
  assert.equal(done.state, 'output-available');
  assert.match(textOf(reply), /^saving a note; hints=\[\]note result: .*hints=\[\]$/);
  assert.equal(reply.metadata.rein.status, 'COMPLETED');
});

test('resumeStream after a dropped connection shows the text once; the stop route ends the resumed run', async () => {
  // The first response's connection drops after its first text.
  let drop = true;
  const dropping = async (url, init) => {
    const res = await fetch(url, init);
    if (!drop || init.method !== 'POST') return res;
    drop = false;
    const reader = res.body.getReader();
    let seen = '';
    const body = new ReadableStream({
      async pull(ctl) {
        const { value, done } = await reader.read();
        if (done) return ctl.close();
        ctl.enqueue(value);
        seen += new TextDecoder().decode(value);
        if (seen.includes('"text-delta"')) {
          await reader.cancel();
          ctl.error(new TypeError('network error (dropped by the test)'));
        }
      },
    });
    return new Response(body, { status: res.status, headers: res.headers });
  };
  const chat = new Chat({ fetch: dropping });
  await chat.sendMessage({ text: 'long sleep' });
  assert.equal(chat.status, 'error');
  const resumed = chat.resumeStream();
  await chat.st.until((s) => s.messages.at(-1)?.parts.some((p) => p.type === 'tool-sleep'));
  assert.equal(textOf(chat.last), 'sleeping for an hour');
  const stop = await post(`/ai-sdk/chat/${chat.id}/stop`, {});
  assert.equal(stop.status, 200);
  assert.equal(stop.body.accepted, true);
  assert.equal(stop.body.run_id, chat.last.id);
  await resumed;
  assert.equal(chat.status, 'ready');
  assert.equal(chat.messages.length, 2);
  const reply = chat.last;
  assert.equal(reply.metadata.rein.reason, 'interrupted');
  assert.equal(reply.parts.filter((p) => p.type === 'text' && p.text.includes('sleeping for an hour')).length, 1);
  // Nothing to resume once the run has ended.
  const again = await fetch(`${base}/ai-sdk/chat/${chat.id}/stream`, { headers: auth });
  assert.equal(again.status, 204);
});

test('a second message sent while the chat is busy queues, and its stream waits for its run; the stop ends only the current run', async () => {
  const a = new Chat();
  const first = a.sendMessage({ text: 'long first' });
  await a.st.until(() => streamedText(a));
  // A second tab of the same chat.
  const positions = [];
  const b = new Chat({ id: a.id, onData: (d) => { if (d.type === 'data-rein-queue') positions.push(d.data.position); } });
  const second = b.sendMessage({ text: 'one' });
  await b.st.until(() => positions.length > 0);
  assert.deepEqual(positions, [1]);
  const stop = await post(`/ai-sdk/chat/${a.id}/stop`, { mode: 'cancel' });
  assert.equal(stop.body.run_id, a.last.id);
  await first;
  assert.equal(a.last.metadata.rein.status, 'CANCELLED');
  await second;
  assert.equal(textOf(b.last), 'echo: one');
  assert.equal(b.last.metadata.rein.status, 'COMPLETED');
  assert.deepEqual(positions, [1, null]);
});

test('a stop by message id lands before its message, and ends exactly that run', async () => {
  const chat = new Chat();
  // The stop overtakes its message (another connection, another server).
  const early = await post(`/ai-sdk/chat/${chat.id}/stop`, { message_id: 'msg-early' });
  assert.equal(early.status, 200);
  assert.deepEqual(early.body, { accepted: true, run_id: null });
  await chat.sendMessage({ id: 'msg-early', role: 'user', parts: [{ type: 'text', text: 'long never' }] });
  assert.equal(chat.status, 'ready');
  assert.equal(chat.last.metadata.rein.status, 'CANCELLED');
  assert.equal(textOf(chat.last), '');
  // A running run, named by its message while another is queued behind it.
  const running = chat.sendMessage({ id: 'msg-running', role: 'user', parts: [{ type: 'text', text: 'long running' }] });
  await chat.st.until(() => streamedText(chat));
  const other = new Chat({ id: chat.id });
  const queued = other.sendMessage({ text: 'queued behind' });
  await other.st.until((s) => s.messages.at(-1)?.role === 'assistant');
  const stop = await post(`/ai-sdk/chat/${chat.id}/stop`, { message_id: 'msg-running' });
  assert.equal(stop.body.accepted, true);
  assert.equal(stop.body.run_id, chat.last.id);
  await running;
  assert.equal(chat.last.metadata.rein.reason, 'interrupted');
  await queued;
  assert.equal(textOf(other.last), 'echo: queued behind');
});

test('a note is read by the next step, and shown in it', async () => {
  const chat = new Chat();
  await chat.sendMessage({ text: 'note the milk' });
  const part = chat.last.parts.find((p) => p.type === 'tool-write_note');
  const note = await post(`/ai-sdk/chat/${chat.id}/notes`, { text: 'buy oat milk', id: 'n1' });
  assert.equal(note.status, 200);
  assert.deepEqual(note.body, { id: 'n1', status: 'queued' });
  await chat.addToolApprovalResponse({ id: part.approval.id, approved: true });
  await chat.sendMessage();
  assert.match(textOf(chat.last), /note result: .*hints=\[buy oat milk\]$/);
  const consumed = chat.last.parts.find((p) => p.type === 'data-rein-note');
  assert.deepEqual(consumed.data, { note_id: 'n1', step: 2 });
});

test('regenerate rolls the running run back and runs its input again', async () => {
  const chat = new Chat();
  const first = chat.sendMessage({ text: 'long regenerate me' });
  await chat.st.until(() => streamedText(chat));
  const old = chat.last.id;
  await chat.stop(); // aborts the fetch only: the run goes on
  await first;
  const again = chat.regenerate();
  await chat.st.until((s) => s.messages.at(-1)?.role === 'assistant' && s.messages.at(-1).id !== old && textOf(s.messages.at(-1)) !== '');
  const fresh = chat.last.id;
  const rolled = await run(chat.id, old);
  assert.equal(rolled.status, 'CANCELLED');
  assert.equal(rolled.reason, 'cancelled');
  assert.equal((await run(chat.id, fresh)).status, 'RUNNING');
  const stop = await post(`/ai-sdk/chat/${chat.id}/stop`, {});
  assert.equal(stop.body.run_id, fresh);
  await again;
  assert.equal(chat.messages.length, 2);
  assert.equal(textOf(chat.last), 'sleeping for an hour');
});

test('bad input is the transport error naming the field, and nothing is applied', async () => {
  const chat = new Chat({ id: 'not a valid id' });
  await chat.sendMessage({ text: 'hi' });
  assert.equal(chat.status, 'error');
  const err = JSON.parse(chat.error.message);
  assert.equal(err.error.code, 'invalid_argument');
  assert.equal(err.error.param, 'id');
  const bad = await post('/ai-sdk/chat/nope/notes', { text: '' });
  assert.equal(bad.status, 400);
  assert.equal(bad.body.error.param, 'text');
});
