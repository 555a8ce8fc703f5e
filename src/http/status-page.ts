// GET /status: the status page, rendered on the server with hono's html helper (every value
// escaped), no script, no external asset. It refreshes itself with a meta refresh, which a strict
// Content-Security-Policy allows; the one stylesheet is allowed by its hash.
import { html, raw } from "hono/html";
import type { Status } from "../observe/status.ts";
import { STARTUP_BUCKETS, type Histogram } from "../state/startup-times.ts";
import { START_VIAS, type StartVia } from "../state/record.ts";

export const REFRESH_SECONDS = 5;

export const STYLE = `
body{font:14px/1.4 system-ui,sans-serif;margin:1.5rem;color:#1b1f24;background:#fff}
h1{font-size:1.3rem;margin:0 0 .2rem}h2{font-size:1.1rem;margin:1.2rem 0 .4rem}
.muted{color:#57606a}.problem{color:#a40e26}.ok{color:#1a7f37}
table{border-collapse:collapse;margin:.3rem 0}td,th{padding:.2rem .7rem;border-bottom:1px solid #d0d7de;text-align:left}
th{font-weight:600}td.t{max-width:22rem;overflow-wrap:anywhere}td.n{text-align:right;font-variant-numeric:tabular-nums}
meter{width:16rem;height:1.1rem;vertical-align:middle}
`;

let hash: Promise<string> | undefined;
/** 'sha256-…' of STYLE, for the Content-Security-Policy: computed once per isolate. */
export function styleHash(): Promise<string> {
  hash ??= crypto.subtle
    .digest("SHA-256", new TextEncoder().encode(STYLE))
    .then((digest) => `'sha256-${btoa(String.fromCharCode(...new Uint8Array(digest)))}'`);
  return hash;
}

export function contentSecurityPolicy(hash: string): string {
  return `default-src 'none'; style-src ${hash}; img-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`;
}

export function age(seconds: number): string {
  if (seconds < 120) return `${seconds} s`;
  if (seconds < 7_200) return `${Math.floor(seconds / 60)} min`;
  if (seconds < 172_800) return `${Math.floor(seconds / 3_600)} h`;
  return `${Math.floor(seconds / 86_400)} d`;
}

/** Bidirectional controls: in a name they would reorder the cell's text (and hide what it says). */
const BIDI_CONTROLS = /[\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]/g;
/** Characters of a name shown in a cell; the whole name is in the cell's title. */
export const CELL_CHARS = 64;

/** A name as a person may read it: bidi controls shown as their code points, long ones cut. */
function textCell(value: string | null) {
  if (value === null) return html`<td class="t">–</td>`;
  const shown = value.replace(BIDI_CONTROLS, (c) => `[U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}]`);
  const chars = [...shown];
  if (chars.length <= CELL_CHARS) return html`<td class="t">${shown}</td>`;
  return html`<td class="t" title="${shown}">${chars.slice(0, CELL_CHARS - 1).join("")}…</td>`;
}

/** "≤ 3 s": the bucket that holds the q-quantile of the pool's start-up times; "–" with none. */
export function startupQuantile(h: Histogram | null | undefined, q: number): string {
  if (!h?.count) return "–";
  const i = h.buckets.findIndex((n) => n >= q * h.count);
  return i < 0 ? `> ${STARTUP_BUCKETS.at(-1)} s` : `≤ ${STARTUP_BUCKETS[i]} s`;
}

function poolsSection(pools: Status["pools"]) {
  if (!pools.length) return "";
  return html`<section aria-label="runner pools"><h2>Runner pools</h2>
<p class="muted">A pool is a kind of runner named in RUNNER_POOLS: its labels, backend and template. Idle runners are up and waiting for a job; warm ones are kept ready before any job comes (target: the pool's minIdle, or its schedule window's; "by reuse": a finished job's server rebuilt within its paid hour); Max is its maxRunners.</p>
<table><thead><tr><th>Pool</th><th>Backend</th><th>Idle</th><th>Busy</th><th>Booting</th><th>Warm / target</th><th>Max</th><th>Start-up p50</th><th>p90</th><th>Jobs</th></tr></thead><tbody>
${pools.map(
  (p) =>
    html`<tr>${textCell(p.pool)}<td>${p.backend}</td><td class="n">${p.idle}</td><td class="n">${p.busy}</td><td class="n">${p.booting}</td><td class="n">${p.warm} / ${p.target}${p.warmByReuse ? ` (${p.warmByReuse} by reuse)` : ""}</td><td class="n">${p.maxRunners ?? "–"}</td><td class="n">${startupQuantile(p.startup, 0.5)}</td><td class="n">${startupQuantile(p.startup, 0.9)}</td><td class="n">${p.startup?.count ?? 0}</td></tr>`,
)}
</tbody></table>${viaTable(pools)}</section>`;
}

/** How each way a runner came reads on the page. */
const VIA_TEXT: Record<StartVia, string> = {
  reuse: "warm by reuse",
  rebuilt: "rebuilt on demand",
  warm: "warm, new machine",
  new: "new, made for the job",
};

