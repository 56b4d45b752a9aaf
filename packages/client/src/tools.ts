import type { Client } from '@modelcontextprotocol/client';
import type { Settings } from './options.js';
import { retrying } from './retry.js';
import { isObject } from './sdk.js';

/** Where a tool declares, in its `tools/list` entry, that it accepts idempotency keys (truthy). */
export const IDEMPOTENCY_META = 'dev.mrtr/idempotency';

/** What this client knows of one tool: it takes keys; it is safe to send twice (read-only or idempotent by annotation). */
interface ToolFacts {
  keyed: boolean;
  repeatable: boolean;
}

const UNKNOWN: ToolFacts = { keyed: false, repeatable: false };

/** How long a tool list is trusted before an unknown tool name makes it be listed again (ms). */
const RELIST_MS = 30_000;

/** The server's tools as far as keys and repeats go: listed once (all pages), again when an unknown name comes and the list is old. */
export class ToolCatalog {
  #facts = new Map<string, ToolFacts>();
  #listedAt = Number.NEGATIVE_INFINITY;
  #listing: Promise<void> | undefined;
  readonly #client: Client;
  readonly #settings: Settings;

  constructor(client: Client, settings: Settings) {
    this.#client = client;
    this.#settings = settings;
  }

  /** The facts of tool `name`; `list: false` answers from what is known without listing (nothing, at first). */
  async get(name: string, list: boolean, signal: AbortSignal | undefined): Promise<ToolFacts> {
    const known = this.#facts.get(name);
    if (known !== undefined || !list) return known ?? UNKNOWN;
    if (this.#settings.now() - this.#listedAt >= RELIST_MS) await this.#list(signal);
    return this.#facts.get(name) ?? UNKNOWN;
  }

  #list(signal: AbortSignal | undefined): Promise<void> {
    this.#listing ??= retrying(
      this.#settings,
      () => this.#client.listTools(undefined, signal === undefined ? undefined : { signal }),
      true,
      signal,
    )
      .then(({ tools }) => {
        const facts = new Map<string, ToolFacts>();
        for (const tool of tools) {
          const declared = isObject(tool._meta) ? tool._meta[IDEMPOTENCY_META] : undefined;
          const hints = tool.annotations;
          facts.set(tool.name, { keyed: Boolean(declared), repeatable: hints?.readOnlyHint === true || hints?.idempotentHint === true });
        }
        this.#facts = facts;
        this.#listedAt = this.#settings.now();
      })
      .finally(() => {
        this.#listing = undefined;
      });
    return this.#listing;
  }
}
