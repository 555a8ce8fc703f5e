// The Forgejo poller: a Durable Object per Forgejo URL and scope, so that however many isolates
// serve the Worker, one poll runs at a time. Its alarm polls every FORGEJO_POLL_MS; the cron tick
// calls `arm`, which sets the alarm again should an eviction or a deploy have lost it. What earlier
// polls published is kept in the object's storage; secrets are not (the configuration comes with
// each call and is kept in memory only; after an eviction the object reads its own env).
import { DurableObject } from "cloudflare:workers";
import { loadConfig, type Config } from "./config.ts";
import { createDispatcher } from "./dispatcher.ts";
import { consoleSink } from "../model/events.ts";
import { createForgejoClient } from "../forge/forgejo/client.ts";
import type { KnownJob } from "../forge/forgejo/jobs.ts";
import { recordPollHealth } from "../forge/forgejo/health.ts";
import { pollForgejo, type KnownStore, type PollOutcome } from "../forge/forgejo/poller.ts";
import { pollerName } from "../forge/forgejo/config.ts";
import type { KnownName, NameStore } from "../forge/forgejo/names.ts";

/** A pass right after a poll that published: the runners are asked for now, not at the next tick. */
const PASS_BUDGET_MS = 5_000;
const KNOWN = "k:";
const NAMES = "n:";

export class ForgejoPoller extends DurableObject<Record<string, unknown>> {
  #config: Config | undefined;
  #known: Map<string, KnownJob> | undefined;
  #running: Promise<unknown> = Promise.resolve();

  /** Keeps `config` for the alarms and sets the alarm when none is set. True when it had to. */
  async arm(config: Config): Promise<boolean> {
    this.#config = config;
    if (await this.#retired(config)) return false;
    if ((await this.ctx.storage.getAlarm()) !== null) return false;
    await this.ctx.storage.setAlarm(Date.now());
    return true;
  }

  /** Polls now (after the poll under way, if any): a run-level webhook said jobs ended. */
  async pollNow(config: Config): Promise<PollOutcome> {
    this.#config = config;
    return this.#serialized(() => this.#poll(config));
  }

  override async alarm(): Promise<void> {
    const config = this.#config ?? configOf(this.env);
    if (!config?.forgejo) return; // not re-armed: the cron tick arms it again, with its configuration
    if (await this.#retired(config, true)) return;
    // Set before the poll: a poll that throws does not end the alarms.
    await this.ctx.storage.setAlarm(Date.now() + config.forgejo.pollMs);
    await this.#serialized(() => this.#poll(config));
  }

  /**
   * An object is named after the Forgejo URL and scope it polls (binding.ts). Once GITEA_URL or
   * GITEA_SCOPE changed, the object of the old name would poll the new configuration beside the
   * new object, forever: it stops its alarm instead, and says so once.
   */
  async #retired(config: Config, firing = false): Promise<boolean> {
    const name = this.ctx.id.name;
    if (name === undefined || name === pollerName(config.forgejo!)) return false;
    // Said once: when it stops its alarm (firing now, or set).
    const armed = firing || (await this.ctx.storage.getAlarm()) !== null;
    await this.ctx.storage.deleteAlarm();
    if (armed)
      consoleSink.event({
        event: "poller_retired",
        assignment: "-",
        backend: undefined,
        reason: "the configuration names another Forgejo URL or scope: this poller's alarm is stopped",
      });
    return true;
  }

  #serialized<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.#running.then(fn, fn);
    this.#running = next.catch(() => undefined);
    return next;
  }

  async #poll(config: Config): Promise<PollOutcome> {
    const f = config.forgejo!;
    const d = createDispatcher({ config, sink: consoleSink, shareConnection: true });
    const client = createForgejoClient({ url: f.url, apiToken: f.apiToken, timeoutMs: config.backendTimeoutMs });
    let closeLater = false;
    try {
      const outcome = await pollForgejo(d, client, f, this.#store(), this.#names());
      await recordPollHealth(d, this.ctx.storage, outcome);
      if (config.eagerReconcile && outcome.backends.length) {
        // Not awaited: a pass may take its whole budget, and the next poll must not wait for it. A
        // whole pass, not an eager one: an eager pass stops at its first batch with something new,
        // and one poll may publish more than a batch.
        const pass = d.reconcile("poll", Math.min(PASS_BUDGET_MS, config.reconcileBudgetMs), { only: outcome.backends });
        this.ctx.waitUntil(pass.catch((err) => consoleSink.error("pass after a poll failed", { reason: (err as Error).message })).finally(() => d.close()));
        closeLater = true;
      }
      return outcome;
    } finally {
      if (!closeLater) await d.close();
    }
  }

  #store(): KnownStore {
    const storage = this.ctx.storage;
    return {
      all: async () => {
        if (!this.#known) {
          const listed = await storage.list<KnownJob>({ prefix: KNOWN });
          this.#known = new Map([...listed].map(([k, v]) => [k.slice(KNOWN.length), v]));
        }
        return new Map(this.#known);
      },
      put: async (key, job) => {
        await storage.put(KNOWN + key, job);
        this.#known?.set(key, job);
      },
      delete: async (key) => {
        await storage.delete(KNOWN + key);
        this.#known?.delete(key);
      },
    };
  }

  /** Repository names by id, looked up from Forgejo (names.ts), kept in the object's storage. */
  #names(): NameStore {
    const storage = this.ctx.storage;
    return { get: (id) => storage.get<KnownName>(NAMES + id), put: (id, known) => storage.put(NAMES + id, known) };
  }

  /** What the poller keeps, for tests and operators: the job attempts it is following. */
  async known(): Promise<KnownJob[]> {
    return [...(await this.#store().all()).values()];
  }
}

function configOf(env: Record<string, unknown>): Config | undefined {
  try {
    return loadConfig(env);
  } catch (err) {
    consoleSink.error("forgejo poller: configuration invalid, alarm not re-armed", { reason: (err as Error).name });
    return undefined;
  }
}
