// What the browser tests share: the API as a script sees it, waiting on a
// condition (never a fixed sleep), and a few page helpers.
import fs from 'node:fs';
import path from 'node:path';

export function stackApi(base) {
  async function api(method, p, body) {
    const init = { method, headers: {} };
    if (body instanceof FormData) init.body = body;
    else if (body !== undefined) { init.body = JSON.stringify(body); init.headers['Content-Type'] = 'application/json'; }
    const res = await fetch(base + p, init);
    const text = await res.text();
    let data = text;
    try { data = JSON.parse(text); } catch { /* not JSON */ }
    if (!res.ok) throw new Error(`${method} ${p}: HTTP ${res.status}: ${text.slice(0, 300)}`);
    return data;
  }
  // Small clips keep the mock engine quick on CI's two cores.
  const SMALL = { frames: 39, width: 320, height: 192, steps: 8 };
  const enqueueAll = async (body) => (await api('POST', '/api/ai/queue', { ...SMALL, ...body })).generations;
  const enqueue = async (body) => (await enqueueAll(body))[0];
  const row = (id) => api('GET', `/api/ai/queue/${id}`);
  const settled = (id, status = 'succeeded') => until(`${id} to be ${status}`, async () => {
    const g = await row(id);
    if (g.status === 'failed' && status !== 'failed') throw new Error(`generation failed: ${g.error_message}`);
    return g.status === status && g;
  }, 120_000, 400);
  async function uploadFile(file, type, name = path.basename(file)) {
    const form = new FormData();
    form.append('files', new Blob([fs.readFileSync(file)], { type }), name);
    const answer = await api('POST', '/api/images', form);
    return answer.images ? answer.images[0] : { image_id: answer.image_ids[0] };
  }
  async function openGallery(page, route = '/') {
    await page.goto(base + route);
    await page.waitForSelector('[data-testid=prompt-input]');
    await until('the live event stream', async () => (await page.locator('[data-testid=live-state]').getAttribute('data-state')) === 'open', 15_000);
  }
  return { api, SMALL, enqueue, enqueueAll, row, settled, uploadFile, openGallery };
}

export async function until(what, fn, timeout = 60_000, every = 250) {
  const end = Date.now() + timeout;
  let last;
  while (Date.now() < end) {
    try { last = await fn(); if (last) return last; } catch (e) { last = e; }
    await new Promise((r) => setTimeout(r, every));
  }
  throw new Error(`waited ${timeout / 1000} s for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
}

export const unique = (word) => `${word}${Date.now().toString(36)}${Math.floor(Math.random() * 1e4)}`;
export const tile = (page, id) => page.locator(`[data-testid=tile][data-id="${id}"]`);

/** Rectangles overlap (touching edges do not). */
export const overlaps = (a, b) => a && b && a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
