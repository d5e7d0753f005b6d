// The gallery as people use it (issue 22, and the web items of issue 25), in
// Chromium against the real stack with the mock engine: true shapes, batches
// and variations, references from a clip, multi-select, prompt history, queue
// estimates, keys, plain words; axe-core over every view (no serious or
// critical violation) and screenshots of the desktop (1440 and 1920 wide) and
// phone (390×844) layouts in OUT_DIR/screens/.
//
//   node tests/e2e/gallery-use.e2e.mjs BASE_URL OUT_DIR [name filter]
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { checkA11y, launch, runAll, test } from './harness.mjs';
import { overlaps, stackApi, tile, unique, until } from './util.mjs';

const [base, outDir = 'tests/out/e2e', filter] = process.argv.slice(2);
if (!base) { console.log('FAIL web/e2e-use: usage: gallery-use.e2e.mjs BASE_URL OUT_DIR'); process.exit(1); }
const stills = process.env.MMH3_E2E_STILLS; // first.png, last.png, voice.wav (made by run.sh)
const screens = path.join(outDir, 'screens');
fs.mkdirSync(screens, { recursive: true });
const { api, enqueue, enqueueAll, row, settled, uploadFile, openGallery } = stackApi(base);

const DESKTOP = [{ width: 1440, height: 900 }, { width: 1920, height: 1080 }];
const PHONE = { width: 390, height: 844 };
const TINY = { frames: 22, width: 320, height: 192, steps: 4 };
const shot = (page, name) => page.screenshot({ path: path.join(screens, `${name}.png`) });
const a11y = (page, name) => checkA11y(page, name, outDir);
const text = (page, sel) => page.textContent(sel).then((t) => (t || '').replace(/\s+/g, ' ').trim());
const readout = (page) => text(page, '[data-testid=frame-readout]');
const expectReadout = (page, want) => until(`frame readout "${want}"`, async () => (await readout(page)) === want, 10_000, 100)
  .catch(async (e) => { throw new Error(`${e.message}; shows "${await readout(page)}"`); });
const ids = (page, sel = '[data-testid=tile]') => page.locator(sel).evaluateAll((els) => els.map((e) => e.dataset.id));
const focusedTile = (page) => page.evaluate(() => document.activeElement && document.activeElement.closest('[data-testid=tile]')?.dataset.id);
const count = async () => (await api('GET', '/api/ai/queue?limit=1')).count;
const search = async (page, word) => {
  await page.fill('[data-testid=search]', word);
  await until(`the search for ${word}`, async () => (await page.locator('[data-testid=tile]').count()) > 0
    && (await page.locator('[data-testid=tile]').allTextContents()).every((t) => t.includes(word)), 10_000);
};

async function withPage(context, size, fn) {
  const page = await context.newPage();
  try {
    await page.setViewportSize(size);
    return await fn(page);
  } finally {
    await page.close();
  }
}

// The name `mmh3 generate` gives its output (src/cli/cmd_generate.c,
// default_out): local %Y%m%d_%H%M%S, a dash, the slug.
function cliStamp(unixSeconds) {
  const t = new Date(unixSeconds * 1000);
  const p2 = (n) => String(n).padStart(2, '0');
  return `${t.getFullYear()}${p2(t.getMonth() + 1)}${p2(t.getDate())}_${p2(t.getHours())}${p2(t.getMinutes())}${p2(t.getSeconds())}`;
}

function probe(file) {
  const out = execFileSync('ffprobe', ['-v', 'error', '-count_frames', '-select_streams', 'v:0', '-show_entries', 'stream=width,height,nb_read_frames', '-of', 'json', file]);
  return JSON.parse(out).streams[0];
}

// ------------------------------------------------------------------ shapes

test('tiles keep each clip\'s own shape, portrait and square too, with its length on the clip', async ({ page }) => {
  const word = unique('shape');
  const shapes = [[192, 320], [256, 256], [320, 192]];
  const gs = [];
  for (const [w, h] of shapes) gs.push(await enqueue({ prompt: `${word} ${w}x${h}`, width: w, height: h, frames: 22, steps: 4 }));
  for (const g of gs) await settled(g.generation_id);
  await openGallery(page);
  await search(page, word);
  for (const [i, [w, h]] of shapes.entries()) {
    const t = tile(page, gs[i].generation_id);
    await t.locator('[data-testid=tile-poster]').waitFor({ timeout: 10_000 });
    const box = await t.boundingBox();
    const want = w / h;
    if (Math.abs(box.width / box.height - want) / want > 0.03) throw new Error(`the ${w}×${h} clip's tile is ${box.width.toFixed(0)}×${box.height.toFixed(0)} (${(box.width / box.height).toFixed(3)}, want ${want.toFixed(3)})`);
    // The whole picture shows: the poster's own aspect is the tile's (nothing cropped).
    const img = await t.locator('[data-testid=tile-poster]').evaluate((el) => ({ w: el.naturalWidth, h: el.naturalHeight, bw: el.clientWidth, bh: el.clientHeight }));
    if (img.w && Math.abs(img.w / img.h - img.bw / img.bh) / want > 0.03) throw new Error(`the ${w}×${h} poster (${img.w}×${img.h}) is cropped into ${img.bw}×${img.bh}`);
    const length = await t.getByTestId('tile-length');
    if (!(await length.isVisible()) || (await length.textContent()) !== '0.9 s') throw new Error(`the ${w}×${h} tile's length reads "${await length.textContent()}", want "0.9 s"`);
  }
  await page.setViewportSize(DESKTOP[0]);
  await shot(page, 'desktop-1440-shapes');
});

