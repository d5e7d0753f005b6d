// The gallery's state: every generation the tab knows (by id) and the
// ordered list of the current query (status filter + search), paged from
// the server and kept live by the event stream.

import { useSyncExternalStore } from 'react';
import { api, normalize, STATUSES } from './api.js';

const PAGE = 40;

export function matchesQuery(g, query) {
  if (!g) return false;
  if (query.statuses.length && !query.statuses.includes(g.status)) return false;
  if (query.rating === 'approved' && g.rating !== 'approved') return false;
  if (query.search) {
    const words = query.search.toLowerCase().split(/\s+/).filter(Boolean);
    const text = (g.prompt || '').toLowerCase();
    if (!words.every((w) => text.includes(w))) return false;
  }
  return true;
}

// The server's list order (docs/API.md): enqueue time in microseconds, then
// the id, both descending. Whole seconds alone would place rows enqueued in
// the same second differently from the pages that bring their neighbours.
// uuids compare in PostgreSQL byte by byte, as their lowercase hex does here.
const enqueuedUs = (g) => g.enqueued_us ?? (g.enqueued_at ?? 0) * 1e6;
export const newer = (a, b) => {
  const d = enqueuedUs(b) - enqueuedUs(a);
  if (d !== 0) return d;
  const x = String(a.generation_id ?? ''), y = String(b.generation_id ?? '');
  return x === y ? 0 : y > x ? 1 : -1;
};

export class GalleryStore {
  constructor(client = api) {
    this.client = client;
    this.byId = new Map();
    this.ids = [];
    this.query = { statuses: [], search: '', rating: '' };
    this.count = 0;
    this.loading = false;
    this.exhausted = false;
    this.error = null;
    this.listeners = new Set();
    this.snapshot = this.makeSnapshot();
    this.generation = 0; // bumps on every query change so stale pages are dropped
    this.pendingFetch = new Map();
    // Rows that entered by event while no page had placed the list (held
    // until one does), and while a resync was on its way (placed again after
    // it rebuilds the list): see place().
    this.held = new Set();
    this.resyncing = 0;
  }

  subscribe = (fn) => { this.listeners.add(fn); return () => this.listeners.delete(fn); };
  getSnapshot = () => this.snapshot;

  makeSnapshot() {
    return {
      items: this.ids.map((id) => this.byId.get(id)).filter(Boolean),
      count: this.count,
      loading: this.loading,
      exhausted: this.exhausted,
      error: this.error,
      query: this.query,
      byId: this.byId,
    };
  }

  changed() {
    this.snapshot = this.makeSnapshot();
    for (const fn of this.listeners) fn();
  }

  setQuery(q) {
    const query = { statuses: q.statuses ?? this.query.statuses, search: (q.search ?? this.query.search).trim(), rating: q.rating ?? this.query.rating };
    if (query.search === this.query.search && query.rating === this.query.rating && query.statuses.join() === this.query.statuses.join() && this.ids.length) return;
    this.query = query;
    this.ids = [];
    this.count = 0;
    this.exhausted = false;
    this.error = null;
    this.generation++;
    this.loading = false;
    this.held.clear(); // the new query's first page is read after this: it has them if they match
    this.changed();
    return this.loadMore();
  }

  /** A row from a page, unless what the tab holds is newer (a later seq). */
  mergeListed(g) {
    const before = this.byId.get(g.generation_id);
    const stale = before && typeof before.seq === 'number' && typeof g.seq === 'number' && g.seq < before.seq;
    this.byId.set(g.generation_id, stale ? { ...g, ...before } : { ...before, ...g });
  }

  /** The list's range is not known until a page (or the end) has been seen. */
  rangeKnown() { return this.ids.length > 0 || this.exhausted; }

  /**
   * Inserts a listed row at its place by enqueue time — when that place lies
   * within what is loaded (or everything is); returns whether it did. Before
   * any page has placed the list nothing is known of where a row goes: it is
   * held, and placed after the page, which lists it where the server does.
   */
  place(id) {
    if (!this.rangeKnown()) { this.held.add(id); return false; }
    const g = this.byId.get(id);
    let i = 0;
    while (i < this.ids.length && newer(g, this.byId.get(this.ids[i])) > 0) i++;
    if (i === this.ids.length && !this.exhausted) return false; // older than all loaded: paging brings it
    this.ids.splice(i, 0, id);
    return true;
  }

  /** After a page or a resync: rows that came by event and the page lacks (enqueued after it was read). */
  placeHeld() {
    const held = [...this.held];
    this.held.clear();
    for (const id of held) {
      const g = this.byId.get(id);
      if (!g || this.ids.includes(id) || g.prompt === undefined || !matchesQuery(g, this.query)) continue;
      if (this.place(id)) this.count++;
    }
  }

