// A small test harness over playwright-core: Debian's Chromium, headless,
// one fresh profile per run; each test prints "PASS name", "FAIL name: why"
// or, when it calls skip(why), "SKIP name: why" (the project's convention,
// counted by tests/run), and a failing test leaves a screenshot in the output
// folder.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const require = createRequire(new URL('../../web/package.json', import.meta.url));
const { chromium } = require('playwright-core');
const AXE_SOURCE = fs.readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');

export const CHROMIUM_ARGS = [
  '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
  '--autoplay-policy=no-user-gesture-required',
];

const tests = [];
export function test(name, fn, { timeout = 90_000 } = {}) { tests.push({ name, fn, timeout }); }

class Skipped extends Error {}
/** Ends the running test as skipped: a check that cannot run against this stack, never a pass. */
export function skip(why) { throw new Skipped(why); }

export async function launch() {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'mmh3-e2e-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: { width: 1400, height: 900 },
  });
  return { context, chromium, profile, close: async () => { await context.close(); fs.rmSync(profile, { recursive: true, force: true }); } };
}

/** A second, separate browser (its own profile and event stream). */
export async function launchOther() { return launch(); }

export async function runAll({ outDir, setup, teardown, filter }) {
  fs.mkdirSync(outDir, { recursive: true });
  let failed = 0;
  const env = await setup();
  for (const t of tests) {
    if (filter && !t.name.includes(filter)) continue;
    const page = await env.context.newPage();
    const logs = [];
    page.on('console', (m) => logs.push(`console.${m.type()}: ${m.text()}`));
    page.on('pageerror', (e) => logs.push(`pageerror: ${e.message}`));
    const started = Date.now();
    let timer;
    try {
      await Promise.race([
        t.fn({ page, ...env }),
        new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`timed out after ${t.timeout / 1000} s`)), t.timeout); }),
      ]);
      const errors = logs.filter((l) => l.startsWith('pageerror'));
      if (errors.length) throw new Error(`uncaught page error: ${errors[0]}`);
      console.log(`PASS web/e2e: ${t.name} (${((Date.now() - started) / 1000).toFixed(1)} s)`);
    } catch (e) {
      if (e instanceof Skipped) {
        console.log(`SKIP web/e2e: ${t.name}: ${e.message}`);
        continue;
      }
      failed++;
      const shot = path.join(outDir, `FAILED-${t.name.replace(/[^\w]+/g, '_')}.png`);
      await page.screenshot({ path: shot }).catch(() => {});
      console.log(`FAIL web/e2e: ${t.name}: ${String(e.message || e).split('\n')[0]} (screenshot ${shot})`);
      for (const l of logs.slice(-15)) console.log(`    ${l}`);
    } finally {
      clearTimeout(timer);
      await page.close().catch(() => {});
    }
  }
  await teardown(env);
  return failed;
}

/**
 * Runs axe-core (injected from web/node_modules) over the page as it is now
 * and throws on any serious or critical violation, naming the rule and the
 * first elements; every violation (any impact) goes to a11y-<name>.json in
 * outDir for review.
 */
export async function checkA11y(page, name, outDir) {
  if (!(await page.evaluate(() => Boolean(window.axe)))) await page.addScriptTag({ content: AXE_SOURCE });
  const result = await page.evaluate(() => window.axe.run(document, { resultTypes: ['violations'] }));
  const violations = result.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map((n) => ({ target: n.target, summary: n.failureSummary })) }));
  fs.writeFileSync(path.join(outDir, `a11y-${name}.json`), JSON.stringify({ url: page.url(), violations }, null, 1));
  const bad = violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  if (bad.length) {
    throw new Error(`axe on ${name}: ${bad.length} serious/critical violation(s): ` + bad.map((v) =>
      `${v.id} (${v.impact}: ${v.help}) at ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(' | ')}${v.nodes.length > 3 ? ` and ${v.nodes.length - 3} more` : ''}`).join('; '));
  }
  return violations;
}