test('on a touch screen every clip shows its prompt', async ({ context }) => {
  const word = unique('touch');
  const g = await enqueue({ prompt: `${word} a heron fishing at dawn`, ...TINY });
  await settled(g.generation_id);
  await withPage(context, PHONE, async (page) => {
    const cdp = await page.context().newCDPSession(page);
    await cdp.send('Emulation.setTouchEmulationEnabled', { enabled: true, maxTouchPoints: 5 });
    await cdp.send('Emulation.setEmulatedMedia', { features: [{ name: 'hover', value: 'none' }, { name: 'pointer', value: 'coarse' }] });
    await openGallery(page);
    if (!(await page.evaluate(() => matchMedia('(hover: none)').matches))) throw new Error('the page does not see a touch screen (hover: none)');
    await search(page, word);
    const caption = tile(page, g.generation_id).getByTestId('tile-caption');
    await caption.waitFor({ timeout: 10_000 });
    const seen = await caption.evaluate((el) => {
      const r = el.getBoundingClientRect(), s = getComputedStyle(el);
      const p = el.querySelector('.tile-caption-prompt');
      return { opacity: Number(s.opacity), visibility: s.visibility, inView: r.top >= 0 && r.bottom <= innerHeight, text: p.textContent, pw: p.clientWidth };
    });
    if (seen.opacity < 0.99 || seen.visibility !== 'visible' || !seen.inView || seen.pw < 40) throw new Error(`the prompt on a touch screen: ${JSON.stringify(seen)}`);
    if (!seen.text.startsWith(word)) throw new Error(`the caption says "${seen.text}"`);
    // The length badge leaves the prompt's line alone.
    const badge = await tile(page, g.generation_id).getByTestId('tile-length').boundingBox();
    const line = await caption.locator('.tile-caption-prompt').boundingBox();
    if (overlaps(badge, line)) throw new Error('the length badge covers the prompt on a touch screen');
    await shot(page, 'phone-touch-gallery');
    // A long press selects (no hover to show the select box).
    await tile(page, g.generation_id).getByTestId('tile-link').dispatchEvent('contextmenu');
    await page.getByTestId('selection-bar').waitFor({ timeout: 5_000 });
    if ((await tile(page, g.generation_id).getAttribute('data-selected')) !== 'true') throw new Error('a long press did not select the clip');
  });
});

test('a clip that appears under a resting pointer shows its poster until it plays, never black', async ({ page }) => {
  await page.setViewportSize(DESKTOP[0]);
  await openGallery(page);
  const g = await enqueue({ prompt: `${unique('rest')} a lighthouse at dusk`, ...TINY, steps: 12 });
  const t = tile(page, g.generation_id);
  await t.waitFor({ timeout: 10_000 });
  const box = await t.boundingBox();
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2); // the pointer rests where the clip will appear
  // Every frame: a tile whose poster is faded while its video has no picture is a black box.
  await page.evaluate((id) => {
    window.__black = [];
    const look = () => {
      const el = document.querySelector(`[data-testid=tile][data-id="${id}"]`);
      const img = el && el.querySelector('[data-testid=tile-poster]');
      const v = el && el.querySelector('[data-testid=tile-video]');
      if (v && (!img || Number(getComputedStyle(img).opacity) < 0.5) && v.readyState < 2) window.__black.push({ t: performance.now(), ready: v.readyState, src: Boolean(v.getAttribute('src')) });
      requestAnimationFrame(look);
    };
    look();
  }, g.generation_id);
  await settled(g.generation_id);
  const video = t.getByTestId('tile-video');
  await until('the clip to play under the resting pointer', () => video.evaluate((v) => !v.paused && v.currentTime > 0.1 && v.readyState >= 2), 20_000);
  const black = await page.evaluate(() => window.__black);
  if (black.length) throw new Error(`the tile showed black for ${black.length} frames (first: ${JSON.stringify(black[0])})`);
});

// ------------------------------------------------------------------ words

test('progress counts the steps the request asked for, and the engine pill says it is rendering', async ({ page }) => {
  await openGallery(page);
  // Every change on the page: the tile's progress text and the engine pill, as shown together.
  await page.evaluate(() => {
    window.__seen = [];
    new MutationObserver(() => {
      const pill = document.querySelector('[data-testid=engine-kind]');
      for (const el of document.querySelectorAll('[data-testid=progress-text]')) window.__seen.push({ progress: el.textContent, pill: pill ? pill.textContent : '' });
    }).observe(document.body, { subtree: true, childList: true, characterData: true });
  });
  const g = await enqueue({ prompt: `${unique('steps')} rain on a tin roof`, ...TINY, steps: 60 });
  const t = tile(page, g.generation_id);
  await until('the tile to denoise', async () => /Denoising/.test(await t.textContent()), 60_000, 100);
  // While the tile denoises the engine is rendering, not loading; the mock has no weights.
  await until('the engine pill to say rendering', async () => /rendering/.test(await text(page, '[data-testid=engine-kind]')), 15_000, 100);
  const residency = await page.getByTestId('residency').textContent();
  if (residency !== 'no weights (mock engine)') throw new Error(`the mock engine's residency reads "${residency}"`);
  await settled(g.generation_id);
  const shown = await page.evaluate(() => window.__seen);
  const loading = shown.filter((x) => /Denoising/.test(x.progress) && /loading/.test(x.pill));
  if (loading.length) throw new Error(`the engine pill said "${loading[0].pill}" while a tile showed "${loading[0].progress}"`);
  const seen = shown.map((x) => /step (\d+)\/(\d+)/.exec(x.progress)).filter(Boolean);
  if (!seen.length) throw new Error('no step was shown');
  const off = seen.filter((m) => m[2] !== '60' || Number(m[1]) < 1 || Number(m[1]) > 60);
  if (off.length) throw new Error(`a 60-step request showed ${off.map((m) => m[0]).join(', ')}`);
  await page.goto(`${base}/g/${g.generation_id}`);
  if ((await text(page, '[data-testid=param-steps]')) !== '60') throw new Error('the lightbox does not say 60 steps');
});

test('one word per status: the filter and the clip both say Done; cancelled jobs can be hidden', async ({ page }) => {
  const word = unique('words');
  const done = await enqueue({ prompt: `${word} finished`, ...TINY });
  await settled(done.generation_id);
  const blocker = await enqueue({ prompt: `${word} long`, ...TINY, steps: 200 });
  const gone = await enqueue({ prompt: `${word} cancelled`, ...TINY });
  await api('DELETE', `/api/ai/queue/${gone.generation_id}`);
  await api('DELETE', `/api/ai/queue/${blocker.generation_id}`);
  await settled(gone.generation_id, 'cancelled');
  await openGallery(page);
  await search(page, word);
  if ((await text(page, '[data-testid=filter-succeeded]')) !== 'Done') throw new Error('the filter is not "Done"');
  await page.goto(`${base}/g/${done.generation_id}`);
  await until('the status tag', async () => (await text(page, '[data-testid=lb-status]')) === 'Done', 10_000);
  await page.keyboard.press('Escape');
  await search(page, word);
  await tile(page, gone.generation_id).waitFor({ timeout: 10_000 });
  await page.click('[data-testid=hide-cancelled]');
  await until('the cancelled tile to go', async () => (await tile(page, gone.generation_id).count()) === 0 && (await tile(page, done.generation_id).count()) === 1, 10_000);
  await page.reload();
  await page.waitForSelector('[data-testid=prompt-input]');
  await search(page, word);
  if ((await tile(page, gone.generation_id).count()) !== 0) throw new Error('"Hide cancelled" did not last a reload');
  await page.click('[data-testid=hide-cancelled]');
  await until('the cancelled tile back', async () => (await tile(page, gone.generation_id).count()) === 1, 10_000);
});

