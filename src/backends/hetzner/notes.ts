// What the hetzner driver keeps between passes, in the records bucket beside the records: each
// assignment's server (its id, so that teardown needs no lookup, and whether its one status read
// was made), and the project's rate budget, so that every invocation spends the same one.
import type { KV } from "@nats-io/kv";
import { driverBudgetKey, driverNoteKey } from "../../nats/names.ts";
import { readJson } from "../../state/kv.ts";
import type { RateState } from "./rate-budget.ts";

export interface ServerNote {
  /** The assignment's id (the note is kept under its server's label, which the sweep reads). */
  id: string;
  serverId: number;
  /** Epoch ms the server was created (or found, when adopted). */
  createdAt: number;
  /** Its one status read was made (the claim is the usual sign that it is up). */
  checked?: boolean;
  /** That read found it running: the runner is up, its claim is awaited. */
  ready?: boolean;
}

export interface Notes {
  /** By the assignment's label (kubernetes/names.ts objectNames): a server's own label finds it. */
  get(backend: string, label: string): Promise<ServerNote | undefined>;
  put(backend: string, label: string, note: ServerNote): Promise<void>;
  remove(backend: string, label: string): Promise<void>;
  budget(): Promise<RateState | undefined>;
  saveBudget(state: RateState): Promise<void>;
}

export function createNotes(kv: KV): Notes {
  return {
    async get(backend, label) {
      return (await readJson<ServerNote>(kv, driverNoteKey(backend, label)))?.value;
    },
    async put(backend, label, note) {
      await kv.put(driverNoteKey(backend, label), JSON.stringify(note));
    },
    async remove(backend, label) {
      await kv.purge(driverNoteKey(backend, label));
    },
    async budget() {
      return (await readJson<RateState>(kv, driverBudgetKey("hetzner")))?.value;
    },
    async saveBudget(state) {
      await kv.put(driverBudgetKey("hetzner"), JSON.stringify(state));
    },
  };
}
