// End-to-end tests of the gallery behind access tokens (docs/SECURITY.md), in
// Chromium against the real stack started with `mmh3 serve --mock --auth on`:
// the app sends the browser to /login, the login cookie then carries the API,
// the live event stream (EventSource) and the clips (<video>), and a revoked
// token ends all three.
//
//   node tests/e2e/auth.e2e.mjs BUILD_DIR OUT_DIR [name filter]
//
// Starts and stops its own stack (run.sh calls it after the gallery tests).
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { launch, runAll, test } from './harness.mjs';

const [build, outDir = 'tests/out/e2e', filter] = process.argv.slice(2);
if (!build) { console.log('FAIL web/e2e-auth: usage: auth.e2e.mjs BUILD_DIR OUT_DIR'); process.exit(1); }
const mmh3 = path.join(build, 'mmh3');
const work = path.join(outDir, 'auth-stack');

async function until(what, fn, timeout = 60_000, every = 250) {
  const end = Date.now() + timeout;
  let last;
  while (Date.now() < end) {
    try { last = await fn(); if (last) return last; } catch (e) { last = e; }
    await new Promise((r) => setTimeout(r, every));
  }
  throw new Error(`waited ${timeout / 1000} s for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
}

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

async function startStack() {
  fs.rmSync(work, { recursive: true, force: true });
  fs.mkdirSync(work, { recursive: true });
  fs.chmodSync(work, 0o755);
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const log = fs.openSync(path.join(work, 'serve.log'), 'a');
  const proc = spawn(mmh3, ['serve', '--mock', '--mock-seconds', '2', '--auth', 'on', '--listen', `127.0.0.1:${port}`,
    '--outputs', path.join(work, 'outputs'), '--web', path.join(build, 'web', 'dist')], { stdio: ['ignore', log, log] });
  const token = await until('the first token in the log', () => {
    const m = fs.readFileSync(path.join(work, 'serve.log'), 'utf8').match(/^\s+(mmh3_[0-9a-f]{64})\s*$/m);
    if (proc.exitCode !== null) throw new Error(`serve exited: ${fs.readFileSync(path.join(work, 'serve.log'), 'utf8').slice(-500)}`);
    return m && m[1];
  }, 90_000, 200);
  await until('the stack', async () => {
    const res = await fetch(`${base}/api/status`, { headers: { Authorization: `Bearer ${token}` } });
    return res.ok && (await res.json()).engine.state === 'ready';
  }, 90_000, 300);
  return { base, token, proc };
}

function stopStack(stack) {
  return new Promise((resolve) => {
    if (!stack || stack.proc.exitCode !== null) return resolve();
    stack.proc.once('exit', resolve);
    stack.proc.kill('SIGINT');
    setTimeout(() => { stack.proc.kill('SIGKILL'); resolve(); }, 60_000).unref();
  });
}

async function api(stack, method, p, body, token = stack.token) {
  const init = { method, headers: { Authorization: `Bearer ${token}` } };
  if (body !== undefined) { init.body = JSON.stringify(body); init.headers['Content-Type'] = 'application/json'; }
  const res = await fetch(stack.base + p, init);
  const data = await res.json().catch(() => null);
  if (!res.ok) throw new Error(`${method} ${p}: HTTP ${res.status}: ${JSON.stringify(data)}`);
  return data;
}

const SMALL = { frames: 22, width: 320, height: 192, steps: 8 };

async function logIn(page, stack, token) {
  await page.fill('#token', token);
  await Promise.all([page.waitForNavigation(), page.click('button[type=submit]')]);
}

// ------------------------------------------------------------------ tests

test('the app sends a visitor without the cookie to the login page, and back after', async ({ page, stack }) => {
  const g = (await api(stack, 'POST', '/api/ai/queue', { ...SMALL, prompt: 'deep link behind the login' })).generations[0];
  await page.goto(`${stack.base}/g/${g.generation_id}`);
  await page.waitForURL(/\/login\?next=/, { timeout: 15_000 });
  const next = new URL(page.url()).searchParams.get('next');
  if (next !== `/g/${g.generation_id}`) throw new Error(`next=${next}`);
  // A wrong token: the page again, with the reason, and no cookie.
  await logIn(page, stack, 'mmh3_not-a-token');
  if (!/\/api\/login$/.test(new URL(page.url()).pathname)) throw new Error(`after a wrong token: ${page.url()}`);
  if (!/not valid/.test(await page.textContent('[role=alert]'))) throw new Error('no error shown for a wrong token');
  if ((await page.context().cookies()).some((c) => c.name === 'mmh3_token')) throw new Error('a wrong token set a cookie');
  await logIn(page, stack, stack.token);
  await page.waitForURL(`${stack.base}/g/${g.generation_id}`, { timeout: 15_000 });
  const cookie = (await page.context().cookies()).find((c) => c.name === 'mmh3_token');
  if (!cookie || !cookie.httpOnly || cookie.sameSite !== 'Strict') throw new Error(`cookie ${JSON.stringify(cookie)}`);
  // Page scripts cannot read it.
  if (await page.evaluate(() => document.cookie.includes('mmh3_token'))) throw new Error('document.cookie shows the token');
  await page.screenshot({ path: path.join(outDir, 'auth-deep-link.png') });
});

test('with the cookie: the event stream is live and clips play', async ({ page, stack }) => {
  await page.goto(`${stack.base}/`);
  if (new URL(page.url()).pathname === '/login') await logIn(page, stack, stack.token);
  await page.waitForSelector('[data-testid=prompt-input]');
  await until('the live event stream', async () => (await page.locator('[data-testid=live-state]').getAttribute('data-state')) === 'open', 15_000);
  // Enqueued by a script with its own token; the browser learns of it over its stream.
  const g = (await api(stack, 'POST', '/api/ai/queue', { ...SMALL, prompt: 'a lantern drifting behind tokens' })).generations[0];
  const t = page.locator(`[data-testid=tile][data-id="${g.generation_id}"]`);
  await t.waitFor({ timeout: 15_000 });
  await until('the tile to succeed over the stream', async () => (await t.getAttribute('data-status')) === 'succeeded', 120_000, 200);
  const video = t.locator('[data-testid=tile-video]');
  await t.hover();
  await until('the clip to decode with the cookie', () => video.evaluate((v) => v.readyState >= 2 && v.videoWidth === 320), 20_000);
  await page.screenshot({ path: path.join(outDir, 'auth-gallery.png') });
});

test('a revoked token ends the session: the stream closes and the app goes to the login page', async ({ page, stack }) => {
  const made = spawnSync(mmh3, ['token', 'create', 'browser', '--outputs', path.join(work, 'outputs')], { encoding: 'utf8' });
  const token = made.stdout.trim();
  if (made.status !== 0 || !/^mmh3_[0-9a-f]{64}$/.test(token)) throw new Error(`token create: ${made.stderr}`);
  await page.context().clearCookies();
  await page.goto(`${stack.base}/login`);
  await logIn(page, stack, token);
  await page.waitForSelector('[data-testid=prompt-input]');
  await until('the live event stream', async () => (await page.locator('[data-testid=live-state]').getAttribute('data-state')) === 'open', 15_000);
  const revoked = spawnSync(mmh3, ['token', 'revoke', 'browser', '--outputs', path.join(work, 'outputs')], { encoding: 'utf8' });
  if (revoked.status !== 0) throw new Error(`token revoke: ${revoked.stderr}`);
  await page.waitForURL(/\/login\?next=/, { timeout: 30_000 });
  // The browser's cookie jar still holds the revoked token; the server refuses it.
  const st = (await page.context().request.get(`${stack.base}/api/status`)).status();
  if (st !== 401) throw new Error(`the revoked cookie still works: ${st}`);
});

// ------------------------------------------------------------------ run
const failed = await runAll({
  outDir,
  filter,
  setup: async () => {
    const stack = await startStack();
    const browser = await launch();
    return { context: browser.context, browser, stack };
  },
  teardown: async (env) => { await env.browser.close(); await stopStack(env.stack); },
});
process.exit(failed ? 1 : 0);
