// The kubernetes and kubevirt drivers as the dispatcher knows them (driver-module.ts): one
// connection (settings.ts), a Pod or a VirtualMachineInstance per assignment, and the workload
// each would make checked against the cluster's own API description at load.
import type { BackendConfig, DriverModule } from "../driver-module.ts";
import { createKubeApi } from "./api.ts";
import { createPodDriver, podManifest } from "./pod.ts";
import { createVmDriver, vmiManifest } from "../kubevirt.ts";
import { checkPod, checkVmi } from "./schema-check.ts";
import { loadKubernetes, type KubernetesConfig } from "./settings.ts";
import { sampleRequest, type SamplePool } from "../sample-request.ts";

const names = { name: "gdr-template-check", label: "template-check" };

function kubeDriver(kind: "kubernetes" | "kubevirt"): DriverModule<KubernetesConfig> {
  const pod = kind === "kubernetes";
  /** The workload made for a sample request, and its problems; none without RUNNER_VM_IMAGE (reported by load). */
  const sample = (k8s: KubernetesConfig, b: BackendConfig, pool?: SamplePool) => {
    const own = b.template;
    const request = sampleRequest(b.backend, pool);
    if (pod) return checkPod(podManifest(names, request, { image: k8s.runnerImage, template: own ?? k8s.podTemplate }));
    if (!k8s.vmImage) return [];
    return checkVmi(vmiManifest(names, request, { image: k8s.vmImage, template: own ?? k8s.vmTemplate }));
  };
  const what = pod ? "Pod" : "VirtualMachineInstance";
  return {
    needsForge: true,
    settingsKey: "kubernetes",
    templateVariable: pod ? "POD_TEMPLATE" : "VM_TEMPLATE",
    load: loadKubernetes,
    checkBackend(k8s, b, variable, problems) {
      if ((b.template ?? (pod ? k8s.podTemplate : k8s.vmTemplate)) === undefined) return;
      const found = sample(k8s, b);
      if (found.length) problems.push(`${variable} would make an invalid ${what} (${b.backend} backend): ${found.join("; ")}`);
    },
    checkPool(k8s, b, pool, problems) {
      if (!pool.template) return;
      const found = sample(k8s, b, pool);
      if (found.length) problems.push(`${pool.at("template")} would make an invalid ${what}: ${found.join("; ")} (pool ${JSON.stringify(pool.name)})`);
    },
    create(b, k8s, deps) {
      const api = createKubeApi({ url: k8s.url, token: k8s.token, ...(deps.fetch ? { fetch: deps.fetch } : {}) });
      const common = { api, namespace: k8s.namespace, prefix: deps.prefix };
      if (pod) return createPodDriver({ ...common, image: k8s.runnerImage, template: b.template ?? k8s.podTemplate });
      return createVmDriver({ ...common, image: k8s.vmImage!, template: b.template ?? k8s.vmTemplate });
    },
  };
}

export const kubernetesDriver = kubeDriver("kubernetes");
export const kubevirtDriver = kubeDriver("kubevirt");
