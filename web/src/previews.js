// Live previews (docs/API.md, `generation_preview`): the newest preview of
// each rendering job, kept apart from the gallery's rows because it changes
// several times a second and matters only while the job runs. Every tab gets
// the events (the EventHub relays them to the other tabs), so every tab shows
// the same picture. A job's preview is dropped when the job leaves
// `processing` or is deleted: the tile then shows what the row says.

import { useSyncExternalStore } from 'react';

export class PreviewStore {
  constructor() {
    this.byId = new Map();
    this.listeners = new Map(); // id -> Set of callbacks
  }

  subscribe(id, fn) {
    let set = this.listeners.get(id);
    if (!set) { set = new Set(); this.listeners.set(id, set); }
    set.add(fn);
    return () => { set.delete(fn); if (!set.size) this.listeners.delete(id); };
  }

  get(id) { return this.byId.get(id) || null; }

  notify(id) { for (const fn of this.listeners.get(id) || []) fn(); }

  drop(id) {
    if (this.byId.delete(id)) this.notify(id);
  }

  /** Applies one message of the event stream. */
  onEvent(msg) {
    const data = msg.data && typeof msg.data === 'object' ? msg.data : null;
    if (msg.event === 'resync') {
      const ids = [...this.byId.keys()];
      this.byId.clear();
      ids.forEach((id) => this.notify(id));
      return;
    }
    const id = data && data.generation_id;
    if (!id) return;
    if (msg.event === 'generation_deleted' || (msg.event === 'generation_update' && data.status && data.status !== 'processing')) {
      this.drop(id);
      return;
    }
    if (msg.event !== 'generation_preview' || typeof data.url !== 'string' || !(data.frames >= 1)) return;
    const known = this.byId.get(id);
    if (known && known.seq >= data.seq) return; // an older one, relayed late
    this.byId.set(id, data);
    this.notify(id);
  }
}

export const previews = new PreviewStore();

/** The newest preview of generation `id`, or null. */
export function usePreview(id, s = previews) {
  return useSyncExternalStore(
    (fn) => s.subscribe(id, fn),
    () => s.get(id),
  );
}
