// The useChat page of docs/protocols.md, as a browser test drives it:
// the chat id and token come from the page's query string, and the
// elements carry ids and data attributes the test reads.
import { useChat } from '@ai-sdk/react';
import { DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } from 'ai';
import { useState } from 'react';
import { createRoot } from 'react-dom/client';

const params = new URLSearchParams(location.search);
const chatId = params.get('chat');
const headers = params.get('token') ? { Authorization: `Bearer ${params.get('token')}` } : {};

function Chat() {
  const { id, messages, sendMessage, status, stop, addToolApprovalResponse, error } = useChat({
    id: chatId,
    resume: true,
    transport: new DefaultChatTransport({ api: '/ai-sdk/chat', headers }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
  const [input, setInput] = useState('');

  // useChat's stop() only closes the browser's fetch; the stop route ends
  // the run on the server.
  async function stopRun() {
    stop();
    await fetch(`/ai-sdk/chat/${id}/stop`, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/json' },
      body: JSON.stringify({ mode: 'interrupt' }),
    });
  }

  return (
    <div>
      <div id="status" data-status={status}>{status}</div>
      {error && <div id="error">{String(error.message || error)}</div>}
      {messages.map((m) => (
        <div key={m.id} className={`msg ${m.role}`} data-id={m.id}>
          {m.parts.map((p, i) => {
            if (p.type === 'text') return <span key={i} className="text">{p.text}</span>;
            if (p.type.startsWith('tool-') && 'state' in p && p.state === 'approval-requested')
              return (
                <div key={i} className="approval">
                  {p.type.slice(5)} wants to run
                  <button id="allow" onClick={() => addToolApprovalResponse({ id: p.approval.id, approved: true })}>Allow</button>
                  <button id="deny" onClick={() => addToolApprovalResponse({ id: p.approval.id, approved: false, reason: 'not now' })}>Deny</button>
                </div>
              );
            return null;
          })}
        </div>
      ))}
      <form id="form" onSubmit={(e) => { e.preventDefault(); sendMessage({ text: input }); setInput(''); }}>
        <input id="input" value={input} onChange={(e) => setInput(e.target.value)} placeholder="Message" />
      </form>
      {(status === 'submitted' || status === 'streaming') && <button id="stop" onClick={stopRun}>Stop</button>}
    </div>
  );
}

createRoot(document.getElementById('root')).render(<Chat />);
window.reinPageReady = true;
