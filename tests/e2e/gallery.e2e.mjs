// End-to-end tests of the gallery in Chromium against the real stack
// (nginx → FastCGI → PostgreSQL ← worker with the mock engine).
//
//   node tests/e2e/gallery.e2e.mjs BASE_URL OUT_DIR [name filter]
//
// The stack is started by tests/e2e/run.sh. Real H3 clips for the player
// and reference tests are read from ../shared/minimax-h3/assets (MMH3_H3_ASSETS).
import fs from 'node:fs';
import path from 'node:path';
import { launch, runAll, skip, test } from './harness.mjs';

const [base, outDir = 'tests/out/e2e', filter] = process.argv.slice(2);
if (!base) { console.log('FAIL web/e2e: usage: gallery.e2e.mjs BASE_URL OUT_DIR'); process.exit(1); }
const assets = process.env.MMH3_H3_ASSETS || path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../../shared/minimax-h3/assets');
const stills = process.env.MMH3_E2E_STILLS; // folder with first.png / last.png (made by run.sh)

// ------------------------------------------------------------------ helpers
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

async function until(what, fn, timeout = 60_000, every = 250) {
  const end = Date.now() + timeout;
  let last;
  while (Date.now() < end) {
    try { last = await fn(); if (last) return last; } catch (e) { last = e; }
    await new Promise((r) => setTimeout(r, every));
  }
  throw new Error(`waited ${timeout / 1000} s for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
}

// Small clips keep the mock engine quick on CI's two cores.
const SMALL = { frames: 39, width: 320, height: 192, steps: 8 };
const unique = (word) => `${word}${Date.now().toString(36)}${Math.floor(Math.random() * 1e4)}`;

async function enqueue(body) {
  const answer = await api('POST', '/api/ai/queue', { ...SMALL, ...body });
  return answer.generations[0];
}
const row = (id) => api('GET', `/api/ai/queue/${id}`);
const settled = (id, status = 'succeeded') => until(`${id} to be ${status}`, async () => {
  const g = await row(id);
  if (g.status === 'failed' && status !== 'failed') throw new Error(`generation failed: ${g.error_message}`);
  return g.status === status && g;
}, 120_000, 400);

async function uploadFile(file, type) {
  const form = new FormData();
  form.append('files', new Blob([fs.readFileSync(file)], { type }), path.basename(file));
  const answer = await api('POST', '/api/images', form);
  return answer.images ? answer.images[0] : { image_id: answer.image_ids[0] };
}

const tile = (page, id) => page.locator(`[data-testid=tile][data-id="${id}"]`);
const tileIds = (page) => page.locator('[data-testid=tile]').evaluateAll((els) => els.map((e) => e.dataset.id));

// Throws unless the tiles are the server's list, in its order, from the top.
// The message names the first index where they differ and both id lists
// (first 8 characters of each id); the full lists go to FAILED-<what>.json.
function expectServerOrder(what, shown, listed) {
  const expected = listed.slice(0, shown.length);
  const at = shown.findIndex((id, i) => id !== expected[i]);
  if (at < 0 && shown.length === expected.length) return;
  const i = at < 0 ? expected.length : at;
  fs.writeFileSync(path.join(outDir, `FAILED-${what.replace(/[^\w]+/g, '_')}.json`), JSON.stringify({ shown, server: listed }, null, 1));
  const short = (ids) => ids.map((id) => id.slice(0, 8)).join(' ');
  throw new Error(`${what}: tiles are not in the server order (newest first): first difference at index ${i} ` +
    `(tile ${shown[i] ?? 'none'}, server ${expected[i] ?? 'none'}); tiles [${short(shown)}]; server [${short(expected)}]`);
}
const readout = (page) => page.locator('[data-testid=frame-readout]');

async function openGallery(page) {
  await page.goto(base + '/');
  await page.waitForSelector('[data-testid=prompt-input]');
  await until('the live event stream', async () => (await page.locator('[data-testid=live-state]').getAttribute('data-state')) === 'open', 15_000);
}

async function expectReadout(page, text) {
  await until(`frame readout "${text}"`, async () => (await readout(page).textContent()).replace(/\s+/g, ' ').trim() === text, 10_000, 100)
    .catch(async (e) => { throw new Error(`${e.message}; shows "${await readout(page).textContent()}"`); });
}

// ------------------------------------------------------------------ tests

test('submit a prompt and watch the tile progress to a playable clip', async ({ page }) => {
  await openGallery(page);
  const prompt = `${unique('heron')} takes off over a misty lake`;
  await page.fill('[data-testid=prompt-input]', prompt);
  // Small clip through the parameters popover: 39 frames, custom 320×192, 8 steps.
  await page.click('[data-testid=params-toggle]');
  await page.fill('[data-testid=frames-input]', '40');
  await page.press('[data-testid=frames-input]', 'Enter');
  await page.click('[data-testid=size-custom]');
  await page.fill('[data-testid=width-input]', '320');
  await page.fill('[data-testid=height-input]', '192');
  await page.fill('[data-testid=steps-input]', '8');
  const summary = await page.textContent('[data-testid=params-toggle]');
  if (!summary.startsWith('39 f · 1.63 s · 320×192 · 8 steps')) throw new Error(`parameters summary is "${summary}"`);
  await page.screenshot({ path: path.join(outDir, 'promptbar.png') });
  await page.click('[data-testid=prompt-input]');
  await page.keyboard.press('Enter');

  const t = page.locator('[data-testid=tile]', { hasText: prompt }).first();
  await t.waitFor({ timeout: 10_000 });
  const id = await t.getAttribute('data-id');
  // Progress shows while it runs (the stage text, then denoising steps).
  const seen = new Set();
  await until('the tile to succeed', async () => {
    const status = await t.getAttribute('data-status');
    seen.add(status);
    if (status === 'processing') {
      const txt = await t.locator('[data-testid=progress-text]').textContent().catch(() => '');
      if (/step \d+\/\d+/.test(txt)) seen.add('step');
    }
    if (status === 'failed') throw new Error(`failed: ${await t.textContent()}`);
    return status === 'succeeded';
  }, 120_000, 100);
  if (!seen.has('processing')) throw new Error(`never saw the tile processing (saw ${[...seen]})`);
  if (!seen.has('step')) throw new Error('never saw a denoising step in the tile');
  // The tile now holds the clip; the browser decodes it.
  const video = t.locator('[data-testid=tile-video]');
  await t.hover();
  await until('the tile clip to decode', () => video.evaluate((v) => v.readyState >= 2 && v.videoWidth === 320 && v.videoHeight === 192), 20_000);
  await until('the clip to play on hover', () => video.evaluate((v) => !v.paused && v.currentTime > 0.05), 10_000);
  await page.mouse.move(0, 0);
  await until('it to stop when the pointer leaves', () => video.evaluate((v) => v.paused), 5_000);
  const g = await row(id);
  if (g.frames !== 39 || g.width !== 320 || g.steps !== 8) throw new Error(`stored request differs: ${JSON.stringify({ frames: g.frames, width: g.width, steps: g.steps })}`);
});

test('upload two images and pin the second as the last frame (fl2va)', async ({ page }) => {
  await openGallery(page);
  // The first image through the file picker, the second dropped onto the page.
  await page.setInputFiles('[data-testid=file-input]', path.join(stills, 'first.png'));
  const dropped = await page.evaluateHandle((b64) => {
    const dt = new DataTransfer();
    dt.items.add(new File([Uint8Array.from(atob(b64), (c) => c.charCodeAt(0))], 'last.png', { type: 'image/png' }));
    return dt;
  }, fs.readFileSync(path.join(stills, 'last.png')).toString('base64'));
  await page.dispatchEvent('[data-testid=prompt-bar]', 'dragenter', { dataTransfer: dropped });
  await page.dispatchEvent('[data-testid=prompt-bar]', 'drop', { dataTransfer: dropped });
  await until('both uploads', async () => {
    const states = await page.locator('[data-testid=chip]').evaluateAll((els) => els.map((e) => e.dataset.state));
    if (states.includes('error')) throw new Error(`upload failed: ${await page.locator('[data-testid=chip]').allTextContents()}`);
    return states.length === 2 && states.every((s) => s === 'done');
  }, 20_000);
  const chips = page.locator('[data-testid=chip]');
  const [firstId, lastId] = await chips.evaluateAll((els) => els.map((e) => e.dataset.imageId));
  if ((await page.locator('[data-testid=pin-last]').count()) !== 1) throw new Error('exactly the second chip should offer pinning');
  await page.click('[data-testid=pin-last]');
  if (!/Last frame/.test(await chips.nth(1).textContent())) throw new Error('the pinned chip is not labelled as the last frame');
  // Switching to ref2va is explained as invalid before anything is sent.
  await page.click('[data-testid=params-toggle]');
  await page.click('[data-testid=model-ref2va]');
  await until('the ref2va explanation', async () => /last frame needs the fl2va/.test(await page.textContent('[data-testid=problems]')), 5_000);
  await page.click('[data-testid=model-fl2va]');
  await page.fill('[data-testid=frames-input]', '22');
  await page.press('[data-testid=frames-input]', 'Enter');
  await page.click('[data-testid=size-custom]');
  await page.fill('[data-testid=width-input]', '320');
  await page.fill('[data-testid=height-input]', '192');
  await page.fill('[data-testid=steps-input]', '4');
  const prompt = `${unique('dawn')} from the first picture to the last`;
  await page.fill('[data-testid=prompt-input]', prompt);
  await page.screenshot({ path: path.join(outDir, 'promptbar-chips.png') });
  await page.keyboard.press('Enter');
  const t = page.locator('[data-testid=tile]', { hasText: prompt }).first();
  await t.waitFor({ timeout: 10_000 });
  const g = await row(await t.getAttribute('data-id'));
  if (g.partition !== 'fl2va') throw new Error(`partition ${g.partition}`);
  if (JSON.stringify(g.image_ids) !== JSON.stringify([firstId])) throw new Error(`image_ids ${JSON.stringify(g.image_ids)}, want [${firstId}]`);
  if (g.last_image_id !== lastId) throw new Error(`last_image_id ${g.last_image_id}, want ${lastId}`);
  // The lightbox rail labels both references.
  await t.locator('a').click();
  await page.waitForSelector('[data-testid=lightbox]');
  const labels = await page.locator('[data-testid=rail-ref]').allTextContents();
  if (labels.join('|') !== 'First frame|Last frame') throw new Error(`rail labels ${labels.join('|')}`);
  await settled(g.generation_id);
});

test('approve in one tab and see the check appear in the other tabs', async ({ page, context, otherBrowser }) => {
  const g = await enqueue({ prompt: `${unique('lantern')} festival` });
  await settled(g.generation_id);
  await openGallery(page);
  const second = await context.newPage(); // same browser: events relayed between tabs
  const third = await otherBrowser.newPage(); // another browser: its own event stream
  try {
    await openGallery(second);
    await openGallery(third);
    for (const p of [page, second, third]) await tile(p, g.generation_id).waitFor({ timeout: 15_000 });
    await tile(page, g.generation_id).hover();
    await tile(page, g.generation_id).locator('[data-testid=approve]').click();
    for (const [name, p] of [['this tab', page], ['second tab', second], ['other browser', third]]) {
      await until(`the check in the ${name}`, async () => (await tile(p, g.generation_id).getAttribute('data-rating')) === 'approved', 15_000);
    }
    const approve = third.locator(`[data-testid=tile][data-id="${g.generation_id}"] [data-testid=approve]`);
    if ((await approve.getAttribute('aria-pressed')) !== 'true') throw new Error('the other browser does not show the green check');
    if ((await row(g.generation_id)).rating !== 'approved') throw new Error('rating not stored');
    // And back: clearing it in the other browser clears it here.
    await tile(third, g.generation_id).hover();
    await approve.click();
    await until('the check to clear in the first tab', async () => (await tile(page, g.generation_id).getAttribute('data-rating')) === '', 15_000);
  } finally {
    await second.close();
    await third.close();
  }
});

test('live previews arrive and update in a running tile, its lightbox and a second tab, then the clip takes over', async ({ page, context }) => {
  await openGallery(page);
  const second = await context.newPage(); // same browser: the events are relayed to it
  try {
    await openGallery(second);
    // 60 steps: about 6 s of denoising with the stack's --mock-seconds 4, a preview every 500 ms
    const g = await enqueue({ prompt: `${unique('aurora')} over a fjord`, steps: 60 });
    const id = g.generation_id;
    const preview = (p) => tile(p, id).locator('[data-testid=live-preview]');
    for (const [name, p] of [['this tab', page], ['second tab', second]]) {
      await preview(p).waitFor({ timeout: 90_000 });
      const first = Number(await preview(p).getAttribute('data-seq'));
      await until(`a newer preview in the ${name}`, async () => Number(await preview(p).getAttribute('data-seq')) > first, 20_000, 100);
    }
    // The picture is the strip the server made: the browser decodes it at frames × frame width.
    const strip = await preview(page).evaluate(async (el) => {
      const url = getComputedStyle(el).backgroundImage.replace(/^url\("?|"?\)$/g, '');
      const img = new Image();
      img.src = url;
      await img.decode();
      return { url, w: img.naturalWidth, h: img.naturalHeight, frames: Number(el.dataset.frames) };
    });
    // SMALL: 39 frames = 12 latent frames of 20x12 latents, each 426x256 (426.7 made even: 428)
    if (!strip.url.includes(`/api/files/previews/${id}.jpg?seq=`) || strip.frames !== 12 || strip.w !== 12 * 428 || strip.h !== 256) {
      throw new Error(`the preview strip: ${JSON.stringify(strip)}`);
    }
    // Animated: the tile steps through the strip's frames.
    const shown = new Set();
    await until('the tile to show several of the frames', async () => {
      shown.add(await preview(page).getAttribute('data-frame'));
      return shown.size >= 3;
    }, 10_000, 40);
    // The lightbox of the running job shows it too, updating.
    await tile(page, id).locator('[data-testid=tile-link]').click();
    const lb = page.locator('[data-testid=lightbox] [data-testid=live-preview]');
    await lb.waitFor({ timeout: 10_000 });
    const lbFirst = Number(await lb.getAttribute('data-seq'));
    await until('a newer preview in the lightbox', async () => Number(await lb.getAttribute('data-seq')) > lbFirst, 20_000, 100);
    await page.screenshot({ path: path.join(outDir, 'live-preview-lightbox.png') });
    // Then the real clip replaces the preview in the lightbox and in both tabs' tiles.
    await settled(id);
    await page.locator('[data-testid=lightbox] [data-testid=player-video]').waitFor({ timeout: 15_000 });
    if (await lb.count()) throw new Error('the lightbox still shows the preview after the clip arrived');
    await page.keyboard.press('Escape');
    for (const [name, p] of [['this tab', page], ['second tab', second]]) {
      await until(`the clip in the ${name}'s tile`, async () => (await tile(p, id).getAttribute('data-status')) === 'succeeded' &&
        (await preview(p).count()) === 0 && (await tile(p, id).locator('[data-testid=tile-video]').count()) === 1, 15_000);
    }
  } finally {
    await second.close();
  }
}, { timeout: 180_000 });