/** The pools' start-ups split by how the runner came (state/record.ts startVia): a row per pool and way seen. */
function viaTable(pools: Status["pools"]) {
  const rows = pools.flatMap((p) =>
    START_VIAS.flatMap((via) => {
      const h = p.startup?.via?.[via];
      return h?.count ? [{ pool: p.pool, via, h }] : [];
    }),
  );
  if (!rows.length) return "";
  return html`<p class="muted">Start-up by how the runner came: warm by reuse (a finished job's server, rebuilt at once within its paid hour), rebuilt on demand (a parked server rebuilt when the job asked), a warm runner on a new machine, or a runner made for the job.</p>
<table aria-label="start-up by how the runner came"><thead><tr><th>Pool</th><th>Runner</th><th>Jobs</th><th>Start-up p50</th><th>p90</th></tr></thead><tbody>
${rows.map((r) => html`<tr>${textCell(r.pool)}<td>${VIA_TEXT[r.via]}</td><td class="n">${r.h.count}</td><td class="n">${startupQuantile(r.h, 0.5)}</td><td class="n">${startupQuantile(r.h, 0.9)}</td></tr>`)}
</tbody></table>`;
}

function ownersSection(owners: Status["owners"]) {
  if (!owners.length) return "";
  return html`<section aria-label="busiest owners"><h2>Busiest owners</h2>
<p class="muted">An owner is the user or organisation whose repository a job is from. "-" stands for jobs published through the API, which name no repository; "other" sums the owners past the busiest (STATUS_TOP_OWNERS).</p>
<table><thead><tr><th>Owner</th><th>Runners</th><th>Waiting for capacity</th><th>Waiting at a quota limit</th></tr></thead><tbody>
${owners.map((o) => html`<tr>${textCell(o.owner)}<td class="n">${o.runners}</td><td class="n">${o.waitingForCapacity}</td><td class="n">${o.waitingForQuota}</td></tr>`)}
</tbody></table></section>`;
}

/** What a cloud driver counted of the backend: a full project, its sweep, the API's rate budget. */
function cloudLine(c: Status["cloud"][number] | undefined) {
  if (!c) return "";
  const rate = c.rate ? `, ${c.rate.remaining} of ${c.rate.limit} API requests left this hour` : "";
  // Its own words (nested html, so that the apostrophes are markup's, not escaped text).
  const w =
    c.driver === "ec2"
      ? {
          limit: html`The EC2 account's instance or vCPU limit`,
          wait: "an instance to end",
          things: "Instances terminated",
          refused: html`the account's limit`,
        }
      : { limit: html`The cloud project's server limit`, wait: "a server to be deleted", things: "Servers deleted", refused: html`the project's limit` };
  const full = c.full ? html`<p class="problem">${w.limit} is reached: jobs wait for ${w.wait}.</p>` : "";
  return html`${full}<p class="muted">${w.things} by the sweep: ${c.swept}; creates refused for ${w.refused}: ${c.fullTotal}${rate}.</p>${paidTable(c.paid)}`;
}

/** Hours as people read them: one decimal. */
const hours = (seconds: number) => `${(seconds / 3_600).toFixed(1)} h`;

/** Paid time of the deleted servers per pool (Hetzner bills the started hour): used, and given up at the delete. */
function paidTable(paid: Status["cloud"][number]["paid"]) {
  if (!paid?.length) return "";
  return html`<p class="muted">Paid hours of the servers deleted, per pool: used from each one's create to its delete (its jobs, and its waits as a warm or parked server); given up, the rest of the hour it was deleted in (Hetzner bills each started hour).</p>
<table aria-label="paid server hours"><thead><tr><th>Pool</th><th>Servers deleted</th><th>Paid hours used</th><th>Given up at the delete</th></tr></thead><tbody>
${paid.map((p) => html`<tr>${textCell(p.pool)}<td class="n">${p.servers}</td><td class="n">${hours(p.used)}</td><td class="n">${hours(p.givenUp)}</td></tr>`)}
</tbody></table>`;
}

/** Runners whose machine was taken back, per pool, and the jobs lost with them: where their reruns stand, and which a person must rerun. */
function interruptionsSection(s: Status) {
  const rows = s.interruptions ?? [];
  const reruns = s.reruns;
  if (!rows.length && !reruns?.byHand.length) return "";
  const states = reruns?.states ?? { waiting: 0, asked: 0, by_hand: 0, refused: 0, settled: 0 };
  const byHand = reruns?.byHand.length
    ? html`<p class="problem">Interrupted after it started; rerun it by hand:</p><ul>${reruns.byHand.map(
        (r) =>
          html`<li>${r.link ? html`<a href="${r.link}">${r.repository} run ${r.run}</a>` : html`${r.repository} run ${r.run}`} (${r.id})${r.reason ? html`: ${r.reason}` : ""}</li>`,
      )}</ul>`
    : "";
  return html`<section aria-label="interruptions"><h2>Interruptions</h2>
<p class="muted">Runners whose machine its cloud took back (a Spot interruption). Before the claim a new runner took the job; after it the job was lost and is rerun once its run has finished (MAX_RERUNS).</p>
<table><thead><tr><th>Pool</th><th>Before the claim</th><th>After the claim</th></tr></thead><tbody>
${rows.map((r) => html`<tr>${textCell(r.pool)}<td class="n">${r.before}</td><td class="n">${r.after}</td></tr>`)}
</tbody></table>
<p>Reruns: ${states.waiting} waiting for their run to finish, ${states.asked} asked, ${states.by_hand + states.refused} left to a person.</p>
${byHand}</section>`;
}

