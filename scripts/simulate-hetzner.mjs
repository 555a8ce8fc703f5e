// What a server of the fake Hetzner API runs when its project simulates runners (mode.simulate):
// what the user_data of the hetzner driver makes a real server do. At boot it fetches its launch
// from the Worker, once, with the one-time token in its user_data; from the launch's files it
// takes its claim token, claims its job, works `jobMs`, and completes. Each step is noted on the
// server (`runner`), for tests and the demo's log. A server deleted meanwhile stops.

/** The bootstrap URL and token of a user_data the driver wrote, or undefined for any other. */
export function bootOf(userData) {
  const url = /^url='([^']+)'$/m.exec(userData ?? "")?.[1];
  const token = /^token='([^']+)'$/m.exec(userData ?? "")?.[1];
  return url && token ? { url, token } : undefined;
}

/** The files and environment a launch script sets, as the shell would. */
export function readLaunch(script) {
  const files = Object.fromEntries(
    [...script.matchAll(/^printf '%s' '([A-Za-z0-9+/=]*)' \| base64 -d > '([^']+)'$/gm)].map((m) => [
      m[2].split("/").pop(),
      Buffer.from(m[1], "base64").toString(),
    ]),
  );
  const env = Object.fromEntries([...script.matchAll(/^export ([A-Z_]+)='([^']*)'$/gm)].map((m) => [m[1], m[2]]));
  return { files, env };
}

export async function runSimulatedServer(server, { jobMs = 3_000, log = () => undefined, alive }) {
  const note = (step, status) => {
    server.runner = { ...(server.runner ?? {}), [step]: status };
    log(`[hetzner] server ${server.name}: ${step} ${status}`);
  };
  const boot = bootOf(server.userData);
  if (!boot) return note("bootstrap", "no bootstrap in user_data");
  const got = await fetch(boot.url, { method: "POST", headers: { authorization: `Bearer ${boot.token}` } }).catch(() => undefined);
  note("bootstrap", got?.status ?? "unreachable");
  if (got?.status !== 200) return got?.body?.cancel();
  const { files, env } = readLaunch(await got.text());
  const auth = { authorization: `Bearer ${files["claim-token"]}` };
  if (!alive()) return;
  const claimed = await fetch(env.GDR_CLAIM_URL, { method: "POST", headers: auth }).catch(() => undefined);
  note("claim", claimed?.status ?? "unreachable");
  await claimed?.body?.cancel();
  await new Promise((r) => setTimeout(r, jobMs));
  if (!alive()) return;
  const done = await fetch(env.GDR_COMPLETE_URL, { method: "POST", headers: auth }).catch(() => undefined);
  note("complete", done?.status ?? "unreachable");
  await done?.body?.cancel();
}
