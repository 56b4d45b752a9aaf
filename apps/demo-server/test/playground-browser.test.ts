// The playground page in Debian's Chromium (playwright-core): a whole deploy through the forms, every attack button,
// the URL flow, two codecs side by side. Every wait is for a selector or an event, never for a fixed time.
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type BrowserContext, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { effects, freshKeys, type Json, type RunningDemo, startDemo } from './helpers.js';

/** Debian's Chromium (`apt-get install -y chromium`); .ci/run installs it when missing. */
const CHROMIUM = '/usr/bin/chromium';
const ARTIFACTS = fileURLToPath(new URL('../test-artifacts/', import.meta.url));
const TOKEN = 'alice-token-0123456789abcdef';
/** Longest wait for one thing to appear (a round over loopback, a page load); generous for a loaded machine. */
const WAIT_MS = 30_000;

const missing = existsSync(CHROMIUM) ? undefined : `${CHROMIUM} is missing (apt-get install -y chromium)`;
if (missing !== undefined && process.env.MRTR_REQUIRE_SERVICES === '1') {
  it('playground in Chromium', () => {
    throw new Error(`${missing} but MRTR_REQUIRE_SERVICES=1`);
  });
} else if (missing !== undefined) {
  console.warn(`skipping the playground browser tests: ${missing}`);
}