test('open a lightbox and step frames with the keyboard', async ({ page }) => {
  const g = await enqueue({ prompt: `${unique('metronome')} ticking`, frames: 39 });
  await settled(g.generation_id);
  await openGallery(page);
  await tile(page, g.generation_id).locator('a').click();
  await page.waitForSelector('[data-testid=lightbox] [data-testid=player-video]');
  if (!page.url().endsWith(`/g/${g.generation_id}`)) throw new Error(`URL is ${page.url()}`);
  await until('the clip to load', () => page.locator('[data-testid=player-video]').evaluate((v) => v.readyState >= 2), 20_000);
  await page.locator('[data-testid=player-video]').evaluate((v) => { v.pause(); v.currentTime = 0; });
  await expectReadout(page, '1 / 39');
  if (!/←\/→ frame/.test(await page.textContent('[data-testid=keys-hint]'))) throw new Error('the key hint under a clip does not list frame stepping');
  for (let i = 0; i < 3; i++) await page.keyboard.press('ArrowRight');
  await expectReadout(page, '4 / 39');
  await page.keyboard.press('Shift+ArrowRight');
  await expectReadout(page, '28 / 39');
  await page.keyboard.press('ArrowLeft');
  await expectReadout(page, '27 / 39');
  await page.keyboard.press('Shift+ArrowRight');
  await expectReadout(page, '39 / 39'); // clamped at the last frame
  await page.keyboard.press('Shift+ArrowLeft');
  await page.keyboard.press('Shift+ArrowLeft');
  await expectReadout(page, '1 / 39'); // clamped at the first
  // l toggles loop, m mute, space plays.
  const loop0 = await page.locator('[data-testid=player-video]').evaluate((v) => v.loop);
  await page.keyboard.press('l');
  await until('loop to toggle', async () => (await page.locator('[data-testid=player-video]').evaluate((v) => v.loop)) === !loop0, 3_000);
  await page.keyboard.press('m');
  if (!(await page.locator('[data-testid=player-video]').evaluate((v) => v.muted))) throw new Error('m did not mute');
  await page.keyboard.press(' ');
  await until('playback', () => page.locator('[data-testid=player-video]').evaluate((v) => !v.paused && v.currentTime > 0.1), 10_000);
  await page.keyboard.press(' ');
  await page.screenshot({ path: path.join(outDir, 'lightbox.png') });
  await page.keyboard.press('Escape');
  await until('the lightbox to close', async () => (await page.locator('[data-testid=lightbox]').count()) === 0 && new URL(page.url()).pathname === '/', 5_000);
});

