// Few-step generation in the web app, in Chromium against the real stack with
// the mock engine (which opens the adapters and runs the sampler's forwards as
// the real engine does): the parameters popover lists the adapters a worker
// published (GET /api/loras), picking one that names its sampler sets the
// sampler and the steps, the speed choice sets sparse attention and the step
// cache, and the tile and lightbox say what was used. The stack's adapter
// folder holds two tiny adapters made by mmh3-gen-tiny (tests/e2e/stack.sh).
//
//   node tests/e2e/fewstep.e2e.mjs BASE_URL OUT_DIR [name filter]
import { checkA11y, launch, runAll, test } from './harness.mjs';
import { stackApi, tile, unique, until } from './util.mjs';

const [base, outDir = 'tests/out/e2e', filter] = process.argv.slice(2);
if (!base) { console.log('FAIL web/e2e-fewstep: usage: fewstep.e2e.mjs BASE_URL OUT_DIR'); process.exit(1); }
const { api, row, settled, openGallery } = stackApi(base);
const TURBO = 'minimax_h3_fl2v_turbo_4step_v1.0_768p_bf16.safetensors'; // LightX2V's name: turbo4-768p
const text = (page, sel) => page.textContent(sel).then((t) => (t || '').replace(/\s+/g, ' ').trim());

/** The parameters popover open (the toggle closes it when it already is). */
async function showParams(page) {
  if (!(await page.isVisible('[data-testid=params-popover]'))) await page.click('[data-testid=params-toggle]');
  await page.waitForSelector('[data-testid=params-popover]');
}

async function openParams(page) {
  await openGallery(page);
  await showParams(page);
  await page.fill('[data-testid=frames-input]', '22');
  await page.press('[data-testid=frames-input]', 'Enter');
  await page.click('[data-testid=size-custom]');
  await page.fill('[data-testid=width-input]', '64');
  await page.fill('[data-testid=height-input]', '64');
  await until('the adapter list', async () => (await page.locator('[data-testid=adapter-select] option').count()) > 1, 15_000);
}

async function submit(page, prompt) {
  await page.fill('[data-testid=prompt-input]', prompt);
  await page.keyboard.press('Enter');
  return until('the queued row', async () => (await api('GET', `/api/ai/queue?search=${prompt.split(' ')[0]}`)).generations[0], 15_000);
}

test('the parameters list the published adapters; one with a sampler sets it and the steps', async ({ page }) => {
  const catalogue = await api('GET', '/api/loras');
  const names = catalogue.loras.map((l) => l.name);
  if (!catalogue.published || !names.includes(TURBO) || !names.includes('ink.safetensors')) throw new Error(`GET /api/loras: ${JSON.stringify(catalogue)}`);
  await openParams(page);
  const options = await page.locator('[data-testid=adapter-select] option').evaluateAll((els) => els.map((e) => e.value));
  if (JSON.stringify(options) !== JSON.stringify(['', ...names])) throw new Error(`the adapter choices ${JSON.stringify(options)} are not the catalogue's ${JSON.stringify(names)}`);
  await page.selectOption('[data-testid=adapter-select]', TURBO);
  await until('the adapter sampler chosen', async () => (await page.getAttribute('[data-testid=sampler-adapter]', 'aria-checked')) === 'true', 5_000);
  if ((await page.inputValue('[data-testid=steps-input]')) !== '5' || !(await page.isDisabled('[data-testid=steps-input]')))
    throw new Error(`steps show ${await page.inputValue('[data-testid=steps-input]')}, not the preset's 5 (fixed)`);
  if (!/turbo4-768p: 5 steps/.test(await text(page, '[data-testid=adapter-hint]'))) throw new Error(`the hint reads "${await text(page, '[data-testid=adapter-hint]')}"`);
  await page.fill('[data-testid=adapter-strength]', '0.8');
  await page.click('[data-testid=speed-both]');
  await checkA11y(page, 'params-adapter', outDir);
  const word = unique('turbo');
  const g = await submit(page, `${word} a kettle on a stove`);
  if (JSON.stringify(g.loras) !== JSON.stringify([{ name: TURBO, strength: 0.8 }]) || g.sampler !== 'turbo4-768p' || g.steps !== 5
      || g.sparse !== 'sol' || g.cache !== 'fbc:high') throw new Error(`queued as ${JSON.stringify({ loras: g.loras, sampler: g.sampler, steps: g.steps, sparse: g.sparse, cache: g.cache })}`);
  const done = await settled(g.generation_id);
  if (done.total_steps !== 4 || done.timings.forwards !== 4) throw new Error(`the mock ran ${done.total_steps} forwards (${JSON.stringify(done.timings)})`);
  const badge = tile(page, g.generation_id).getByTestId('tile-fewstep');
  await until('the tile badge', async () => (await badge.count()) === 1, 10_000);
  const title = await badge.getAttribute('title');
  for (const want of [`Adapter: ${TURBO} ×0.8`, 'Sampler: turbo4-768p', 'Sparse: sol', 'Cache: fbc:high'])
    if (!title.includes(want)) throw new Error(`the tile's details "${title}" lack "${want}"`);
  await page.goto(`${base}/g/${g.generation_id}`);
  await page.waitForSelector('[data-testid=params]');
  for (const [k, v] of [['adapter', `${TURBO} ×0.8`], ['sampler', 'turbo4-768p'], ['sparse', 'sol'], ['cache', 'fbc:high'], ['steps', '5']]) {
    const shown = await text(page, `[data-testid=param-${k}]`);
    if (shown !== v) throw new Error(`the lightbox's ${k} reads "${shown}", not "${v}"`);
  }
  if ((await text(page, '[data-testid=timing-forwards] dd')) !== '4') throw new Error('the lightbox does not say 4 forwards');
});

