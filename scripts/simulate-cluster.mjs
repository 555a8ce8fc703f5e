// Plays the runners of the embedded fake Kubernetes API for `npm start`: a pod or VMI starts
// running after a second; its runner claims, works three seconds, completes and exits.
import { FAKE_K8S_TOKEN } from "./fake-kubernetes.mjs";

export function simulateCluster(apiUrl, { log, intervalMs = 1_000 }) {
  const seen = new Map();
  const ctl = (what, body) => fetch(`${apiUrl}/_control/${what}`, body ? { method: "POST", body: JSON.stringify(body) } : {}).then((r) => r.json());
  const timer = setInterval(async () => {
    try {
      const { objects } = await ctl("state");
      const secrets = new Map(objects.filter((o) => o.kind === "Secret").map((o) => [o.metadata.name, o]));
      for (const o of objects.filter((o) => o.kind !== "Secret")) {
        const name = o.metadata.name;
        const resource = o.kind === "Pod" ? "pods" : "virtualmachineinstances";
        const s = seen.get(name) ?? { step: 0 };
        seen.set(name, s);
        if (s.step === 0) {
          s.step = 1;
          await ctl("phase", { resource, name, phase: "Running" });
          log(`[cluster] ${o.kind} ${name} running`);
        } else if (s.step === 1) {
          s.step = 2;
          const id = o.metadata.annotations["gitea-edge-dispatcher/assignment-id"];
          const token = secrets.get(name)?.stringData?.["claim-token"];
          const env = Object.fromEntries((o.spec.containers?.[0]?.env ?? []).map((e) => [e.name, e.value]));
          const claimUrl = env.GDR_CLAIM_URL ?? `${process.env.PUBLIC_URL ?? "http://127.0.0.1:8787"}/v1/assignments/${id}/claim`;
          const res = await fetch(claimUrl, { method: "POST", headers: { authorization: `Bearer ${token}` } });
          log(`[cluster] runner of ${id} claimed (${res.status})`);
          setTimeout(async () => {
            const done = await fetch(claimUrl.replace(/\/claim$/, "/complete"), { method: "POST", headers: { authorization: `Bearer ${token}` } });
            log(`[cluster] runner of ${id} completed (${done.status})`);
          }, 3_000);
        }
      }
    } catch {
      // the next round tries again
    }
  }, intervalMs);
  return async () => clearInterval(timer);
}
export { FAKE_K8S_TOKEN };