test('a real H3 clip as a ref2va reference plays frame by frame in the rail', async ({ page }) => {
  const clip = path.join(assets, 't2va.mp4');
  const up = await uploadFile(clip, 'video/mp4');
  const g = await enqueue({ prompt: `${unique('echo')} of the reference`, image_ids: [up.image_id], partition: 'ref2va' });
  await openGallery(page);
  await page.goto(`${base}/g/${g.generation_id}`);
  await page.waitForSelector('[data-testid=lightbox]');
  const ref = page.locator('[data-testid=rail-ref]');
  await ref.first().waitFor({ timeout: 10_000 });
  if ((await ref.first().getAttribute('data-kind')) !== 'video') throw new Error('the reference is not shown as a video');
  if ((await ref.first().locator('.badge').count()) !== 1) throw new Error('the video reference has no play badge');
  await ref.first().click();
  await until('the reference clip to load', () => page.locator('[data-testid=player-video]').evaluate((v) => v.readyState >= 2 && v.videoWidth === 1344 && v.videoHeight === 768), 20_000);
  await page.locator('[data-testid=player-video]').evaluate((v) => { v.pause(); v.currentTime = 0; });
  const total = Number(process.env.MMH3_E2E_T2VA_FRAMES); // counted by ffprobe in run.sh
  await expectReadout(page, `1 / ${total}`);
  await page.keyboard.press('Shift+ArrowRight');
  await page.keyboard.press('Shift+ArrowRight');
  await page.keyboard.press('ArrowRight');
  await expectReadout(page, `50 / ${total}`);
  for (let i = 0; i < 12; i++) await page.keyboard.press('Shift+ArrowRight');
  await expectReadout(page, `${total} / ${total}`);
  await page.screenshot({ path: path.join(outDir, 'lightbox-reference.png') });
  await page.click('[data-testid=rail-result]');
  await settled(g.generation_id).catch(() => {});
});

