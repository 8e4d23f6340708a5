// Rein web console. Plain JavaScript, no dependency, no build step.
//
// Built only on the public HTTP API (docs/api.md). Everything the page
// shows about a session is derived from its event log: the log is read from
// seq 0 (GET …/events, paged), then followed live with the SSE stream read
// through fetch (so the Authorization header is sent), resuming with
// Last-Event-ID from the last seq applied. Events are applied once, in seq
// order (dedupe by seq), so a reconnect or a reload rebuilds the same view.
//
// Data from the server (model output, tool inputs, notes, ids) only ever
// reaches the DOM as text (textContent / text nodes), never as HTML.
'use strict';

(() => {
  // ---------------------------------------------------------------- utils

  const K = {
    token: 'rein.console.token',
    draft: (sid) => 'rein.console.draft.' + sid,
    cid: (sid) => 'rein.console.cid.' + sid,
    noteDraft: (sid) => 'rein.console.note.' + sid,
    noteId: (sid) => 'rein.console.noteid.' + sid,
  };

  const $ = (id) => document.getElementById(id);

  // el builds an element; strings among the children become text nodes.
  function el(tag, props, ...kids) {
    const n = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === null || v === undefined || v === false) continue;
        if (k === 'class') n.className = v;
        else if (k === 'text') n.textContent = v;
        else if (k === 'dataset') Object.assign(n.dataset, v);
        else if (k.startsWith('on') && typeof v === 'function') n.addEventListener(k.slice(2), v);
        else if (v === true) n.setAttribute(k, '');
        else n.setAttribute(k, String(v));
      }
    }
    for (const c of kids.flat()) {
      if (c === null || c === undefined || c === false) continue;
      n.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return n;
  }

  function show(node, on) { node.hidden = !on; }

  // setError shows msg in an error box; outage marks one that says the
  // server could not be reached (it goes once the server is back).
  function setError(node, msg, outage) {
    node.textContent = msg || '';
    node.hidden = !msg;
    if (msg && outage) node.dataset.outage = '1';
    else delete node.dataset.outage;
  }

  function store(kind) {
    try { return window[kind]; } catch (_) { return null; }
  }
  const ss = {
    get(k) { const s = store('sessionStorage'); return s ? s.getItem(k) : null; },
    set(k, v) { const s = store('sessionStorage'); if (s) { if (v === null || v === '') s.removeItem(k); else s.setItem(k, v); } },
  };

  function randomId(prefix) {
    const b = new Uint8Array(10);
    crypto.getRandomValues(b);
    return prefix + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  }

  const shortId = (id) => (id ? '…' + String(id).slice(-6) : '');

  function fmtTime(iso) {
    if (!iso) return '';
    const d = new Date(iso);
    if (isNaN(d)) return '';
    return d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
  }

  function fmtDateTime(iso) {
    if (!iso) return '';
    const d = new Date(iso);
    if (isNaN(d)) return '';
    return d.toLocaleString([], { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });
  }

  function fmtDuration(ms) {
    if (ms === null || ms === undefined || !isFinite(ms) || ms < 0) return '';
    if (ms < 1000) return (ms / 1000).toFixed(1) + ' s';
    const s = ms / 1000;
    if (s < 60) return s.toFixed(1) + ' s';
    const m = Math.floor(s / 60);
    if (m < 60) return m + ' min ' + String(Math.floor(s % 60)).padStart(2, '0') + ' s';
    return Math.floor(m / 60) + ' h ' + String(m % 60).padStart(2, '0') + ' min';
  }

  // fmtCount is a count short enough for a table cell: 950, 12.3k, 4.5M.
  function fmtCount(n) {
    if (typeof n !== 'number' || !isFinite(n)) return '?';
    if (n < 10000) return String(n);
    if (n < 1e6) return (n / 1e3).toFixed(n < 1e5 ? 1 : 0) + 'k';
    return (n / 1e6).toFixed(n < 1e7 ? 2 : 1) + 'M';
  }

  function pretty(v) {
    if (v === undefined) return '';
    if (typeof v === 'string') return v;
    try { return JSON.stringify(v, null, 2); } catch (_) { return String(v); }
  }

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  // ------------------------------------------------------------- the API

  class ApiError extends Error {
    constructor(status, body) {
      const e = (body && body.error) || {};
      super(e.message || ('HTTP ' + status));
      this.status = status;
      this.code = e.code || '';
      this.param = e.param || '';
      this.runId = e.run_id || '';
      this.body = body;
    }
  }

  // A network failure (no answer at all) is a TypeError from fetch; it is
  // told apart from an answer with an error status.
  const isNetworkError = (e) => !(e instanceof ApiError) && e && e.name !== 'AbortError';

  const auth = {
    token: ss.get(K.token) || '',
    required: false,
    waiting: null, // a promise resolved when the user gives a token
    resolve: null,

    headers(extra) {
      const h = Object.assign({ Accept: 'application/json' }, extra || {});
      if (this.token) h.Authorization = 'Bearer ' + this.token;
      return h;
    },

    // need is called after a 401 answered a request sent with `used`. If
    // the token changed meanwhile the caller just retries; otherwise the
    // dialog asks for a (new) token and the promise waits for it.
    need(used, why) {
      if (this.token !== used) return Promise.resolve();
      this.required = true;
      $('change-token').hidden = false;
      if (used) {
        this.token = '';
        ss.set(K.token, null);
      }
      askToken(why || (used ? 'wrong' : 'missing'));
      if (!this.waiting) {
        this.waiting = new Promise((r) => { this.resolve = r; });
      }
      return this.waiting;
    },

    set(tok) {
      this.token = tok;
      ss.set(K.token, tok);
      const r = this.resolve;
      this.waiting = null;
      this.resolve = null;
      if (r) r();
    },
  };

  async function api(method, path, body, opts) {
    opts = opts || {};
    for (;;) {
      const used = auth.token;
      const headers = auth.headers(body !== undefined ? { 'Content-Type': 'application/json' } : null);
      const res = await fetch(path, {
        method,
        headers,
        body: body !== undefined ? JSON.stringify(body) : undefined,
        cache: 'no-store',
        credentials: 'omit',
        signal: opts.signal,
      });
      if (res.status === 401) {
        await auth.need(used);
        continue;
      }
      noteServerUp();
      let data = null;
      const text = await res.text();
      if (text) {
        try { data = JSON.parse(text); } catch (_) { data = null; }
      }
      if (!res.ok) throw new ApiError(res.status, data);
      if (auth.token) auth.required = true;
      return data;
    }
  }

  const sessionPath = (sid) => '/api/sessions/' + encodeURIComponent(sid);

  function postEvents(sid, events) {
    return api('POST', sessionPath(sid) + '/events', { events });
  }

  // explain turns an error into a sentence for the person at the keyboard.
  function explain(e, kept) {
    const keep = kept ? ' Your text is kept.' : '';
    if (e instanceof ApiError) {
      switch (e.code) {
        case 'session_busy':
          return 'The session is busy with run ' + shortId(e.runId) + '. Use “Send after current”, “Interrupt and send” or “Replace” from “More ways to send”.' + keep;
        case 'unavailable':
          return 'The server is not taking this right now (shutting down, or its store is unreachable): ' + e.message + '.' + keep;
        case 'not_found':
          return 'Not found: ' + e.message + '.' + keep;
        case 'conflict':
          return e.message;
        default:
          return e.message + (e.param ? ' (' + e.param + ')' : '') + '.' + keep;
      }
    }
    if (e && e.name === 'AbortError') return '';
    return 'Could not reach the server (' + (e && e.message ? e.message : 'network error') + ').' + keep + ' Try again.';
  }

  // ------------------------------------------------------- server status

  let serverDownSince = 0;
  function noteServerUp() {
    if (serverDownSince) {
      serverDownSince = 0;
      $('server-state').textContent = '';
    }
  }
  function noteServerDown() {
    if (!serverDownSince) serverDownSince = Date.now();
    $('server-state').textContent = 'server unreachable';
  }

  // ------------------------------------------------------------ the token

  const tokenDialog = $('token-dialog');

  function askToken(why) {
    const msg = {
      missing: 'This server needs a token. Enter your bearer token (a line of the server’s tokens file).',
      wrong: 'The server did not accept that token (401 unauthenticated). Check it and enter it again.',
      change: 'Enter the token to use from now on.',
    }[why] || why;
    $('token-message').textContent = msg;
    $('token-heading').textContent = why === 'wrong' ? 'Token not accepted' : 'Token needed';
    tokenDialog.dataset.reason = why;
    if (!tokenDialog.open) {
      $('token-input').value = '';
      tokenDialog.showModal();
    }
    $('token-input').focus();
  }

  $('token-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const tok = $('token-input').value.trim();
    if (!tok) {
      $('token-message').textContent = 'Enter a token.';
      return;
    }
    tokenDialog.close();
    auth.set(tok);
    if (tokenDialog.dataset.reason === 'change') {
      loadAgents();
      loadSessions();
      if (current) current.reconnect();
    }
  });
  // Nothing works without a token: Escape does not dismiss the dialog
  // while one is needed.
  tokenDialog.addEventListener('cancel', (e) => {
    if (!auth.token) e.preventDefault();
  });
  $('change-token').addEventListener('click', () => askToken('change'));

  // ------------------------------------------------------------ sessions

  let sessions = [];
  let current = null; // the open SessionView

  // loadSessions reads the list (one request for every session's title,
  // busy state and count of calls waiting for a person). Calls that come
  // while one is out share its answer and ask once more after it.
  let sessionsLoading = null;
  let sessionsAgain = false;
  async function loadSessions() {
    if (sessionsLoading) { sessionsAgain = true; return sessionsLoading; }
    sessionsLoading = (async () => {
      do {
        sessionsAgain = false;
        try {
          const data = await api('GET', '/api/sessions');
          sessions = data.sessions || [];
          setError($('sessions-error'), '');
          renderSessionList();
          if (current) current.renderHead();
        } catch (e) {
          if (isNetworkError(e)) noteServerDown();
          setError($('sessions-error'), 'Could not list sessions: ' + explain(e));
        }
      } while (sessionsAgain);
      sessionsLoading = null;
    })();
    return sessionsLoading;
  }

  // Other sessions change too (another tab, a script, a subagent): the
  // list is read again every few seconds while the page is in view.
  let sessionsTimer = 0;
  function soonSessions(ms) {
    clearTimeout(sessionsTimer);
    sessionsTimer = setTimeout(() => { loadSessions(); }, ms);
  }
  setInterval(() => { if (!document.hidden && !auth.waiting) loadSessions(); }, 5000);

  function sessionTitle(s) {
    // The session's title; a metadata.title from before sessions had one.
    const t = (s && typeof s.title === 'string' && s.title.trim()) ||
      (s && s.metadata && typeof s.metadata.title === 'string' && s.metadata.title.trim());
    if (t) return t;
    return (s && s.parent_session_id ? 'Subagent ' : 'Session ') + shortId(s && s.id);
  }

  function renderSessionList() {
    const list = $('session-list');
    const byId = new Map(sessions.map((s) => [s.id, s]));
    const kids = new Map();
    const roots = [];
    for (const s of sessions) {
      if (s.parent_session_id && byId.has(s.parent_session_id)) {
        if (!kids.has(s.parent_session_id)) kids.set(s.parent_session_id, []);
        kids.get(s.parent_session_id).push(s);
      } else {
        roots.push(s);
      }
    }
    const item = (s, depth) => {
      const a = el('a', {
        href: '#/s/' + encodeURIComponent(s.id),
        class: 'session-link',
        'aria-current': current && current.id === s.id ? 'page' : null,
        title: s.id,
        dataset: { sessionId: s.id },
      },
      el('span', { class: 'session-name', text: sessionTitle(s) }),
      el('span', { class: 'session-marks' },
        s.state === 'busy' ? el('span', { class: 'mark mark-busy', text: 'working' }) : null,
        s.pending_confirmations > 0 ? el('span', { class: 'mark mark-waiting', text: s.pending_confirmations + ' waiting for you' }) : null),
      el('span', { class: 'session-sub', text: (s.agent || 'default') + ' · ' + fmtDateTime(s.last_event_at || s.created_at) }));
      const li = el('li', { dataset: { sessionId: s.id } }, a);
      const children = kids.get(s.id);
      if (children && depth < 20) {
        li.append(el('ul', { class: 'children', 'aria-label': 'Subagents of ' + sessionTitle(s) }, children.map((c) => item(c, depth + 1))));
      }
      return li;
    };
    list.replaceChildren(...roots.map((s) => item(s, 0)));
    if (!sessions.length) list.append(el('li', { class: 'hint', text: 'No sessions yet.' }));
  }

  $('refresh-sessions').addEventListener('click', loadSessions);

  // The configured agents (GET /api/agents), offered as the new session's
  // choices; the field stays free text, so a server without the list (or
  // one that answers late) still works and names the agents it has.
  async function loadAgents() {
    try {
      const data = await api('GET', '/api/agents');
      const agents = data.agents || [];
      $('agent-options').replaceChildren(...agents.map((a) => el('option', { value: a.name })));
      $('agent-hint').textContent = agents.length ? 'Configured: ' + agents.map((a) => a.name).join(', ') : '';
      // Without a "default" agent the field starts on the first one, unless
      // someone is already typing in it.
      const input = $('new-agent');
      if (agents.length && !agents.some((a) => a.default) && input.value === 'default' && document.activeElement !== input) {
        input.value = agents[0].name;
      }
    } catch (err) {
      // Creating a session still works with a typed name.
    }
  }

  $('new-session').addEventListener('submit', async (e) => {
    e.preventDefault();
    const agent = $('new-agent').value.trim();
    const title = $('new-title').value.trim();
    const body = {};
    if (agent) body.agent = agent;
    if (title) body.title = title;
    const btn = $('create-session');
    btn.disabled = true;
    setError($('new-error'), '');
    try {
      const s = await api('POST', '/api/sessions', body);
      $('new-title').value = '';
      await loadSessions();
      location.hash = '#/s/' + encodeURIComponent(s.id);
    } catch (err) {
      if (isNetworkError(err)) noteServerDown();
      setError($('new-error'), 'Could not create the session: ' + explain(err), isNetworkError(err));
    } finally {
      btn.disabled = false;
    }
  });

  // ---------------------------------------------------------- run blocks

  // ordinal is a queue place as people say it: 1st, 2nd, 3rd, 4th.
  function ordinal(n) {
    const v = n % 100;
    const suf = (v >= 11 && v <= 13) ? 'th' : ({ 1: 'st', 2: 'nd', 3: 'rd' }[v % 10] || 'th');
    return n + suf;
  }

  // statusOf is a run's state in the words a person reads as intended: a
  // run the user stopped is not an error, a normal finish is "done".
  function statusOf(r) {
    if (r.end) {
      const p = r.end;
      if (p.rolled_back) return { text: 'rolled back', cls: 'rolledback' };
      switch (p.reason) {
        case 'stop': return { text: 'done', cls: 'completed' };
        case 'interrupted': return { text: r.byYou ? 'interrupted by you' : 'interrupted', cls: 'interrupted' };
        case 'max_steps': return { text: 'stopped at its step limit', cls: 'limit' };
        case 'budget': return { text: 'stopped at its budget', cls: 'limit' };
        case 'timeout': return { text: 'timed out', cls: 'timeout' };
        case 'cancelled':
          if (!r.times.started) return { text: r.byYou ? 'cancelled by you' : 'cancelled', cls: 'stopped' };
          return { text: r.byYou ? 'stopped by you' : 'stopped', cls: 'stopped' };
        case 'error': return { text: 'failed', cls: 'failed' };
      }
      if (p.status === 'COMPLETED') return { text: 'done', cls: 'completed' };
      if (p.status === 'FAILED') return { text: 'failed', cls: 'failed' };
      return { text: 'stopped', cls: 'stopped' };
    }
    if (r.status === 'running') {
      if (r.waiting.size) return { text: 'waiting for you', cls: 'waiting' };
      return { text: 'running', cls: 'running' };
    }
    if (r.status === 'queued') return { text: 'queued' + (r.position ? ' · ' + ordinal(r.position) : ''), cls: 'queued' };
    return { text: 'starting', cls: 'queued' };
  }

  // firstLine is the first line with text of s, for one-line summaries.
  function firstLine(s) {
    for (const l of String(s || '').split('\n')) if (l.trim()) return l.trim();
    return '';
  }

  class RunBlock {
    constructor(view, runId) {
      this.view = view;
      this.id = runId;
      this.status = 'created';
      this.position = 0;
      this.text = null; // the user's message
      this.end = null; // session.run_completed payload
      this.final = null; // agent.message payload
      this.resumed = false;
      this.confirmed = false; // its user.message event was applied
      this.steps = new Map();
      this.times = { created: null, queued: null, started: null, ended: null };
      this.stopping = false;
      this.waiting = new Set(); // its tool calls waiting for a person's answer
      this.byYou = false; // a person stopped it (user.interrupt, or a message sent to interrupt or replace it)
      this.seq = { message: 0, started: 0, ended: 0 }; // where its events are in the log
      this.userFold = null; // true/false once the person folded or unfolded it

      this.badge = el('span', { class: 'badge' });
      this.resumedBadge = el('span', { class: 'badge st-resumed', hidden: true, title: 'Its server was lost and another one (or the same one, restarted) took the run up from its last saved step.' }, 'resumed after instance loss');
      this.stopBtn = el('button', { type: 'button', class: 'stop danger', 'aria-label': 'Stop run ' + runId, title: 'Cancel this run now (user.interrupt, mode cancel)', onclick: () => this.stop('cancel') }, 'Stop');
      this.intBtn = el('button', { type: 'button', class: 'interrupt', 'aria-label': 'Interrupt run ' + runId, title: 'Ask the agent to stop cooperatively: it answers with what it has (mode interrupt)', onclick: () => this.stop('interrupt') }, 'Interrupt');
      this.actions = el('span', { class: 'run-actions' }, this.intBtn, this.stopBtn);
      this.timeline = el('ol', { class: 'timeline', 'aria-label': 'Timeline of run ' + runId });
      this.userText = el('p', { class: 'text' });
      this.userBox = el('div', { class: 'user-msg', hidden: true }, el('span', { class: 'who', text: 'You' }), this.userText);
      this.stepsBox = el('div', { class: 'steps' });
      this.finalBox = el('div', { class: 'final', hidden: true });
      this.notes = el('ul', { class: 'run-notes' });
      this.msg = el('p', { class: 'run-msg', role: 'status', hidden: true });
      const heading = el('h3', { class: 'run-title', id: 'h-' + runId },
        el('span', { class: 'run-label', text: 'Run ' + shortId(runId), title: runId }));
      // A finished run folds to one line: its status, how long it took and
      // the first line of its reply; the toggle (or the line) unfolds it.
      this.foldBtn = el('button', { type: 'button', class: 'fold-toggle quiet', 'aria-expanded': 'true', 'aria-controls': 'b-' + runId,
        'aria-label': 'Fold run ' + runId, onclick: () => this.toggleFold() }, '▾');
      this.foldSummary = el('span', { class: 'fold-summary', hidden: true, onclick: () => this.toggleFold() });
      this.body = el('div', { class: 'run-body', id: 'b-' + runId },
        this.timeline, this.userBox, this.stepsBox, this.finalBox, this.notes, this.msg);
      this.node = el('article', { class: 'run', 'aria-labelledby': 'h-' + runId, tabindex: '-1', dataset: { runId } },
        el('header', { class: 'run-head' }, this.foldBtn, heading, this.badge, this.resumedBadge, this.foldSummary, this.actions),
        this.body);
      this.folded = false;
      this.render();
    }

    get terminal() { return !!this.end; }

    // key is the block's place in the conversation: runs in the order they
    // ran (their start in the log), a run that ended without starting where
    // it ended, then the queued runs in queue order, then the runs this page
    // sent whose user.message the log has not shown yet.
    key() {
      if (this.node.classList.contains('optimistic')) return [2, this.optimisticN || 0];
      if (this.seq.started) return [0, this.seq.started];
      if (this.end) return [0, this.seq.ended || this.seq.message];
      if (this.status === 'queued') return [1, this.position || 1e9, this.seq.message];
      return [0, this.seq.message];
    }

    duration() {
      const t = this.times;
      const from = t.started || t.queued || t.created;
      return from && t.ended ? fmtDuration(new Date(t.ended) - new Date(from)) : '';
    }

    replyLine() {
      if (this.final && this.final.text) return firstLine(this.final.text);
      let last = null;
      for (const s of this.steps.values()) if (s.text && (!last || s.n > last.n)) last = s;
      return last ? firstLine(last.text) : '';
    }

    toggleFold() {
      this.userFold = !this.folded;
      this.setFolded(this.userFold);
    }

    setFolded(on) {
      on = !!on && !!this.end;
      if (on === this.folded) {
        if (on) this.renderFoldSummary();
        return;
      }
      this.folded = on;
      this.node.classList.toggle('folded', on);
      this.body.hidden = on;
      this.foldSummary.hidden = !on;
      this.foldBtn.textContent = on ? '▸' : '▾';
      this.foldBtn.setAttribute('aria-expanded', on ? 'false' : 'true');
      this.foldBtn.setAttribute('aria-label', (on ? 'Unfold run ' : 'Fold run ') + this.id);
      if (on) this.renderFoldSummary();
    }

    renderFoldSummary() {
      const bits = [];
      const d = this.duration();
      if (d) bits.push(d);
      const line = this.replyLine() || firstLine(this.text);
      if (line) bits.push(line);
      this.foldSummary.textContent = bits.join(' · ');
      this.foldSummary.title = line;
    }

    step(n, at) {
      n = Number(n) || 1;
      let s = this.steps.get(n);
      if (!s) {
        const textEl = el('p', { class: 'reply-text' });
        const tools = el('div', { class: 'tools' });
        const restarted = el('p', { class: 'restarted', hidden: true });
        const node = el('div', { class: 'step', dataset: { step: String(n) } },
          el('span', { class: 'step-label', text: 'step ' + n }), restarted, textEl, tools);
        s = { n, text: '', at, node, textEl, tools, restarted };
        this.steps.set(n, s);
        // Steps in order, whatever order their first events come in.
        const after = [...this.stepsBox.children].find((c) => Number(c.dataset.step) > n);
        this.stepsBox.insertBefore(node, after || null);
        this.renderTimeline();
      }
      return s;
    }

    setUserText(t) {
      this.text = t;
      this.userText.textContent = t;
      this.userBox.hidden = false;
    }

    render() {
      const st = statusOf(this);
      this.badge.textContent = st.text;
      this.badge.className = 'badge status st-' + st.cls;
      if (!this.end && this.status === 'queued' && this.position) {
        this.badge.title = this.position === 1 ? 'next to run' : this.position + ' runs from now; ' + (this.position - 1) + ' ahead of it';
      } else if (this.end && (this.end.error || this.end.reason)) {
        this.badge.title = this.end.error ? 'error: ' + this.end.error : 'reason: ' + this.end.reason;
      } else {
        this.badge.removeAttribute('title');
      }
      this.resumedBadge.hidden = !this.resumed;
      const live = !this.end;
      this.actions.hidden = !live;
      this.intBtn.hidden = this.status !== 'running';
      this.stopBtn.textContent = this.status === 'running' ? 'Stop' : 'Cancel';
      this.stopBtn.disabled = this.stopping === 'cancel';
      this.intBtn.disabled = !!this.stopping;
      this.node.classList.toggle('ended', !!this.end);
      this.node.classList.toggle('live', !this.end);
      this.node.classList.toggle('rolled-back', !!(this.end && this.end.rolled_back));
      this.renderFinal();
      this.renderTimeline();
      if (this.folded) this.renderFoldSummary();
    }

    renderFinal() {
      const f = this.final;
      if (!f) { this.finalBox.hidden = true; return; }
      // On a normal finish the last step's deltas spell the final text:
      // then that step is marked as the reply; otherwise the reply is
      // shown on its own.
      let last = null;
      for (const s of this.steps.values()) if (s.text && (!last || s.n > last.n)) last = s;
      for (const s of this.steps.values()) s.node.classList.toggle('is-final', s === last && last.text === f.text);
      const same = last && last.text === f.text;
      const parts = [];
      if (!same && f.text) parts.push(el('p', { class: 'reply-text', text: f.text }));
      const info = [];
      if (f.reason && f.reason !== 'stop') info.push('reason: ' + f.reason);
      if (f.usage) info.push('tokens: ' + (f.usage.input_tokens ?? '?') + ' in / ' + (f.usage.output_tokens ?? '?') + ' out');
      if (info.length) parts.push(el('p', { class: 'meta', text: info.join(' · ') }));
      this.finalBox.replaceChildren(...parts);
      this.finalBox.hidden = !parts.length;
    }

    renderTimeline() {
      const items = [];
      const t = this.times;
      const li = (label, at, cls) => el('li', { class: cls || null }, el('span', { class: 'tl-label', text: label }), at ? el('time', { datetime: at, text: fmtTime(at) }) : null);
      if (t.queued) items.push(li('queued', t.queued));
      if (t.started) items.push(li('started', t.started));
      for (const s of [...this.steps.values()].sort((a, b) => a.n - b.n)) {
        items.push(li('step ' + s.n + (s.restartedAttempt ? ' (attempt ' + s.restartedAttempt + ')' : ''), s.at));
      }
      if (this.end) {
        const st = statusOf(this);
        let label = st.text;
        const d = this.duration();
        if (d) label += ' after ' + d;
        items.push(li(label, t.ended, 'tl-end tl-' + st.cls));
      }
      this.timeline.replaceChildren(...items);
      this.timeline.hidden = !items.length;
    }

    addNote(text, cls) {
      this.notes.append(el('li', { class: cls || null, text }));
    }

    // stop sends user.interrupt for this run only. After an Interrupt,
    // Stop (cancel) stays available, for an agent slow to wrap up.
    async stop(mode) {
      if (this.end || this.stopping === 'cancel' || this.stopping === mode) return;
      this.stopping = mode;
      this.render();
      this.msg.hidden = true;
      try {
        const res = await postEvents(this.view.id, [{ type: 'user.interrupt', payload: { run_id: this.id, mode } }]);
        const r = (res.results || [])[0] || {};
        if (this.end) return; // its end came first: the block says how it ended
        if (!r.accepted) {
          this.flash('Nothing to stop: the run had already ended.');
        } else {
          this.flash(mode === 'interrupt' ? 'Interrupt sent: the agent is wrapping up.' : 'Stop sent.');
        }
      } catch (e) {
        if (isNetworkError(e)) noteServerDown();
        this.flash('Could not stop the run: ' + explain(e));
        if (isNetworkError(e)) this.msg.dataset.outage = '1';
        this.stopping = false;
        this.render();
      }
    }

    flash(text) {
      this.msg.textContent = text;
      this.msg.hidden = false;
    }
  }

  // ------------------------------------------------------- session view

  // The event types that always concern a run (docs/api.md).
  const RUN_EVENTS = new Set(['user.message', 'session.run_queued', 'session.run_started', 'agent.message.delta',
    'agent.step_restarted', 'agent.tool_use', 'session.tool_confirmation_requested', 'agent.tool_result',
    'agent.message', 'session.run_completed']);

  // The result a tool call gets when its run is stopped while it runs.
  const CUT_OUTPUT = 'tool call did not complete';

  // cmpKey orders the conversation's items (see RunBlock.key).
  function cmpKey(a, b) {
    for (let i = 0; i < Math.max(a.length, b.length); i++) {
      const d = (a[i] || 0) - (b[i] || 0);
      if (d) return d;
    }
    return 0;
  }
  let optimisticN = 0;

  class SessionView {
    constructor(id) {
      this.id = id;
      this.lastSeq = 0;
      this.runs = new Map();
      this.tools = new Map(); // tool_use_id → {run, node, summary, state, ...}
      this.notes = new Map(); // supplement_id → {node, status}
      this.pending = new Map(); // tool_use_id → confirmation
      this.answered = new Set();
      this.endedRuns = new Set();
      this.info = null;
      this.apiRuns = [];
      this.subagents = [];
      this.labels = new Map(); // child id → label
      this.closed = false;
      this.ctrl = null;
      this.chat = $('chat');
      this.refreshTimer = 0;
      this.wantSubagents = true;
      this.connected = false;
    }

    close() {
      this.closed = true;
      if (this.ctrl) this.ctrl.abort();
      clearTimeout(this.refreshTimer);
      clearTimeout(this.retryTimer);
    }

    // ---------------------------------------------------------- loading

    async open() {
      this.setStream('loading…', 'connecting');
      try {
        this.info = await api('GET', sessionPath(this.id));
      } catch (e) {
        if (this.closed) return;
        if (e instanceof ApiError && e.status === 404) {
          this.setStream('', '');
          setError($('session-error'), 'No such session (or it is not yours): ' + this.id);
          $('session-title').textContent = 'Session ' + shortId(this.id);
          return;
        }
        if (isNetworkError(e)) noteServerDown();
        setError($('session-error'), 'Could not load the session: ' + explain(e), true);
        // The stream loop retries and loads what it can.
      }
      if (this.closed) return;
      this.renderHead();
      await this.readLog();
      if (this.closed) return;
      this.mergePending();
      this.refresh();
      this.follow();
    }

    // readLog applies the log after lastSeq, page by page, up to its end.
    async readLog() {
      for (let guard = 0; guard < 10000 && !this.closed; guard++) {
        let page;
        try {
          page = await api('GET', sessionPath(this.id) + '/events?after=' + this.lastSeq + '&limit=1000');
        } catch (e) {
          if (isNetworkError(e)) noteServerDown();
          return; // the stream catches up from lastSeq
        }
        if (this.closed) return;
        const evs = page.events || [];
        for (const ev of evs) this.ingest(ev);
        if (!evs.length || this.lastSeq >= (page.last_seq || 0)) return;
      }
    }

    // -------------------------------------------------------- the stream

    setStream(text, state) {
      const n = $('stream-state');
      n.textContent = text;
      n.dataset.state = state || '';
    }

    reconnect() {
      if (this.ctrl) this.ctrl.abort();
    }

    async follow() {
      let backoff = 500;
      let attempt = 0;
      while (!this.closed) {
        const ctrl = new AbortController();
        this.ctrl = ctrl;
        let gotData = false;
        const openedAt = Date.now();
        let watchdog = 0;
        const pet = () => {
          clearTimeout(watchdog);
          // The server sends a comment at least every 15 s; silence for
          // much longer means a dead connection.
          watchdog = setTimeout(() => ctrl.abort(), 45000);
        };
        try {
          if (attempt > 0) this.setStream('reconnecting…', 'connecting');
          const used = auth.token;
          const headers = auth.headers({ Accept: 'text/event-stream' });
          if (this.lastSeq > 0) headers['Last-Event-ID'] = String(this.lastSeq);
          pet();
          const res = await fetch(sessionPath(this.id) + '/events/stream?after=' + this.lastSeq, {
            headers, cache: 'no-store', credentials: 'omit', signal: ctrl.signal,
          });
          if (res.status === 401) {
            clearTimeout(watchdog);
            this.setStream('waiting for a token', 'down');
            await auth.need(used);
            continue;
          }
          if (!res.ok) {
            let body = null;
            try { body = await res.json(); } catch (_) { /* not JSON */ }
            throw new ApiError(res.status, body);
          }
          noteServerUp();
          this.connected = true;
          this.setStream('live', 'live');
          if (attempt > 0 || !this.info) {
            // What happened while we were away: queue, approvals, runs,
            // the other sessions. The errors of the outage are over.
            clearOutageErrors();
            this.refresh(true);
            loadSessions();
          }
          attempt = 0;
          for await (const msg of sse(res.body, pet)) {
            if (this.closed) break;
            if (!msg.data) continue;
            let ev;
            try { ev = JSON.parse(msg.data); } catch (_) { continue; }
            if (typeof ev.seq !== 'number') continue;
            if (ev.seq > this.lastSeq + 1) {
              // Never expected (the stream has no gaps), but if it ever
              // happens the page fills the gap from the log first.
              await this.fillGap(ev.seq - 1);
            }
            this.ingest(ev);
            gotData = true;
          }
          if (this.closed) break;
          throw new Error('the stream ended');
        } catch (e) {
          if (this.closed) break;
          if (e instanceof ApiError && e.status === 404) {
            this.setStream('session not found', 'down');
            return;
          }
          if (isNetworkError(e) || (e instanceof ApiError && e.status >= 500)) noteServerDown();
        } finally {
          clearTimeout(watchdog);
        }
        if (this.closed) break;
        this.connected = false;
        if (gotData || Date.now() - openedAt > 5000) backoff = 500;
        attempt++;
        const wait = Math.round(backoff * (0.8 + Math.random() * 0.4));
        this.setStream('disconnected, retrying in ' + Math.max(1, Math.round(wait / 1000)) + ' s…', 'down');
        await new Promise((r) => { this.retryTimer = setTimeout(r, wait); });
        backoff = Math.min(backoff * 2, 10000);
      }
    }

    async fillGap(upTo) {
      while (this.lastSeq < upTo && !this.closed) {
        const page = await api('GET', sessionPath(this.id) + '/events?after=' + this.lastSeq + '&limit=1000');
        const evs = (page.events || []).filter((e) => e.seq <= upTo);
        if (!evs.length) return;
        for (const ev of evs) this.ingest(ev);
      }
    }

    // ingest applies one event exactly once, in seq order.
    ingest(ev) {
      if (ev.seq <= this.lastSeq) return; // a duplicate (replay after a reconnect)
      this.lastSeq = ev.seq;
      this.seqNow = ev.seq;
      const stick = wantStick();
      try {
        this.apply(ev);
      } catch (e) {
        console.error('rein console: event', ev.seq, ev.type, e);
      }
      if (stick) scrollToBottom();
    }

    // ---------------------------------------------------------- events

    run(runId, at) {
      let r = this.runs.get(runId);
      if (!r) {
        r = new RunBlock(this, runId);
        r.times.created = at || null;
        r.seq.message = this.seqNow || 0;
        this.runs.set(runId, r);
        this.placeRun(r);
        this.refold();
      }
      return r;
    }

    // place puts a node of the conversation where its key says (see
    // RunBlock.key; notes and system items are at their seq), searching from
    // the end, where new items land.
    place(node, key) {
      node._key = key;
      if (node.parentNode === this.chat) node.remove();
      let after = this.chat.lastElementChild;
      while (after && after._key && cmpKey(after._key, key) > 0) after = after.previousElementSibling;
      this.chat.insertBefore(node, after ? after.nextSibling : this.chat.firstChild);
    }

    // placeRun moves a run block when its place changed (it started, ended,
    // or moved in the queue).
    placeRun(r) {
      const k = r.key();
      if (r.node._key && cmpKey(r.node._key, k) === 0 && r.node.parentNode === this.chat) return;
      this.place(r.node, k);
    }

    // requeue moves the queued runs to their places after positions change.
    requeue() {
      for (const r of this.runs.values()) if (r.status === 'queued' && !r.end) { this.placeRun(r); r.render(); }
    }

    // refold folds every finished run but the newest run of the
    // conversation, unless the person folded or unfolded it.
    refold() {
      let last = null;
      for (const n of this.chat.querySelectorAll(':scope > .run')) last = n;
      for (const r of this.runs.values()) {
        const auto = !!r.end && r.node !== last;
        r.setFolded(r.userFold === null ? auto : r.userFold);
      }
    }

    flowItem(cls, ...kids) {
      const n = el('div', { class: 'flow ' + (cls || '') }, ...kids);
      this.place(n, [0, this.seqNow || 0]);
      return n;
    }

    apply(ev) {
      const p = ev.payload || {};
      const runId = ev.run_id || p.run_id || null;
      if (RUN_EVENTS.has(ev.type) && !runId) return; // malformed: these always name their run
      switch (ev.type) {
        case 'user.message': {
          // A message that arrives while runs are going may be the one that
          // interrupts or replaces them (when_busy): if one of them then
          // ends interrupted or cancelled, a person stopped it.
          for (const o of this.runs.values()) if (o.id !== runId && !o.end && o.status === 'running') o.nextMessage = true;
          const r = this.run(runId, ev.created_at);
          r.times.created = ev.created_at;
          r.seq.message = ev.seq;
          r.setUserText(p.text ?? '');
          if (!r.confirmed) {
            r.confirmed = true;
            r.node.classList.remove('optimistic');
          }
          this.placeRun(r); // to its place in the log
          r.render();
          this.refold();
          this.changed();
          break;
        }
        case 'session.run_queued': {
          const r = this.run(runId, ev.created_at);
          if (!r.end && r.status !== 'running') {
            r.status = 'queued';
            r.position = p.position || 0;
            // A run queued ahead of others (when_busy interrupt or
            // rollback) moves them back one place.
            if (r.position) {
              for (const o of this.runs.values()) {
                if (o !== r && !o.end && o.status === 'queued' && o.position >= r.position) o.position++;
              }
            }
          }
          r.times.queued = ev.created_at;
          this.requeue();
          r.render();
          this.changed();
          break;
        }
        case 'session.run_started': {
          const r = this.run(runId, ev.created_at);
          if (r.times.started) r.resumed = true;
          else { r.times.started = ev.created_at; r.seq.started = ev.seq; }
          this.leaveQueue(r);
          if (!r.end) r.status = 'running';
          this.placeRun(r);
          this.requeue();
          r.render();
          this.changed();
          break;
        }
        case 'agent.message.delta': {
          const r = this.run(runId, ev.created_at);
          const s = r.step(p.step, ev.created_at);
          s.text += p.text ?? '';
          s.textEl.textContent = s.text;
          if (r.final) r.renderFinal();
          break;
        }
        case 'agent.step_restarted': {
          const r = this.run(runId, ev.created_at);
          const s = r.step(p.step, ev.created_at);
          // Drop what this step streamed before: fresh deltas follow.
          s.text = '';
          s.textEl.textContent = '';
          s.restartedAttempt = p.attempt || 2;
          s.restarted.textContent = 'Restarted after its server was lost (attempt ' + s.restartedAttempt + '): the text below is from the new attempt.';
          s.restarted.hidden = false;
          r.resumed = true;
          r.render();
          break;
        }
        case 'agent.tool_use': {
          const r = this.run(runId, ev.created_at);
          const s = r.step(p.step, ev.created_at);
          this.toolNode(r, s, p);
          break;
        }
        case 'session.tool_confirmation_requested': {
          const r = this.run(runId, ev.created_at);
          const t = this.tools.get(p.tool_use_id);
          if (t) this.setToolState(t, 'awaiting approval', 'waiting');
          if (!this.answered.has(p.tool_use_id) && !r.end) {
            r.waiting.add(p.tool_use_id);
            r.render();
            this.addApproval({ tool_use_id: p.tool_use_id, run_id: runId, name: p.name, input: p.input, created_at: ev.created_at });
          }
          break;
        }
        case 'user.tool_confirmation': {
          this.answered.add(p.tool_use_id);
          this.removeApproval(p.tool_use_id);
          const t = this.tools.get(p.tool_use_id);
          if (t) {
            if (p.allow) this.setToolState(t, 'allowed, running', 'running');
            else this.setToolState(t, 'denied', 'error');
            if (!p.allow && p.deny_message) t.extra.textContent = 'Denied: ' + p.deny_message;
          }
          const r = runId && this.runs.get(runId);
          if (r) {
            r.addNote((p.allow ? 'Allowed ' : 'Denied ') + (t ? t.name : 'a tool call') + (p.deny_message ? ': ' + p.deny_message : ''), p.allow ? 'ok' : 'bad');
            if (r.waiting.delete(p.tool_use_id)) r.render();
          }
          break;
        }
        case 'agent.tool_result': {
          const r = this.run(runId, ev.created_at);
          let t = this.tools.get(p.tool_use_id);
          if (!t) t = this.toolNode(r, r.step(Math.max(1, ...r.steps.keys()), ev.created_at), { tool_use_id: p.tool_use_id, name: 'tool', input: undefined });
          t.output.textContent = pretty(p.output);
          t.outputBox.hidden = false;
          if (p.in_doubt) {
            r.resumed = true;
            r.render();
            this.setToolState(t, 'in doubt', 'doubt');
            t.extra.textContent = 'In doubt: the call was executing when its server was lost. It may or may not have taken effect, and it is never run again.';
            t.node.open = true;
          } else if (p.is_error && t.state === 'denied') {
            this.setToolState(t, 'denied', 'error');
          } else if (p.is_error && typeof p.output === 'string' && p.output.startsWith(CUT_OUTPUT)) {
            // The run was stopped while the call ran: not the tool's error.
            this.setToolState(t, 'stopped', 'stopped');
          } else if (p.is_error) {
            this.setToolState(t, 'error', 'error');
          } else {
            this.setToolState(t, 'done', 'ok');
          }
          if (r.waiting.delete(p.tool_use_id)) r.render();
          break;
        }
        case 'user.supplement': {
          this.noteItem(p.supplement_id, p.text, p.source);
          break;
        }
        case 'agent.supplement_consumed': {
          const n = this.notes.get(p.supplement_id);
          const where = 'seen in step ' + p.step + (runId ? ' of run ' + shortId(runId) : '');
          if (n) {
            n.status.textContent = where;
            n.status.className = 'badge st-completed';
            n.node.classList.add('consumed');
          }
          const r = runId && this.runs.get(runId);
          if (r) {
            const label = n ? 'Read the note “' + n.text + '” in step ' + p.step : 'Read a notice in step ' + p.step;
            r.addNote(label, 'note');
          }
          break;
        }
        case 'agent.message': {
          const r = this.run(runId, ev.created_at);
          r.final = { text: p.text ?? '', reason: p.reason, usage: p.usage || null };
          r.renderFinal();
          this.renderRuns();
          break;
        }
        case 'user.interrupt': {
          const r = runId ? this.runs.get(runId) : null;
          if (r && p.accepted) r.byYou = true;
          const what = (p.mode === 'interrupt' ? 'Interrupt' : 'Stop') + ' requested' + (p.accepted ? '' : ' (not accepted: nothing to stop)') + (p.message ? ': ' + p.message : '');
          if (r) r.addNote(what, 'stop');
          else this.flowItem('system', what);
          break;
        }
        case 'system.message': {
          this.flowItem('system', el('span', { class: 'who', text: 'System prompt set' }), el('p', { class: 'text', text: p.text || '(empty: back to the agent’s own)' }));
          break;
        }
        case 'session.run_completed': {
          const r = this.run(runId, ev.created_at);
          this.leaveQueue(r);
          r.end = p;
          if ((p.reason === 'interrupted' || p.reason === 'cancelled') && r.nextMessage) r.byYou = true;
          r.status = 'ended';
          r.stopping = false;
          r.waiting.clear();
          r.times.ended = ev.created_at;
          r.seq.ended = ev.seq;
          if (p.error) r.flash('Error: ' + p.error);
          else r.msg.hidden = true;
          this.endedRuns.add(runId);
          for (const [id, c] of this.pending) if (c.run_id === runId) this.removeApproval(id);
          for (const t of this.tools.values()) {
            if (t.run === r && (t.stateCls === 'waiting' || t.stateCls === 'running')) this.setToolState(t, 'stopped', 'stopped');
          }
          this.placeRun(r);
          this.requeue();
          r.render();
          this.refold();
          this.renderRuns();
          this.changed();
          break;
        }
        case 'subagent.started':
        case 'subagent.completed': {
          const child = p.child_id;
          const link = el('a', { href: '#/s/' + encodeURIComponent(child), text: this.labels.get(child) || ('subagent ' + shortId(child)), dataset: { childId: child } });
          if (ev.type === 'subagent.started') {
            this.flowItem('system subagent', 'Subagent ', link, ' started (task ' + shortId(p.task_id) + ')');
          } else {
            const st = String(p.status || '').toLowerCase();
            this.flowItem('system subagent', 'Subagent ', link, ' ' + (st || 'ended') + (p.reason ? ' (' + p.reason + ')' : ''),
              p.output ? el('p', { class: 'text', text: p.output }) : null);
          }
          this.wantSubagents = true;
          this.changed();
          break;
        }
        default:
          // New event types may be added; ignore the ones we do not know.
          break;
      }
    }

    // leaveQueue is a run leaving the queue (it started, or ended while
    // queued): the runs behind it move up one place.
    leaveQueue(r) {
      if (r.status !== 'queued' || !r.position) return;
      for (const o of this.runs.values()) {
        if (o !== r && !o.end && o.status === 'queued' && o.position > r.position) o.position--;
      }
      r.position = 0;
    }

    toolNode(r, s, p) {
      let t = this.tools.get(p.tool_use_id);
      if (t) return t;
      const state = el('span', { class: 'badge tool-state' }, 'running');
      const input = el('pre', { class: 'code', text: pretty(p.input) });
      const output = el('pre', { class: 'code' });
      const outputBox = el('div', { hidden: true }, el('span', { class: 'label', text: 'Result' }), output);
      const extra = el('p', { class: 'tool-extra' });
      const summary = el('summary', null, el('span', { class: 'tool-name', text: p.name || 'tool' }), ' ', state);
      const node = el('details', { class: 'tool', dataset: { toolUseId: p.tool_use_id || '' } },
        summary,
        el('div', { class: 'tool-body' },
          el('span', { class: 'label', text: 'Input' }), input, outputBox, extra,
          el('p', { class: 'meta', text: 'call ' + (p.tool_use_id || '') })));
      t = { run: r, node, name: p.name || 'tool', stateEl: state, state: 'running', stateCls: 'running', output, outputBox, extra };
      this.tools.set(p.tool_use_id, t);
      s.tools.append(node);
      this.setToolState(t, 'running', 'running');
      return t;
    }

    setToolState(t, text, cls) {
      t.state = text;
      t.stateCls = cls;
      t.stateEl.textContent = text;
      t.stateEl.className = 'badge tool-state ts-' + cls;
      t.node.classList.toggle('in-doubt', cls === 'doubt');
    }

    noteItem(id, text, source, optimistic) {
      let n = this.notes.get(id);
      if (n) {
        if (!optimistic && n.node.classList.contains('optimistic')) {
          n.node.classList.remove('optimistic');
          this.place(n.node, [0, this.seqNow || 0]);
        }
        return n;
      }
      const status = el('span', { class: 'badge st-queued', text: 'queued' });
      const node = el('div', { class: 'flow note' + (optimistic ? ' optimistic' : ''), dataset: { supplementId: id } },
        el('span', { class: 'who', text: source === 'parent' ? 'Note from the parent agent' : 'Note' }), ' ', status,
        el('p', { class: 'text', text }));
      n = { node, status, text };
      this.notes.set(id, n);
      if (optimistic) this.place(node, [2, ++optimisticN]);
      else this.place(node, [0, this.seqNow || 0]);
      return n;
    }

    // ------------------------------------------------------- approvals

    addApproval(c) {
      if (this.pending.has(c.tool_use_id) || this.answered.has(c.tool_use_id) || this.endedRuns.has(c.run_id)) return;
      const err = el('p', { class: 'error', role: 'alert', hidden: true });
      const denyId = 'deny-' + c.tool_use_id;
      const deny = el('input', { id: denyId, class: 'deny-message', autocomplete: 'off', placeholder: 'e.g. read-only please' });
      const allowBtn = el('button', { type: 'button', class: 'allow primary' }, 'Allow');
      const denyBtn = el('button', { type: 'submit', class: 'deny danger' }, 'Deny');
      const card = el('form', { class: 'approval', dataset: { toolUseId: c.tool_use_id, runId: c.run_id || '' }, 'aria-label': 'Approve or deny ' + (c.name || 'a tool call') },
        el('p', { class: 'approval-title' }, el('strong', { text: c.name || 'tool call' }), ' wants to run', c.run_id ? ' (run ' + shortId(c.run_id) + ')' : '', c.created_at ? ', asked at ' + fmtTime(c.created_at) : ''),
        el('pre', { class: 'code', text: pretty(c.input) }),
        el('label', { for: denyId, text: 'Message for the agent if you deny (optional)' }), deny,
        el('div', { class: 'actions' }, allowBtn, denyBtn), err);
      const answer = async (allow) => {
        allowBtn.disabled = denyBtn.disabled = true;
        setError(err, '');
        const payload = { tool_use_id: c.tool_use_id, allow };
        if (!allow && deny.value.trim()) payload.deny_message = deny.value.trim();
        try {
          await postEvents(this.id, [{ type: 'user.tool_confirmation', payload }]);
          this.answered.add(c.tool_use_id);
          this.removeApproval(c.tool_use_id);
        } catch (e) {
          if (e instanceof ApiError && (e.code === 'conflict' || e.code === 'not_found')) {
            // Answered elsewhere, or its run ended: nothing to decide.
            this.answered.add(c.tool_use_id);
            this.removeApproval(c.tool_use_id);
            flashChat('That call no longer waits for an answer: ' + e.message);
            return;
          }
          if (isNetworkError(e)) noteServerDown();
          setError(err, 'Could not send the answer: ' + explain(e, true), isNetworkError(e));
          allowBtn.disabled = denyBtn.disabled = false;
        }
      };
      allowBtn.addEventListener('click', () => answer(true));
      card.addEventListener('submit', (e) => { e.preventDefault(); answer(false); });
      this.pending.set(c.tool_use_id, { ...c, node: card });
      const rb = c.run_id && this.runs.get(c.run_id);
      if (rb && !rb.end && !rb.waiting.has(c.tool_use_id)) { rb.waiting.add(c.tool_use_id); rb.render(); }
      $('approval-cards').append(card);
      $('approvals').hidden = false;
    }

    removeApproval(id) {
      const c = this.pending.get(id);
      if (!c) return;
      const hadFocus = c.node.contains(document.activeElement);
      c.node.remove();
      this.pending.delete(id);
      $('approvals').hidden = this.pending.size === 0;
      if (hadFocus) $('message').focus();
    }

    // mergePending adds the calls the server lists as waiting (calls from
    // before a restart included) to what the events showed.
    mergePending() {
      const list = (this.info && this.info.pending_confirmations) || [];
      for (const c of list) this.addApproval(c);
    }

    // ------------------------------------------------ the server's view

    // changed schedules a refresh of the session, its runs and subagents.
    changed() {
      updateComposer(); // busy or idle follows the events at once
      clearTimeout(this.refreshTimer);
      this.refreshTimer = setTimeout(() => this.refresh(), 150);
      soonSessions(300); // its title, busy marker and waiting count in the list
    }

    async refresh(all) {
      if (this.closed) return;
      const subs = all || this.wantSubagents;
      this.wantSubagents = false;
      try {
        const [info, runs, children] = await Promise.all([
          api('GET', sessionPath(this.id)),
          api('GET', sessionPath(this.id) + '/runs'),
          subs ? api('GET', sessionPath(this.id) + '/subagents') : Promise.resolve(null),
        ]);
        if (this.closed) return;
        this.info = info;
        this.apiRuns = runs.runs || [];
        if (children) {
          this.subagents = children.subagents || [];
          for (const c of this.subagents) if (c.label) this.labels.set(c.id, c.label);
          this.renderSubagents();
          for (const a of this.chat.querySelectorAll('a[data-child-id]')) {
            const l = this.labels.get(a.dataset.childId);
            if (l) a.textContent = l;
          }
          if (this.subagents.some((c) => !sessions.find((s) => s.id === c.id))) loadSessions();
        }
        this.mergePending();
        // Queue positions move as runs ahead end.
        (info.queued_run_ids || []).forEach((id, i) => {
          const r = this.runs.get(id);
          if (r && !r.end && r.status !== 'running') { r.status = 'queued'; r.position = i + 1; }
        });
        this.requeue();
        this.renderHead();
        this.renderRuns();
      } catch (e) {
        if (subs) this.wantSubagents = true;
        if (e instanceof TypeError && /fetch/i.test(e.message)) noteServerDown();
        else if (!(e instanceof ApiError) && e.name !== 'AbortError') console.error('rein console: refresh', e);
      }
    }

    busy() {
      for (const r of this.runs.values()) if (!r.end) return true;
      return !!(this.info && this.info.state === 'busy' && !this.connected && this.runs.size === 0);
    }

    renderHead() {
      const info = this.info || { id: this.id };
      const meta = sessions.find((s) => s.id === this.id) || info;
      let title = sessionTitle(meta.metadata ? meta : info);
      if (info.parent_session_id && !(info.metadata && info.metadata.title)) {
        // A child's label is in its parent's list of subagents.
        if (this.childLabel === undefined) {
          this.childLabel = null;
          api('GET', sessionPath(info.parent_session_id) + '/subagents').then((d) => {
            const me = (d.subagents || []).find((c) => c.id === this.id);
            if (me && me.label && !this.closed) { this.childLabel = me.label; this.renderHead(); }
          }).catch(() => {});
        }
        if (this.childLabel) title = this.childLabel + ' (subagent ' + shortId(this.id) + ')';
      }
      $('session-title').textContent = title;
      const busy = this.busy();
      const state = $('session-state');
      state.textContent = busy ? 'busy' : 'idle';
      state.className = 'badge ' + (busy ? 'st-running' : 'st-idle');
      const bits = [this.id];
      if (info.agent) bits.push('agent ' + info.agent);
      if (info.created_at) bits.push('created ' + fmtDateTime(info.created_at));
      $('session-meta').textContent = bits.join(' · ');
      const parent = $('session-parent');
      if (info.parent_session_id) {
        parent.replaceChildren('Subagent of ', el('a', { href: '#/s/' + encodeURIComponent(info.parent_session_id), text: 'session ' + shortId(info.parent_session_id) }));
        parent.hidden = false;
      } else {
        parent.hidden = true;
      }
      updateComposer();
    }

    renderRuns() {
      const tbody = $('runs-table').querySelector('tbody');
      // Newest first in the order the runs ran or will run (the
      // conversation's order, reversed): after a Replace the replacement is
      // below a run queued before it, which runs after it.
      const keyOf = (a, i) => { const b = this.runs.get(a.run_id); return b ? b.key() : [3, -i]; };
      const ordered = this.apiRuns.map((a, i) => [keyOf(a, i), a]).sort((x, y) => cmpKey(y[0], x[0])).map((x) => x[1]);
      const rows = ordered.map((a) => {
        const b = this.runs.get(a.run_id);
        // The log may be ahead of the last refresh: what it shows wins.
        const st = b && (b.end || (!a.ended_at && b.status !== 'created')) ? statusOf(b) : apiStatus(a);
        const started = a.started_at || (b && b.times.started);
        const ended = a.ended_at || (b && b.end && b.times.ended);
        let dur = '';
        if (started && ended) dur = fmtDuration(new Date(ended) - new Date(started));
        else if (started) dur = fmtDuration(Date.now() - new Date(started)) + ' so far';
        else if (ended) dur = 'never ran';
        const u = a.usage || (b && b.final && b.final.usage);
        const tokens = u && (u.input_tokens || u.output_tokens) ? fmtCount(u.input_tokens) + ' / ' + fmtCount(u.output_tokens) : '';
        const exact = tokens ? (u.input_tokens ?? '?') + ' input / ' + (u.output_tokens ?? '?') + ' output tokens' : null;
        const why = a.error || (b && b.end && b.end.error) || a.reason || (b && b.end && b.end.reason) || '';
        const go = el('button', { type: 'button', class: 'link', title: a.run_id, 'aria-label': 'Show run ' + a.run_id,
          onclick: () => {
            const blk = this.runs.get(a.run_id);
            if (!blk) return;
            if (blk.folded) { blk.userFold = false; blk.setFolded(false); }
            blk.node.scrollIntoView({ block: 'start' });
            blk.node.focus({ preventScroll: true });
          } }, shortId(a.run_id));
        return el('tr', { dataset: { runId: a.run_id } },
          el('td', { title: 'created ' + fmtDateTime(a.created_at) }, go),
          el('td', { title: why ? 'reason: ' + why : null }, el('span', { class: 'badge st-' + st.cls, text: st.text })),
          el('td', { class: 'num', text: dur }),
          el('td', { class: 'num', text: tokens, title: exact }));
      });
      tbody.replaceChildren(...rows);
      $('runs-count').textContent = rows.length ? '(' + rows.length + ')' : '';
      $('runs-empty').hidden = rows.length > 0;
    }

    renderSubagents() {
      const ul = $('subagents');
      ul.replaceChildren(...this.subagents.map((c) => el('li', { dataset: { childId: c.id } },
        el('a', { href: '#/s/' + encodeURIComponent(c.id), text: c.label || shortId(c.id), title: c.id }), ' ',
        el('span', { class: 'badge ' + (c.state === 'running' ? 'st-running' : 'st-idle'), text: c.state }),
        c.current_run_id ? el('span', { class: 'sub', text: ' run ' + shortId(c.current_run_id) }) : null)));
      $('subagents-count').textContent = this.subagents.length ? '(' + this.subagents.length + ')' : '';
      $('subagents-empty').hidden = this.subagents.length > 0;
    }

    // ---------------------------------------------------------- sending

    async send(mode) {
      const box = $('message');
      const text = box.value;
      if (!text.trim()) { box.focus(); return; }
      let cid = ss.get(K.cid(this.id));
      if (!cid) { cid = randomId('web-'); ss.set(K.cid(this.id), cid); }
      const payload = { text, client_id: cid };
      if (mode) payload.when_busy = mode;
      setError($('send-error'), '');
      setSending(true);
      try {
        const res = await postEvents(this.id, [{ type: 'user.message', payload }]);
        const r = (res.results || [])[0] || {};
        ss.set(K.cid(this.id), null);
        if (current !== this) return; // the user opened another session meanwhile
        // Only now is the text safe to clear.
        if (box.value === text) box.value = '';
        ss.set(K.draft(this.id), box.value || null);
        if (r.run_id) {
          let blk = this.runs.get(r.run_id);
          if (!blk) {
            blk = new RunBlock(this, r.run_id);
            blk.node.classList.add('optimistic');
            blk.optimisticN = ++optimisticN;
            this.runs.set(r.run_id, blk);
            blk.setUserText(text);
            this.placeRun(blk);
            this.refold();
          }
          if (!blk.end && blk.status === 'created') blk.status = r.status === 'QUEUED' ? 'queued' : 'running';
          this.placeRun(blk);
          blk.render();
          scrollToBottom();
          this.changed();
        }
        updateComposer();
      } catch (e) {
        if (current !== this) return;
        if (isNetworkError(e)) {
          noteServerDown();
          // The request may have reached the server and only its answer
          // been lost: the client_id makes a resend safe.
          setError($('send-error'), 'Could not reach the server, or its answer was lost (' + (e.message || 'network error') + '). Your text is kept: send it again, it will not run twice.', true);
        } else {
          setError($('send-error'), 'Not sent. ' + explain(e, true));
        }
        if (e instanceof ApiError && e.code === 'session_busy') this.changed();
      } finally {
        setSending(false);
      }
    }

    async addNote() {
      const box = $('note');
      const text = box.value;
      if (!text.trim()) { box.focus(); return; }
      let id = ss.get(K.noteId(this.id));
      if (!id) { id = randomId('note-'); ss.set(K.noteId(this.id), id); }
      setError($('note-error'), '');
      $('add-note').disabled = true;
      try {
        const res = await postEvents(this.id, [{ type: 'user.supplement', payload: { text, id } }]);
        const r = (res.results || [])[0] || {};
        ss.set(K.noteId(this.id), null);
        if (current !== this) return;
        if (box.value === text) box.value = '';
        ss.set(K.noteDraft(this.id), box.value || null);
        this.noteItem(r.supplement_id || id, text, 'user', true);
        scrollToBottom();
      } catch (e) {
        if (current !== this) return;
        if (isNetworkError(e)) noteServerDown();
        setError($('note-error'), 'Note not added. ' + explain(e, true), isNetworkError(e));
      } finally {
        $('add-note').disabled = false;
      }
    }
  }

  // apiStatus is the words for a run known only from GET …/runs (the log
  // has not shown it yet).
  function apiStatus(a) {
    switch (a.status) {
      case 'RUNNING': return { text: 'running', cls: 'running' };
      case 'QUEUED': return { text: 'queued' + (a.position ? ' · ' + ordinal(a.position) : ''), cls: 'queued' };
      case 'CREATED': return { text: 'starting', cls: 'queued' };
    }
    return statusOf({ end: { status: a.status, reason: a.reason }, times: { started: a.started_at }, waiting: new Set() });
  }

  // sse yields the messages of a text/event-stream body (the WHATWG
  // format: fields, comments, CR/LF/CRLF line ends). onBytes is called on
  // every chunk (keepalive comments included).
  async function* sse(body, onBytes) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    let data = [];
    let id = null;
    let type = '';
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        if (onBytes) onBytes();
        buf += value;
        for (;;) {
          const m = /\r\n|\r|\n/.exec(buf);
          if (!m) break;
          if (m[0] === '\r' && m.index === buf.length - 1) break; // maybe CRLF split across chunks
          const line = buf.slice(0, m.index);
          buf = buf.slice(m.index + m[0].length);
          if (line === '') {
            if (data.length) yield { id, type: type || 'message', data: data.join('\n') };
            data = [];
            type = '';
            continue;
          }
          if (line[0] === ':') continue;
          const c = line.indexOf(':');
          const field = c < 0 ? line : line.slice(0, c);
          let val = c < 0 ? '' : line.slice(c + 1);
          if (val[0] === ' ') val = val.slice(1);
          if (field === 'data') data.push(val);
          else if (field === 'id') id = val;
          else if (field === 'event') type = val;
        }
      }
    } finally {
      reader.cancel().catch(() => {});
    }
  }

  // ---------------------------------------------------------- the chat

  // The page scrolls (the composer is docked at the bottom): new output
  // keeps the view at the bottom only if the reader was already there.
  function nearBottom() {
    const d = document.scrollingElement || document.documentElement;
    return d.scrollTop + window.innerHeight >= d.scrollHeight - 120;
  }

  // wantStick is nearBottom read at most once per frame: a burst of events
  // (a log replayed on open) forces one layout, not one per event.
  let stickFrame = null;
  function wantStick() {
    if (stickFrame === null) {
      stickFrame = nearBottom();
      requestAnimationFrame(() => { stickFrame = null; });
    }
    return stickFrame;
  }

  let scrollQueued = false;
  function scrollToBottom() {
    if (scrollQueued) return;
    scrollQueued = true;
    requestAnimationFrame(() => {
      scrollQueued = false;
      const d = document.scrollingElement || document.documentElement;
      window.scrollTo(0, d.scrollHeight);
    });
  }

  // clearOutageErrors takes away the error boxes that said the server could
  // not be reached, once it can be again.
  function clearOutageErrors() {
    for (const n of ['session-error', 'sessions-error', 'new-error', 'note-error', 'send-error']) {
      if ($(n).dataset.outage) setError($(n), '');
    }
    setError($('session-error'), '');
    setError($('sessions-error'), '');
    if (current) {
      for (const r of current.runs.values()) if (r.msg.dataset.outage) { r.msg.hidden = true; delete r.msg.dataset.outage; }
      for (const c of current.pending.values()) {
        const e = c.node.querySelector('.error');
        if (e && e.dataset.outage) setError(e, '');
      }
    }
  }

  function flashChat(text) {
    if (!current) return;
    current.flowItem('system', text);
  }

  // ----------------------------------------------------------- composer

  let sending = false;
  function setSending(on) {
    sending = on;
    $('send').disabled = on;
    for (const b of $('send-menu').querySelectorAll('button')) b.disabled = on;
  }

  function updateComposer() {
    const busy = !!(current && current.busy());
    $('send').textContent = busy ? 'Send after current' : 'Send';
    $('send').dataset.when = busy ? 'enqueue' : '';
    $('busy-hint').hidden = !busy;
    const st = $('session-state');
    if (current) {
      st.textContent = busy ? 'busy' : 'idle';
      st.className = 'badge ' + (busy ? 'st-running' : 'st-idle');
    }
  }

  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    if (!current || sending) return;
    current.send($('send').dataset.when || '');
  });

  $('message').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing && !e.altKey) {
      e.preventDefault();
      $('composer').requestSubmit();
    }
  });
  $('message').addEventListener('input', () => {
    if (!current) return;
    ss.set(K.draft(current.id), $('message').value || null);
    ss.set(K.cid(current.id), null); // an edited message is a new message
  });

  $('note-form').addEventListener('submit', (e) => {
    e.preventDefault();
    if (current) current.addNote();
  });
  $('note').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing && !e.altKey) {
      e.preventDefault();
      $('note-form').requestSubmit();
    }
  });
  $('note').addEventListener('input', () => {
    if (!current) return;
    ss.set(K.noteDraft(current.id), $('note').value || null);
    ss.set(K.noteId(current.id), null);
  });

  // The "more ways to send" menu.
  const menuBtn = $('send-menu-button');
  const menu = $('send-menu');
  const menuItems = () => [...menu.querySelectorAll('[role=menuitem]')];
  function openMenu(focusFirst) {
    menu.hidden = false;
    menuBtn.setAttribute('aria-expanded', 'true');
    if (focusFirst) menuItems()[0].focus();
  }
  function closeMenu(refocus) {
    if (menu.hidden) return;
    menu.hidden = true;
    menuBtn.setAttribute('aria-expanded', 'false');
    if (refocus) menuBtn.focus();
  }
  menuBtn.addEventListener('click', () => (menu.hidden ? openMenu(true) : closeMenu(false)));
  menuBtn.addEventListener('keydown', (e) => {
    if (e.key === 'ArrowDown' || e.key === 'ArrowUp') { e.preventDefault(); openMenu(true); }
  });
  menu.addEventListener('keydown', (e) => {
    const items = menuItems();
    const i = items.indexOf(document.activeElement);
    if (e.key === 'ArrowDown') { e.preventDefault(); items[(i + 1) % items.length].focus(); }
    else if (e.key === 'ArrowUp') { e.preventDefault(); items[(i - 1 + items.length) % items.length].focus(); }
    else if (e.key === 'Home') { e.preventDefault(); items[0].focus(); }
    else if (e.key === 'End') { e.preventDefault(); items[items.length - 1].focus(); }
    else if (e.key === 'Escape') { e.preventDefault(); closeMenu(true); }
    else if (e.key === 'Tab') closeMenu(false);
  });
  menu.addEventListener('click', (e) => {
    const b = e.target.closest('[data-when]');
    if (!b || !current || sending) return;
    closeMenu(false);
    $('message').focus();
    current.send(b.dataset.when);
  });
  document.addEventListener('click', (e) => {
    if (!menu.hidden && !menu.contains(e.target) && e.target !== menuBtn) closeMenu(false);
  });

  // ------------------------------------------------------------ routing

  function route() {
    const m = /^#\/s\/([^/]+)$/.exec(location.hash);
    const id = m ? decodeURIComponent(m[1]) : '';
    if (current && current.id === id) return;
    if (current) current.close();
    current = null;
    $('chat').replaceChildren();
    $('approval-cards').replaceChildren();
    $('approvals').hidden = true;
    $('runs-table').querySelector('tbody').replaceChildren();
    $('subagents').replaceChildren();
    for (const n of ['session-error', 'send-error', 'note-error']) setError($(n), '');
    if (!id) {
      $('session').hidden = true;
      $('empty').hidden = false;
      renderSessionList();
      return;
    }
    $('empty').hidden = true;
    $('session').hidden = false;
    $('message').value = ss.get(K.draft(id)) || '';
    $('note').value = ss.get(K.noteDraft(id)) || '';
    current = new SessionView(id);
    $('session-title').textContent = 'Session ' + shortId(id);
    $('session-meta').textContent = id;
    $('runs-empty').hidden = false;
    $('subagents-empty').hidden = false;
    $('runs-count').textContent = '';
    $('subagents-count').textContent = '';
    renderSessionList();
    updateComposer();
    current.open();
    if (window.matchMedia('(max-width: 720px)').matches) $('session').scrollIntoView({ block: 'start' });
  }

  window.addEventListener('hashchange', route);

  // Durations of running runs tick.
  setInterval(() => {
    if (current && current.apiRuns.some((a) => a.started_at && !a.ended_at && !(current.runs.get(a.run_id) || {}).end)) current.renderRuns();
  }, 1000);

  window.addEventListener('focus', () => { if (!document.hidden) loadSessions(); });

  // For the browser tests and the curious: the console's view of things.
  window.reinConsole = {
    get sessionId() { return current ? current.id : null; },
    get lastSeq() { return current ? current.lastSeq : 0; },
    get connected() { return !!(current && current.connected); },
  };

  // ---------------------------------------------------------------- start

  async function start() {
    if (auth.token) $('change-token').hidden = false;
    await loadSessions(); // asks for the token first when one is needed
    loadAgents();
    route();
  }
  start();
})();