  async loadMore() {
    if (this.loading || this.exhausted) return;
    const gen = this.generation;
    this.loading = true;
    this.changed();
    try {
      const page = await this.client.list({ ...this.query, statuses: this.query.statuses.length ? this.query.statuses : STATUSES, limit: PAGE, offset: this.ids.length });
      if (gen !== this.generation) return;
      const seen = new Set(this.ids);
      for (const g of page.generations) {
        this.mergeListed(g);
        if (!seen.has(g.generation_id)) { this.ids.push(g.generation_id); seen.add(g.generation_id); }
      }
      this.count = page.count;
      this.exhausted = page.generations.length < PAGE || this.ids.length >= page.count;
      this.error = null;
      this.placeHeld();
    } catch (e) {
      if (gen !== this.generation) return;
      this.error = e.message;
    } finally {
      if (gen === this.generation) { this.loading = false; this.changed(); }
    }
  }

  /** Re-reads the loaded range after a gap in the event stream. */
  async resync() {
    const gen = this.generation;
    const want = Math.max(PAGE, this.ids.length);
    this.resyncing++;
    try {
      const page = await this.client.list({ ...this.query, statuses: this.query.statuses.length ? this.query.statuses : STATUSES, limit: want, offset: 0 });
      if (gen !== this.generation) return;
      this.ids = [];
      for (const g of page.generations) { this.mergeListed(g); this.ids.push(g.generation_id); }
      this.count = page.count;
      this.exhausted = page.generations.length < want;
      this.error = null;
      this.placeHeld();
      this.changed();
    } catch (e) {
      this.error = e.message;
      this.changed();
    } finally {
      this.resyncing--;
    }
  }

  /** Merges a row (from an event, an action's answer or a fetch). */
  upsert(row, { isNew = false } = {}) {
    const g = normalize(row);
    const id = g && g.generation_id;
    if (!id) return;
    const before = this.byId.get(id);
    // Snapshots carry seq (docs/API.md): an older one than what we hold is stale.
    if (before && typeof g.seq === 'number' && typeof before.seq === 'number' && g.seq < before.seq) return;
    const merged = { ...before, ...g };
    this.byId.set(id, merged);
    const listed = this.ids.includes(id);
    const complete = merged.prompt !== undefined;
    // A row enters the list when it is new, or when this change makes it
    // match (a job finishing under "Done", a clip approved in another tab
    // under "Approved"); a known row that matched all along but lies beyond
    // the loaded pages stays for paging to bring.
    const enters = isNew || !before || before.prompt === undefined || !matchesQuery(before, this.query);
    if (!listed && complete && matchesQuery(merged, this.query) && enters) {
      // Newest first, by enqueue time. A resync on its way rebuilds the list
      // from a page that may have been read before this row existed.
      if (this.resyncing) this.held.add(id);
      if (this.place(id)) {
        this.count++;
      } else if (this.rangeKnown() && before && before.prompt !== undefined) {
        // Older than everything loaded while more pages remain: the next
        // page brings it; the total grows only by a row that newly matches.
        this.count++;
      }
    } else if (listed && !matchesQuery(merged, this.query)) {
      this.ids = this.ids.filter((x) => x !== id);
      this.count = Math.max(0, this.count - 1);
    }
    this.changed();
  }

  remove(id) {
    const had = this.ids.includes(id);
    this.byId.delete(id);
    if (had) { this.ids = this.ids.filter((x) => x !== id); this.count = Math.max(0, this.count - 1); }
    this.changed();
  }

  /** Fetches one row (deduplicated) and merges it. */
  fetchOne(id) {
    if (this.pendingFetch.has(id)) return this.pendingFetch.get(id);
    const p = this.client.get(id).then(
      (g) => { this.upsert(g, { isNew: true }); return g; },
      (e) => { if (e.status === 404) this.remove(id); throw e; },
    ).finally(() => this.pendingFetch.delete(id));
    this.pendingFetch.set(id, p);
    return p;
  }

  /** Applies one message of the event stream. */
  onEvent(msg) {
    if (msg.event === 'resync') { this.resync(); return; }
    if (msg.event === 'status_update') return;
    const data = msg.data && typeof msg.data === 'object' ? msg.data : {};
    const id = data.generation_id || data.id || (typeof msg.data === 'string' ? msg.data : null);
    if (!id) return;
    if (msg.event === 'generation_deleted') { this.remove(id); return; }
    if (msg.event !== 'generation_update') return;
    const known = this.byId.get(id);
    // Events may carry the whole row or only what changed; a partial event
    // about an unknown row (or one whose result just appeared) is completed
    // by fetching the row.
    const hasRow = data.prompt !== undefined;
    if (hasRow || known) this.upsert(data, { isNew: !known });
    const needsRow = (!hasRow && !known) || (!hasRow && data.status === 'succeeded' && !(known && known.result_url) && !data.result_url);
    if (needsRow) this.fetchOne(id).catch(() => {});
  }
}

export const store = new GalleryStore();

export function useGallery(s = store) {
  return useSyncExternalStore(s.subscribe, s.getSnapshot);
}