test('rerun fills the prompt bar with a new seed to tweak before running; edit & resubmit keeps the seed', async ({ page }) => {
  const prompt = `${unique('kite')} over a windy beach`;
  const img = await uploadFile(path.join(stills, 'first.png'), 'image/png');
  const g = await enqueue({ prompt, image_ids: [img.image_id] });
  const done = await settled(g.generation_id);
  await openGallery(page);
  await page.goto(`${base}/g/${g.generation_id}`);
  await page.waitForSelector('[data-testid=rerun]');
  const copies = () => api('GET', `/api/ai/queue?search=${encodeURIComponent(prompt)}`).then((r) => r.generations);
  await page.click('[data-testid=rerun]');
  await until('the lightbox to close', async () => (await page.locator('[data-testid=lightbox]').count()) === 0, 5_000);
  // Nothing is queued yet: the prompt bar holds the request, with a new seed shown.
  if ((await page.inputValue('[data-testid=prompt-input]')) !== prompt) throw new Error('rerun did not put the prompt in the prompt bar');
  const chips = await page.locator('[data-testid=chip]').evaluateAll((els) => els.map((e) => e.dataset.imageId));
  if (JSON.stringify(chips) !== JSON.stringify([img.image_id])) throw new Error(`rerun's references: ${JSON.stringify(chips)}, want [${img.image_id}]`);
  const filled = await page.textContent('[data-testid=params-toggle]');
  const seed = (/seed (\d+)/.exec(filled) || [])[1];
  if (!filled.startsWith(`${done.frames} f`) || !filled.includes(`${done.width}×${done.height}`) || !filled.includes(`${done.steps} steps`)) throw new Error(`parameters not filled: "${filled}"`);
  if (!seed || Number(seed) === done.seed) throw new Error(`rerun's seed: "${filled}" (the clip's was ${done.seed})`);
  if ((await copies()).length !== 1) throw new Error('rerun queued a job before it was sent');
  // Tweak, then run.
  await page.click('[data-testid=params-toggle]');
  await page.fill('[data-testid=steps-input]', '6');
  await page.click('[data-testid=prompt-input]');
  await page.keyboard.press('Enter');
  const rerun = await until('the rerun', async () => (await copies()).find((x) => x.generation_id !== g.generation_id), 10_000);
  if (String(rerun.seed) !== seed) throw new Error(`the rerun ran with seed ${rerun.seed}, the bar showed ${seed}`);
  if (rerun.steps !== 6) throw new Error(`the tweak was lost: steps ${rerun.steps}`);
  for (const k of ['frames', 'width', 'height', 'partition', 'no_audio']) {
    if (rerun[k] !== done[k]) throw new Error(`rerun changed ${k}: ${done[k]} → ${rerun[k]}`);
  }
  if (JSON.stringify(rerun.image_ids) !== JSON.stringify([img.image_id])) throw new Error(`rerun's image_ids ${JSON.stringify(rerun.image_ids)}`);
  await page.goto(`${base}/g/${g.generation_id}`);
  await page.waitForSelector('[data-testid=edit]');
  await page.click('[data-testid=edit]');
  await until('the lightbox to close', async () => (await page.locator('[data-testid=lightbox]').count()) === 0, 5_000);
  if ((await page.inputValue('[data-testid=prompt-input]')) !== prompt) throw new Error('the prompt was not loaded for editing');
  const summary = await page.textContent('[data-testid=params-toggle]');
  if (!summary.includes(`seed ${done.seed}`) || !summary.startsWith(`${done.frames} f`)) throw new Error(`parameters not loaded: "${summary}"`);
  await page.fill('[data-testid=prompt-input]', `${prompt}, edited`);
  await page.keyboard.press('Enter');
  const edited = await until('the edited job', async () => (await copies()).find((x) => x.prompt === `${prompt}, edited`), 10_000);
  if (edited.seed !== done.seed) throw new Error(`edit & resubmit changed the seed ${done.seed} → ${edited.seed}`);
  await settled(edited.generation_id);
  await settled(rerun.generation_id);
});

test('the event stream reconnects by itself after the API process dies', async ({ page, context }) => {
  const runDir = process.env.MMH3_E2E_RUN_DIR;
  if (!runDir) skip('it kills the API process, so it needs the stack run.sh starts (its pid files), not MMH3_E2E_BASE');
  const g = await enqueue({ prompt: `${unique('phoenix')} rising` });
  await settled(g.generation_id);
  await openGallery(page);
  const follower = await context.newPage(); // a second tab: gets the events relayed
  try {
    await openGallery(follower);
    await tile(page, g.generation_id).waitFor();
    const pid = Number(fs.readFileSync(path.join(runDir, 'fcgi.pid'), 'utf8').trim());
    process.kill(pid, 'SIGKILL'); // mmh3 serve restarts it
    await until('the tab to notice the lost stream', async () => (await page.locator('[data-testid=live-state]').getAttribute('data-state')) !== 'open', 15_000, 50);
    // Said in words next to the dot while it lasts.
    await until('"Reconnecting…" in the header', () => page.getByTestId('live-label').isVisible(), 15_000, 50);
    await until('the API to come back', async () => (await fetch(`${base}/api/status`)).ok, 30_000);
    await api('PATCH', `/api/ai/queue/${g.generation_id}`, { rating: 'approved' });
    await until('the stream to reopen', async () => (await page.locator('[data-testid=live-state]').getAttribute('data-state')) === 'open', 30_000);
    for (const p of [page, follower]) {
      await until('the change made while reconnecting', async () => (await tile(p, g.generation_id).getAttribute('data-rating')) === 'approved', 15_000);
    }
  } finally {
    await follower.close();
  }
});

test('open /g/<id> directly, reload it, and use back/forward', async ({ page }) => {
  const prompt = `${unique('glacier')} calving into the sea`;
  const g = await enqueue({ prompt });
  await settled(g.generation_id);
  await page.goto(`${base}/g/${g.generation_id}`);
  await page.waitForSelector('[data-testid=lightbox]');
  await until('the prompt in the lightbox', async () => (await page.textContent('[data-testid=lb-prompt]')) === prompt, 10_000);
  await page.reload();
  await until('the lightbox after a hard refresh', async () => (await page.textContent('[data-testid=lb-prompt]').catch(() => '')) === prompt, 10_000);
  await page.click('[data-testid=modal-close]');
  await until('the gallery at /', async () => new URL(page.url()).pathname === '/' && (await page.locator('[data-testid=lightbox]').count()) === 0, 5_000);
  await tile(page, g.generation_id).locator('a').click();
  await page.waitForSelector('[data-testid=lightbox]');
  await page.goBack();
  await until('back to close the lightbox', async () => (await page.locator('[data-testid=lightbox]').count()) === 0 && new URL(page.url()).pathname === '/', 5_000);
  await page.goForward();
  await until('forward to reopen it', async () => (await page.textContent('[data-testid=lb-prompt]').catch(() => '')) === prompt, 5_000);
  // An unknown id says so.
  await page.goto(`${base}/g/00000000-0000-4000-8000-000000000000`);
  await until('the not-found message', async () => /does not exist/.test(await page.textContent('[data-testid=lightbox]')), 10_000);
});

