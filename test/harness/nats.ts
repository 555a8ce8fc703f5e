// Looks into the stream and buckets of a test environment. Runs in Node and workerd alike.
import { jetstreamManager } from "@nats-io/jetstream";
import { loadConfig } from "../../src/config.ts";
import { admissionBucket, admissionKey, type Backend } from "../../src/names.ts";
import { withNats } from "../../src/nats/connection.ts";
import { bindBucket, readJson } from "../../src/state/kv.ts";

/** Messages in the stream, and the first enabled backend's pending and ack-pending counts. */
export async function streamState(env: Record<string, string>) {
  const config = loadConfig(env);
  return withNats(config, async (h) => {
    const jsm = await jetstreamManager(h.nc);
    const s = await jsm.streams.info(config.stream);
    const c = await jsm.consumers.info(config.stream, config.backends[0]!.backend);
    return { messages: s.state.messages, ackPending: c.num_ack_pending, pending: c.num_pending };
  });
}

/** Every message body still stored in the stream and both KV buckets, as text. */
export async function storedTexts(env: Record<string, string>): Promise<string[]> {
  const config = loadConfig(env);
  return withNats(config, async (h) => {
    const jsm = await jetstreamManager(h.nc);
    const texts: string[] = [];
    for (const name of [config.stream, `KV_${config.stream}_records`, `KV_${config.stream}_admission`]) {
      const info = await jsm.streams.info(name);
      for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
        const m = await jsm.streams.getMessage(name, { seq }).catch(() => null);
        if (m) texts.push(new TextDecoder().decode(m.data));
      }
    }
    return texts;
  });
}

/** The admission entry of a backend: live slot leases and registration reservations. */
export async function admissionState(env: Record<string, string>, backend: Backend = "pod") {
  const config = loadConfig(env);
  return withNats(config, async (h) => {
    const kv = await bindBucket(h, admissionBucket(config));
    const entry = await readJson<{ leases: Record<string, number>; registering?: Record<string, number> }>(kv, admissionKey(backend));
    const live = (m: Record<string, number> = {}) => Object.keys(m).filter((id) => m[id]! > Date.now());
    return { leases: live(entry?.value.leases), registering: live(entry?.value.registering) };
  });
}
