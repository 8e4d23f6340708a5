// An AG-UI front end as docs/protocols.md describes it, as a browser test
// drives it: HttpAgent runs the agent; the page keeps the thread and its
// current runId in sessionStorage so that a reload rejoins the thread's
// stream (Rein's extension, decoded by the client's own SSE decoder) and
// its Stop still names the run (the cancel route, by the client's runId).
import { HttpAgent, runHttpRequest, transformHttpEventStream } from '@ag-ui/client';

const params = new URLSearchParams(location.search);
const threadId = params.get('thread');
const headers = params.get('token') ? { Authorization: `Bearer ${params.get('token')}` } : {};
const base = '/ag-ui/default';
const stored = JSON.parse(sessionStorage.getItem(`rein-run:${threadId}`) || 'null');

const statusEl = document.getElementById('status');
const messagesEl = document.getElementById('messages');
const stopEl = document.getElementById('stop');
const shown = new Map(); // messageId → element

function setStatus(s) {
  statusEl.textContent = s;
  statusEl.dataset.status = s;
  stopEl.hidden = s !== 'running';
}

// render shows one AG-UI event: a message's text grows by its deltas.
function render(event) {
  switch (event.type) {
    case 'RUN_STARTED':
      setStatus('running');
      break;
    case 'RUN_FINISHED':
      setStatus(event.outcome?.type ?? 'success');
      break;
    case 'RUN_ERROR':
      setStatus('error');
      break;
    case 'TEXT_MESSAGE_START': {
      if (event.metadata?.reinReopened && shown.has(event.messageId)) break;
      const el = document.createElement('div');
      el.className = 'msg assistant';
      el.dataset.id = event.messageId;
      messagesEl.append(el);
      shown.set(event.messageId, el);
      break;
    }
    case 'TEXT_MESSAGE_CONTENT':
      shown.get(event.messageId).textContent += event.delta;
      break;
  }
}

stopEl.onclick = async () => {
  const run = JSON.parse(sessionStorage.getItem(`rein-run:${threadId}`) || 'null');
  if (!run) return;
  await fetch(`${base}/threads/${encodeURIComponent(threadId)}/runs/${encodeURIComponent(run.runId)}/cancel`, { method: 'POST', headers });
};

const agent = new HttpAgent({ url: base, headers, threadId });
document.getElementById('form').onsubmit = async (e) => {
  e.preventDefault();
  const input = document.getElementById('input');
  const text = input.value;
  input.value = '';
  const runId = crypto.randomUUID();
  // Remembered before the POST: a Stop pressed now, or after a reload,
  // names this run.
  sessionStorage.setItem(`rein-run:${threadId}`, JSON.stringify({ runId }));
  agent.addMessage({ id: crypto.randomUUID(), role: 'user', content: text });
  try {
    await agent.runAgent({ runId }, { onEvent: ({ event }) => render(event) });
  } catch (err) {
    setStatus('error');
    console.warn(err);
  }
};

// A page reloaded mid-run rejoins the thread: its stream replays the
// thread's runs from the start, then goes on live.
if (stored) {
  const url = `${base}/threads/${encodeURIComponent(threadId)}/stream`;
  transformHttpEventStream(runHttpRequest(() => fetch(url, { method: 'GET', headers })))
    .subscribe({ next: render, error: (err) => console.warn(err) });
}
window.reinPageReady = true;