test('search prompts (Ctrl-K) and filter by status', async ({ page }) => {
  const word = unique('zebra');
  const a = await enqueue({ prompt: `${word} crossing a river` });
  const b = await enqueue({ prompt: `${word} asleep under a tree` });
  const other = await enqueue({ prompt: `${unique('walrus')} on the ice` });
  await api('DELETE', `/api/ai/queue/${b.generation_id}`).catch(() => {}); // cancelled (or cancelling)
  await settled(a.generation_id);
  await until('b to be cancelled or done', async () => ['cancelled', 'succeeded'].includes((await row(b.generation_id)).status), 60_000);
  const bStatus = (await row(b.generation_id)).status;
  await openGallery(page);
  await page.keyboard.press('Control+k');
  if (!(await page.evaluate(() => document.activeElement && document.activeElement.dataset.testid === 'search'))) throw new Error('Ctrl-K did not focus the search');
  await page.keyboard.type(word);
  await until('only the two matching tiles', async () => {
    const ids = await page.locator('[data-testid=tile]').evaluateAll((els) => els.map((e) => e.dataset.id));
    return ids.length === 2 && ids.includes(a.generation_id) && ids.includes(b.generation_id);
  }, 10_000);
  if ((await tile(page, other.generation_id).count()) !== 0) throw new Error('a non-matching tile is shown');
  await page.click(`[data-testid=filter-${bStatus}]`);
  await until(`only the ${bStatus} one`, async () => {
    const ids = await page.locator('[data-testid=tile]').evaluateAll((els) => els.map((e) => e.dataset.id));
    return ids.length === 1 && ids[0] === b.generation_id;
  }, 10_000);
  await page.click(`[data-testid=filter-${bStatus}]`);
  await page.click('[data-testid=filter-failed]');
  await until('no failed matches', async () => (await page.locator('[data-testid=tile]').count()) === 0 && (await page.locator('[data-testid=empty]').count()) === 1, 10_000);
  await page.screenshot({ path: path.join(outDir, 'search-filter.png') });
});

test('cancel a running job from its live lightbox', async ({ page }) => {
  // Many steps and frames so that the job is still running when Cancel lands.
  const g = await enqueue({ prompt: `${unique('slow')} sunrise over dunes`, steps: 200, frames: 124 });
  await openGallery(page);
  await until('the job to start', async () => (await row(g.generation_id)).status === 'processing', 60_000);
  await tile(page, g.generation_id).locator('a').click();
  await page.waitForSelector('[data-testid=live-progress]');
  await until('live progress in the lightbox', async () => /Denoising · step \d+\/\d+|Loading|Encoding|Starting/.test(await page.textContent('[data-testid=live-progress]')), 20_000);
  // Arm, see it armed, confirm, see the DELETE go out: a failure then says which of the three did not happen
  // (one run in twenty once ended with the job finished and no DELETE sent at all).
  await page.click('[data-testid=cancel]');
  await until('the cancel button to ask for confirmation', async () => (await page.textContent('[data-testid=cancel]')) === 'Cancel this job?', 3_000);
  const sent = page.waitForResponse((r) => r.request().method() === 'DELETE' && r.url().endsWith(`/api/ai/queue/${g.generation_id}`), { timeout: 10_000 })
    .catch(async () => { throw new Error(`the confirm click sent no DELETE within 10 s (button now "${await page.textContent('[data-testid=cancel]').catch(() => 'gone')}", job ${(await row(g.generation_id)).status})`); });
  await page.click('[data-testid=cancel]'); // confirm
  await sent;
  await until('the job to end cancelled', async () => (await row(g.generation_id)).status === 'cancelled', 60_000);
  await until('the lightbox to show it', async () => (await page.getAttribute('[data-testid=lb-status]', 'data-status')) === 'cancelled' && (await page.textContent('[data-testid=lb-status]')) === 'Cancelled', 10_000);
  await page.keyboard.press('Escape');
  await until('the tile to show it', async () => (await tile(page, g.generation_id).getAttribute('data-status')) === 'cancelled', 10_000);
});

test('delete a finished clip', async ({ page, otherBrowser }) => {
  const g = await enqueue({ prompt: `${unique('origami')} crane unfolding` });
  await settled(g.generation_id);
  await openGallery(page);
  const watcher = await otherBrowser.newPage();
  try {
    await openGallery(watcher);
    await tile(watcher, g.generation_id).waitFor({ timeout: 10_000 });
    await tile(watcher, g.generation_id).locator('a').click(); // the other browser looks at it
    await watcher.waitForSelector('[data-testid=lightbox] [data-testid=player-video]');
    await tile(page, g.generation_id).locator('a').click();
    await page.waitForSelector('[data-testid=delete]');
    await page.click('[data-testid=delete]');
    if (!/Delete for good/.test(await page.textContent('[data-testid=delete]'))) throw new Error('delete did not ask for confirmation');
    await page.click('[data-testid=delete]');
    await until('the lightbox to close', async () => (await page.locator('[data-testid=lightbox]').count()) === 0 && new URL(page.url()).pathname === '/', 10_000);
    await until('the tile to go', async () => (await tile(page, g.generation_id).count()) === 0, 10_000);
    await until('the tile to go in another browser', async () => (await tile(watcher, g.generation_id).count()) === 0, 10_000);
    await until('the open lightbox there to say so', async () => (await watcher.locator('[data-testid=lb-gone]').count()) === 1, 10_000);
    const res = await fetch(`${base}/api/ai/queue/${g.generation_id}`);
    if (res.status !== 404) throw new Error(`GET after delete answered ${res.status}`);
  } finally {
    await watcher.close();
  }
});