test('an adapter without a sampler keeps the steps; the release grid stays a click away; off sends nothing extra', async ({ page }) => {
  await openParams(page);
  await page.fill('[data-testid=steps-input]', '3');
  await page.selectOption('[data-testid=adapter-select]', 'ink.safetensors');
  if ((await page.locator('[data-testid=sampler-adapter]').count()) !== 0) throw new Error('a sampler choice for an adapter that names none');
  if ((await page.inputValue('[data-testid=steps-input]')) !== '3') throw new Error('picking a plain adapter changed the steps');
  const word = unique('ink');
  const g = await submit(page, `${word} an ink fox`);
  if (JSON.stringify(g.loras) !== JSON.stringify([{ name: 'ink.safetensors', strength: 1 }]) || g.steps !== 3 || g.sampler !== 'default'
      || g.sparse !== 'off' || g.cache !== 'off') throw new Error(`queued as ${JSON.stringify(g)}`);
  await settled(g.generation_id);
  // The turbo adapter, then the release grid instead of its sampler.
  await showParams(page);
  await page.selectOption('[data-testid=adapter-select]', TURBO);
  await page.click('[data-testid=sampler-release]');
  if ((await page.inputValue('[data-testid=steps-input]')) !== '28' || (await page.isDisabled('[data-testid=steps-input]'))) throw new Error('the release grid did not give back the steps');
  await page.fill('[data-testid=steps-input]', '3');
  const word2 = unique('grid');
  const g2 = await submit(page, `${word2} the release grid`);
  if (g2.sampler !== 'default' || g2.steps !== 3) throw new Error(`queued as ${JSON.stringify({ sampler: g2.sampler, steps: g2.steps })}`);
  await settled(g2.generation_id);
  // None again: no adapter, no sampler, no speed fields at all.
  await showParams(page);
  await page.selectOption('[data-testid=adapter-select]', '');
  const word3 = unique('plain');
  const g3 = await submit(page, `${word3} nothing extra`);
  if (g3.loras.length || g3.sampler !== null || (await row(g3.generation_id)).steps !== 3) throw new Error(`queued as ${JSON.stringify({ loras: g3.loras, sampler: g3.sampler, steps: g3.steps })}`);
  await settled(g3.generation_id);
  if ((await tile(page, g3.generation_id).getByTestId('tile-fewstep').count()) !== 0) throw new Error('a plain clip has a few-step badge');
});

test('Reuse of a few-step clip brings its adapter, sampler and speed back; the rerun is accepted', async ({ page }) => {
  const word = unique('reuse');
  const [g] = (await api('POST', '/api/ai/queue', { prompt: `${word} again`, frames: 22, width: 64, height: 64,
    loras: [{ name: TURBO, strength: 0.5 }], sampler: 'turbo4-768p', cache: 'fbc' })).generations;
  await settled(g.generation_id);
  await openGallery(page);
  await tile(page, g.generation_id).hover();
  await tile(page, g.generation_id).getByTestId('reuse').click();
  await showParams(page);
  await until('the adapter back', async () => (await page.inputValue('[data-testid=adapter-select]')) === TURBO, 10_000);
  if ((await page.inputValue('[data-testid=adapter-strength]')) !== '0.5' || (await page.getAttribute('[data-testid=speed-cache]', 'aria-checked')) !== 'true'
      || (await page.getAttribute('[data-testid=sampler-adapter]', 'aria-checked')) !== 'true') throw new Error('the reused parameters differ');
  await page.keyboard.press('Escape');
  await page.fill('[data-testid=prompt-input]', `${word} reused`);
  await page.keyboard.press('Enter');
  const again = await until('the reused row', async () => (await api('GET', `/api/ai/queue?search=${word}%20reused`)).generations[0], 15_000);
  if (again.sampler !== 'turbo4-768p' || again.cache !== 'fbc:high' || again.loras[0].strength !== 0.5) throw new Error(`reused as ${JSON.stringify(again)}`);
  await settled(again.generation_id);
});

const failed = await runAll({
  outDir,
  filter,
  setup: async () => {
    const main = await launch();
    return { context: main.context, main };
  },
  teardown: async (env) => { await env.main.close(); },
});
process.exit(failed ? 1 : 0);