test('downloads are named from the date and the prompt\'s head, as mmh3 generate names its files', async ({ page }) => {
  const word = unique('name');
  const g = await enqueue({ prompt: `${word} Red fox, 2 cubs!`, ...TINY });
  const done = await settled(g.generation_id);
  await page.goto(`${base}/g/${g.generation_id}`);
  await page.waitForSelector('[data-testid=download]');
  const [dl] = await Promise.all([page.waitForEvent('download'), page.click('[data-testid=download]')]);
  const want = `${cliStamp(done.completed_at)}-${word}-red-fox-2-cubs.mp4`;
  if (dl.suggestedFilename() !== want) throw new Error(`the download is named "${dl.suggestedFilename()}", want "${want}"`);
  const file = path.join(os.tmpdir(), `mmh3-e2e-${word}.mp4`);
  await dl.saveAs(file);
  const v = probe(file);
  fs.rmSync(file, { force: true });
  if (v.width !== 320 || Number(v.nb_read_frames) !== 22) throw new Error(`the downloaded clip: ${JSON.stringify(v)}`);
});

test('errors in words: a rewrite without an Oxen key points to Settings; a refused upload says why once', async ({ page }) => {
  await api('PUT', '/api/settings', { rewrite_enabled: true, oxen_api_key: null });
  try {
    await openGallery(page);
    await page.fill('[data-testid=prompt-input]', `${unique('rw')} a kite`);
    await page.keyboard.press('Enter');
    const err = page.getByTestId('rewrite-error');
    await err.waitFor({ timeout: 15_000 });
    const said = await err.textContent();
    if (!/needs an Oxen API key/.test(said) || /PUT|\/api\/|accepted/.test(said)) throw new Error(`the sheet says "${said}"`);
    await a11y(page, 'rewrite-sheet-no-key');
    await shot(page, 'desktop-1440-rewrite-no-key');
    await page.click('[data-testid=rewrite-open-settings]');
    await page.getByTestId('settings').waitFor({ timeout: 5_000 });
    if (await page.getByTestId('rewrite-sheet').count()) throw new Error('the rewrite sheet stayed open under the settings');
    await page.keyboard.press('Escape');
  } finally {
    await api('PUT', '/api/settings', { rewrite_enabled: false });
  }
  const bogus = path.join(outDir, 'not-an-image.png');
  fs.writeFileSync(bogus, 'this is text, not a PNG');
  await page.setInputFiles('[data-testid=file-input]', bogus);
  const chip = page.getByTestId('chip');
  await until('the refused upload', async () => (await chip.getAttribute('data-state')) === 'error', 15_000);
  const label = await text(page, '[data-testid=chip] .chip-label');
  if (label !== 'not-an-image.png · not used') throw new Error(`the refused chip is labelled "${label}"`);
  const problems = await text(page, '[data-testid=problems]');
  if (/files\[|multipart|accepted:/.test(problems)) throw new Error(`API terms reach the user: "${problems}"`);
  if ((problems.match(/PNG/g) || []).length !== 1) throw new Error(`the accepted kinds are listed ${(problems.match(/PNG/g) || []).length} times: "${problems}"`);
  if (!/could not be attached: .*This server takes a picture/.test(problems)) throw new Error(`the problem reads "${problems}"`);
});

// ------------------------------------------------------------------ requests

test('a batch count queues that many clips, each with its own seed', async ({ page }) => {
  const word = unique('batch');
  await openGallery(page);
  await page.click('[data-testid=params-toggle]');
  await page.fill('[data-testid=frames-input]', '22');
  await page.press('[data-testid=frames-input]', 'Enter');
  await page.click('[data-testid=size-custom]');
  await page.fill('[data-testid=width-input]', '64');
  await page.fill('[data-testid=height-input]', '64');
  await page.fill('[data-testid=steps-input]', '2');
  await page.click('[data-testid=batch-3]');
  await a11y(page, 'params-popover');
  await shot(page, 'desktop-1440-params-popover');
  await page.fill('[data-testid=prompt-input]', `${word} three foxes`);
  if ((await text(page, '[data-testid=submit]')) !== 'Generate ×3') throw new Error(`the button says "${await text(page, '[data-testid=submit]')}"`);
  await page.keyboard.press('Enter');
  await until('three tiles', async () => (await page.locator('[data-testid=tile]', { hasText: word }).count()) === 3, 15_000);
  const rows = (await api('GET', `/api/ai/queue?search=${word}`)).generations;
  if (rows.length !== 3 || new Set(rows.map((g) => g.seed)).size !== 3) throw new Error(`rows: ${JSON.stringify(rows.map((g) => g.seed))}`);
  for (const g of rows) await settled(g.generation_id);
});

test('Vary queues new seeds of a clip at once; Reuse on a tile fills the prompt bar', async ({ page }) => {
  const word = unique('vary');
  const img = await uploadFile(path.join(stills, 'first.png'), 'image/png');
  const g = await enqueue({ prompt: `${word} a paper boat`, ...TINY, image_ids: [img.image_id] });
  const done = await settled(g.generation_id);
  await page.goto(`${base}/g/${g.generation_id}`);
  await page.waitForSelector('[data-testid=vary-2]');
  await page.click('[data-testid=vary-2]');
  const copies = await until('two variations', async () => {
    const rows = (await api('GET', `/api/ai/queue?search=${word}`)).generations.filter((x) => x.generation_id !== g.generation_id);
    return rows.length === 2 && rows;
  }, 15_000);
  const seeds = new Set([done.seed, ...copies.map((x) => x.seed)]);
  if (seeds.size !== 3) throw new Error(`variation seeds ${[...seeds]}`);
  for (const c of copies) {
    for (const k of ['frames', 'width', 'height', 'steps', 'partition']) if (c[k] !== done[k]) throw new Error(`a variation changed ${k}`);
    if (JSON.stringify(c.image_ids) !== JSON.stringify([img.image_id])) throw new Error('a variation lost the reference');
  }
  for (const c of copies) await settled(c.generation_id);
  await page.keyboard.press('Escape');
  await search(page, word);
  const n = await count();
  await tile(page, g.generation_id).hover();
  await tile(page, g.generation_id).getByTestId('reuse').click();
  if ((await page.inputValue('[data-testid=prompt-input]')) !== done.prompt) throw new Error('Reuse did not fill the prompt');
  const chips = await page.locator('[data-testid=chip]').evaluateAll((els) => els.map((e) => e.dataset.imageId));
  if (JSON.stringify(chips) !== JSON.stringify([img.image_id])) throw new Error(`Reuse's references ${JSON.stringify(chips)}`);
  const summary = await text(page, '[data-testid=params-toggle]');
  const seed = (/seed (\d+)/.exec(summary) || [])[1];
  if (!summary.startsWith('22 f') || !summary.includes('4 steps') || !seed || Number(seed) === done.seed) throw new Error(`Reuse's parameters: "${summary}"`);
  if ((await count()) !== n) throw new Error('Reuse queued something');
});

test('use the frame on screen, or the clip itself, as a reference', async ({ page }) => {
  const word = unique('ref');
  const g = await enqueue({ prompt: `${word} a spinning top`, frames: 39, width: 320, height: 192, steps: 4 });
  await settled(g.generation_id);
  await page.goto(`${base}/g/${g.generation_id}`);
  await page.waitForSelector('[data-testid=player-video]');
  await until('the clip to load', () => page.locator('[data-testid=player-video]').evaluate((v) => v.readyState >= 2), 20_000);
  await page.locator('[data-testid=player-video]').evaluate((v) => { v.pause(); v.currentTime = 0; });
  await expectReadout(page, '1 / 39');
  for (let i = 0; i < 4; i++) await page.keyboard.press('ArrowRight');
  await expectReadout(page, '5 / 39');
  await page.click('[data-testid=use-frame]');
  await until('the lightbox to close', async () => (await page.getByTestId('lightbox').count()) === 0, 5_000);
  const chips = page.locator('[data-testid=chip]');
  await until('the frame uploaded', async () => (await chips.count()) === 1 && (await chips.first().getAttribute('data-state')) === 'done', 15_000);
  const frameName = await chips.first().locator('.chip-label').getAttribute('title');
  if (!/-frame-5\.png$/.test(frameName) || (await chips.first().getAttribute('data-kind')) !== 'image') throw new Error(`the frame chip: ${frameName}`);
  const frame = await api('GET', `/api/images/${await chips.first().getAttribute('data-image-id')}`);
  if (frame.kind !== 'image' || frame.width !== 320 || frame.height !== 192) throw new Error(`the frame upload: ${JSON.stringify(frame)}`);
  await page.goto(`${base}/g/${g.generation_id}`);
  await page.waitForSelector('[data-testid=use-clip]');
  await page.click('[data-testid=use-clip]');
  await until('the clip uploaded', async () => (await chips.count()) === 1 && (await chips.first().getAttribute('data-state')) === 'done', 20_000);
  const clip = await api('GET', `/api/images/${await chips.first().getAttribute('data-image-id')}`);
  if (clip.kind !== 'video' || clip.width !== 320 || Math.abs(clip.duration_seconds - 39 / 24) > 0.1) throw new Error(`the clip upload: ${JSON.stringify(clip)}`);
  // Sent, the clip is the request's reference.
  await page.fill('[data-testid=prompt-input]', `${word} again`);
  await page.keyboard.press('Enter');
  const sent = await until('the request', async () => (await api('GET', `/api/ai/queue?search=${word}%20again`)).generations[0], 10_000);
  await api('DELETE', `/api/ai/queue/${sent.generation_id}`).catch(() => {});
  if (JSON.stringify(sent.image_ids) !== JSON.stringify([clip.image_id])) throw new Error(`sent image_ids ${JSON.stringify(sent.image_ids)}`);
});

test('select clips in the grid: approve, reject, download one zip, delete', async ({ page }) => {
  const word = unique('many');
  const gs = [];
  for (let i = 0; i < 3; i++) gs.push(await enqueue({ prompt: `${word} clip ${i}`, ...TINY }));
  for (const g of gs) await settled(g.generation_id);
  // Each clip's own download name, as its lightbox gives it.
  const names = [];
  for (const g of gs) {
    await page.goto(`${base}/g/${g.generation_id}`);
    await page.waitForSelector('[data-testid=download]');
    names.push(await page.getAttribute('[data-testid=download]', 'download'));
  }
  await page.setViewportSize(DESKTOP[0]);
  await openGallery(page);
  await search(page, word);
  const order = await ids(page);
  // x on the focused tile starts a selection; shift-click takes the range to the third.
  await tile(page, order[0]).getByTestId('tile-link').focus();
  await page.keyboard.press('x');
  await page.getByTestId('selection-bar').waitFor({ timeout: 5_000 });
  await tile(page, order[2]).getByTestId('tile-link').click({ modifiers: ['Shift'] });
  await until('three selected', async () => (await text(page, '[data-testid=selection-count]')) === '3 selected', 5_000);
  if (new URL(page.url()).pathname !== '/') throw new Error('a click while selecting opened the clip');
  await a11y(page, 'gallery-selection');
  await shot(page, 'desktop-1440-selection');
  await page.click('[data-testid=bulk-approve]');
  await until('all approved', async () => (await Promise.all(gs.map((g) => row(g.generation_id)))).every((g) => g.rating === 'approved'), 10_000);
  await page.click('[data-testid=bulk-reject]');
  await until('all rejected', async () => (await Promise.all(gs.map((g) => row(g.generation_id)))).every((g) => g.rating === 'rejected'), 10_000);
  // One zip, each clip named as its own download.
  const [dl] = await Promise.all([page.waitForEvent('download', { timeout: 30_000 }), page.click('[data-testid=bulk-download]')]);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mmh3-e2e-zip-'));
  try {
    if (!/^mmh3-3-clips-\d{8}_\d{6}\.zip$/.test(dl.suggestedFilename())) throw new Error(`the zip is named ${dl.suggestedFilename()}`);
    const zip = path.join(dir, dl.suggestedFilename());
    await dl.saveAs(zip);
    const listed = JSON.parse(execFileSync('python3', ['-c', 'import json,sys,zipfile; z=zipfile.ZipFile(sys.argv[1]); z.extractall(sys.argv[2]); print(json.dumps(z.namelist()))', zip, dir]));
    if (JSON.stringify([...listed].sort()) !== JSON.stringify([...names].sort())) throw new Error(`the zip holds ${JSON.stringify(listed)}, want ${JSON.stringify(names)}`);
    for (const name of listed) {
      const v = probe(path.join(dir, name));
      if (v.width !== 320 || v.height !== 192 || Number(v.nb_read_frames) !== 22) throw new Error(`${name} in the zip: ${JSON.stringify(v)}`);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  await page.click('[data-testid=bulk-delete]');
  if (!/for good/.test(await text(page, '[data-testid=bulk-delete]'))) throw new Error('delete did not ask to confirm');
  await page.click('[data-testid=bulk-delete]');
  await until('the rows gone', async () => (await Promise.all(gs.map((g) => fetch(`${base}/api/ai/queue/${g.generation_id}`).then((r) => r.status)))).every((st) => st === 404), 15_000);
  await until('the tiles and the bar gone', async () => (await page.locator('[data-testid=tile]', { hasText: word }).count()) === 0 && (await page.getByTestId('selection-bar').count()) === 0, 10_000);
});

test('↑/↓ in an empty prompt bar walk this browser\'s earlier prompts with their references and parameters', async ({ page }) => {
  const word = unique('hist');
  await openGallery(page);
  const sentIds = [];
  const sendWith = async (prompt, steps, file) => {
    await page.click('[data-testid=params-toggle]');
    await page.fill('[data-testid=frames-input]', '5');
    await page.press('[data-testid=frames-input]', 'Enter');
    await page.fill('[data-testid=steps-input]', String(steps));
    await page.keyboard.press('Escape');
    if (file) {
      await page.setInputFiles('[data-testid=file-input]', file);
      await until('the upload', async () => (await page.getByTestId('chip').getAttribute('data-state')) === 'done', 15_000);
    }
    await page.fill('[data-testid=prompt-input]', prompt);
    await page.keyboard.press('Enter');
    const g = await until(`${prompt} queued`, async () => (await api('GET', `/api/ai/queue?search=${encodeURIComponent(prompt)}`)).generations[0], 10_000);
    sentIds.push(g.generation_id);
    await until('the bar to clear', async () => (await page.inputValue('[data-testid=prompt-input]')) === '', 5_000);
    return g;
  };
  const first = await sendWith(`${word} first, with a picture`, 3, path.join(stills, 'first.png'));
  await sendWith(`${word} second`, 5, null);
  for (const id of sentIds) await api('DELETE', `/api/ai/queue/${id}`).catch(() => {});
  await page.reload();
  await page.waitForSelector('[data-testid=prompt-input]');
  await page.focus('[data-testid=prompt-input]');
  await page.keyboard.press('ArrowUp');
  if ((await page.inputValue('[data-testid=prompt-input]')) !== `${word} second`) throw new Error(`↑ shows "${await page.inputValue('[data-testid=prompt-input]')}"`);
  if (!(await text(page, '[data-testid=params-toggle]')).includes('5 steps') || (await page.getByTestId('chip').count()) !== 0) throw new Error('↑ did not bring the second request\'s parameters');
  await page.keyboard.press('ArrowUp');
  if ((await page.inputValue('[data-testid=prompt-input]')) !== `${word} first, with a picture`) throw new Error('↑↑ is not the first prompt');
  if (!(await text(page, '[data-testid=params-toggle]')).includes('3 steps')) throw new Error('↑↑ did not bring its parameters');
  if ((await page.getByTestId('chip').getAttribute('data-image-id')) !== first.image_ids[0]) throw new Error('↑↑ did not bring its picture');
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('ArrowDown');
  if ((await page.inputValue('[data-testid=prompt-input]')) !== '' || (await page.getByTestId('chip').count()) !== 0) throw new Error('↓↓ did not give back the empty bar');
});

test('a queued tile shows its place and an estimate; a long request shows its estimate before it is queued', async ({ page }) => {
  const word = unique('eta');
  await settled((await enqueue({ prompt: `${word} pace`, ...TINY })).generation_id); // something measured
  const long = await enqueue({ prompt: `${word} long`, ...TINY, steps: 200 });
  const q1 = await enqueue({ prompt: `${word} next`, ...TINY });
  const q2 = await enqueue({ prompt: `${word} after`, ...TINY });
  try {
    await openGallery(page);
    await search(page, word);
    await until('the long job to run', async () => (await row(long.generation_id)).status === 'processing', 60_000);
    const eta = async (id) => {
      const el = tile(page, id).getByTestId('queue-eta');
      return (await el.count()) ? { text: (await el.textContent()).trim(), position: await el.getAttribute('data-position') } : null;
    };
    const [a, b] = await until('both queued tiles to show their place', async () => {
      const x = await eta(q1.generation_id), y = await eta(q2.generation_id);
      return x && y && /starts/.test(x.text) && /starts/.test(y.text) && [x, y];
    }, 20_000);
    // The places the worker will take them in: oldest first (src/queue/jobs.c), by the server's list.
    const queued = (await api('GET', '/api/ai/queue?status=queued&limit=500')).generations.reverse().map((g) => g.generation_id);
    const [p1, p2] = [queued.indexOf(q1.generation_id) + 1, queued.indexOf(q2.generation_id) + 1];
    if (p2 !== p1 + 1) throw new Error(`the server lists the two queued jobs at ${p1} and ${p2}`);
    const nth = (n) => `${n}${n % 100 >= 11 && n % 100 <= 13 ? 'th' : ['th', 'st', 'nd', 'rd'][n % 10] || 'th'}`;
    if (a.position !== String(p1) || !new RegExp(`^${nth(p1)} in queue · (starts soon|starts in ≈ \\d+ (s|min)) · done in ≈ \\d+ (s|min)$`).test(a.text)) throw new Error(`the next job (place ${p1}): "${a.text}"`);
    if (b.position !== String(p2) || !b.text.startsWith(`${nth(p2)} in queue`)) throw new Error(`the one after (place ${p2}): "${b.text}"`);
    if (!/left|finishing/.test((await eta(long.generation_id) || {}).text || '')) throw new Error('the running tile has no estimate');
    await shot(page, 'desktop-1440-queue');
  } finally {
    for (const g of [q2, q1, long]) await api('DELETE', `/api/ai/queue/${g.generation_id}`).catch(() => {});
  }
  // 2048², 362 frames, 200 steps: said before anything is sent.
  const n = await count();
  await page.click('[data-testid=params-toggle]');
  await page.fill('[data-testid=frames-input]', '362');
  await page.press('[data-testid=frames-input]', 'Enter');
  await page.click('[data-testid=size-custom]');
  await page.fill('[data-testid=width-input]', '2048');
  await page.fill('[data-testid=height-input]', '2048');
  await page.fill('[data-testid=steps-input]', '200');
  if (!/^Estimated: ≈ \d+ h/.test(await text(page, '[data-testid=estimate]'))) throw new Error(`the popover's estimate: "${await text(page, '[data-testid=estimate]')}"`);
  await page.keyboard.press('Escape');
  await page.getByTestId('heavy-estimate').waitFor({ timeout: 5_000 });
  if (!/≈ \d+ h.* to render at this server's measured pace/.test(await text(page, '[data-testid=heavy-estimate]'))) throw new Error(`the bar says "${await text(page, '[data-testid=heavy-estimate]')}"`);
  if ((await count()) !== n) throw new Error('the estimate queued something');
  await page.click('[data-testid=params-toggle]');
  await page.fill('[data-testid=steps-input]', '2');
  await page.fill('[data-testid=frames-input]', '5');
  await page.press('[data-testid=frames-input]', 'Enter');
  await page.fill('[data-testid=width-input]', '64');
  await page.fill('[data-testid=height-input]', '64');
  await page.keyboard.press('Escape');
  await until('the note to go for a small request', async () => (await page.getByTestId('heavy-estimate').count()) === 0, 5_000);
});

// ------------------------------------------------------------------ keys and the player

test('keys: one Tab stop for the grid after the prompt bar, arrows across it, a/r/x on a tile, / to the prompt; a/r and Home/End in the lightbox', async ({ page }) => {
  const word = unique('keys');
  const gs = [];
  for (let i = 0; i < 6; i++) gs.push(await enqueue({ prompt: `${word} ${i}`, ...TINY, ...(i % 3 === 1 ? { width: 192, height: 320 } : {}) }));
  for (const g of gs) await settled(g.generation_id);
  await page.setViewportSize(DESKTOP[0]);
  await openGallery(page);
  await search(page, word);
  // Tab from the prompt: the bar's controls, then one tile, then past the grid.
  await page.focus('[data-testid=prompt-input]');
  const stops = [];
  for (let i = 0; i < 12; i++) {
    await page.keyboard.press('Tab');
    stops.push(await page.evaluate(() => { const a = document.activeElement; return a.dataset.testid || a.tagName; }));
  }
  const tileStops = stops.filter((s) => s === 'tile-link').length;
  if (tileStops !== 1) throw new Error(`the grid takes ${tileStops} Tab stops: ${stops.join(' → ')}`);
  if (stops.indexOf('tile-link') < stops.indexOf('submit')) throw new Error(`the prompt bar comes after the tiles: ${stops.join(' → ')}`);
  const order = await ids(page);
  await tile(page, order[0]).getByTestId('tile-link').focus();
  await page.keyboard.press('ArrowRight');
  if ((await focusedTile(page)) !== order[1]) throw new Error('→ did not move to the next tile');
  await page.keyboard.press('ArrowLeft');
  await page.keyboard.press('ArrowDown');
  const below = await page.evaluate((first) => {
    const rect = (id) => document.querySelector(`[data-testid=tile][data-id="${id}"]`).getBoundingClientRect();
    const a = rect(first), b = rect(document.activeElement.closest('[data-testid=tile]').dataset.id);
    return { below: b.top > a.top + 2, dx: Math.abs((b.left + b.width / 2) - (a.left + a.width / 2)) };
  }, order[0]);
  if (!below.below) throw new Error('↓ did not move to the row below');
  await page.keyboard.press('ArrowUp');
  if ((await focusedTile(page)) !== order[0]) throw new Error('↑ did not come back to the first tile');
  await page.keyboard.press('End');
  if ((await focusedTile(page)) !== order[order.length - 1]) throw new Error('End is not the last tile');
  await page.keyboard.press('Home');
  const id = order[0];
  await page.keyboard.press('a');
  await until('a approves the focused tile', async () => (await row(id)).rating === 'approved', 10_000);
  await page.keyboard.press('r');
  await until('r rejects it', async () => (await row(id)).rating === 'rejected', 10_000);
  await page.keyboard.press('x');
  await page.getByTestId('selection-bar').waitFor({ timeout: 5_000 });
  await page.keyboard.press('Escape');
  await until('Esc clears the selection', async () => (await page.getByTestId('selection-bar').count()) === 0, 5_000);
  await page.keyboard.press('/');
  if (!(await page.evaluate(() => document.activeElement && document.activeElement.dataset.testid === 'prompt-input'))) throw new Error('/ did not focus the prompt bar');
  // The lightbox.
  await tile(page, id).getByTestId('tile-link').focus();
  await page.keyboard.press('Enter');
  await page.waitForSelector('[data-testid=player-video]');
  await until('the clip to load', () => page.locator('[data-testid=player-video]').evaluate((v) => v.readyState >= 2), 20_000);
  await page.keyboard.press('a');
  await until('a approves in the lightbox', async () => (await row(id)).rating === 'approved', 10_000);
  await page.keyboard.press('r');
  await until('r rejects in the lightbox', async () => (await row(id)).rating === 'rejected', 10_000);
  await page.keyboard.press('End');
  await expectReadout(page, '22 / 22');
  await page.keyboard.press('Home');
  await expectReadout(page, '1 / 22');
  if (!/home\/end/.test(await text(page, '[data-testid=keys-hint]'))) throw new Error('the key hint does not list Home/End');
});

test('the player: frame-step buttons beside the readout, controls under the picture, a short clip\'s time in hundredths', async ({ context }) => {
  const g = await enqueue({ prompt: `${unique('tall')} a dancer, portrait`, frames: 22, width: 192, height: 320, steps: 4 });
  await settled(g.generation_id);
  for (const size of [PHONE, DESKTOP[0]]) {
    await withPage(context, size, async (page) => {
      await page.goto(`${base}/g/${g.generation_id}`);
      await page.waitForSelector('[data-testid=player-video]');
      await until('the clip to load', () => page.locator('[data-testid=player-video]').evaluate((v) => v.readyState >= 2), 20_000);
      await page.locator('[data-testid=player-video]').evaluate((v) => { v.pause(); v.currentTime = 0; });
      await expectReadout(page, '1 / 22');
      await page.click('[data-testid=frame-next]');
      await page.click('[data-testid=frame-next]');
      await expectReadout(page, '3 / 22');
      await page.click('[data-testid=frame-prev]');
      await expectReadout(page, '2 / 22');
      // The bar sits under the picture, not over its bottom rows.
      const pic = await page.locator('[data-testid=player]').boundingBox();
      const bar = await page.getByTestId('player-bar').boundingBox();
      if (bar.y < pic.y + pic.height - 0.5) throw new Error(`the control bar (top ${bar.y}) covers the picture (bottom ${pic.y + pic.height})`);
      const v = await page.locator('[data-testid=player-video]').boundingBox();
      if (v.y + v.height > bar.y + 0.5) throw new Error('the video reaches under the control bar');
      // Every control within the bar and on screen, none scrolled out of reach.
      for (const sel of ['media-play-button', '[data-testid=frame-prev]', '[data-testid=frame-readout]', '[data-testid=frame-next]', '[data-testid=loop]', 'media-mute-button', '[data-testid=time-readout]']) {
        const r = await page.locator(`[data-testid=player-bar] ${sel}`).boundingBox();
        if (!r || r.width < 10 || r.x < bar.x - 0.5 || r.x + r.width > bar.x + bar.width + 0.5 || r.x + r.width > size.width) throw new Error(`${sel} is not shown whole in the bar at ${size.width} px (${JSON.stringify(r)})`);
      }
      const time = await text(page, '[data-testid=time-readout]');
      if (!/^0\.\d\d s \/ [01]\.\d\d s$/.test(time)) throw new Error(`a 0.92 s clip's time reads "${time}"`);
      await shot(page, size === PHONE ? 'phone-lightbox-player' : 'desktop-1440-lightbox-player');
    });
  }
});

// ------------------------------------------------------------------ layout

test('toasts stay clear of the clip count and the prompt bar; the parameter summary is never cut; an audio thumbnail shows its glyph', async ({ context }) => {
  const snd = await uploadFile(path.join(stills, 'voice.wav'), 'audio/wav');
  const g = await enqueue({ prompt: `${unique('layout')} a choir`, ...TINY, image_ids: [snd.image_id], partition: 'ref2va' });
  await settled(g.generation_id);
  for (const size of [DESKTOP[0], PHONE]) {
    await withPage(context, size, async (page) => {
      await page.goto(`${base}/g/${g.generation_id}`);
      await page.waitForSelector('[data-testid=copy-prompt]');
      // The audio reference in the rail: its glyph, no badge over it.
      const thumb = page.locator('[data-testid=rail-ref][data-kind=audio] .ref-thumb');
      if (await thumb.locator('[data-testid=kind-badge]').count()) throw new Error('a badge covers the audio glyph');
      const glyph = await thumb.getByTestId('thumb-glyph').boundingBox();
      const box = await thumb.boundingBox();
      if (!glyph || glyph.width < 6 || glyph.x < box.x || glyph.x + glyph.width > box.x + box.width) throw new Error('the audio glyph is not shown whole');
      await page.click('[data-testid=copy-prompt]');
      await page.keyboard.press('Escape');
      const toast = page.locator('.toast').first();
      await toast.waitFor({ timeout: 5_000 });
      const [t, c, bar] = [await toast.boundingBox(), await page.getByTestId('result-count').boundingBox(), await page.getByTestId('prompt-bar').boundingBox()];
      if (overlaps(t, c)) throw new Error(`a toast covers the clip count at ${size.width} px`);
      if (overlaps(t, bar)) throw new Error(`a toast covers the prompt bar at ${size.width} px`);
      // The longest summary there is.
      await page.click('[data-testid=params-toggle]');
      await page.fill('[data-testid=frames-input]', '362');
      await page.press('[data-testid=frames-input]', 'Enter');
      await page.click('[data-testid=size-custom]');
      await page.fill('[data-testid=width-input]', '2048');
      await page.fill('[data-testid=height-input]', '2048');
      await page.fill('[data-testid=steps-input]', '200');
      await page.uncheck('[data-testid=audio-toggle]');
      await page.check('[data-testid=fast-toggle]');
      await page.click('[data-testid=seed-locked]');
      await page.fill('[data-testid=seed-input]', '9007199254740991');
      await page.click('[data-testid=batch-4]');
      await page.click('[data-testid=model-ref2va]');
      await page.keyboard.press('Escape');
      const cut = await page.getByTestId('params-toggle').evaluate((b) => {
        const s = b.querySelector('.params-summary');
        const r = s.getBoundingClientRect(), br = b.getBoundingClientRect();
        return { text: s.textContent, clipped: s.scrollWidth > s.clientWidth + 1 || b.scrollHeight > b.clientHeight + 1 || r.right > br.right + 1 || r.bottom > br.bottom + 1 || br.right > innerWidth };
      });
      if (cut.clipped || !cut.text.endsWith('seed 9007199254740991 · ×4')) throw new Error(`the summary is cut at ${size.width} px: "${cut.text}"`);
      await shot(page, size === PHONE ? 'phone-promptbar-long-summary' : 'desktop-1440-promptbar-long-summary');
    });
  }
});

// ------------------------------------------------------------------ accessibility and screenshots

test('axe: the gallery and the parameters at 1440 and 1920 wide, no serious or critical violation (screenshots kept)', async ({ context }) => {
  const word = unique('axe');
  const img = await uploadFile(path.join(stills, 'first.png'), 'image/png');
  const mixed = [
    await enqueue({ prompt: `${word} a wide harbour at dawn`, ...TINY }),
    await enqueue({ prompt: `${word} a tall waterfall`, ...TINY, width: 192, height: 320 }),
    await enqueue({ prompt: `${word} a square tile mosaic`, ...TINY, width: 256, height: 256, image_ids: [img.image_id] }),
  ];
  for (const g of mixed) await settled(g.generation_id);
  await api('PATCH', `/api/ai/queue/${mixed[0].generation_id}`, { rating: 'approved' });
  await api('PATCH', `/api/ai/queue/${mixed[1].generation_id}`, { rating: 'rejected' });
  const running = await enqueue({ prompt: `${word} a long render still running`, ...TINY, steps: 200 });
  const waiting = await enqueue({ prompt: `${word} waiting its turn`, ...TINY });
  try {
    await until('a running job', async () => (await row(running.generation_id)).status === 'processing', 60_000);
    for (const size of DESKTOP) {
      await withPage(context, size, async (page) => {
        await openGallery(page);
        await tile(page, waiting.generation_id).waitFor({ timeout: 10_000 });
        await page.mouse.move(0, 0);
        await a11y(page, `gallery-${size.width}`);
        await shot(page, `desktop-${size.width}-gallery`);
        await page.click('[data-testid=params-toggle]');
        await a11y(page, `params-popover-${size.width}`);
        await shot(page, `desktop-${size.width}-params`);
      });
    }
  } finally {
    await api('DELETE', `/api/ai/queue/${waiting.generation_id}`).catch(() => {});
    await api('DELETE', `/api/ai/queue/${running.generation_id}`).catch(() => {});
  }
}, { timeout: 240_000 });

test('axe: the lightbox live, finished and with references; settings; the rewrite sheet (screenshots kept)', async ({ context }) => {
  const word = unique('axelb');
  const img = await uploadFile(path.join(stills, 'first.png'), 'image/png');
  const snd = await uploadFile(path.join(stills, 'voice.wav'), 'audio/wav');
  const withRefs = await enqueue({ prompt: `${word} with references`, ...TINY, image_ids: [img.image_id, snd.image_id], partition: 'ref2va' });
  await settled(withRefs.generation_id);
  for (const size of DESKTOP) {
    // A job of its own per width: a 200-step mock job runs ~30 s.
    const live = await enqueue({ prompt: `${word} rendering now at ${size.width}`, ...TINY, steps: 200 });
    try {
      await withPage(context, size, async (page) => {
        await until('the live job to run', async () => (await row(live.generation_id)).status === 'processing', 60_000);
        await page.goto(`${base}/g/${live.generation_id}`);
        await page.getByTestId('live-progress').waitFor({ timeout: 10_000 });
        await a11y(page, `lightbox-live-${size.width}`);
        await shot(page, `desktop-${size.width}-lightbox-live`);
      });
    } finally {
      await api('DELETE', `/api/ai/queue/${live.generation_id}`).catch(() => {});
    }
  }
  for (const size of DESKTOP) {
    await withPage(context, size, async (page) => {
      await page.goto(`${base}/g/${withRefs.generation_id}`);
      await page.waitForSelector('[data-testid=player-video]');
      await until('the clip to load', () => page.locator('[data-testid=player-video]').evaluate((v) => v.readyState >= 2), 20_000);
      await a11y(page, `lightbox-finished-${size.width}`);
      await shot(page, `desktop-${size.width}-lightbox-finished`);
      await page.locator('[data-testid=rail-ref]').first().click();
      await page.waitForSelector('.viewer-still img');
      await a11y(page, `lightbox-reference-image-${size.width}`);
      await page.locator('[data-testid=rail-ref][data-kind=audio]').click();
      await page.getByTestId('audio-view').waitFor();
      await a11y(page, `lightbox-reference-audio-${size.width}`);
      await shot(page, `desktop-${size.width}-lightbox-references`);
      await page.keyboard.press('Escape');
      await page.click('[data-testid=settings-button]');
      await page.getByTestId('settings').waitFor();
      await a11y(page, `settings-${size.width}`);
      await shot(page, `desktop-${size.width}-settings`);
      await page.keyboard.press('Escape');
    });
  }
  // The rewrite sheet as it streams against an unreachable hub (run.sh points the stack at a closed port).
  await api('PUT', '/api/settings', { rewrite_enabled: true, oxen_api_key: `sk-test-${word}` });
  try {
    for (const size of DESKTOP) {
      await withPage(context, size, async (page) => {
        await openGallery(page);
        await page.fill('[data-testid=prompt-input]', `${word} a lighthouse in fog`);
        await page.keyboard.press('Enter');
        await page.getByTestId('rewrite-sheet').waitFor();
        await until('the rewrite to end', async () => (await page.getByTestId('rewrite-error').count()) > 0 || (await page.locator('[data-testid=use-rewrite]:not([disabled])').count()) > 0, 30_000);
        await a11y(page, `rewrite-sheet-${size.width}`);
        await shot(page, `desktop-${size.width}-rewrite-sheet`);
        await page.keyboard.press('Escape');
      });
    }
  } finally {
    await api('PUT', '/api/settings', { rewrite_enabled: false, oxen_api_key: null });
  }
}, { timeout: 240_000 });

test('axe: the phone layout (390×844): gallery, lightbox, parameters (screenshots kept)', async ({ context }) => {
  const word = unique('axephone');
  const snd = await uploadFile(path.join(stills, 'voice.wav'), 'audio/wav');
  const gs = [
    await enqueue({ prompt: `${word} a harbour at night`, ...TINY }),
    await enqueue({ prompt: `${word} a portrait`, ...TINY, width: 192, height: 320, image_ids: [snd.image_id], partition: 'ref2va' }),
  ];
  for (const g of gs) await settled(g.generation_id);
  await withPage(context, PHONE, async (page) => {
    await openGallery(page);
    await tile(page, gs[1].generation_id).waitFor({ timeout: 10_000 });
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - innerWidth);
    if (overflow > 0) throw new Error(`the page is ${overflow}px wider than the phone`);
    await a11y(page, 'phone-gallery');
    await shot(page, 'phone-gallery');
    await page.click('[data-testid=params-toggle]');
    await a11y(page, 'phone-params');
    await shot(page, 'phone-params');
    await page.keyboard.press('Escape');
    await page.goto(`${base}/g/${gs[1].generation_id}`);
    await page.waitForSelector('[data-testid=player-video]');
    await until('the clip to load', () => page.locator('[data-testid=player-video]').evaluate((v) => v.readyState >= 2), 20_000);
    await a11y(page, 'phone-lightbox');
    await shot(page, 'phone-lightbox');
  });
}, { timeout: 240_000 });

// ------------------------------------------------------------------ /docs

test('/docs is an interactive API reference served from this server alone; /openapi.json is the document', async ({ page }) => {
  const doc = await api('GET', '/openapi.json');
  if (!String(doc.openapi).startsWith('3.') || !doc.paths['/api/ai/queue']) throw new Error('/openapi.json is not the OpenAPI document');
  const foreign = [];
  page.on('request', (r) => { if (!r.url().startsWith(base) && !r.url().startsWith('data:')) foreign.push(r.url()); });
  const res = await page.goto(`${base}/docs`);
  if (!(res.headers()['content-type'] || '').startsWith('text/html')) throw new Error(`/docs is ${res.headers()['content-type']}`);
  await page.locator('.swagger-ui .opblock').first().waitFor({ timeout: 20_000 });
  const ops = await page.locator('.swagger-ui .opblock').count();
  const documented = Object.values(doc.paths).reduce((n, p) => n + Object.keys(p).filter((m) => ['get', 'post', 'put', 'patch', 'delete', 'head'].includes(m)).length, 0);
  if (ops !== documented) throw new Error(`/docs shows ${ops} operations, the document has ${documented}`);
  // Interactive: "Try it out" on GET /api/status sends the request and shows the answer.
  const status = page.locator('.opblock-get', { has: page.locator('[data-path="/api/status"]') }).first();
  await status.locator('.opblock-summary').click();
  await status.locator('.try-out__btn').click();
  await status.locator('.execute').click();
  await until('the answer of /api/status', async () => /"engine"/.test(await status.locator('.responses-wrapper .live-responses-table').textContent().catch(() => '')), 15_000);
  if (foreign.length) throw new Error(`/docs fetched from elsewhere: ${foreign.slice(0, 3).join(', ')}`);
  await page.setViewportSize(DESKTOP[0]);
  await shot(page, 'desktop-1440-docs');
});

// ------------------------------------------------------------------ run
const failed = await runAll({
  outDir,
  filter,
  setup: async () => {
    const main = await launch();
    return { context: main.context, main };
  },
  teardown: async (env) => { await env.main.close(); },
});
console.log(`INFO web/e2e-use: screenshots for review in ${screens} (desktop-1440-*, desktop-1920-*, phone-*); axe reports a11y-*.json in ${outDir}`);
process.exit(failed ? 1 : 0);