test('audio switches to ref2va, invalid combinations are explained, server refusals are shown', async ({ page }) => {
  await openGallery(page);
  await page.fill('[data-testid=prompt-input]', `${unique('never')} sent`);
  // Attaching audio (a real H3 soundtrack) switches the model to ref2va.
  await page.setInputFiles('[data-testid=file-input]', path.join(stills, 'voice.wav'));
  const chip = page.locator('[data-testid=chip]');
  await until('the audio upload', async () => (await chip.getAttribute('data-state')) === 'done', 15_000);
  if ((await chip.getAttribute('data-kind')) !== 'audio') throw new Error('the chip is not an audio chip');
  if (!/ref2va/.test(await page.textContent('[data-testid=params-toggle]'))) throw new Error('audio did not switch the model to ref2va');
  // Forcing fl2va is explained, and nothing is sent.
  await page.click('[data-testid=params-toggle]');
  await page.click('[data-testid=model-fl2va]');
  await until('the explanation', async () => /Audio references need the ref2va/.test(await page.textContent('[data-testid=problems]')), 5_000);
  const before = (await api('GET', '/api/ai/queue?limit=1')).count;
  await page.focus('[data-testid=prompt-input]');
  await page.keyboard.press('Enter');
  await page.waitForTimeout(500);
  if ((await api('GET', '/api/ai/queue?limit=1')).count !== before) throw new Error('an invalid form was sent');
  await page.click('[data-testid=chip-remove]');
  // the next file's chip must be the only one: a removal still rendering leaves two for the locator
  await until('the audio chip removed', async () => (await chip.count()) === 0, 5_000);
  // A file the server's FFmpeg check refuses: the server's reason reaches the chip.
  const bogus = path.join(outDir, 'not-an-image.png');
  fs.writeFileSync(bogus, 'this is text, not a PNG');
  await page.setInputFiles('[data-testid=file-input]', bogus);
  await until('the refused upload', async () => (await chip.getAttribute('data-state')) === 'error', 15_000);
  const why = await chip.locator('.chip-label').getAttribute('title');
  if (!why || why.length < 8 || /^HTTP \d+$/.test(why)) throw new Error(`the chip does not carry the server's reason: "${why}"`);
  await until('the problem listed', async () => /could not be attached/.test(await page.textContent('[data-testid=problems]')), 5_000);
});

test('settings: write-only key, rewrite on opens the approval sheet, Esc cancels', async ({ page }) => {
  await openGallery(page);
  const secret = `sk-test-${unique('k')}`;
  try {
    await page.click('[data-testid=settings-button]');
    await page.waitForSelector('[data-testid=settings]');
    if ((await page.inputValue('[data-testid=rewrite-model]')) === '') throw new Error('no rewrite model shown');
    await page.fill('[data-testid=api-key]', secret);
    await page.check('[data-testid=rewrite-toggle]');
    await page.click('[data-testid=settings-save]');
    await until('the settings to close', async () => (await page.locator('[data-testid=settings]').count()) === 0, 10_000);
    const stored = await api('GET', '/api/settings');
    if (!stored.has_oxen_api_key || !stored.rewrite_enabled) throw new Error(`settings not stored: ${JSON.stringify(stored)}`);
    if (JSON.stringify(stored).includes(secret)) throw new Error('the API key came back from the server');
    await page.click('[data-testid=settings-button]');
    if ((await page.inputValue('[data-testid=api-key]')) !== '') throw new Error('the key field is not write-only');
    if (!/set/.test(await page.textContent('[data-testid=key-state]'))) throw new Error('the dialog does not say a key is set');
    await page.keyboard.press('Escape');

    const prompt = `${unique('rewrite')} a lighthouse in fog`;
    const before = (await api('GET', '/api/ai/queue?limit=1')).count;
    await page.fill('[data-testid=prompt-input]', prompt);
    await page.keyboard.press('Enter');
    await page.waitForSelector('[data-testid=rewrite-sheet]');
    if ((await page.textContent('[data-testid=rewrite-original]')) !== prompt) throw new Error('the sheet does not show the original');
    // With no reachable hub the server answers with an error, which the sheet shows.
    await until('the rewrite to stream or fail', async () =>
      (await page.locator('[data-testid=rewrite-error]').count()) > 0 || (await page.locator('[data-testid=use-rewrite]:not([disabled])').count()) > 0, 30_000);
    if (await page.locator('[data-testid=rewrite-error]').count()) {
      const msg = await page.textContent('[data-testid=rewrite-error]');
      if (msg.replace('Rewrite failed:', '').trim().length < 4) throw new Error(`the sheet shows no server message: "${msg}"`);
    }
    await page.screenshot({ path: path.join(outDir, 'rewrite-sheet.png') });
    await page.keyboard.press('Escape');
    await until('the sheet to close', async () => (await page.locator('[data-testid=rewrite-sheet]').count()) === 0, 5_000);
    if ((await api('GET', '/api/ai/queue?limit=1')).count !== before) throw new Error('Esc still queued a job');
    if ((await page.inputValue('[data-testid=prompt-input]')) !== prompt) throw new Error('the prompt was lost');
    // "Use original" sends the prompt as typed.
    await page.keyboard.press('Enter');
    await page.click('[data-testid=use-original]');
    await page.locator('[data-testid=tile]', { hasText: prompt }).first().waitFor({ timeout: 10_000 });
  } finally {
    await api('PUT', '/api/settings', { rewrite_enabled: false, oxen_api_key: null });
  }
});

test('phone width: gallery, prompt bar and lightbox fit the screen', async ({ context }) => {
  const g = await enqueue({ prompt: `${unique('phone')} view of a city at night` });
  await settled(g.generation_id);
  const page = await context.newPage();
  try {
    await page.setViewportSize({ width: 390, height: 844 });
    await openGallery(page);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    if (overflow > 0) throw new Error(`the page is ${overflow}px wider than the phone screen`);
    // Every status filter and the clip count are on screen: nothing scrolled
    // out of a row that does not look scrollable.
    const hidden = await page.evaluate(() => {
      const row = document.querySelector('.filters');
      const out = [];
      if (row.scrollWidth > row.clientWidth + 1) out.push(`the filter row scrolls (${row.scrollWidth}px in ${row.clientWidth}px)`);
      for (const el of [...row.querySelectorAll('button'), document.querySelector('[data-testid=result-count]')]) {
        const r = el.getBoundingClientRect();
        const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
        if (r.width === 0 || r.left < 0 || r.right > window.innerWidth || !hit || !el.contains(hit)) out.push(`"${el.textContent}" at x ${Math.round(r.left)}..${Math.round(r.right)}`);
      }
      return out;
    });
    if (hidden.length) throw new Error(`off screen on a phone: ${hidden.join('; ')}`);
    if (!/^\d+ clips?$/.test(await page.textContent('[data-testid=result-count]'))) throw new Error('no clip count');
    await page.screenshot({ path: path.join(outDir, 'phone-gallery.png') });
    await tile(page, g.generation_id).locator('a').click();
    await page.waitForSelector('[data-testid=player-video]');
    const box = await page.locator('[data-testid=lightbox]').boundingBox();
    if (box.width > 390) throw new Error(`lightbox is ${box.width}px wide`);
    await page.screenshot({ path: path.join(outDir, 'phone-lightbox.png') });
  } finally {
    await page.close();
  }
});

