// What a cloud VM (a Hetzner server, an EC2 instance) is given to boot its runner. Its user_data holds nothing that outlives the
// boot: the Worker's bootstrap URL and a one-time token. With the token it fetches its launch (the
// runner's identity, its claim token and its command) once, as a shell script, and runs it. The
// registration token is never in either: the forge's identity is a registered runner already.
import type { RunnerLaunch, RunnerRequest } from "../domain/backend.ts";
import { base64 } from "../model/crypto.ts";

/** Where the launch writes the runner's files; the forge's command reads them from `mountPath`. */
const quote = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;

/** The runner program to download on a stock image (HCLOUD_RUNNER_URL, EC2_RUNNER_URL), checked by its sha256. */
export interface RunnerDownload {
  url: string;
  sha256: string;
}

/**
 * The program a request's forge runs, as HCLOUD_RUNNER_URL / EC2_RUNNER_URL install it when the
 * image lacks it: gitea-runner (Gitea Runner 2.x; the launch falls back to an act_runner the
 * image has) for Gitea, forgejo-runner for Forgejo.
 */
export const runnerProgram = (request: RunnerRequest) => (request.forgejo ? "forgejo-runner" : "gitea-runner");

/** user_data for one boot: fetch the launch once, then run it. Under Hetzner's 32 KiB by far. */
export function bootUserData(bootstrapUrl: string, token: string, program: string, download?: RunnerDownload): string {
  const fetchOnce = [
    // Tried until the Worker answers; a token it has handed out once is refused after (404).
    "i=0",
    'until fetch_launch; do i=$((i+1)); [ "$i" -lt 60 ] || exit 1; sleep 2; done',
  ];
  return [
    "#!/bin/sh",
    "# gitea-edge-dispatcher: this server runs one job's runner. It fetches its launch once,",
    "# with a one-time token; the runner's identity is never in this user_data.",
    "set -eu",
    "umask 077",
    `url=${quote(bootstrapUrl)}`,
    `token=${quote(token)}`,
    "fetch_launch() {",
    '  if command -v curl >/dev/null; then curl -fsS -X POST -H "Authorization: Bearer $token" -o /run/gdr-launch.sh "$url"',
    '  else wget -q -O /run/gdr-launch.sh --header "Authorization: Bearer $token" --post-data "" "$url"; fi',
    "}",
    ...(download ? downloadRunner(program, download) : []),
    ...fetchOnce,
    "unset token",
    "exec sh /run/gdr-launch.sh",
    "",
  ].join("\n");
}

function downloadRunner(program: string, d: RunnerDownload): string[] {
  const bin = `/usr/local/bin/${program}`;
  return [
    `if ! command -v ${program} >/dev/null; then`,
    `  curl -fsSL --retry 5 -o ${bin}.part ${quote(d.url)} || wget -q -O ${bin}.part ${quote(d.url)}`,
    `  echo ${quote(`${d.sha256}  ${bin}.part`)} | sha256sum -c - || { rm -f ${bin}.part; exit 1; }`,
    `  chmod 755 ${bin}.part && mv ${bin}.part ${bin}`,
    "fi",
  ];
}

/**
 * The launch as a shell script, handed out once by the bootstrap endpoint: the files (0600) where
 * the forge's command reads them, the URLs it reads from the environment, then the command.
 */
export function launchScript(request: RunnerRequest, launch: RunnerLaunch, { watch }: { watch?: "ec2-spot" } = {}): string {
  const dir = launch.mountPath;
  const env: [string, string | undefined][] = [
    ["GDR_ASSIGNMENT_ID", request.assignment.id],
    ["GDR_CLAIM_URL", request.claimUrl],
    ["GDR_COMPLETE_URL", request.completeUrl],
    ["GDR_HANDLE_URL", request.handleUrl],
    ["GDR_INTERRUPT_URL", watch ? request.interruptUrl : undefined],
  ];
  return [
    "#!/bin/sh",
    "set -eu",
    "umask 077",
    `mkdir -p ${quote(dir)} /data`,
    ...Object.entries(launch.files).map(([name, content]) => `printf '%s' ${quote(base64(content))} | base64 -d > ${quote(`${dir}/${name}`)}`),
    ...env.flatMap(([k, v]) => (v ? [`export ${k}=${quote(v)}`] : [])),
    ...(watch && request.interruptUrl ? spotWatcher(`${dir}/claim-token`) : []),
    `exec ${launch.command.map(quote).join(" ")}`,
    "",
  ].join("\n");
}

/**
 * Beside the runner (which `exec` makes this shell's pid): every 5 s, IMDSv2's
 * spot/instance-action. On a notice the runner is stopped first, so that it takes no job after
 * the report, then the notice is POSTed with the claim token, retried for a minute: well within
 * the two minutes EC2 gives. GDR_IMDS_URL is for tests only.
 */
export function spotWatcher(claimTokenPath: string): string[] {
  return [
    "gdr_watch() {",
    '  imds="${GDR_IMDS_URL:-http://169.254.169.254}"',
    "  while sleep 5; do",
    '    t=$(curl -fsS -m 2 -X PUT -H "X-aws-ec2-metadata-token-ttl-seconds: 300" "$imds/latest/api/token") || continue',
    '    notice=$(curl -fsS -m 2 -H "X-aws-ec2-metadata-token: $t" "$imds/latest/meta-data/spot/instance-action") || continue',
    '    kill -TERM "$1" 2>/dev/null || true',
    "    i=0",
    `    until curl -fsS -m 10 -o /dev/null -X POST -H "Authorization: Bearer $(cat ${quote(claimTokenPath)})" -H "Content-Type: application/json" --data "$notice" "$GDR_INTERRUPT_URL"; do`,
    '      i=$((i+1)); [ "$i" -lt 12 ] || return 1; sleep 5',
    "    done",
    "    return 0",
    "  done",
    "}",
    "gdr_watch $$ &",
  ];
}
