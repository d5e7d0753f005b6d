// User actions on a generation. Each updates the store at once where that
// is safe, then applies the server's answer; failures are shown as toasts
// with the server's message and the optimistic change is rolled back.
import { api, enqueued, normalize } from './api.js';
import { store } from './store.js';
import { toast } from './toasts.js';
import { rerunRequest } from './params.js';

export async function setRating(g, rating) {
  const before = g.rating ?? null;
  store.upsert({ generation_id: g.generation_id, rating });
  try {
    const answer = await api.rate(g.generation_id, rating);
    const row = answer && (answer.generation || answer);
    if (row && row.generation_id) store.upsert(row);
  } catch (e) {
    store.upsert({ generation_id: g.generation_id, rating: before });
    toast(`Rating not saved: ${e.message}`, { kind: 'error' });
  }
}

/** DELETE: cancels an active job, deletes a finished one. */
export async function cancelOrDelete(g) {
  try {
    const answer = await api.remove(g.generation_id);
    const row = answer && (answer.generation || null);
    if (row && row.generation_id) store.upsert(row);
    else if (g.status === 'queued' || g.status === 'processing') store.upsert({ generation_id: g.generation_id, cancel_requested: true });
    else store.remove(g.generation_id);
    return true;
  } catch (e) {
    toast(`${g.status === 'queued' || g.status === 'processing' ? 'Cancel' : 'Delete'} failed: ${e.message}`, { kind: 'error' });
    return false;
  }
}

export async function submit(body) {
  const answer = await api.enqueue(body);
  const { generation, generations, warnings } = enqueued(answer);
  for (const g of generations) {
    store.upsert({ prompt: body.prompt, ...body, ...g, status: g.status || 'queued', enqueued_at: g.enqueued_at ?? Math.floor(Date.now() / 1000), enqueued_us: g.enqueued_us ?? Date.now() * 1000 }, { isNew: true });
    store.fetchOne(g.generation_id).catch(() => {});
  }
  for (const w of warnings) toast(typeof w === 'string' ? w : w.message || JSON.stringify(w), { kind: 'warn', timeout: 8000 });
  return generation;
}

export async function rerun(g) {
  try {
    const created = await submit(rerunRequest(normalize(g), { keepSeed: false }));
    toast('Queued again with a new seed.');
    return created;
  } catch (e) {
    toast(`Rerun failed: ${e.message}`, { kind: 'error' });
    return null;
  }
}

export async function copyText(text, what = 'Prompt') {
  try {
    if (navigator.clipboard && window.isSecureContext) await navigator.clipboard.writeText(text);
    else {
      // Plain-HTTP LAN origins have no async clipboard; fall back to a selection copy.
      const ta = document.createElement('textarea');
      ta.value = text;
      ta.setAttribute('readonly', '');
      ta.style.position = 'fixed';
      ta.style.opacity = '0';
      document.body.appendChild(ta);
      ta.select();
      document.execCommand('copy');
      ta.remove();
    }
    toast(`${what} copied.`);
  } catch (e) {
    toast(`Copy failed: ${e.message}`, { kind: 'error' });
  }
}