test('phone width: whole lines in text tiles, queue counts in the header, a portrait clip fills the viewer', async ({ context }) => {
  const img = await uploadFile(path.join(stills, 'first.png'), 'image/png');
  const snd = await uploadFile(path.join(stills, 'voice.wav'), 'audio/wav');
  // A long prompt with references and progress: the most a text tile holds.
  const word = unique('balloon');
  const busy = await enqueue({ prompt: `${word} drifting over a valley of fairy chimneys at sunrise, long shadows, a flock of birds crossing, slow crane shot rising above the ridge`, image_ids: [img.image_id, snd.image_id], partition: 'ref2va', steps: 60 });
  const tall = await enqueue({ prompt: `${unique('dancer')} spinning, portrait`, width: 192, height: 320 });
  const page = await context.newPage();
  try {
    await page.setViewportSize({ width: 390, height: 844 });
    await openGallery(page);
    await tile(page, busy.generation_id).waitFor({ timeout: 10_000 });
    const cut = await page.locator('[data-testid=tile] .tile-card').evaluateAll((cards) => cards
      .filter((c) => c.scrollHeight > c.clientHeight + 1)
      .map((c) => `${c.closest('[data-testid=tile]').dataset.status} tile: content ${c.scrollHeight}px in ${c.clientHeight}px`));
    // A squeezed text block shows a fraction of a line: its height is not a whole number of lines.
    const halfLines = await page.locator('[data-testid=tile] .tile-card').evaluateAll((cards) => cards.flatMap((c) => [...c.querySelectorAll('.tile-prompt, .tile-error')]
      .map((el) => { const lh = parseFloat(getComputedStyle(el).lineHeight); const lines = el.clientHeight / lh; return { lines, off: Math.abs(lines - Math.round(lines)) * lh, text: el.textContent.slice(0, 30) }; })
      .filter((x) => x.off > 1.5)
      .map((x) => `"${x.text}…" shows ${x.lines.toFixed(2)} lines`)));
    if (cut.length || halfLines.length) throw new Error(`text tiles cut their content at the edge: ${[...cut, ...halfLines].slice(0, 3).join('; ')}`);
    if (!(await page.locator('[data-testid=queue-counts]').isVisible())) throw new Error('the queue counts are hidden on a phone');
    const brand = await page.locator('.brand').boundingBox();
    const gear = await page.getByTestId('settings-button').boundingBox();
    if (Math.abs((gear.y + gear.height / 2) - (brand.y + brand.height / 2)) > 8) throw new Error('the settings button sits on a row of its own');
    await page.screenshot({ path: path.join(outDir, 'phone-text-tiles.png') });
    await settled(tall.generation_id);
    await tile(page, tall.generation_id).locator('a').click();
    await page.waitForSelector('[data-testid=player-video]');
    const viewer = await page.getByTestId('lb-viewer').boundingBox();
    if (viewer.height <= viewer.width) throw new Error(`a 192×320 clip shows in a ${Math.round(viewer.width)}×${Math.round(viewer.height)} box`);
    await page.screenshot({ path: path.join(outDir, 'phone-lightbox-portrait.png') });
  } finally {
    await page.close();
    await api('DELETE', `/api/ai/queue/${busy.generation_id}`).catch(() => {});
  }
});

test('filtered views take in live changes: a job finishing under Done, a clip approved in another tab under Approved', async ({ page, context }) => {
  const word = unique('lantern');
  await openGallery(page);
  await page.fill('[data-testid=search]', word);
  await page.click('[data-testid=filter-succeeded]');
  await until('the empty filtered view', async () => (await page.getByTestId('empty').count()) === 1, 10_000);
  const g = await enqueue({ prompt: `${word} festival on a river` });
  await until('the tile of the job that finished while filtered', async () => (await tile(page, g.generation_id).count()) === 1, 120_000);
  if (!/^1 clip/.test(await page.textContent('[data-testid=result-count]'))) throw new Error(`count: ${await page.textContent('[data-testid=result-count]')}`);
  await page.click('[data-testid=filter-approved]');
  await until('no approved clip yet', async () => (await page.getByTestId('empty').count()) === 1, 10_000);
  const other = await context.newPage();
  try {
    await openGallery(other);
    await tile(other, g.generation_id).hover();
    await tile(other, g.generation_id).getByTestId('approve').click();
    await until('the clip approved in the other tab to appear under Approved', async () => (await tile(page, g.generation_id).count()) === 1, 15_000);
  } finally {
    await other.close();
  }
});

test('an audio reference plays with controls in the rail, not as a black box', async ({ page }) => {
  const snd = await uploadFile(path.join(stills, 'voice.wav'), 'audio/wav');
  const g = await enqueue({ prompt: `${unique('choir')} singing`, image_ids: [snd.image_id], partition: 'ref2va' });
  await page.goto(`${base}/g/${g.generation_id}`);
  await page.locator('[data-testid=rail-ref][data-kind=audio]').click();
  await page.getByTestId('audio-view').waitFor({ timeout: 10_000 });
  const bar = await page.locator('[data-testid=audio-view] media-control-bar').boundingBox();
  if (!bar || bar.height < 30) throw new Error(`the audio controls are not shown (${JSON.stringify(bar)})`);
  const play = await page.locator('[data-testid=audio-view] media-play-button').boundingBox();
  if (!play || play.width < 20) throw new Error('no play button for the audio reference');
  // The hint lists the keys that work on audio: no frames to step; ← → seek by seconds.
  const hint = await page.textContent('[data-testid=keys-hint]');
  if (/frame/.test(hint) || !/space play/.test(hint) || !/m mute/.test(hint)) throw new Error(`key hint under an audio reference: "${hint}"`);
  await until('the audio to load', async () => page.$eval('[data-testid=audio-view] audio', (a) => a.readyState >= 1 && a.duration > 2), 10_000);
  await page.keyboard.press('ArrowRight');
  await until('→ to seek one second', async () => Math.abs(await page.$eval('[data-testid=audio-view] audio', (a) => a.currentTime) - 1) < 0.05, 5_000);
  await page.screenshot({ path: path.join(outDir, 'lightbox-audio-reference.png') });
  await api('DELETE', `/api/ai/queue/${g.generation_id}`).catch(() => {});
});

