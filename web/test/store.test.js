import { describe, expect, it } from 'vitest';
import { GalleryStore, matchesQuery, newer } from '../src/store.js';

// A tiny in-memory stand-in for the list endpoint, enough to exercise the
// store's merging rules; the real API is covered by the e2e suite.
function client(rows) {
  return {
    list: async ({ statuses, search, rating = '', limit, offset }) => {
      const all = rows.filter((g) => matchesQuery(g, { statuses, search, rating }));
      return { count: all.length, generations: all.slice(offset, offset + limit) };
    },
    get: async (id) => {
      const g = rows.find((r) => r.generation_id === id);
      if (!g) { const e = new Error('not found'); e.status = 404; throw e; }
      return g;
    },
  };
}
const row = (id, over = {}) => ({ generation_id: id, prompt: `prompt ${id}`, status: 'succeeded', enqueued_at: 1000 + Number(id.replace(/\D/g, '')), seq: 1, ...over });

describe('GalleryStore', () => {
  it('pages newest first and stops at the end', async () => {
    const rows = Array.from({ length: 50 }, (_, i) => row(`g${50 - i}`));
    const s = new GalleryStore(client(rows));
    await s.setQuery({ statuses: [], search: '' });
    expect(s.getSnapshot().items).toHaveLength(40);
    await s.loadMore();
    const snap = s.getSnapshot();
    expect(snap.items).toHaveLength(50);
    expect(snap.exhausted).toBe(true);
    expect(snap.items[0].generation_id).toBe('g50');
  });
  it('puts a new job from an event at the top and drops stale snapshots', async () => {
    const s = new GalleryStore(client([row('g1')]));
    await s.setQuery({ statuses: [], search: '' });
    s.onEvent({ event: 'generation_update', data: row('g2', { status: 'processing', stage: 'denoising', step: 3, total_steps: 27, seq: 10 }) });
    expect(s.getSnapshot().items.map((g) => g.generation_id)).toEqual(['g2', 'g1']);
    s.onEvent({ event: 'generation_update', data: row('g2', { status: 'succeeded', seq: 12 }) });
    s.onEvent({ event: 'generation_update', data: row('g2', { status: 'processing', step: 9, seq: 11 }) });
    expect(s.byId.get('g2').status).toBe('succeeded');
    expect(s.getSnapshot().count).toBe(2);
  });
  it('removes deleted rows and rows that leave the filter', async () => {
    const s = new GalleryStore(client([row('g1', { status: 'processing' }), row('g2')]));
    await s.setQuery({ statuses: ['processing'], search: '' });
    expect(s.getSnapshot().items.map((g) => g.generation_id)).toEqual(['g1']);
    s.onEvent({ event: 'generation_update', data: row('g1', { status: 'succeeded', seq: 5 }) });
    expect(s.getSnapshot().items).toEqual([]);
    await s.setQuery({ statuses: [], search: '' });
    s.onEvent({ event: 'generation_deleted', data: { generation_id: 'g2', seq: 9 } });
    expect(s.getSnapshot().items.map((g) => g.generation_id)).toEqual(['g1']);
  });
  it('matches search words case-insensitively', () => {
    expect(matchesQuery({ prompt: 'A Red Fox', status: 'queued' }, { statuses: [], search: 'red fox' })).toBe(true);
    expect(matchesQuery({ prompt: 'A Red Fox', status: 'queued' }, { statuses: [], search: 'blue' })).toBe(false);
    expect(matchesQuery({ prompt: 'x', status: 'queued', rating: null }, { statuses: [], search: '', rating: 'approved' })).toBe(false);
  });
});

