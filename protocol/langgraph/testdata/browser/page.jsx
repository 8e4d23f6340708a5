// A chat page on the LangGraph SDK's useStream, as an app would write it,
// pointed at Rein's /langgraph (same origin). window.page lets the Go
// test (TestUseStreamBrowser) press its buttons and read what it shows.
import React, { useEffect, useState } from "react";
import { createRoot } from "react-dom/client";
import { useStream } from "@langchain/langgraph-sdk/react";

const params = new URLSearchParams(location.search);

function App() {
  // The thread is the page's state, kept in its URL (a reload keeps it).
  const [threadId, setThreadId] = useState(params.get("thread"));
  const stream = useStream({
    apiUrl: `${location.origin}/langgraph`,
    assistantId: "default",
    threadId,
    onThreadId: (id) => {
      setThreadId(id);
      const url = new URL(location.href);
      url.searchParams.set("thread", id);
      history.replaceState(null, "", url);
    },
    reconnectOnMount: true,
    messagesKey: "messages",
  });
  useEffect(() => {
    window.page = {
      submit: (text, options) => { stream.submit({ messages: [{ type: "human", content: text }] }, options); },
      approve: () => { stream.submit(undefined, { command: { resume: { decisions: [{ type: "approve" }] } } }); },
      stop: () => { stream.stop(); },
      state: () => ({
        threadId,
        isLoading: stream.isLoading,
        interrupt: stream.interrupt?.value?.action_requests?.[0]?.name ?? null,
        messages: stream.messages.map((m) => `${m.type}: ${typeof m.content === "string" ? m.content : JSON.stringify(m.content)}`),
        error: stream.error ? String(stream.error) : null,
      }),
    };
  });
  return (
    <main>
      {stream.messages.map((m, i) => <p key={m.id ?? i} className={m.type}>{String(m.content)}</p>)}
      {stream.interrupt && <button onClick={() => window.page.approve()}>Approve</button>}
      {stream.isLoading && <button onClick={() => stream.stop()}>Stop</button>}
    </main>
  );
}

createRoot(document.getElementById("root")).render(<App />);
