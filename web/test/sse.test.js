import { describe, expect, it } from 'vitest';
import { createSSEParser } from '../src/sse.js';

const collect = (chunks) => {
  const out = [];
  const p = createSSEParser((e) => out.push(e));
  for (const c of chunks) p.push(c);
  p.end();
  return out;
};

describe('SSE parser', () => {
  it('parses events, ids, comments and multi-line data', () => {
    const text = 'retry: 2000\n\n: ping 1\n\nid: 7\nevent: token\ndata: Hel\n\nevent: token\ndata: a\ndata: b\n\n';
    expect(collect([text])).toEqual([
      { event: 'token', data: 'Hel', id: '7' },
      { event: 'token', data: 'a\nb', id: '7' },
    ]);
  });
  it('gives the same events however the stream is split', () => {
    const text = 'event: token\r\ndata: {"token":"A"}\r\n\r\nevent: done\r\ndata: {}\r\n\r\n';
    const whole = collect([text]);
    for (let i = 1; i < text.length; i++) expect(collect([text.slice(0, i), text.slice(i)])).toEqual(whole);
    expect(collect(text.split(''))).toEqual(whole);
    expect(whole.map((e) => e.event)).toEqual(['token', 'done']);
  });
  it('defaults the event name to message and ignores empty events', () => {
    expect(collect(['data:x\n\n\n\n'])).toEqual([{ event: 'message', data: 'x', id: null }]);
  });
});
