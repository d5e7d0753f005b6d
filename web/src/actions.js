// User actions on a generation. Each updates the store at once where that
// is safe, then applies the server's answer; failures are shown as toasts
// with the server's message and the optimistic change is rolled back.
import { api, enqueued, normalize } from './api.js';
import { store } from './store.js';
import { toast } from './toasts.js';
import { rerunRequest } from './params.js';
import { downloadName } from './format.js';
import { resultUrl } from './media.js';

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
    // Already gone (deleted in another tab): what was asked.
    if (e.status === 404) { store.remove(g.generation_id); return true; }
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

/** Vary: the same prompt, references and parameters, `count` new seeds, queued at once. */
export async function vary(g, count) {
  try {
    const body = rerunRequest(normalize(g), { keepSeed: false });
    if (count > 1) body.num_generations = count;
    const created = await submit(body);
    toast(count > 1 ? `${count} variations queued, each with its own seed.` : 'A variation with a new seed is queued.');
    return created;
  } catch (e) {
    toast(`Vary failed: ${e.message}`, { kind: 'error' });
    return null;
  }
}

/** Saves a blob under a file name (the browser's download). */
export function saveBlob(blob, name) {
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  a.style.display = 'none';
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

/**
 * Finished clips as one zip (stored, not recompressed: mp4 is compressed
 * already), each named as a single download would be; fetched one after
 * the other while the zip streams. A single clip downloads as itself.
 */
export async function downloadClips(gs) {
  if (gs.length === 1) {
    // One clip is a plain download, named as the lightbox names it.
    const a = document.createElement('a');
    a.href = resultUrl(gs[0]);
    a.download = downloadName(gs[0]);
    document.body.appendChild(a);
    a.click();
    a.remove();
    return;
  }
  const { downloadZip } = await import('client-zip');
  const used = new Map();
  const unique = (name) => {
    const n = (used.get(name) || 0) + 1;
    used.set(name, n);
    return n === 1 ? name : name.replace(/\.mp4$/, `-${n}.mp4`);
  };
  async function* files() {
    for (const g of gs) {
      const url = resultUrl(g);
      if (!url) continue;
      const res = await fetch(url);
      if (!res.ok) throw new Error(`${url}: HTTP ${res.status}`);
      yield { name: unique(downloadName(g)), input: res, lastModified: new Date((g.completed_at || Date.now() / 1000) * 1000) };
    }
  }
  const blob = await downloadZip(files()).blob();
  const first = downloadName({ prompt: '', completed_at: Date.now() / 1000 }).replace(/\.mp4$/, '');
  saveBlob(blob, `mmh3-${gs.length}-clips-${first}.zip`);
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