/** A recent assignment's state as the pool would say it: a job a warm runner ran reads so, not "terminated". */
function stateText(r: Status["recent"][number]): string {
  if (r.note?.startsWith("ran on ")) return r.note;
  return r.note ? `${r.state} (${r.note})` : r.state;
}

/** Bytes for people: KiB, MiB, GiB. */
export function sizeText(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  for (; v >= 1024 && i < units.length - 1; i++) v /= 1024;
  return `${i ? v.toFixed(1) : v} ${units[i]}`;
}

function cacheSection(cache: Status["cache"]) {
  if (!cache) return "";
  if (!cache.length) return html`<section aria-label="actions cache"><h2>Actions cache</h2><p class="muted">On; no repository has used it yet.</p></section>`;
  return html`<section aria-label="actions cache"><h2>Actions cache</h2>
<p class="muted">Per repository. Stored: as the cron tick's upkeep last counted it. Refused: requests the cache turned down once it knew the job.</p>
<table><thead><tr><th>Repository</th><th>Hits</th><th>Misses</th><th>Entries</th><th>Stored</th><th>Saved</th><th>Served</th><th>Evicted</th><th>Refused</th></tr></thead><tbody>
${cache.map(({ repository, figures: f }) => {
  const refused = Object.values(f.refused).reduce((a, b) => a + (b ?? 0), 0);
  return html`<tr>${textCell(repository)}<td class="n">${f.hits}</td><td class="n">${f.misses}</td><td class="n">${f.entries}</td><td class="n">${sizeText(f.bytesStored)}</td><td class="n">${sizeText(f.bytesIn)}</td><td class="n">${sizeText(f.bytesOut)}</td><td class="n">${f.evictions}</td><td class="n">${refused}</td></tr>`;
})}
</tbody></table></section>`;
}

export function renderStatusPage(s: Status) {
  const cloud = new Map(s.cloud.map((c) => [c.backend, c]));
  const backends = s.backends.map((b) => {
    const free = Math.max(0, b.capacity - b.slotsInUse);
    const rows: [string, number][] = [
      ["Queued", b.queued],
      ["Waiting for capacity", b.waitingForCapacity],
      ["Waiting at a quota limit", b.waitingForQuota],
      ["Pending at the backend", b.pendingAtBackend],
      ["Ready, waiting for the claim", b.readyForClaim],
      ["Running", b.running],
      ["Registrations under way", b.registering],
    ];
    return html`<section aria-label="backend ${b.backend}">
<h2>Backend ${b.backend}</h2>
<p><meter min="0" max="${b.capacity}" value="${b.slotsInUse}" aria-label="capacity used"></meter>
 ${b.slotsInUse} of ${b.capacity} slots used, ${free} free</p>
<table>${rows.map(([label, n]) => html`<tr><th scope="row">${label}</th><td class="n">${n}</td></tr>`)}</table>
${cloudLine(cloud.get(b.backend))}
</section>`;
  });
  const problems = s.problems.length
    ? html`<ul>${s.problems.map((p) => html`<li class="problem">${p}</li>`)}</ul>`
    : html`<p class="ok">Healthy: /healthz names no problem.</p>`;
  const recent = s.recent.length
    ? html`<table><thead><tr><th>Assignment</th><th>Repository</th><th>Job</th><th>State</th><th>Age</th><th>Runner</th></tr></thead><tbody>
${s.recent.map((r) => html`<tr>${textCell(r.id)}${textCell(r.repository)}${textCell(r.job)}${textCell(stateText(r))}<td class="n">${age(r.ageSeconds)}</td>${textCell(r.runner)}</tr>`)}
</tbody></table>`
    : html`<p class="muted">No assignments yet.</p>`;
  return html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<meta http-equiv="refresh" content="${REFRESH_SECONDS}">
<title>gitea-edge-dispatcher status</title><style>${raw(STYLE)}</style></head>
<body><h1>gitea-edge-dispatcher</h1>
<p class="muted">As of ${s.at}; this page refreshes every ${REFRESH_SECONDS} s. Stream: ${s.stream.messages} messages, ${s.stream.published} published so far.</p>
<h2>Health</h2>${problems}
${backends}
${poolsSection(s.pools)}
${ownersSection(s.owners)}
${interruptionsSection(s)}
${cacheSection(s.cache)}
<h2>Most recent assignments</h2>${recent}
</body></html>`;
}
