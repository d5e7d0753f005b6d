// OpenAI's own Node SDK (`openai` from npm, web/package.json's devDependencies)
// against the stack's /v1 video API: client.videos.create / retrieve / list /
// delete as an OpenAI user writes them, and the SDK's error objects for a
// refused request (its message, status, type and param come from our body).
// No browser: each check prints PASS/FAIL like the other e2e programs.
//
//   node tests/e2e/openai.e2e.mjs BASE OUT_DIR [name filter]
import { createRequire } from 'node:module';

import { until, unique } from './util.mjs';

const require = createRequire(new URL('../../web/package.json', import.meta.url));
const { default: OpenAI, BadRequestError, NotFoundError } = require('openai');

const [base, , filter] = process.argv.slice(2);
// A loopback stack asks for no token; the SDK insists on some key.
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: process.env.MMH3_E2E_TOKEN || 'unused-on-loopback', maxRetries: 0 });

const tests = [];
const test = (name, fn) => tests.push({ name, fn });
const check = (cond, what) => { if (!cond) throw new Error(what); };
const made = [];

// 200 is off the 32-px grid: the nearest multiple is 192, and the answer says so.
const SMALL = { model: 'minimax-h3', seconds: '1', size: '320x200' };

test('openai sdk: videos.create reports the snapped size, retrieve follows it to completed', async () => {
  const prompt = unique('an sdk fox');
  const { data: video, response } = await client.videos.create({ ...SMALL, prompt }).withResponse();
  made.push(video.id);
  check(video.object === 'video' && video.status === 'queued' && video.prompt === prompt, `created ${JSON.stringify(video)}`);
  check(video.size === '320x192', `size ${video.size}, 320x192 expected (200 snapped to the nearest multiple of 32)`);
  check(Array.isArray(video.warnings) && video.warnings.some((w) => w.includes('height 200 is off the 32-px grid; using 192')),
    `warnings ${JSON.stringify(video.warnings)}`);
  const header = response.headers.get('x-mmh3-warning') || '';
  check(header.includes('height 200 is off the 32-px grid; using 192'), `X-MMH3-Warning '${header}'`);
  const done = await until(`${video.id} to complete`, async () => {
    const v = await client.videos.retrieve(video.id);
    if (v.status === 'failed') throw new Error(`failed: ${JSON.stringify(v.error)}`);
    return v.status === 'completed' && v;
  }, 120_000, 500);
  check(done.progress === 100 && done.size === '320x192', `completed ${JSON.stringify(done)}`);
  const content = await client.videos.downloadContent(video.id);
  const bytes = Buffer.from(await content.arrayBuffer());
  check(bytes.length > 1000 && bytes.subarray(4, 8).toString() === 'ftyp', `content: ${bytes.length} bytes, not an mp4`);
});

test('openai sdk: videos.list pages with limit/after in both orders', async () => {
  const ids = [];
  for (let i = 0; i < 3; i++) {
    const v = await client.videos.create({ ...SMALL, prompt: unique(`a listed clip ${i}`) });
    made.push(v.id);
    ids.push(v.id);
  }
  const first = await client.videos.list({ limit: 2 });
  check(first.data.length === 2 && first.has_more === true && first.hasNextPage(), `first page ${JSON.stringify(first.data.map((v) => v.id))} has_more ${first.has_more}`);
  check(first.data[0].id === ids[2] && first.data[1].id === ids[1], `newest first: ${first.data.map((v) => v.id)} vs ${ids.slice().reverse()}`);
  const second = await first.getNextPage();
  check(second.data[0].id === ids[0], `the next page starts after ${ids[1]}: ${second.data.map((v) => v.id)}`);
  const all = [];
  for await (const v of client.videos.list({ limit: 2 })) all.push(v.id);
  check(new Set(all).size === all.length && ids.every((id) => all.includes(id)), `auto-paging saw ${all.length} ids, repeats or misses`);
  // every page, oldest first: the stack holds the other tests' clips too, more than one page of them
  const ascending = [];
  for await (const v of client.videos.list({ limit: 100, order: 'asc' })) ascending.push(v.id);
  const pos = ids.map((id) => ascending.indexOf(id));
  check(pos.every((p) => p >= 0) && pos[0] < pos[1] && pos[1] < pos[2], `ascending order positions ${pos}`);
  const after = await client.videos.list({ after: ids[1], order: 'asc', limit: 5 });
  check(after.data[0].id === ids[2], `asc after ${ids[1]}: ${after.data.map((v) => v.id)}`);
});

test('openai sdk: videos.delete removes a video; retrieving it then is a NotFoundError', async () => {
  const v = await client.videos.create({ ...SMALL, prompt: unique('a deleted clip') });
  const gone = await client.videos.delete(v.id); // still queued: cancelled, then removed
  check(gone.id === v.id && gone.object === 'video.deleted' && gone.deleted === true, `delete ${JSON.stringify(gone)}`);
  const err = await client.videos.retrieve(v.id).then(() => null, (e) => e);
  check(err instanceof NotFoundError && err.status === 404 && err.message.includes(`no video has the id ${v.id}`),
    `retrieve after delete: ${err && err.constructor.name} ${err && err.message}`);
  const again = await client.videos.delete(v.id).then(() => null, (e) => e);
  check(again instanceof NotFoundError, `a second delete: ${again && again.message}`);
});

test('openai sdk: a refused request is a BadRequestError with OpenAI\'s fields', async () => {
  const err = await client.videos.create({ ...SMALL, prompt: ' ' }).then(() => null, (e) => e);
  check(err instanceof BadRequestError && err.status === 400, `blank prompt: ${err && err.constructor.name} ${err && err.status}`);
  check(err.type === 'invalid_request_error' && err.param === 'prompt' && typeof err.code === 'string', `type ${err.type} param ${err.param} code ${err.code}`);
  check(/^400 prompt: is empty; accepted: string of 1\.\.8000 characters/.test(err.message), `message '${err.message}'`);
  const big = await client.videos.create({ ...SMALL, prompt: 'x', size: '9000x64' }).then(() => null, (e) => e);
  check(big instanceof BadRequestError && big.param === 'size' && big.message.includes('9000 is above the maximum 2048'), `size 9000x64: ${big && big.message}`);
  const list = await client.videos.list({ limit: 0 }).then(() => null, (e) => e);
  check(list instanceof BadRequestError && list.param === 'limit', `limit 0: ${list && list.message}`);
});

let failed = 0;
for (const t of tests) {
  if (filter && !t.name.includes(filter)) continue;
  const started = Date.now();
  try {
    await t.fn();
    console.log(`PASS web/e2e: ${t.name} (${((Date.now() - started) / 1000).toFixed(1)} s)`);
  } catch (e) {
    failed++;
    console.log(`FAIL web/e2e: ${t.name}: ${String(e.message || e).split('\n')[0]}`);
  }
}
// Leave the shared stack's gallery as it was.
for (const id of made) await client.videos.delete(id).catch(() => {});
process.exit(failed ? 1 : 0);