describe('GalleryStore under a filter', () => {
  it('adds a row whose change makes it match: a job finishing under "Done"', async () => {
    const s = new GalleryStore(client([row('g1')]));
    await s.setQuery({ statuses: ['succeeded'], search: '' });
    // The new job is announced while queued (not shown), then finishes.
    s.onEvent({ event: 'generation_update', data: row('g2', { status: 'queued', seq: 3 }) });
    expect(s.getSnapshot().items.map((g) => g.generation_id)).toEqual(['g1']);
    s.onEvent({ event: 'generation_update', data: row('g2', { status: 'processing', seq: 4 }) });
    s.onEvent({ event: 'generation_update', data: row('g2', { status: 'succeeded', seq: 5 }) });
    expect(s.getSnapshot().items.map((g) => g.generation_id)).toEqual(['g2', 'g1']);
    expect(s.getSnapshot().count).toBe(2);
  });
  it('adds a clip approved elsewhere under "Approved" and drops it when cleared', async () => {
    const s = new GalleryStore(client([row('g1', { rating: 'approved' }), row('g2')]));
    await s.setQuery({ statuses: [], search: '', rating: '' });
    await s.setQuery({ statuses: [], search: '', rating: 'approved' });
    expect(s.getSnapshot().items.map((g) => g.generation_id)).toEqual(['g1']);
    s.onEvent({ event: 'generation_update', data: row('g2', { rating: 'approved', seq: 7 }) });
    expect(s.getSnapshot().items.map((g) => g.generation_id)).toEqual(['g2', 'g1']);
    expect(s.getSnapshot().count).toBe(2);
    s.onEvent({ event: 'generation_update', data: row('g2', { rating: null, seq: 8 }) });
    expect(s.getSnapshot().items.map((g) => g.generation_id)).toEqual(['g1']);
    expect(s.getSnapshot().count).toBe(1);
  });
  it('leaves a row older than the loaded pages for paging to bring', async () => {
    const rows = Array.from({ length: 50 }, (_, i) => row(`g${50 - i}`));
    const s = new GalleryStore(client(rows));
    await s.setQuery({ statuses: [], search: '' });
    expect(s.getSnapshot().items).toHaveLength(40);
    await s.setQuery({ statuses: ['succeeded'], search: '' });
    // g3 lies beyond the loaded 40: an update about it must not append it
    // after g11 (the next page would then skip or repeat rows).
    s.upsert(row('g3', { seq: 2 }));
    expect(s.getSnapshot().items).toHaveLength(40);
    expect(s.getSnapshot().items.some((g) => g.generation_id === 'g3')).toBe(false);
    expect(s.getSnapshot().count).toBe(50);
    await s.loadMore();
    expect(s.getSnapshot().items.map((g) => g.generation_id).slice(-3)).toEqual(['g3', 'g2', 'g1']);
    expect(s.getSnapshot().items).toHaveLength(50);
  });
  it('places a row from an event where the server lists it when the second is the same', async () => {
    // 45 rows enqueued within one second, listed by the server by microseconds
    // then id, newest first; an update about one beyond the loaded 40 (a worker
    // claiming the oldest) must not land among them.
    const rows = Array.from({ length: 45 }, (_, i) => row(`g${45 - i}`, { enqueued_at: 1000, enqueued_us: 1000e6 + 45 - i }));
    const s = new GalleryStore(client(rows));
    await s.setQuery({ statuses: [], search: '' });
    const loaded = s.getSnapshot().items.map((g) => g.generation_id);
    s.onEvent({ event: 'generation_update', data: { ...rows[44], status: 'processing', seq: 5 } });
    expect(s.getSnapshot().items.map((g) => g.generation_id)).toEqual(loaded);
    await s.loadMore();
    expect(s.getSnapshot().items.map((g) => g.generation_id)).toEqual(rows.map((g) => g.generation_id));
  });
  it('orders equal enqueue times by id, descending, as the server does', () => {
    const a = { generation_id: '0f0e0d0c-0000-4000-8000-000000000000', enqueued_us: 5 };
    const b = { generation_id: 'a0000000-0000-4000-8000-000000000000', enqueued_us: 5 };
    expect(newer(a, b)).toBeGreaterThan(0); // b first
    expect(newer(b, a)).toBeLessThan(0);
    expect(newer(a, { ...a })).toBe(0);
    expect(newer({ generation_id: 'x', enqueued_us: 7 }, b)).toBeLessThan(0); // the later time first
  });
});

// The list endpoint answers later than it reads: the page is taken from the
// rows as they are when list() is called, and delivered when the test says.
// Events in between are what the SSE stream delivers while a page is on its way.
function slowClient(rows) {
  const base = client(rows);
  const waiting = [];
  return {
    ...base,
    list(args) {
      const page = base.list(args);
      return new Promise((resolve) => waiting.push(() => resolve(page)));
    },
    async deliver() {
      expect(waiting.length).toBeGreaterThan(0);
      waiting.shift()();
      await new Promise((r) => setTimeout(r, 0));
    },
  };
}
const ids = (s) => s.getSnapshot().items.map((g) => g.generation_id);

