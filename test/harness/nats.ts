// Looks into the stream and buckets of a test environment. Runs in Node and workerd alike.
import { jetstreamManager } from "@nats-io/jetstream";
import { loadConfig } from "../../src/app/config.ts";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { admissionStreams } from "../../src/nats/layout.ts";
import { type Backend } from "../../src/nats/names.ts";
import { withNats } from "../../src/nats/connection.ts";

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

/** Every message body still stored in the stream, the records bucket and the admission streams, as text. */
export async function storedTexts(env: Record<string, string>): Promise<string[]> {
  const config = loadConfig(env);
  return withNats(config, async (h) => {
    const jsm = await jetstreamManager(h.nc);
    const texts: string[] = [];
    for (const name of [config.stream, `KV_${config.stream}_records`, ...admissionStreams(config).map((s) => s.name)]) {
      const info = await jsm.streams.info(name);
      for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
        const m = await jsm.streams.getMessage(name, { seq }).catch(() => null);
        if (m) texts.push(new TextDecoder().decode(m.data));
      }
    }
    return texts;
  });
}

/** The admission state of a backend: live slot leases and registration reservations. */
export async function admissionState(env: Record<string, string>, backend: Backend = "pod") {
  return createDispatcher({ config: loadConfig(env) }).withState(async ({ admission }) => {
    const { holders, registering } = await admission.snapshot(backend);
    return { leases: holders, registering };
  });
}
