// Server-sent events.
import { ApiError, errorMessage, loginRedirect } from './api.js';
//
// 1. parseSSE: an incremental parser of the text/event-stream format for
//    streams read with fetch (POST /api/rewrite cannot use EventSource).
//    Frames may be split anywhere across network reads.
// 2. EventHub: the one /api/events stream of the browser. Without HTTP/2 a
//    browser allows 6 connections per host for all tabs together, so one tab
//    (the holder of a Web Lock) keeps the EventSource open and relays every
//    event to the other tabs over a BroadcastChannel; when it closes, the
//    next tab takes over. Where either API is missing each tab listens itself.

export function createSSEParser(onEvent) {
  let buf = '';
  let event = '';
  let data = [];
  let id = null;
  const dispatch = () => {
    if (data.length) onEvent({ event: event || 'message', data: data.join('\n'), id });
    event = '';
    data = [];
  };
  return {
    push(chunk) {
      buf += chunk;
      let nl;
      while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
        // A lone \r at the very end may be the first half of \r\n.
        if (buf[nl] === '\r' && nl === buf.length - 1) break;
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + (buf[nl] === '\r' && buf[nl + 1] === '\n' ? 2 : 1));
        if (line === '') { dispatch(); continue; }
        if (line[0] === ':') continue; // comment / heartbeat
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? '' : line.slice(colon + 1);
        if (value[0] === ' ') value = value.slice(1);
        if (field === 'event') event = value;
        else if (field === 'data') data.push(value);
        else if (field === 'id' && !value.includes('\0')) id = value;
      }
    },
    end() { if (buf) { this.push('\n'); } dispatch(); },
  };
}

/** POSTs JSON and calls onEvent for each SSE event of the streamed answer. */
export async function postSSE(path, body, onEvent, { signal } = {}) {
  const res = await fetch(path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream' },
    body: JSON.stringify(body),
    signal,
  });
  const type = res.headers.get('content-type') || '';
  if (res.status === 401) loginRedirect();
  if (!res.ok || !type.includes('text/event-stream')) {
    const text = await res.text();
    let parsed = text;
    try { parsed = JSON.parse(text); } catch { /* plain text */ }
    throw new ApiError(res.status, errorMessage(res.status, parsed, `${path}: HTTP ${res.status} ${res.statusText}`), parsed);
  }
  const parser = createSSEParser(onEvent);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    parser.push(decoder.decode(value, { stream: true }));
  }
  parser.push(decoder.decode());
  parser.end();
}

const EVENT_TYPES = ['generation_update', 'generation_deleted', 'generation_preview', 'status_update', 'resync'];

/** After a refused stream: to the login page when the server wants a token we no longer have. */
export async function checkSession(fetchFn = typeof fetch !== 'undefined' ? fetch : null, loc) {
  if (!fetchFn) return false;
  try {
    const res = await fetchFn('/api/session', { headers: { Accept: 'application/json' } });
    const s = res.ok ? await res.json() : null;
    if (s && s.auth_required && !s.authenticated) return loginRedirect(loc);
  } catch { /* the server is away: the stream's own retries cover it */ }
  return false;
}

export class EventHub {
  constructor({ url = '/api/events', channel = 'mmh3-events', lockName = 'mmh3-events-leader' } = {}) {
    this.url = url;
    this.listeners = new Set();
    this.stateListeners = new Set();
    this.state = 'connecting';
    this.leader = false;
    this.lastId = null;
    this.es = null;
    this.retry = 1000;
    this.closed = false;
    this.everOpened = false;
    this.bc = typeof BroadcastChannel !== 'undefined' ? new BroadcastChannel(channel) : null;
    if (this.bc) this.bc.onmessage = (m) => this.onRelay(m.data);
    const locks = typeof navigator !== 'undefined' && navigator.locks;
    if (locks && this.bc) {
      // Held for the life of the tab; released when the tab goes away.
      locks.request(lockName, () => new Promise((release) => {
        this.releaseLock = release;
        if (this.closed) { release(); return; }
        this.leader = true;
        this.connect();
      }));
      if (this.bc) this.bc.postMessage({ type: 'hello' });
    } else {
      this.leader = true;
      this.connect();
    }
  }

  subscribe(fn) { this.listeners.add(fn); return () => this.listeners.delete(fn); }
  onState(fn) { this.stateListeners.add(fn); fn(this.state); return () => this.stateListeners.delete(fn); }

  setState(s) {
    if (this.state === s) return;
    this.state = s;
    for (const fn of this.stateListeners) fn(s);
    if (this.leader && this.bc) this.bc.postMessage({ type: 'state', state: s });
  }

  emit(msg) { for (const fn of this.listeners) fn(msg); }

  onRelay(m) {
    if (!m || typeof m !== 'object') return;
    if (!this.leader) this.everOpened = true; // a later takeover must resync the gap
    if (m.type === 'event' && !this.leader) this.emit(m.msg);
    else if (m.type === 'state' && !this.leader) {
      // The leader's (re)connection is ours too: resync after a gap.
      this.setState(m.state);
      if (m.state === 'open') this.emit({ event: 'resync' });
    } else if (m.type === 'hello' && this.leader && this.bc) this.bc.postMessage({ type: 'state', state: this.state });
  }

  connect() {
    if (this.closed) return;
    const url = this.url;
    const es = new EventSource(url);
    this.es = es;
    es.onopen = () => {
      this.retry = 1000;
      this.setState('open');
      // After any gap the list may be stale; a resync refetches what is shown.
      if (this.everOpened) this.deliver({ event: 'resync' });
      this.everOpened = true;
    };
    const handle = (e) => {
      if (e.lastEventId) this.lastId = e.lastEventId;
      let data = e.data;
      try { data = JSON.parse(e.data); } catch { /* keep text */ }
      this.deliver({ event: e.type, data, id: e.lastEventId || null });
    };
    for (const t of EVENT_TYPES) es.addEventListener(t, handle);
    es.onerror = () => {
      if (es.readyState === EventSource.CLOSED) {
        // The browser gave up (HTTP error, wrong type): retry with backoff.
        // EventSource hides the status; a server that requires tokens says
        // whether ours is gone (revoked, expired cookie): then log in again.
        es.close();
        checkSession();
        this.setState('reconnecting');
        const wait = this.retry;
        this.retry = Math.min(this.retry * 2, 15000);
        this.timer = setTimeout(() => this.connect(), wait);
      } else {
        this.setState('reconnecting'); // EventSource retries on its own
      }
    };
  }

  deliver(msg) {
    this.emit(msg);
    if (this.bc) this.bc.postMessage({ type: 'event', msg });
  }

  close() {
    this.closed = true;
    clearTimeout(this.timer);
    if (this.es) this.es.close();
    if (this.releaseLock) this.releaseLock();
    if (this.bc) this.bc.close();
  }
}