describe('GalleryStore while a page is loading', () => {
  it('keeps the server order when an event about a listed row arrives before the first page', async () => {
    const rows = Array.from({ length: 5 }, (_, i) => row(`g${5 - i}`, { status: 'queued' }));
    const c = slowClient(rows);
    const s = new GalleryStore(c);
    s.setQuery({ statuses: [], search: '' });
    // A worker claims g2 while the list is on its way.
    s.onEvent({ event: 'generation_update', data: row('g2', { status: 'processing', seq: 5 }) });
    await c.deliver();
    expect(ids(s)).toEqual(['g5', 'g4', 'g3', 'g2', 'g1']);
    expect(s.getSnapshot().count).toBe(5);
    expect(s.byId.get('g2').status).toBe('processing'); // the page's older copy does not undo the event
  });
  it('loads the first page when an event came before the first query', async () => {
    // The app subscribes to the stream before it sets the query; a relayed
    // event can land in between.
    const rows = Array.from({ length: 5 }, (_, i) => row(`g${5 - i}`, { status: 'queued' }));
    const c = slowClient(rows);
    const s = new GalleryStore(c);
    s.onEvent({ event: 'generation_update', data: row('g2', { status: 'processing', seq: 5 }) });
    expect(ids(s)).toEqual([]);
    s.setQuery({ statuses: [], search: '', rating: '' });
    await c.deliver();
    expect(ids(s)).toEqual(['g5', 'g4', 'g3', 'g2', 'g1']);
  });
  it('leaves a row beyond the first page, updated while it loads, for paging to bring', async () => {
    const rows = Array.from({ length: 50 }, (_, i) => row(`g${50 - i}`, { status: 'queued' }));
    const c = slowClient(rows);
    const s = new GalleryStore(c);
    s.setQuery({ statuses: [], search: '' });
    s.onEvent({ event: 'generation_update', data: row('g3', { status: 'processing', seq: 5 }) });
    await c.deliver();
    expect(ids(s)).toEqual(rows.slice(0, 40).map((g) => g.generation_id));
    expect(s.getSnapshot().count).toBe(50);
    const more = s.loadMore();
    await c.deliver();
    await more;
    expect(ids(s)).toEqual(rows.map((g) => g.generation_id));
  });
  it('puts a job enqueued after the page was read at the top', async () => {
    const rows = [row('g2'), row('g1')];
    const c = slowClient(rows);
    const s = new GalleryStore(c);
    s.setQuery({ statuses: [], search: '' });
    s.onEvent({ event: 'generation_update', data: row('g3', { status: 'queued', seq: 9 }) });
    await c.deliver();
    expect(ids(s)).toEqual(['g3', 'g2', 'g1']);
    expect(s.getSnapshot().count).toBe(3);
  });
  it('keeps the newer of an event and the page it raced with', async () => {
    const c = slowClient([row('g1', { status: 'processing', seq: 10 })]);
    const s = new GalleryStore(c);
    s.setQuery({ statuses: [], search: '' });
    s.onEvent({ event: 'generation_update', data: row('g1', { status: 'succeeded', seq: 12, result_url: '/media/g1.mp4' }) });
    await c.deliver();
    expect(s.byId.get('g1')).toMatchObject({ status: 'succeeded', seq: 12, result_url: '/media/g1.mp4' });
  });
  it('keeps a job enqueued while a resync is on its way', async () => {
    const rows = [row('g2'), row('g1')];
    const c = slowClient(rows);
    const s = new GalleryStore(c);
    const first = s.setQuery({ statuses: [], search: '' });
    await c.deliver();
    await first;
    s.onEvent({ event: 'resync' });
    s.onEvent({ event: 'generation_update', data: row('g3', { status: 'queued', seq: 9 }) });
    expect(ids(s)).toEqual(['g3', 'g2', 'g1']);
    await c.deliver(); // the resync's page was read before g3 existed
    expect(ids(s)).toEqual(['g3', 'g2', 'g1']);
    expect(s.getSnapshot().count).toBe(3);
  });
});