describe.skipIf(missing !== undefined)('the playground page in Chromium', () => {
  let profile: string;
  let context: BrowserContext;
  let hmac: RunningDemo;
  let aead: RunningDemo;
  let all: RunningDemo;
  const problems: string[] = [];

  beforeAll(async () => {
    profile = mkdtempSync(join(tmpdir(), 'mrtr-playground-chromium-'));
    [hmac, aead, all] = await Promise.all([
      startDemo([], { env: { MRTR_KEYS: freshKeys(), MRTR_DEMO_TOKENS: `alice:${TOKEN}`, MRTR_DEMO_CONNECT_WAIT_MS: '1' } }),
      // A short lifetime for the expiry button (TTL + 5 s skew + 1 s of waiting in the page).
      startDemo(['--codec', 'aead', '--ttl-ms', '1000'], { env: { MRTR_KEYS: freshKeys(), MRTR_DEMO_TOKENS: '' } }),
      startDemo(['--codec', 'all'], { env: { MRTR_KEYS: freshKeys(), MRTR_DEMO_TOKENS: '' } }),
    ]);
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
      viewport: { width: 1100, height: 900 },
    });
    context.setDefaultTimeout(WAIT_MS);
    context.on('page', (page) => watch(page));
    for (const page of context.pages()) watch(page);
  });

  afterAll(async () => {
    await context?.close();
    if (profile !== undefined) rmSync(profile, { recursive: true, force: true });
    for (const demo of [hmac, aead, all]) if (demo !== undefined) expect(await demo.stop()).toBe(0);
  });

  /** Page errors and console errors (a CSP violation would show here) fail the last test. */
  function watch(page: Page): void {
    page.on('pageerror', (error) => problems.push(`pageerror: ${error.message}`));
    page.on('console', (message) => {
      if (message.type() === 'error') problems.push(`console: ${message.text()}`);
    });
  }

  async function open(demo: RunningDemo, token?: string): Promise<Page> {
    const page = await context.newPage();
    await page.goto(`${demo.origin}/`);
    await page.waitForSelector('#server-info[data-codec]');
    if (token !== undefined) await page.fill('#token', token);
    return page;
  }

  async function call(page: Page, label: string): Promise<void> {
    await page.selectOption('#target', { label });
    await page.click('#call');
    await page.waitForSelector('#timeline > li[data-kind="input_required"]');
  }

  /** Sends the answers and waits for the timeline to grow by one entry. */
  async function send(page: Page): Promise<void> {
    const before = await page.locator('#timeline > li').count();
    await page.click('#send');
    await page.locator('#timeline > li').nth(before).waitFor();
  }

  /**
   * Whether the heading of the newest timeline entry lies inside the viewport (its bounding box against the window):
   * the page scrolls each new round into view, so nobody has to scroll to see what just happened.
   */
  const newestInView = (page: Page): Promise<boolean> =>
    page.locator('#timeline > li:last-child > h3').evaluate((heading) => {
      const box = heading.getBoundingClientRect();
      const viewport = (globalThis as unknown as { innerHeight: number }).innerHeight;
      return box.height > 0 && box.top >= 0 && box.bottom <= viewport;
    });

  /** Presses an attack button and returns the verdict of the entry it adds. */
  async function attack(page: Page, id: string): Promise<{ code: string; error: string; text: string }> {
    const attacks = page.locator('#timeline > li[data-attack]');
    const before = await attacks.count();
    await page.click(`#${id}`);
    const added = attacks.nth(before);
    await added.waitFor();
    const verdict = added.locator('.verdict');
    return {
      code: (await verdict.getAttribute('data-code')) ?? '',
      error: (await verdict.getAttribute('data-error')) ?? '',
      text: (await verdict.textContent()) ?? '',
    };
  }

  it('completes deploy to production through the forms, showing each state with its codec, kid and readable claims', async () => {
    const page = await open(hmac, TOKEN);
    // A small window (the timeline soon taller than it), and no scroll anchoring (as in browsers without it, Safari):
    // the page itself must bring each new round on screen.
    await page.setViewportSize({ width: 1100, height: 420 });
    for (const scroller of ['html', 'body']) {
      await page.locator(scroller).evaluate((node) => {
        (node as unknown as { style: { overflowAnchor: string } }).style.overflowAnchor = 'none';
      });
    }
    await call(page, 'tool deploy');
    const first = page.locator('#timeline > li').first();
    await expect.poll(() => first.locator('.state-info').getAttribute('data-codec')).toBe('hmac');
    expect(await first.locator('.state-info').textContent()).toMatch(/requestState: \d+ bytes · codec hmac · kid k2/);
    expect(await first.locator('.note').textContent()).toContain('This client (and anyone who sees the token) can read these claims');
    await expect.poll(() => newestInView(page)).toBe(true);
    await page.selectOption('select[data-field="environment"]', 'production');
    await send(page);
    await expect.poll(() => newestInView(page)).toBe(true);
    await page.check('input[data-field="confirm"]');
    await send(page);
    await expect.poll(() => newestInView(page)).toBe(true);
    await page.fill('input[data-field="service"]', 'web');
    await send(page);
    const done = page.locator('#timeline > li[data-kind="complete"]');
    await done.waitFor();
    // After four rounds (the timeline taller than the window), the newest round is on screen without scrolling.
    expect(await page.locator('#timeline > li').count()).toBe(4);
    await expect.poll(() => newestInView(page)).toBe(true);
    expect(await done.textContent()).toContain('Deployed web to production');
    expect(await done.locator('.verdict').textContent()).toBe('✓ COMPLETE after 4 round(s).');
    // The replay button works on the spent state of the finished flow.
    const replay = await attack(page, 'attack-replay');
    expect(replay.error).toBe('-32602');
    expect(replay.code).toBe('ERR_STATE_REPLAYED');
    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, 'playground-deploy.png'), fullPage: true });
    await page.close();
  });

  it('shows -32602 and the recorded code for each attack button', async () => {
    const page = await open(hmac, TOKEN);
    await call(page, 'tool deploy');
    expect(await page.isDisabled('#attack-replay')).toBe(true);
    await page.selectOption('select[data-field="environment"]', 'staging');
    await send(page);
    const expected: [string, string][] = [
      ['attack-flip', 'ERR_STATE_INTEGRITY'],
      ['attack-other', 'ERR_STATE_BINDING'],
      ['attack-args', 'ERR_STATE_BINDING'],
      ['attack-replay', 'ERR_STATE_REPLAYED'],
    ];
    for (const [id, code] of expected) {
      const verdict = await attack(page, id);
      expect(verdict.error, id).toBe('-32602');
      expect(verdict.code, id).toBe(code);
      expect(verdict.text, id).toContain(`✗ REJECTED: -32602 Invalid or expired requestState. The server recorded: ${code}`);
    }
    // Not an error: the unasked answer is ignored and the server asks its own question again.
    const unasked = await attack(page, 'attack-unasked');
    expect(unasked.code).toBe('');
    expect(unasked.text).toContain('Not rejected. The server recorded no rejection code');
    await page.locator('#timeline > li[data-kind="note"]').waitFor();
    // The flow goes on with the fresh state.
    await page.check('input[data-field="confirm"]');
    await send(page);
    await page.locator('#timeline > li[data-kind="complete"]').waitFor();
    expect(await page.locator('#timeline > li[data-kind="complete"]').textContent()).toContain('Deployed web to staging');
    // The default 10 min lifetime: the page explains instead of waiting.
    expect(await page.isDisabled('#attack-expire')).toBe(true);
    expect(await page.textContent('#expire-note')).toContain('--ttl-ms 2000');
    await page.close();
  });

  it('refuses an expired state (a server with --ttl-ms 1000) and shows a sealed state for the aead codec', async () => {
    const page = await open(aead);
    await call(page, 'tool delete_files');
    const info = page.locator('#timeline > li').first().locator('.state-info');
    expect(await info.getAttribute('data-codec')).toBe('aead');
    expect(await page.locator('#timeline > li').first().locator('.note').textContent()).toContain('cannot read what it carries');
    expect(await page.textContent('#expire-note')).toContain('waits 7 s');
    const verdict = await attack(page, 'attack-expire');
    expect(verdict.error).toBe('-32602');
    expect(verdict.code).toBe('ERR_STATE_EXPIRED');
    await page.close();
  });

  it('shows other token sizes for another codec (hmac readable vs aead sealed, same call)', async () => {
    const sizes: Record<string, number> = {};
    for (const [demo, token] of [
      [hmac, TOKEN],
      [aead, undefined],
    ] as const) {
      const page = await open(demo, token);
      await call(page, 'tool delete_files');
      const info = page.locator('#timeline > li').first().locator('.state-info');
      sizes[(await info.getAttribute('data-codec'))!] = Number(await info.getAttribute('data-bytes'));
      await page.close();
    }
    expect(Object.keys(sizes).sort()).toEqual(['aead', 'hmac']);
    expect(sizes.hmac).toBeGreaterThan(100);
    expect(sizes.aead).toBeGreaterThan(100);
    expect(sizes.aead).not.toBe(sizes.hmac);
  });

  it('with --codec all: switching the codec changes the token, and the comparison shows each size and time', async () => {
    const page = await open(all);
    expect(await page.isVisible('#endpoint')).toBe(true);
    const seen: Record<string, number> = {};
    for (const codec of ['hmac', 'jwe', 'aead']) {
      await page.selectOption('#endpoint', `/mcp/${codec}`);
      await call(page, 'tool delete_files');
      const info = page.locator('#timeline > li').first().locator('.state-info');
      expect(await info.getAttribute('data-codec')).toBe(codec);
      seen[codec] = Number(await info.getAttribute('data-bytes'));
      // The flow finishes on the endpoint it started on.
      await page.check('input[data-field="confirm"]');
      await send(page);
      await page.locator('#timeline > li[data-kind="complete"]').waitFor();
    }
    expect(new Set(Object.values(seen)).size).toBe(3);
    await page.click('#compare');
    const rows = page.locator('#comparison tbody tr');
    await rows.nth(2).waitFor();
    const table: Record<string, number> = {};
    for (let i = 0; i < 3; i++) {
      const row = rows.nth(i);
      table[(await row.getAttribute('data-codec'))!] = Number(await row.getAttribute('data-bytes'));
      expect(await row.textContent()).toMatch(/\d+ B.*\d+\.\d ms/);
    }
    expect(Object.keys(table)).toEqual(['hmac', 'jwe', 'aead']);
    // The first round of the same call. hmac and aead seal the claims' integer milliseconds: the same size. JWE writes
    // iat and exp as NumericDate seconds with up to three decimals (…801.014, …801.01, …801), so its plaintext is up to
    // 8 bytes shorter when the milliseconds end in zeros: at most ceil(8 × 4 / 3) = 11 base64url characters.
    const sizes = JSON.stringify({ seen, table });
    expect(table.hmac, sizes).toBe(seen.hmac);
    expect(table.aead, sizes).toBe(seen.aead);
    expect(Math.abs(table.jwe! - seen.jwe!), sizes).toBeLessThanOrEqual(11);
    await page.screenshot({ path: join(ARTIFACTS, 'playground-compare.png'), fullPage: false });
    await page.close();
  });

  it('completes the URL flow: the link opens the connect page, the page is completed, then accept', async () => {
    const page = await open(hmac, TOKEN);
    await call(page, 'tool connect_account');
    const link = page.locator('#q-connect-link');
    expect(await link.getAttribute('href')).toMatch(new RegExp(`^${hmac.origin}/connect/[A-Za-z0-9_-]{22}$`));
    const [connectPage] = await Promise.all([context.waitForEvent('page'), link.click()]);
    await connectPage.waitForSelector('button[value="connect"]');
    await connectPage.fill('input[name="token"]', TOKEN);
    await connectPage.click('button[value="connect"]');
    await connectPage.waitForSelector('h1:has-text("github connected")');
    await connectPage.close();
    await send(page);
    const done = page.locator('#timeline > li[data-kind="complete"]');
    await done.waitFor();
    expect(await done.textContent()).toContain('Connected your github account (simulated).');
    await page.close();
  });

  it('answers a form of every field type (prompt), a sampling request, a roots list and the resource', async () => {
    const page = await open(hmac, TOKEN);
    await call(page, 'prompt incident_report');
    await page.selectOption('select[data-field="severity"]', 'sev2');
    await page.fill('input[data-field="impact"]', 'Slow checkouts');
    await page.check('input[data-field="resolved"]');
    await page.fill('input[data-field="customers"]', '42');
    const regions = page.locator('fieldset[data-field="regions"]');
    await regions.getByLabel('eu').check();
    await regions.getByLabel('apac').check();
    await send(page);
    const prompt = page.locator('#timeline > li[data-kind="complete"] .result-text');
    await prompt.waitFor();
    expect(await prompt.textContent()).toContain(
      'Severity: sev2. Customer impact: Slow checkouts. About 42 customer(s) affected. Regions: eu, apac. Status: resolved.',
    );

    await call(page, 'tool summarize');
    await page.fill('textarea[data-kind="sampling"]', 'A person wrote this summary.');
    await send(page);
    await page.locator('#timeline > li[data-kind="complete"]').waitFor();
    expect(await page.textContent('#timeline > li[data-kind="complete"] .result-text')).toBe(
      'Summary (by a person in the playground): A person wrote this summary.',
    );

    await call(page, 'tool list_workspace');
    await page.fill('textarea[data-kind="roots"]', 'file:///srv/app app\nfile:///srv/docs');
    await send(page);
    await page.locator('#timeline > li[data-kind="complete"]').waitFor();
    expect(await page.textContent('#timeline > li[data-kind="complete"] .result-text')).toBe(
      'Workspace roots (2):\n- app: file:///srv/app\n- file:///srv/docs',
    );

    await call(page, 'resource runbook://{service}');
    await page.selectOption('select[data-field="environment"]', 'staging');
    await send(page);
    await page.locator('#timeline > li[data-kind="complete"]').waitFor();
    expect(await page.textContent('#timeline > li[data-kind="complete"] .result-text')).toContain('# web runbook (staging)');
    await page.close();
  });

  it('is usable from the keyboard: Tab to the call button, Enter calls', async () => {
    const page = await open(aead);
    await page.focus('#args');
    await page.keyboard.press('Tab');
    expect(await page.evaluate('document.activeElement && document.activeElement.id')).toBe('call');
    await page.keyboard.press('Enter');
    await page.waitForSelector('#timeline > li[data-kind="input_required"]');
    await page.close();
  });

  /** The statuses of the task timeline, in order. */
  const taskSteps = (page: Page): Promise<string[]> =>
    page.locator('#task-steps > li').evaluateAll((items) => items.map((li) => li.getAttribute('data-status') ?? ''));

  it('runs rollout to production as a task: the environment form, working, the approval question (tasks/update), completed', async () => {
    const page = await open(hmac, TOKEN);
    await call(page, 'tool rollout');
    await page.selectOption('select[data-field="environment"]', 'production');
    await page.click('#send');
    await page.locator('#task-section').waitFor({ state: 'visible' });
    expect(await page.textContent('#task-id')).toMatch(/^[A-Za-z0-9_-]{8}…$/);
    expect(await page.getAttribute('#task-id', 'title')).toMatch(/^[A-Za-z0-9_-]{9,}$/);
    await page.locator('#timeline > li[data-kind="task"]').first().waitFor();
    const working = page.locator('#task-steps > li[data-status="working"]').first();
    await working.waitFor();
    const asking = page.locator('#task-steps > li[data-status="input_required"]');
    await asking.waitFor();
    expect(await asking.locator('.task-question').textContent()).toMatch(
      /asks approve_rollout \(form: approve\): The canary of web .* is healthy/,
    );
    const before = await taskSteps(page);
    expect(before[0]).toBe('working');
    expect(before.at(-1)).toBe('input_required');
    // The handle's own `working` (no message yet), then the canary's status message.
    expect(await page.locator('#task-steps > li[data-status="working"] .task-message').first().textContent()).toMatch(
      /^canary: release \S+ on 1 of 10 instances$/,
    );
    expect(await page.textContent('#task-status')).toBe('input_required');
    // The question is in the page's own form; the answer goes out with tasks/update.
    await page.check('input[data-field="approve"]');
    await page.click('#send');
    await page.locator('#timeline > li[data-kind="task"]', { hasText: 'tasks/update' }).waitFor();
    const done = page.locator('#timeline > li[data-kind="complete"]');
    await done.waitFor();
    expect(await done.locator('.result-text').textContent()).toMatch(/^Rolled web release \S+ out to production: 10 of 10 instances\.$/);
    // The task panel above the timeline grew with every status; the newest entry is still on screen.
    await expect.poll(() => newestInView(page)).toBe(true);
    expect(await page.textContent('#task-status')).toBe('completed');
    const steps = await taskSteps(page);
    expect(steps.at(-1)).toBe('completed');
    const asked = steps.indexOf('input_required');
    expect(asked).toBeGreaterThan(0);
    expect(steps.slice(asked + 1, -1)).toContain('working');
    expect(steps.filter((s) => s === 'completed')).toHaveLength(1);
    expect(await page.locator('#task-steps > li .task-message').allTextContents()).toContainEqual(expect.stringMatching(/^wave 3: /));
    expect(await page.isDisabled('#task-cancel')).toBe(true);
    expect(await page.locator('#questions fieldset').count()).toBe(0);
    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, 'playground-rollout.png'), fullPage: true });
    await page.close();
  });

  it('cancels a staging rollout from the task panel: cancelled, no result, the polling stops', async () => {
    const page = await open(hmac, TOKEN);
    await call(page, 'tool rollout');
    await page.selectOption('select[data-field="environment"]', 'staging');
    await page.click('#send');
    await page.locator('#task-steps > li[data-status="working"]').first().waitFor();
    await page.locator('#task-cancel:not([disabled])').waitFor();
    await page.click('#task-cancel');
    const cancelled = page.locator('#timeline > li[data-kind="cancelled"]');
    await cancelled.waitFor();
    expect(await cancelled.locator('.verdict').textContent()).toMatch(
      /^✗ CANCELLED: task [A-Za-z0-9_-]{8}… was cancelled; it has no result\.$/,
    );
    expect(await page.textContent('#task-status')).toBe('cancelled');
    expect((await taskSteps(page)).at(-1)).toBe('cancelled');
    expect(await page.locator('#timeline > li[data-kind="complete"]').count()).toBe(0);
    expect(await page.isDisabled('#task-cancel')).toBe(true);
    // Another flow replaces the task panel.
    await call(page, 'tool delete_files');
    expect(await page.isHidden('#task-section')).toBe(true);
    await page.close();
  });

  /** The params of every `tools/call` the page POSTs to /mcp, as they left the browser. */
  function toolCalls(page: Page): Json[] {
    const sent: Json[] = [];
    page.on('request', (request) => {
      if (request.method() === 'POST' && request.headers()['mcp-method'] === 'tools/call') {
        sent.push((JSON.parse(request.postData() ?? '{}') as { params: Json }).params);
      }
    });
    return sent;
  }

  /** The effect counts the page shows under a result after a dropped answer. */
  async function shownEffects(entry: ReturnType<Page['locator']>): Promise<number[]> {
    const line = entry.locator('.effects');
    return Promise.all(['data-before', 'data-after-lost', 'data-after-retry'].map(async (name) => Number(await line.getAttribute(name))));
  }

  it('drops the answer to a keyed send_email, sends the same request again: replayed from the record, one e-mail', async () => {
    const before = await effects(hmac, 'send_email', TOKEN);
    const page = await open(hmac, TOKEN);
    const sent = toolCalls(page);
    await page.selectOption('#target', { label: 'tool send_email' });
    await page.check('#drop-next');
    await page.click('#call');
    const done = page.locator('#timeline > li[data-kind="complete"]');
    await done.waitFor();
    const kinds = await page.locator('#timeline > li').evaluateAll((items) => items.map((li) => li.getAttribute('data-kind')));
    expect(kinds).toEqual(['dropped', 'complete']);
    const dropped = page.locator('#timeline > li[data-kind="dropped"]');
    expect(await dropped.locator('.verdict').textContent()).toMatch(/^↯ DROPPED: the server answered \(HTTP 200, \d+ characters\)/);
    // The retry: marked replayed, the same message id as the answer that was lost, the effect counted once.
    expect(await done.locator('.badge').getAttribute('data-replayed')).toBe('true');
    expect(await done.locator('.badge').textContent()).toBe('replayed — answered from the record, no second effect');
    const messageId = /message id (<[^>]+>)/.exec((await done.locator('.result-text').textContent()) ?? '')?.[1];
    expect(messageId).toBeDefined();
    expect(await dropped.locator('details pre').last().textContent()).toContain(messageId);
    const [shownBefore, afterLost, afterRetry] = await shownEffects(done);
    expect([afterLost! - shownBefore!, afterRetry]).toEqual([1, afterLost]);
    expect(await effects(hmac, 'send_email', TOKEN)).toBe(before + 1);
    // A real re-send: two tools/call left the browser with the same params, idempotency key included.
    expect(sent).toHaveLength(2);
    expect(sent[1]).toEqual(sent[0]);
    expect((sent[0]!._meta as Json)['dev.mrtr/idempotency-key']).toMatch(/^pg-[0-9a-f]{32}$/);
    expect(await page.isChecked('#drop-next')).toBe(false);
    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, 'playground-drop.png'), fullPage: true });
    // Another call is another key: it runs, unmarked.
    await page.click('#call');
    await page.locator('#timeline > li[data-kind="complete"] .result-text').waitFor();
    expect(await page.locator('#timeline > li[data-kind="complete"] .badge').count()).toBe(0);
    expect((sent[2]!._meta as Json)['dev.mrtr/idempotency-key']).not.toBe((sent[0]!._meta as Json)['dev.mrtr/idempotency-key']);
    expect(await effects(hmac, 'send_email', TOKEN)).toBe(before + 2);
    await page.close();
  });

  it('drops the answer to the last deploy round, sends the same state and answers again: replayed, one deployment', async () => {
    const before = await effects(hmac, 'deploy', TOKEN);
    const page = await open(hmac, TOKEN);
    const sent = toolCalls(page);
    await call(page, 'tool deploy');
    expect((sent[0]!._meta as Json)['dev.mrtr/idempotency-key']).toMatch(/^pg-/);
    await page.selectOption('select[data-field="environment"]', 'staging');
    await send(page);
    await page.check('input[data-field="confirm"]');
    await page.check('#drop-next');
    await page.click('#send');
    const done = page.locator('#timeline > li[data-kind="complete"]');
    await done.waitFor();
    expect(await done.textContent()).toContain('Deployed web to staging');
    expect(await page.locator('#timeline > li[data-kind="dropped"]').count()).toBe(1);
    expect(await done.locator('.badge').getAttribute('data-replayed')).toBe('true');
    const [shownBefore, afterLost, afterRetry] = await shownEffects(done);
    expect([afterLost! - shownBefore!, afterRetry]).toEqual([1, afterLost]);
    expect(await effects(hmac, 'deploy', TOKEN)).toBe(before + 1);
    // Three rounds, the last sent twice with the same state and answers (a later round carries no key).
    expect(sent).toHaveLength(4);
    expect(sent[3]).toEqual(sent[2]);
    expect(typeof sent[2]!.requestState).toBe('string');
    expect(sent[2]!._meta).not.toHaveProperty(['dev.mrtr/idempotency-key']);
    await page.close();
  });

  it('ran without a page error or a console error (no CSP violation)', () => {
    expect(problems).toEqual([]);
  });
});
