// What the tab knows of the queue as a whole, apart from the gallery's
// (filtered, paged) list: every active job and the latest finished clips,
// read from GET /api/ai/queue when the queue changes, and the plan computed
// from them (estimate.js).
import { useSyncExternalStore } from 'react';
import { api } from './api.js';
import { activeWorkers, paceSamples, queuePlan } from './estimate.js';

const PACE_ROWS = 20;
const MIN_GAP_MS = 1500;

export class QueueInfo {
  constructor(client = api) {
    this.client = client;
    this.active = [];
    this.samples = [];
    this.status = null;
    this.clockOffset = 0; // server time − local time, seconds
    this.listeners = new Set();
    this.snapshot = this.compute();
    this.timer = null;
    this.last = 0;
    this.inflight = null;
    this.paceDirty = true;
  }

  subscribe = (fn) => { this.listeners.add(fn); return () => this.listeners.delete(fn); };
  getSnapshot = () => this.snapshot;

  serverNow() { return Date.now() / 1000 + this.clockOffset; }

  compute() {
    const now = this.serverNow();
    const processing = this.active.filter((g) => g.status === 'processing').length;
    const { plan, nextStartAt, queued, running } = queuePlan({ active: this.active, workers: activeWorkers(this.status, processing), samples: this.samples, now });
    const rows = new Map(this.active.map((g) => [g.generation_id, g]));
    return { plan, rows, nextStartAt, queued, running, samples: this.samples, clockOffset: this.clockOffset, workers: activeWorkers(this.status, processing) };
  }

  changed() {
    this.snapshot = this.compute();
    for (const fn of this.listeners) fn();
  }

  setStatus(status) {
    if (!status || status.error) return;
    this.status = status;
    if (typeof status.time === 'number') this.clockOffset = status.time - Date.now() / 1000;
    this.changed();
  }

  /** A change in the queue: re-read it soon (at most every MIN_GAP_MS). */
  poke({ finished = false } = {}) {
    if (finished) this.paceDirty = true;
    if (this.timer) return;
    const wait = Math.max(0, this.last + MIN_GAP_MS - Date.now());
    this.timer = setTimeout(() => { this.timer = null; this.refresh(); }, wait);
  }

  async refresh() {
    if (this.inflight) { this.poke(); return; }
    this.last = Date.now();
    const pace = this.paceDirty;
    this.paceDirty = false;
    this.inflight = Promise.all([
      this.client.list({ statuses: ['queued', 'processing'], limit: 500, offset: 0 }),
      pace ? this.client.list({ statuses: ['succeeded'], limit: PACE_ROWS, offset: 0 }) : null,
    ]).then(([active, done]) => {
      this.active = active.generations;
      if (done) this.samples = paceSamples(done.generations);
      this.changed();
    }, () => { if (pace) this.paceDirty = true; })
      .finally(() => { this.inflight = null; });
    return this.inflight;
  }

  /** Applies an event of the stream: status changes and new or deleted rows move the queue. */
  onEvent(msg, known) {
    if (msg.event === 'resync') { this.poke({ finished: true }); return; }
    if (msg.event === 'generation_deleted') { this.poke(); return; }
    if (msg.event !== 'generation_update' || !msg.data || typeof msg.data !== 'object') return;
    const d = msg.data;
    const before = known ? known.status : undefined;
    if (d.status && d.status !== before) this.poke({ finished: d.status === 'succeeded' });
  }
}

export const queueInfo = new QueueInfo();

export function useQueueInfo(q = queueInfo) {
  return useSyncExternalStore(q.subscribe, q.getSnapshot);
}