test('no layout shift while the gallery media loads', async ({ page }) => {
  await page.addInitScript(() => {
    window.__cls = 0;
    new PerformanceObserver((list) => { for (const e of list.getEntries()) if (!e.hadRecentInput) window.__cls += e.value; })
      .observe({ type: 'layout-shift', buffered: true });
  });
  await openGallery(page);
  await page.locator('[data-testid=tile]').first().waitFor({ timeout: 10_000 });
  await page.waitForTimeout(2500);
  const cls = await page.evaluate(() => window.__cls);
  if (cls > 0.01) throw new Error(`cumulative layout shift ${cls.toFixed(3)}`);
});

test('keyboard only: Tab to a tile, Enter opens it, Esc returns focus', async ({ page }) => {
  const g = await enqueue({ prompt: `${unique('keys')} on a piano` });
  await settled(g.generation_id);
  await openGallery(page);
  await tile(page, g.generation_id).waitFor();
  await tile(page, g.generation_id).locator('a').focus();
  await page.keyboard.press('Enter');
  await page.waitForSelector('[data-testid=lightbox]');
  // ↓ / ↑ walk the gallery's list in place.
  const order = await page.locator('[data-testid=tile]').evaluateAll((els) => els.map((e) => e.dataset.id));
  const at = order.indexOf(g.generation_id);
  if (at >= 0 && at + 1 < order.length) {
    await page.keyboard.press('ArrowDown');
    await until('the next clip', async () => page.url().endsWith(`/g/${order[at + 1]}`), 5_000);
    await page.keyboard.press('ArrowUp');
    await until('back to the clip', async () => page.url().endsWith(`/g/${g.generation_id}`), 5_000);
  }
  await page.keyboard.press('Escape');
  await until('focus back on the tile', () => page.evaluate((id) => document.activeElement && document.activeElement.closest(`[data-id="${id}"]`) !== null, g.generation_id), 5_000);
  await page.keyboard.press('a'); // approve the focused tile
  await until('approved by keyboard', async () => (await row(g.generation_id)).rating === 'approved', 10_000);
});

test('the gallery lists newest first and pages in on scroll', async ({ page }) => {
  // Enough rows for a second page (the app loads 40 at a time).
  const have = (await api('GET', '/api/ai/queue?limit=1')).count;
  const word = unique('page');
  for (let i = have; i < 45; i++) await enqueue({ prompt: `${word} filler ${i}`, frames: 5, width: 64, height: 64, steps: 2 });
  await openGallery(page);
  const listed = (await api('GET', '/api/ai/queue?limit=500')).generations.map((g) => g.generation_id);
  await page.locator('[data-testid=tile]').nth(39).waitFor({ timeout: 15_000 });
  await page.locator('[data-testid=tile]').nth(39).scrollIntoViewIfNeeded();
  await until('the second page', async () => (await page.locator('[data-testid=tile]').count()) >= Math.min(listed.length, 41), 15_000);
  expectServerOrder('after paging', await tileIds(page), listed);
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.mouse.move(0, 0);
  await page.waitForTimeout(500);
  await page.screenshot({ path: path.join(outDir, 'gallery-live.png') });
  // The artefact of the finished clips.
  await page.click('[data-testid=filter-succeeded]');
  await until('only finished clips', async () => {
    const st = await page.locator('[data-testid=tile]').evaluateAll((els) => els.map((e) => e.dataset.status));
    return st.length > 0 && st.every((s) => s === 'succeeded');
  }, 10_000);
  await page.waitForTimeout(1000);
  await page.screenshot({ path: path.join(outDir, 'gallery.png') });
});

test('an update that arrives while the first page loads leaves the gallery in the server order', async ({ page }) => {
  // Rows the worker is busy on, with newer rows listed above them: their
  // progress events stream in while the tab's first page is held back below.
  const word = unique('race');
  for (let i = 0; i < 3; i++) await enqueue({ prompt: `${word} busy ${i}`, frames: 5, width: 64, height: 64, steps: 28 });
  for (let i = 0; i < 3; i++) await enqueue({ prompt: `${word} newer ${i}`, frames: 5, width: 64, height: 64, steps: 2 });
  // Every generation_update the tab's event stream delivers, by id.
  await page.addInitScript(() => {
    window.__updates = [];
    const Source = window.EventSource;
    window.EventSource = class extends Source {
      constructor(...args) {
        super(...args);
        this.addEventListener('generation_update', (e) => { try { window.__updates.push(JSON.parse(e.data).generation_id); } catch { /* not JSON */ } });
      }
    };
  });
  // The first list request is read from the server at once but answered only
  // after the stream has brought an update about a row that page lists below
  // its top: the race of a slow list response on a busy machine, every time.
  let firstPage = null;
  let raced = null;
  await page.route(/\/api\/ai\/queue\?/, async (route) => {
    if (firstPage) return route.continue();
    firstPage = route.fetch();
    const response = await firstPage;
    const listedIds = (await response.json()).generations.map((g) => g.generation_id);
    raced = await until('an update about a listed row below the top while the first page is held', async () => {
      const seen = await page.evaluate(() => window.__updates);
      return seen.find((id) => listedIds.indexOf(id) > 0);
    }, 60_000, 100);
    await route.fulfill({ response });
  });
  await openGallery(page);
  await until('the held first page to be answered', () => raced, 70_000);
  await page.locator('[data-testid=tile]').first().waitFor({ timeout: 15_000 }); // the page renders in one go
  await page.unroute(/\/api\/ai\/queue\?/);
  const listed = (await api('GET', '/api/ai/queue?limit=500')).generations.map((g) => g.generation_id);
  const shown = await tileIds(page);
  if (shown.length < Math.min(40, listed.length)) throw new Error(`${shown.length} tiles for a first page of ${Math.min(40, listed.length)}`);
  expectServerOrder(`update about ${raced.slice(0, 8)} (index ${listed.indexOf(raced)}) during the first page`, shown, listed);
});

// ------------------------------------------------------------------ run
const failed = await runAll({
  outDir,
  filter,
  setup: async () => {
    const main = await launch();
    const other = await launch();
    return { context: main.context, otherBrowser: other.context, main, other };
  },
  teardown: async (env) => { await env.main.close(); await env.other.close(); },
});
process.exit(failed ? 1 : 0);
