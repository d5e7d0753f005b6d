import { afterEach, describe, expect, it, vi } from 'vitest';
import { EventHub } from '../src/sse.js';

// A stand-in for the browser's EventSource, driven by the test.
class FakeEventSource {
  static all = [];
  static CONNECTING = 0; static OPEN = 1; static CLOSED = 2;
  constructor(url) { this.url = url; this.readyState = 0; this.listeners = {}; FakeEventSource.all.push(this); }
  addEventListener(type, fn) { (this.listeners[type] ||= []).push(fn); }
  close() { this.readyState = 2; }
  open() { this.readyState = 1; this.onopen && this.onopen(); }
  send(type, data, id) { for (const fn of this.listeners[type] || []) fn({ type, data: JSON.stringify(data), lastEventId: id }); }
  fail() { this.readyState = 2; this.onerror && this.onerror(); }
}

afterEach(() => { vi.unstubAllGlobals(); vi.useRealTimers(); FakeEventSource.all = []; });

describe('EventHub', () => {
  it('delivers events, and after the browser gives up reconnects with backoff and asks for a resync', () => {
    vi.useFakeTimers();
    vi.stubGlobal('EventSource', FakeEventSource);
    vi.stubGlobal('BroadcastChannel', undefined);
    const hub = new EventHub();
    const got = [];
    const states = [];
    hub.subscribe((m) => got.push(m));
    hub.onState((s) => states.push(s));
    const first = FakeEventSource.all[0];
    expect(first.url).toBe('/api/events');
    first.open();
    first.send('generation_update', { generation_id: 'a', status: 'processing' }, '7');
    expect(got).toEqual([{ event: 'generation_update', data: { generation_id: 'a', status: 'processing' }, id: '7' }]);
    first.fail();
    expect(states.at(-1)).toBe('reconnecting');
    vi.advanceTimersByTime(999);
    expect(FakeEventSource.all).toHaveLength(1);
    vi.advanceTimersByTime(1);
    expect(FakeEventSource.all).toHaveLength(2);
    FakeEventSource.all[1].fail(); // the next wait doubles
    vi.advanceTimersByTime(1999);
    expect(FakeEventSource.all).toHaveLength(2);
    vi.advanceTimersByTime(1);
    FakeEventSource.all[2].open();
    expect(states.at(-1)).toBe('open');
    expect(got.at(-1)).toEqual({ event: 'resync' });
    hub.close();
  });
});
